//! Local engine tests: the shared conformance suite (questions are covered end to end with the
//! real `flowgate ask` in the binary's tests), plus what only this engine promises.

use std::sync::Arc;
use std::time::Duration;

use flowgate_core::conformance::{Case, Fixture, run_all};
use flowgate_core::{Engine, ExecutionRef, StartRequest, TaskState};
use nix::sys::signal::Signal;
use serde_json::{Value, json};

use super::*;

fn engine(state: &std::path::Path, script: &str) -> LocalEngine {
    let config = Arc::new(LocalConfig {
        state_dir: state.to_owned(),
        flowgate_bin: None,
        supervisor: Some(supervisor_program()),
    });
    let target = LocalTarget {
        command: vec!["/bin/sh".into(), "-c".into(), script.into()],
        env: Default::default(),
        env_passthrough: Vec::new(),
        working_dir: None,
        leftover_processes: Default::default(),
    };
    LocalEngine::new(config, target)
}

/// The crate's supervisor program (`src/bin`), which cargo builds next to the test binaries'
/// folder for `cargo test -p flowgate-local` (the crate has integration tests, so its programs
/// are built for them).
pub(crate) fn supervisor_program() -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let program = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("the target folder")
        .join("flowgate-local-supervisor");
    assert!(
        program.is_file(),
        "{} is not built: run the crate's tests with `cargo test -p flowgate-local`",
        program.display()
    );
    program
}

fn case(state: &std::path::Path, script: &str) -> Case {
    Case {
        engine: Arc::new(engine(state, script)),
        arguments: json!({"name": "it"}),
    }
}

async fn start(e: &LocalEngine, arguments: Value) -> ExecutionRef {
    let request = StartRequest {
        tool: "t".into(),
        arguments,
        principal_tag: "p".into(),
        idempotency_key: flowgate_core::IdempotencyKey::new(),
        ttl_ms: None,
    };
    e.start(request).await.expect("start").execution
}

