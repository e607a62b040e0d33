//! HTTP mode as Cloud Run runs it: `$PORT`, allowed hosts, JSON logs with request ids, and a
//! graceful drain on SIGTERM.

use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::*;

/// A request on the 2026-07-28 wire (from a client without the tasks extension) with `Host`
/// `host` and a request id named after the method.
fn post(port: u16, host: &str, method: &str, name: Option<&str>, params: Value) -> Post {
    Post::rpc_as(
        &format!("http://127.0.0.1:{port}/mcp"),
        method,
        params,
        false,
    )
    .header("host", host)
    .header("x-request-id", format!("test-{method}"))
    .name(name)
}

#[tokio::test]
async fn port_hosts_logs_and_a_graceful_drain() {
    let state = tempfile::tempdir().expect("tempdir");
    let log = state.path().join("server.log");
    let port = free_port();
    let mut child = Command::new(bin())
        .arg("serve")
        .env("PORT", port.to_string())
        // What this test looks at is not authentication (safe_defaults.rs covers that).
        .env("FLOWGATE_ALLOW_UNAUTHENTICATED", "true")
        .env("FLOWGATE_ALLOWED_HOSTS", "svc-abc.a.run.app")
        .env("FLOWGATE_STATE_DIR", state.path())
        .env("FLOWGATE_HANDLE_KEYS", KEY)
        .env("FLOWGATE_LOG", "debug")
        .env("FLOWGATE_LOG_FORMAT", "json")
        .env_remove("FLOWGATE_LISTEN")
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(&log).expect("log")))
        .spawn()
        .expect("spawn");
    wait_for_port(port);

    // The configured host is served; another host is refused.
    let ok = post(port, "svc-abc.a.run.app", "tools/list", None, json!({}))
        .send()
        .await;
    assert_eq!(ok.status, 200);
    let refused = post(port, "evil.example", "tools/list", None, json!({}))
        .send()
        .await;
    assert_eq!(refused.status, 403, "a host that is not allowed");

    // A slow synchronous call is in flight when SIGTERM arrives: it still gets its answer.
    let slow = tokio::spawn(
        post(
            port,
            "svc-abc.a.run.app",
            "tools/call",
            Some("long_job"),
            json!({"name": "long_job", "arguments": {"steps": 2}}),
        )
        .request()
        .send(),
    );
    // The call is in flight once its run exists.
    eventually(Duration::from_secs(20), || async {
        match runs(state.path()).len() {
            0 => Err("no run yet"),
            _ => Ok(()),
        }
    })
    .await;
    let term = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(term.success());
    let answer = slow
        .await
        .expect("join")
        .expect("the in-flight request was answered");
    assert_eq!(answer.status().as_u16(), 200);
    let body: Value = answer.json().await.expect("json");
    assert_eq!(
        body["result"]["structuredContent"],
        json!({"steps": 2, "finished": true}),
        "{body}"
    );
    let status =
        exited(&mut child, Duration::from_secs(10)).expect("the server exits after draining");
    assert!(status.success(), "exit status {status:?}");
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "no longer listening"
    );

    // Every log line is one JSON object; request lines carry the request id; the key is absent.
    let text = std::fs::read_to_string(&log).expect("read log");
    let secret = KEY.split_once(':').map(|(_, s)| s).expect("key");
    assert!(!text.contains(secret), "the handle key reached the log");
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert!(lines.iter().all(|l| l["severity"].is_string()
        && l["timestamp"].is_string()
        && l["message"].is_string()));
    let call_lines: Vec<&Value> = lines
        .iter()
        .filter(|l| l["mcpMethod"] == "tools/call")
        .collect();
    assert!(
        !call_lines.is_empty(),
        "the tools/call request logged nothing: {text}"
    );
    assert!(
        call_lines
            .iter()
            .all(|l| l["requestId"] == "test-tools/call"),
        "{call_lines:?}"
    );
    assert!(
        lines.iter().any(|l| l["message"] == "drained; exiting"),
        "{text}"
    );
}

#[tokio::test]
async fn request_ids_a_client_offers_never_forge_a_text_log_line() {
    let state = tempfile::tempdir().expect("tempdir");
    let log = state.path().join("server.log");
    let port = free_port();
    let mut child = Command::new(bin())
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .env("FLOWGATE_ALLOW_UNAUTHENTICATED", "true")
        .env("FLOWGATE_STATE_DIR", state.path())
        .env("FLOWGATE_HANDLE_KEYS", KEY)
        .env("FLOWGATE_LOG", "info")
        .env("FLOWGATE_LOG_FORMAT", "text")
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(&log).expect("log")))
        .spawn()
        .expect("spawn");
    wait_for_port(port);
    let call = |id: &str| {
        post(
            port,
            &format!("127.0.0.1:{port}"),
            "tools/call",
            Some("long_job"),
            json!({"name": "long_job", "arguments": {"steps": 1}}),
        )
        .header("x-request-id", id.to_owned())
    };
    // Words that would read as another field, an id in flowgate's own namespace, and an id
    // that is fine as it is.
    for id in [
        "x requestId=forged event=cancelled",
        "fg-0000000000000001",
        "trace-42",
    ] {
        let answer = call(id).send().await;
        assert_eq!(answer.status, 200, "{id}: {:?}", answer.body);
    }
    let _ = child.kill();
    let _ = child.wait();

    let text = std::fs::read_to_string(&log).expect("read log");
    let audit: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("event=started"))
        .collect();
    assert_eq!(audit.len(), 3, "{text}");
    assert!(!text.contains("requestId=forged"), "{text}");
    assert!(!text.contains("fg-0000000000000001"), "{text}");
    let ids: Vec<&str> = audit
        .iter()
        .flat_map(|l| l.split("requestId=").skip(1))
        .filter_map(|rest| rest.split([' ', '}']).next())
        .collect();
    assert_eq!(
        ids.len(),
        6,
        "the span's id and the audit field's: {audit:?}"
    );
    let fresh = |id: &&&str| {
        id.strip_prefix("fg-")
            .is_some_and(|hex| hex.len() == 16 && hex.chars().all(|c| c.is_ascii_hexdigit()))
    };
    assert_eq!(ids.iter().filter(fresh).count(), 4, "{ids:?}");
    assert_eq!(
        ids.iter().filter(|id| **id == "trace-42").count(),
        2,
        "{ids:?}"
    );
}

#[test]
fn conflicting_key_sources_are_refused_without_printing_a_key() {
    let out = Command::new(bin())
        .arg("serve")
        .env("FLOWGATE_HANDLE_KEYS", KEY)
        .env("FLOWGATE_HANDLE_KEYS_FILE", "/nonexistent")
        .env("FLOWGATE_LOG_FORMAT", "text")
        .output()
        .expect("run");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("set only one handle key source"),
        "{stderr}"
    );
    assert!(
        !stderr.contains(KEY.split_once(':').map(|(_, s)| s).unwrap_or("")),
        "{stderr}"
    );

    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("keys");
    std::fs::write(&file, "k1:dG9vLXNob3J0\n").expect("write");
    let out = Command::new(bin())
        .arg("serve")
        .env_remove("FLOWGATE_HANDLE_KEYS")
        .env("FLOWGATE_HANDLE_KEYS_FILE", &file)
        .output()
        .expect("run");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("FLOWGATE_HANDLE_KEYS_FILE: invalid handle key") && stderr.contains("32"),
        "{stderr}"
    );
    assert!(!stderr.contains("dG9vLXNob3J0"), "{stderr}");
}
