//! The local engine as an attacker and a new user meet it through the binary: what a command's
//! environment holds, and where commands run when the manifest is named by a bare file name.

use std::path::Path;
use std::process::{Command, Stdio};

use rmcp::model::TaskStatus;
use serde_json::json;

use crate::support::*;

const MANIFEST: &str = r#"
tools:
  - name: show_env
    description: Prints its environment.
    input_schema: { type: object }
    task: required
    target:
      engine: local
      command: [env]
      env: { GREETING: hello }
      env_passthrough: [FLOWGATE_E2E_PASSED]
  - name: where
    description: Prints the folder it runs in.
    input_schema: { type: object }
    task: required
    target:
      engine: local
      command: [./where.sh]
"#;

fn text_of(task: &serde_json::Value) -> String {
    task["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text in {task}"))
        .to_owned()
}

/// A tool that runs `env` shows none of the server's secrets: not the handle keys, not the
/// server's other variables, only the base, its manifest's `env:` and passthrough names.
#[tokio::test]
async fn a_command_never_sees_the_handle_keys_or_the_servers_environment() {
    let state = tempfile::tempdir().expect("tempdir");
    let manifest = state.path().join("tools.yaml");
    std::fs::write(&manifest, MANIFEST).expect("manifest");
    let server = Server::start_with(
        &state.path().join("state"),
        Some(&manifest),
        &[
            ("FLOWGATE_E2E_PASSED", "passed"),
            ("FLOWGATE_E2E_SECRET", "cloud-credential"),
            ("AWS_SECRET_ACCESS_KEY", "cloud-credential"),
        ],
        None,
    );
    let client = http_client(&server.url, true).await;
    let id = start_task(&client, "show_env", json!({})).await;
    let task = poll_until(&client, &id, &[TaskStatus::Completed], &mut vec![]).await;
    let env = text_of(&task);
    let key_material = KEY.split_once(':').map(|(_, k)| k).unwrap_or(KEY);
    assert!(
        !env.contains(key_material),
        "the sealing key reached the command: {env}"
    );
    assert!(!env.contains("FLOWGATE_HANDLE_KEYS"), "{env}");
    assert!(
        !env.contains("cloud-credential"),
        "a server secret reached the command: {env}"
    );
    assert!(env.contains("GREETING=hello"), "{env}");
    assert!(env.contains("FLOWGATE_E2E_PASSED=passed"), "{env}");
}

/// `cd DIR && flowgate serve --manifest tools.yaml` runs commands in DIR (not in an empty path).
#[tokio::test]
async fn a_bare_manifest_name_runs_commands_in_the_current_folder() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("tools.yaml"), MANIFEST).expect("manifest");
    let script = dir.path().join("where.sh");
    std::fs::write(&script, "#!/bin/sh\npwd\n").expect("script");
    chmod_x(&script);
    let mut cmd = Command::new(bin());
    cmd.current_dir(dir.path())
        .args(["serve", "--manifest", "tools.yaml"]);
    let (mut child, task) = serve_and_run(cmd, &dir.path().join("state"), "where").await;
    let _ = child.kill();
    let _ = child.wait();
    let expected = dir.path().canonicalize().expect("canonical");
    assert_eq!(
        Path::new(text_of(&task).trim()).canonicalize().ok(),
        Some(expected),
        "{task}"
    );
}

/// Starts `cmd` (a `flowgate serve` invocation without `--listen`) on a free port with `state`
/// as its state folder, calls `tool` as a task and polls it to its end.
async fn serve_and_run(
    mut cmd: Command,
    state: &Path,
    tool: &str,
) -> (std::process::Child, serde_json::Value) {
    let port = free_port();
    let child = cmd
        .arg("--listen")
        .arg(format!("127.0.0.1:{port}"))
        .env("FLOWGATE_STATE_DIR", state)
        .env("FLOWGATE_HANDLE_KEYS", KEY)
        .env("FLOWGATE_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn flowgate serve");
    wait_for_port(port);
    let client = http_client(&format!("http://127.0.0.1:{port}/mcp"), true).await;
    let id = start_task(&client, tool, json!({})).await;
    let task = poll_until(
        &client,
        &id,
        &[TaskStatus::Completed, TaskStatus::Failed],
        &mut vec![],
    )
    .await;
    (child, task)
}