/// Whether every process of group `pgid` is gone within `limit`.
async fn group_gone_within(pgid: i32, limit: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    while group_alive(pgid) {
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    true
}

async fn wait_terminal(e: &LocalEngine, x: &ExecutionRef) -> flowgate_core::ExecutionRecord {
    for _ in 0..200 {
        let r = e.get(x).await.expect("get");
        if r.state.is_terminal() {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("not terminal in 10 s")
}

#[tokio::test]
async fn local_engine_passes_the_conformance_suite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = dir.path();
    let fixture = Fixture {
        success: case(s, r#"echo '{"greeting": "hello '"$FLOWGATE_ARG_NAME"'"}'"#),
        expected_output: json!({"greeting": "hello it"}),
        failure: case(s, "echo working; echo 'disk full' >&2; exit 3"),
        expected_failure: "disk full".into(),
        slow: case(s, "sleep 60"),
        asks: None,
        answer: Value::Null,
        timeout: Duration::from_secs(10),
        lose_next_start_answer: None,
        transient_read_fault: Some(flowgate_core::conformance::TransientReadFault(Arc::new({
            let root = s.to_owned();
            move |skip| crate::run_dir::faults::arm(&root, skip)
        }))),
    };
    run_all(&fixture).await;
}

#[tokio::test]
async fn arguments_arrive_on_stdin_and_in_the_environment() {
    let dir = tempfile::tempdir().expect("tempdir");
    let e = engine(
        dir.path(),
        r#"cat; printf ' %s %s' "$FLOWGATE_ARG_COUNT" "$FLOWGATE_ARG_DRY_RUN""#,
    );
    let x = start(
        &e,
        json!({"count": 3, "dry-run": true, "evil": "$(touch /tmp/x); `id`"}),
    )
    .await;
    let r = wait_terminal(&e, &x).await;
    assert_eq!(r.state, TaskState::Completed);
    let out = r.output.expect("output");
    let text = out.as_str().expect("not JSON because of the suffix");
    assert!(
        text.starts_with(r#"{"count":3,"dry-run":true,"evil":"$(touch /tmp/x); `id`"}"#),
        "{text}"
    );
    assert!(text.ends_with(" 3 true"), "{text}");
}

#[tokio::test]
async fn status_lines_become_the_status_message() {
    let dir = tempfile::tempdir().expect("tempdir");
    let e = engine(
        dir.path(),
        r#"echo "copying 2/5" > "$FLOWGATE_STATUS_FILE"; sleep 30"#,
    );
    let x = start(&e, json!({})).await;
    let mut seen = None;
    for _ in 0..100 {
        seen = e.get(&x).await.expect("get").status_message;
        if seen.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(seen.as_deref(), Some("copying 2/5"));
    e.cancel(&x).await.expect("cancel");
}

#[tokio::test]
async fn cancel_stops_the_whole_process_group() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A child that ignores SIGTERM, and a grandchild: both must go.
    let e = engine(
        dir.path(),
        "trap '' TERM; (sleep 300 & sleep 300; wait) & sleep 300; wait",
    );
    let x = start(&e, json!({})).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let run = e.open_run(&x).expect("run").0;
    let pgid = run.process().expect("pgid").0;
    assert!(group_alive(pgid));
    e.cancel(&x).await.expect("cancel");
    assert_eq!(e.get(&x).await.expect("get").state, TaskState::Cancelled);
    let gone = group_gone_within(pgid, Duration::from_secs(10)).await;
    assert!(gone, "process group {pgid} still alive 10 s after cancel");
    assert_eq!(e.get(&x).await.expect("get").state, TaskState::Cancelled);
}

/// The supervisor may write the exit status of a command it ended for a cancel within the same
/// clock tick as the cancel (file times are as coarse as the kernel's tick): equal file times
/// are a cancel, not a failure by signal.
#[tokio::test]
async fn an_exit_in_the_cancels_tick_is_a_cancel() {
    let dir = tempfile::tempdir().expect("tempdir");
    let e = engine(dir.path(), "echo up; exec sleep 300");
    let x = start(&e, json!({})).await;
    let run = e.open_run(&x).expect("run").0;
    let pgid = run.process().expect("pgid").0;
    // The command runs (its supervisor started it) before the cancel.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while std::fs::read_to_string(run.path("stdout")).unwrap_or_default() != "up\n" {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the command never started"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    e.cancel(&x).await.expect("cancel");
    assert!(group_gone_within(pgid, Duration::from_secs(10)).await);
    let exit = run.path("exit");
    let cancelled = std::fs::metadata(run.path("cancelled"))
        .and_then(|m| m.modified())
        .expect("the cancel's time");
    std::fs::File::options()
        .append(true)
        .open(&exit)
        .and_then(|f| f.set_modified(cancelled))
        .expect("the exit in the cancel's tick");
    // Read by an engine that kept nothing of the run.
    let fresh = engine(dir.path(), "sleep 300");
    let record = fresh.get(&x).await.expect("get");
    assert_eq!(record.state, TaskState::Cancelled, "{record:?}");
}

/// A cancel's SIGTERM with no server left to follow it with SIGKILL (the server died within the
/// grace): the run's supervisor escalates on its own.
#[tokio::test]
async fn the_supervisor_kills_a_command_that_ignores_sigterm_without_the_server() {
    let dir = tempfile::tempdir().expect("tempdir");
    let e = engine(dir.path(), "trap '' TERM; sleep 300 & sleep 300; wait");
    let x = start(&e, json!({})).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let pgid = e.open_run(&x).expect("run").0.process().expect("pgid").0;
    assert!(group_alive(pgid));
    // Only the TERM, as `cancel` sends it; no engine task is left to send the KILL.
    killpg(Pid::from_raw(pgid), Signal::SIGTERM).expect("SIGTERM");
    let gone = group_gone_within(pgid, Duration::from_secs(10)).await;
    assert!(
        gone,
        "process group {pgid} ignored SIGTERM and lived 10 s with no server escalating"
    );
}

#[tokio::test]
async fn a_new_engine_on_the_same_state_folder_sees_the_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let first = engine(dir.path(), "sleep 1; echo done");
    let x = start(&first, json!({})).await;
    drop(first);
    let second = engine(dir.path(), "unrelated");
    let r = wait_terminal(&second, &x).await;
    assert_eq!(r.output, Some(json!("done")));
}

#[tokio::test]
async fn a_run_killed_from_outside_is_reported_not_left_working() {
    let dir = tempfile::tempdir().expect("tempdir");
    let e = engine(dir.path(), "sleep 60");
    let x = start(&e, json!({})).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    // A poll first, so that the run's leader is held (module `leaders`): its end must still
    // be seen.
    let running = e.get(&x).await.expect("get");
    assert_eq!(running.state, TaskState::Working, "{running:?}");
    assert!(crate::leaders::alive(&e.open_run(&x).expect("run").0.0));
    let pgid = e.open_run(&x).expect("run").0.process().expect("pgid").0;
    killpg(Pid::from_raw(pgid), Signal::SIGKILL).expect("kill");
    let r = wait_terminal(&e, &x).await;
    assert_eq!(r.state, TaskState::Failed, "{r:?}");
    assert!(
        r.failure
            .expect("failure")
            .error
            .contains("without reporting")
    );
}

#[tokio::test]
async fn references_cannot_escape_the_state_folder() {
    let dir = tempfile::tempdir().expect("tempdir");
    let e = engine(dir.path(), "true");
    for bad in [
        "../..",
        "..",
        "/etc",
        "runs/../../x",
        "0123456789abcdef/../x",
    ] {
        assert!(
            e.get(&ExecutionRef(bad.into()))
                .await
                .expect_err(bad)
                .is_not_found()
        );
    }
}

#[tokio::test]
async fn questions_are_listed_answered_once_and_unknown_keys_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let e = engine(dir.path(), "sleep 30");
    let x = start(&e, json!({})).await;
    let run = e.open_run(&x).expect("run").0;
    let q = crate::run_dir::Question {
        message: "Ok?".into(),
        requested_schema: json!({"type": "object"}),
    };
    assert_eq!(run.ask(&q).expect("ask"), 1);
    assert_eq!(run.ask(&q).expect("ask"), 2);
    let r = e.get(&x).await.expect("get");
    assert_eq!(r.state, TaskState::InputRequired);
    assert_eq!(
        r.input_requests
            .iter()
            .map(|q| q.key.as_str())
            .collect::<Vec<_>>(),
        ["q1", "q2"]
    );
    let yes = flowgate_core::InputResponse {
        action: flowgate_core::Action::Accept,
        content: Some(json!({})),
    };
    e.respond(&x, "q2", yes.clone()).await.expect("answer q2");
    assert!(
        e.respond(&x, "q2", yes.clone()).await.is_err(),
        "answered twice"
    );
    assert!(e.respond(&x, "q9", yes.clone()).await.is_err());
    assert!(e.respond(&x, "../q1", yes.clone()).await.is_err());
    let r = e.get(&x).await.expect("get");
    assert_eq!(
        r.input_requests
            .iter()
            .map(|q| q.key.as_str())
            .collect::<Vec<_>>(),
        ["q1"]
    );
    e.cancel(&x).await.expect("cancel");
    assert!(
        e.respond(&x, "q1", yes).await.is_err(),
        "no answers after cancel"
    );
}

/// A command sees the fixed base, its manifest's `env:` and passthrough names, and its run
/// variables; never the server's other variables, and never the handle keys.
#[tokio::test]
async fn commands_get_a_cleared_environment() {
    // cargo runs tests with CARGO_* variables set: one passed through, the rest must not leak.
    let dir = tempfile::tempdir().expect("tempdir");
    let mut e = engine(dir.path(), "env");
    e.target.env.insert("GREETING".into(), "hi".into());
    e.target.env_passthrough = vec!["CARGO_PKG_NAME".into()];
    let x = start(&e, json!({"name": "it"})).await;
    let r = wait_terminal(&e, &x).await;
    let out = r.output.expect("output");
    let text = out.as_str().expect("env output is text");
    let names: Vec<&str> = text
        .lines()
        .filter_map(|l| l.split_once('=').map(|(k, _)| k))
        .collect();
    for name in &names {
        let allowed = [
            "PATH", "HOME", "LANG", "TZ", "PWD", "SHLVL", "_", "GREETING",
        ]
        .contains(name)
            || name.starts_with("FLOWGATE_ARG")
            || ["FLOWGATE_RUN_DIR", "FLOWGATE_STATUS_FILE", "FLOWGATE_TOOL"].contains(name)
            || *name == "CARGO_PKG_NAME";
        assert!(allowed, "the command got the server's {name}: {text}");
    }
    assert!(text.contains("GREETING=hi"), "{text}");
    assert!(text.contains("CARGO_PKG_NAME=flowgate-local"), "{text}");
    assert!(text.contains("FLOWGATE_ARG_NAME=it"), "{text}");
    assert!(!text.contains("FLOWGATE_HANDLE_KEYS"), "{text}");
}

/// Arguments too large for the environment still start the command: they arrive on stdin.
#[tokio::test]
async fn arguments_too_large_for_the_environment_arrive_on_stdin() {
    let dir = tempfile::tempdir().expect("tempdir");
    let e = engine(
        dir.path(),
        r#"wc -c | tr -d ' '; printf '%s' "${FLOWGATE_ARG_BIG:-absent}" | head -c 6"#,
    );
    let big = "x".repeat(200 << 10);
    let x = start(&e, json!({"big": big})).await;
    let r = wait_terminal(&e, &x).await;
    assert_eq!(r.state, TaskState::Completed, "{r:?}");
    let out = r.output.expect("output");
    let text = out.as_str().unwrap_or_default().to_owned();
    let expected = serde_json::to_vec(&json!({"big": "x".repeat(200 << 10)}))
        .expect("json")
        .len();
    assert_eq!(text, format!("{expected}\nabsent"), "{text}");
}

/// The command starts with no signal blocked and SIGPIPE, SIGTERM, SIGINT, SIGHUP and SIGCHLD at
/// their default action, whatever the supervisor set up for itself: a shell's `wait` for a
/// background job returns (it would wait forever with SIGCHLD blocked).
#[tokio::test]
async fn the_command_starts_with_signals_as_a_fresh_process_has_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    // The command itself reads its masks: nothing (a shell) between the supervisor and it.
    let mut e = engine(dir.path(), "unused");
    e.target.command = ["grep", "-E", "^Sig(Blk|Ign)", "/proc/self/status"]
        .map(String::from)
        .to_vec();
    let x = start(&e, json!({})).await;
    let r = wait_terminal(&e, &x).await;
    assert_eq!(r.state, TaskState::Completed, "{r:?}");
    let text = r
        .output
        .and_then(|o| o.as_str().map(str::to_owned))
        .unwrap_or_default();
    let mask = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
            .expect("a signal mask")
    };
    assert_eq!(mask("SigBlk:"), 0, "{text}");
    for signal in [
        Signal::SIGPIPE,
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGCHLD,
    ] {
        let bit = 1u64 << (signal as i32 - 1);
        assert_eq!(mask("SigIgn:") & bit, 0, "{signal} is ignored: {text}");
    }

    let e = engine(dir.path(), "sleep 0.1 & wait; echo waited");
    let x = start(&e, json!({})).await;
    let r = wait_terminal(&e, &x).await;
    assert_eq!(r.output, Some(json!("waited")), "{r:?}");
}

