//! Safe defaults: `flowgate serve` refuses to serve a public address, `$PORT` or AWS Lambda
//! without an auth mode, saying which flag to add, unless told `--allow-unauthenticated`.

use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::support::{KEY, bin, exited, free_port};

/// Runs `flowgate serve` with `args` and `env`, expecting it to exit; gives up after 20 s.
fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    let state = tempfile::tempdir().expect("tempdir");
    let mut child = Command::new(bin())
        .arg("serve")
        .args(args)
        .env("FLOWGATE_STATE_DIR", state.path())
        .env("FLOWGATE_HANDLE_KEYS", KEY)
        .env("FLOWGATE_LOG", "info")
        .env("FLOWGATE_LOG_FORMAT", "text")
        .env_remove("PORT")
        .env_remove("FLOWGATE_LISTEN")
        .env_remove("AWS_LAMBDA_RUNTIME_API")
        .env_remove("FLOWGATE_ALLOW_UNAUTHENTICATED")
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn flowgate serve");
    // A refusal ends the process; one still running after 20 s is serving instead.
    if exited(&mut child, Duration::from_secs(20)).is_none() {
        let _ = child.kill();
        let out = child.wait_with_output().expect("output");
        panic!(
            "flowgate served instead of refusing: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    child.wait_with_output().expect("output")
}

fn assert_refused(out: &Output, why: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    for needle in [
        "refusing to serve MCP without authentication",
        why,
        "--auth-mode",
        "--allow-unauthenticated",
        "FLOWGATE_ALLOW_UNAUTHENTICATED",
    ] {
        assert!(stderr.contains(needle), "missing {needle:?} in: {stderr}");
    }
}

#[test]
fn a_public_address_without_auth_is_refused() {
    let out = run(&["--listen", "0.0.0.0:0"], &[]);
    assert_refused(&out, "0.0.0.0:0, which is not a loopback address");
}

#[test]
fn port_without_auth_is_refused() {
    let port = free_port().to_string();
    let out = run(&[], &[("PORT", &port)]);
    assert_refused(&out, "$PORT");
}

#[test]
fn lambda_mode_without_auth_is_refused() {
    // A runtime API nobody listens on: the refusal comes before any contact with it.
    let port = free_port().to_string();
    let api = format!("127.0.0.1:{port}");
    let out = run(&[], &[("AWS_LAMBDA_RUNTIME_API", &api)]);
    assert_refused(&out, "as an AWS Lambda function");
}

#[test]
fn platform_modes_are_refused_where_their_platform_is_not() {
    let out = run(&["--auth-mode", "aws-iam"], &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("applies only when running on AWS Lambda"),
        "{stderr}"
    );
    let out = run(&["--auth-mode", "google-iap"], &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("needs --auth-audience"), "{stderr}");
}

/// With `--allow-unauthenticated` the same public address is served, with a warning; a
/// loopback address needs nothing.
#[test]
fn allow_unauthenticated_serves_with_a_warning() {
    let state = tempfile::tempdir().expect("tempdir");
    let mut child = Command::new(bin())
        .args(["serve", "--listen", "0.0.0.0:0"])
        .env("FLOWGATE_STATE_DIR", state.path())
        .env("FLOWGATE_HANDLE_KEYS", KEY)
        .env("FLOWGATE_LOG", "info")
        .env("FLOWGATE_LOG_FORMAT", "text")
        .env("FLOWGATE_ALLOW_UNAUTHENTICATED", "true")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = Vec::new();
    let mut served = false;
    for line in BufReader::new(stderr).lines() {
        let line = line.expect("line");
        served = line.contains("serving MCP on http://0.0.0.0:");
        lines.push(line);
        if served {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let text = lines.join("\n");
    assert!(served, "{text}");
    assert!(text.contains("WITHOUT authentication"), "{text}");
}