fn chmod_x(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// Runs `flowgate serve` expecting it to refuse to start; returns what it printed.
fn refused_start(configure: impl FnOnce(&mut Command)) -> String {
    let port = free_port();
    let mut cmd = Command::new(bin());
    cmd.args(["serve", "--listen"])
        .arg(format!("127.0.0.1:{port}"))
        .env("FLOWGATE_HANDLE_KEYS", KEY)
        .env("FLOWGATE_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    configure(&mut cmd);
    let out = cmd
        .spawn()
        .expect("spawn")
        .wait_with_output()
        .expect("wait");
    assert!(!out.status.success(), "the server started");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Without HOME, XDG_STATE_HOME or --state-dir there is no shared temp folder to fall back on:
/// the server says what to pass.
#[test]
fn without_a_home_the_local_engine_asks_for_a_state_folder() {
    let err = refused_start(|cmd| {
        cmd.env_remove("HOME")
            .env_remove("XDG_STATE_HOME")
            .env_remove("FLOWGATE_STATE_DIR");
    });
    assert!(err.contains("--state-dir"), "{err}");
}

/// A state folder others can write to is refused, with the fix.
#[test]
fn a_state_folder_others_can_write_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state");
    std::fs::create_dir(&state).expect("mkdir");
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let err = refused_start(|cmd| {
        cmd.env("FLOWGATE_STATE_DIR", &state);
    });
    assert!(err.contains("chmod 700"), "{err}");
}

/// As PID 1 (here: in a new PID namespace, as a container without an init runs it), the server
/// reaps orphans: a command whose supervisor is killed from outside does not linger as a
/// zombie in the run's process group, and the task ends failed instead of working forever.
#[tokio::test]
async fn as_pid_1_orphans_are_reaped_and_the_run_ends_failed() {
    let probe = Command::new("unshare")
        .args(["-p", "-f", "--mount-proc", "true"])
        .status();
    assert!(
        matches!(probe, Ok(s) if s.success()),
        "this test needs `unshare -p -f --mount-proc` (util-linux, run as root): {probe:?}"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = dir.path().join("tools.yaml");
    std::fs::write(
        &manifest,
        r#"
tools:
  - name: orphan
    description: Kills its own supervisor, then exits a second later as an orphan.
    input_schema: { type: object }
    task: required
    target:
      engine: local
      command: [/bin/sh, -c, 'kill -9 $PPID; sleep 1; exit 0']
"#,
    )
    .expect("manifest");
    let mut cmd = Command::new("unshare");
    cmd.args(["-p", "-f", "--kill-child", "--mount-proc"])
        .arg(bin())
        .args(["serve", "--manifest"])
        .arg(&manifest);
    let (mut child, task) = serve_and_run(cmd, &dir.path().join("state"), "orphan").await;
    let text = task.to_string();
    assert!(
        text.contains("without reporting an exit status"),
        "the run must end as vanished (failed): {task}"
    );
    // The orphan exits about a second after its supervisor died; as PID 1 the server must have
    // collected it: no zombie is left among the server's children.
    let server = children_of(child.id())
        .into_iter()
        .next()
        .expect("the server inside the namespace");
    // Reaped, the orphan leaves no child behind; unreaped, it stays a zombie.
    let left = eventually(std::time::Duration::from_secs(10), || async {
        let children = children_of(server);
        if children.is_empty() {
            Ok(children)
        } else {
            let zombies: Vec<u32> = children
                .into_iter()
                .filter(|pid| state_of(*pid) == Some('Z'))
                .collect();
            Err(format!("unreaped orphans (zombies): {zombies:?}"))
        }
    })
    .await;
    let _ = child.kill();
    let _ = child.wait();
    assert!(left.is_empty());
}

/// The children of `pid`, from /proc.
fn children_of(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// The one-letter state of `pid` (`Z` for a zombie), from /proc.
fn state_of(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..].trim_start().chars().next()
}

/// `flowgate status` and `flowgate ask` outside a run say what they are for and where they
/// work, instead of only naming a missing variable.
#[test]
fn status_and_ask_outside_a_run_say_what_they_are_for() {
    for args in [&["status", "copying"][..], &["ask", "--message", "Go?"][..]] {
        let out = Command::new(bin())
            .args(args)
            .env_remove("FLOWGATE_RUN_DIR")
            .env_remove("FLOWGATE_STATUS_FILE")
            .output()
            .expect("run");
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("for the commands the local engine runs"),
            "{err}"
        );
        assert!(err.contains("flowgate serve"), "{err}");
    }
}

/// Logs written to a file carry no terminal colour codes.
#[tokio::test]
async fn logs_to_a_file_have_no_colour_codes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("server.log");
    let server = Server::start_with(
        &dir.path().join("state"),
        None,
        &[("FLOWGATE_LOG", "info")],
        Some(&log),
    );
    let client = http_client(&server.url, true).await;
    let _ = client.list_all_tools().await;
    drop(server);
    let text = std::fs::read_to_string(&log).expect("log");
    assert!(!text.is_empty(), "the server logged nothing at info");
    assert!(
        !text.contains('\u{1b}'),
        "colour codes in a log file: {text}"
    );
}

/// A finished run is removed once the task's advertised `ttlMs` runs out, and its handle then
/// answers exactly like an unknown one.
#[tokio::test]
async fn a_task_past_its_ttl_answers_like_an_unknown_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = dir.path().join("tools.yaml");
    std::fs::write(
        &manifest,
        "tools:\n  - name: brief\n    task: required\n    ttl_ms: 3000\n    target: {engine: local, command: [echo, hi]}\n",
    )
    .expect("manifest");
    let state = dir.path().join("state");
    let port = free_port();
    let mut child = Command::new(bin())
        .args(["serve", "--manifest"])
        .arg(&manifest)
        .arg("--listen")
        .arg(format!("127.0.0.1:{port}"))
        .env("FLOWGATE_STATE_DIR", &state)
        .env("FLOWGATE_HANDLE_KEYS", KEY)
        .env("FLOWGATE_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn flowgate serve");
    wait_for_port(port);
    let url = format!("http://127.0.0.1:{port}/mcp");
    let client = http_client(&url, true).await;
    let id = start_task(&client, "brief", json!({})).await;
    let task = poll_until(&client, &id, &[TaskStatus::Completed], &mut vec![]).await;
    assert_eq!(task["ttlMs"], 3000, "{task}");
    assert_eq!(
        std::fs::read_dir(state.join("runs")).expect("runs").count(),
        1
    );

    // Once the ttl has run out, the task is gone.
    eventually(std::time::Duration::from_secs(10), || async {
        let (status, body) = raw(&url, "tasks/get", Some(&id), json!({"taskId": id})).await;
        match body["error"]["code"].as_i64() {
            Some(-32602) => Ok(()),
            _ => Err(format!("still answered: HTTP {status} {body}")),
        }
    })
    .await;
    for method in ["tasks/get", "tasks/cancel"] {
        let (status, body) = raw(&url, method, Some(&id), json!({"taskId": id})).await;
        assert_eq!(
            body["error"]["code"], -32602,
            "{method}: HTTP {status} {body}"
        );
        assert_eq!(
            body["error"]["message"], "Failed to retrieve task: Task not found",
            "{method}"
        );
    }
    assert_eq!(
        std::fs::read_dir(state.join("runs")).expect("runs").count(),
        0,
        "the run folder is removed"
    );
    let _ = child.kill();
    let _ = child.wait();
}