/// A script without a `#!` line runs under `/bin/sh`, as under a shell (and the shell
/// supervisor before the current one); a program that is not there fails with 127 and says so.
#[tokio::test]
async fn a_script_without_an_interpreter_line_runs_under_the_shell() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let script = dir.path().join("plain");
    std::fs::write(&script, "echo plain $FLOWGATE_ARG_NAME\n").expect("script");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let mut e = engine(dir.path(), "unused");
    e.target.command = vec![script.to_string_lossy().into_owned()];
    let x = start(&e, json!({"name": "it"})).await;
    let r = wait_terminal(&e, &x).await;
    assert_eq!(r.output, Some(json!("plain it")), "{r:?}");

    e.target.command = vec![dir.path().join("missing").to_string_lossy().into_owned()];
    let x = start(&e, json!({})).await;
    let r = wait_terminal(&e, &x).await;
    assert_eq!(r.engine_status, "exited 127", "{r:?}");
    let cause = r.failure.and_then(|f| f.cause).unwrap_or_default();
    assert!(cause.contains("missing: not found"), "{cause}");
}

/// A command that cannot start is not retryable and leaves no run folder behind.
#[tokio::test]
async fn a_command_that_cannot_start_is_not_retryable_and_leaves_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut e = engine(dir.path(), "true");
    e.target.working_dir = Some(dir.path().join("no-such-folder"));
    let request = StartRequest::new("t", json!({}), "p");
    let err = e.start(request).await.expect_err("cannot start");
    assert!(!err.is_retryable(), "{err:?}");
    assert!(err.to_string().contains("no-such-folder"), "{err}");
    let runs = std::fs::read_dir(dir.path().join("runs"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(runs, 0, "a run that never started left its folder");
}

/// Run folders and every file in them are private to the server's user.
#[tokio::test]
async fn run_folders_and_files_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let e = engine(
        dir.path(),
        r#"echo out; echo err >&2; echo step > "$FLOWGATE_STATUS_FILE""#,
    );
    let x = start(&e, json!({"name": "it"})).await;
    wait_terminal(&e, &x).await;
    let run = e.open_run(&x).expect("run").0;
    let mode =
        |p: &std::path::Path| std::fs::metadata(p).expect("metadata").permissions().mode() & 0o777;
    assert_eq!(mode(&run.0), 0o700, "run folder");
    assert_eq!(mode(&dir.path().join("runs")), 0o700, "runs folder");
    for entry in std::fs::read_dir(&run.0).expect("read_dir") {
        let path = entry.expect("entry").path();
        assert_eq!(mode(&path), 0o600, "{}", path.display());
    }
}

/// A `pid` file whose process is not the one started for the run (a planted file, or an id
/// reused since) is never signalled by a cancel.
#[tokio::test]
async fn cancel_never_signals_a_group_that_is_not_the_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let e = engine(dir.path(), "sleep 30");
    let x = start(&e, json!({})).await;
    let run = e.open_run(&x).expect("run").0;
    let (pgid, _) = run.process().expect("pid");
    // Another process group, standing in for someone else's processes.
    use std::os::unix::process::CommandExt;
    let mut victim = std::process::Command::new("sleep")
        .arg("30")
        .process_group(0)
        .spawn()
        .expect("victim");
    let victim_pid = victim.id();
    std::fs::write(run.path("pid"), format!("{victim_pid} 12345")).expect("plant");
    e.cancel(&x).await.expect("cancel");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        victim.try_wait().expect("try_wait").is_none(),
        "a group the run cannot prove is its own was signalled"
    );
    let _ = victim.kill();
    let _ = victim.wait();
    let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
}

#[tokio::test]
async fn finished_runs_past_their_ttl_are_removed_and_running_ones_kept() {
    let dir = tempfile::tempdir().expect("tempdir");
    let quick = engine(dir.path(), "echo done");
    let slow = engine(dir.path(), "sleep 30");
    let with_ttl = |ms| StartRequest::new("t", json!({}), "p").with_ttl_ms(Some(ms));

    // Finished and past its ttl: the handle is unknown, and the folder is gone.
    // (ttls of a second, so a loaded machine still sees the runs finish before they expire)
    let x = quick.start(with_ttl(1_000)).await.expect("start").execution;
    assert_eq!(wait_terminal(&quick, &x).await.state, TaskState::Completed);
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let gone = quick.get(&x).await.expect_err("past its ttl");
    assert!(matches!(gone, EngineError::NotFound { .. }), "{gone:?}");
    assert!(!dir.path().join("runs").join(&x.0).exists());

    // Still running past its ttl: kept until it ends.
    let running = slow.start(with_ttl(1)).await.expect("start").execution;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        slow.get(&running).await.expect("kept").state,
        TaskState::Working
    );

    // The sweep removes finished expired runs only: not the running one, not one without a
    // ttl, not one whose ttl has not run out.
    let unlimited = start(&quick, json!({})).await;
    let fresh = quick
        .start(with_ttl(3_600_000))
        .await
        .expect("start")
        .execution;
    let expiring = quick.start(with_ttl(1_000)).await.expect("start").execution;
    for x in [&unlimited, &fresh, &expiring] {
        wait_terminal(&quick, x).await;
    }
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    assert_eq!(crate::sweep_expired_runs(dir.path()), 1);
    let runs = dir.path().join("runs");
    assert!(!runs.join(&expiring.0).exists());
    for kept in [&unlimited, &fresh, &running] {
        assert!(runs.join(&kept.0).exists(), "{kept:?} kept");
    }
    slow.cancel(&running).await.expect("cancel");
}