/// Live processes whose command line is `sleep <token>`, with their parent and session.
fn sleeping(token: &str) -> Vec<(i32, i32, i32)> {
    let want = format!("sleep\0{token}\0");
    std::fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == want.as_bytes())
        })
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let rest: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
            let alive = !matches!(rest.first(), Some(&"Z" | &"X"));
            alive.then_some((pid, rest.get(1)?.parse().ok()?, rest.get(3)?.parse().ok()?))
        })
        .collect()
}

/// Through the binary: `tasks/cancel` ends a double-forked daemon a tool started, once it runs
/// on its own (a session of its own, handed to the run's supervisor, which is this binary), and
/// nothing is left within the grace plus a second.
#[tokio::test]
async fn cancel_ends_a_daemon_the_tool_detached() {
    let dir = tempfile::tempdir().expect("tempdir");
    let token = format!("3100.{}", std::process::id());
    let manifest = dir.path().join("tools.yaml");
    std::fs::write(
        &manifest,
        format!(
            "tools:\n  - name: daemon\n    task: required\n    target:\n      engine: local\n      \
             command: [/bin/sh, -c, '(setsid sleep {token} >/dev/null 2>&1 &); sleep 300']\n"
        ),
    )
    .expect("manifest");
    let state = dir.path().join("state");
    let server = Server::start(&state, Some(&manifest));
    let client = http_client(&server.url, true).await;
    let id = start_task(&client, "daemon", json!({})).await;
    let run = runs(&state).pop().expect("a run");
    let supervisor: i32 = std::fs::read_to_string(run.join("pid"))
        .expect("pid")
        .split_whitespace()
        .next()
        .and_then(|p| p.parse().ok())
        .expect("the supervisor's pid");
    // The server learns the supervisor started once its `exec` is past the point of no return;
    // the kernel fills in its command line a moment later, a moment a loaded machine stretches.
    eventually(std::time::Duration::from_secs(10), || async {
        let cmdline = std::fs::read(format!("/proc/{supervisor}/cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).contains(flowgate_local::SUPERVISE_ARG) {
            Ok(())
        } else {
            Err(format!(
                "the supervisor {supervisor} is the binary: {:?}; exit {:?}, stderr {:?}",
                String::from_utf8_lossy(&cmdline),
                std::fs::read_to_string(run.join("exit")),
                std::fs::read_to_string(run.join("stderr")),
            ))
        }
    })
    .await;
    let daemon = eventually(std::time::Duration::from_secs(10), || async {
        sleeping(&token)
            .into_iter()
            .find(|&(pid, ppid, sid)| sid == pid && ppid == supervisor)
            .ok_or_else(|| format!("no daemon handed to the supervisor: {:?}", sleeping(&token)))
    })
    .await;
    let cancelled = std::time::Instant::now();
    let settled = cancel_and_settle(&client, &id).await;
    assert_eq!(settled["status"], "cancelled", "{settled}");
    while !sleeping(&token).is_empty() {
        assert!(
            cancelled.elapsed() < std::time::Duration::from_secs(4),
            "the daemon {daemon:?} outlived the cancel by 4 s: {:?}",
            sleeping(&token)
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    stop_runs(&state);
}