/// A retried start that cannot read the first attempt's record (a transient fault) answers a
/// retryable error instead of starting the command a second time; once the record reads, the
/// retry finds the first run.
#[tokio::test]
async fn a_retried_start_that_cannot_read_the_record_never_runs_the_command_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let count = dir.path().join("count");
    let e = engine(dir.path(), &format!("echo ran >> '{}'", count.display()));
    let request = StartRequest::new("t", json!({}), "p");
    let first = e.start(request.clone()).await.expect("start").execution;
    wait_terminal(&e, &first).await;
    crate::run_dir::faults::arm(dir.path(), Some(0));
    let err = e
        .start(request.clone())
        .await
        .expect_err("the record could not be read");
    crate::run_dir::faults::arm(dir.path(), None);
    assert!(err.is_retryable(), "{err:?}");
    let again = e.start(request).await.expect("retried start").execution;
    assert_eq!(again, first);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let runs = std::fs::read_to_string(&count).expect("count");
    assert_eq!(runs.lines().count(), 1, "the command ran again: {runs:?}");
}

/// A poll of a run whose folder has not changed answers the record the last poll read (module
/// `open_runs`), and never one the run has left: a new status, new output and the group's end
/// each show at the very next poll.
#[tokio::test]
async fn a_kept_record_never_hides_a_change() {
    let dir = tempfile::tempdir().expect("tempdir");
    let e = engine(dir.path(), "sleep 60");
    let x = start(&e, json!({})).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let served = || crate::open_runs::SERVED.with(std::cell::Cell::get);
    let first = e.get(&x).await.expect("get");
    let before = served();
    let again = e.get(&x).await.expect("get");
    assert_eq!(again, first);
    let watched = served() == before + 1;
    let (run, _) = e.open_run(&x).expect("run");
    crate::run_dir::write_atomic(&run.path("status"), b"step 2\n").expect("status");
    let status = e.get(&x).await.expect("get");
    assert_eq!(status.status_message.as_deref(), Some("step 2"));
    {
        use std::io::Write as _;
        std::thread::sleep(Duration::from_millis(20));
        let mut err = std::fs::OpenOptions::new()
            .append(true)
            .open(run.path("stderr"))
            .expect("stderr");
        err.write_all(b"warning\n").expect("append");
    }
    let output = e.get(&x).await.expect("get");
    assert!(
        output.updated_at > status.updated_at,
        "{output:?} after {status:?}"
    );
    assert_eq!(e.get(&x).await.expect("get"), output);
    let pgid = run.process().expect("pgid").0;
    killpg(Pid::from_raw(pgid), Signal::SIGKILL).expect("kill");
    let r = wait_terminal(&e, &x).await;
    assert_eq!(r.state, TaskState::Failed, "{r:?}");
    let local =
        rustix::fs::statfs(dir.path()).is_ok_and(|s| crate::open_runs::local_file_system(s.f_type));
    assert_eq!(watched, local, "kept only where the folder is watched");
}

/// Starts of one call made at once (a client retrying while its first attempt is in flight)
/// run the command once and answer the same run (on threads of their own, so that they race).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_starts_of_one_call_run_the_command_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let count = dir.path().join("count");
    let e = Arc::new(engine(
        dir.path(),
        &format!("echo ran >> '{}'", count.display()),
    ));
    let calls = 20;
    for _ in 0..calls {
        let request = StartRequest::new("t", json!({}), "p");
        let starts: Vec<_> = (0..4)
            .map(|_| {
                let (e, request) = (Arc::clone(&e), request.clone());
                tokio::spawn(async move { e.start(request).await })
            })
            .collect();
        let mut runs = Vec::new();
        for start in starts {
            runs.push(start.await.expect("task").expect("start").execution);
        }
        assert!(runs.iter().all(|r| *r == runs[0]), "{runs:?}");
        wait_terminal(&e, &runs[0]).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let ran = std::fs::read_to_string(&count).expect("count");
    assert_eq!(ran.lines().count(), calls, "{ran:?}");
}

/// A run folder left without a record by a start that stopped (a crash) is taken over once it
/// is old enough to be abandoned; a young one is another start in progress: a retryable error.
#[tokio::test]
async fn a_folder_left_without_a_record_is_taken_over_once_abandoned() {
    let dir = tempfile::tempdir().expect("tempdir");
    let e = engine(dir.path(), "true");
    let request = StartRequest::new("t", json!({}), "p");
    let folder = dir
        .path()
        .join("runs")
        .join(request.idempotency_key.to_string());
    std::fs::create_dir_all(&folder).expect("mkdir");
    let err = e
        .start(request.clone())
        .await
        .expect_err("another start is in progress");
    assert!(err.is_retryable(), "{err:?}");
    std::fs::File::open(&folder)
        .expect("open folder")
        .set_modified(SystemTime::now() - Duration::from_secs(120))
        .expect("age it");
    let started = e.start(request).await.expect("taken over").execution;
    let done = wait_terminal(&e, &started).await;
    assert_eq!(done.state, TaskState::Completed, "{done:?}");
    let left: Vec<_> = std::fs::read_dir(dir.path().join("runs"))
        .expect("runs")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(
        left.len(),
        1,
        "the abandoned folder was not removed: {left:?}"
    );
}

/// A run's id is the call's key (32 hex digits); the longest id the engine opens is 64
/// characters of hex digits and `-`. The state folder, however long, is the tool's scope.
#[test]
fn the_longest_run_id_gets_a_task_id_a_client_takes() {
    let state = std::path::PathBuf::from(format!("/{}", "state/".repeat(60)));
    let e = engine(&state, "true");
    let key = flowgate_core::IdempotencyKey::new().to_string();
    for id in [key, "0-".repeat(32)] {
        let execution = ExecutionRef(id.clone());
        let locator = e.locator(&execution).expect("a run id");
        assert_eq!(e.reference_at(locator), execution);
        let length = flowgate_core::handle::task_id_fits(locator).expect("fits");
        assert!(length <= flowgate_core::handle::ID_MAX, "{id}: {length}");
    }
    assert_eq!(e.reference_scope(), state.display().to_string());
}
