//! What a run of the local engine leaves behind: nothing, however its processes detached, once
//! it is cancelled or has ended (module `supervisor`), unless its tool says `leave`.
//!
//! Each test first waits until the detached process really runs on its own (its own session,
//! its own command line in `/proc`, handed to the supervisor when that applies), so that a cancel
//! cannot find it still attached by luck; then it checks that no process of the run is alive
//! within the grace plus one second: neither the ones it watched nor any process whose
//! environment names the run's folder.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use flowgate_core::{Engine, ExecutionRef, StartRequest, TaskState};
use flowgate_local::{LeftoverProcesses, LocalConfig, LocalEngine, LocalTarget};
use serde_json::json;

/// The supervisor's grace between SIGTERM and SIGKILL.
const GRACE: Duration = Duration::from_secs(3);
/// How long after a cancel or an end every process of the run must be gone.
const GONE_WITHIN: Duration = Duration::from_secs(4);

fn engine(state: &Path, script: &str, leftovers: LeftoverProcesses) -> LocalEngine {
    let config = Arc::new(LocalConfig {
        state_dir: state.to_owned(),
        flowgate_bin: None,
        supervisor: Some(env!("CARGO_BIN_EXE_flowgate-local-supervisor").into()),
    });
    let target = LocalTarget {
        command: vec!["/bin/sh".into(), "-c".into(), script.into()],
        env: Default::default(),
        env_passthrough: Vec::new(),
        working_dir: None,
        leftover_processes: leftovers,
    };
    LocalEngine::new(config, target)
}

/// A `sleep` argument no other process has: the test's number and this test process's id (a
/// number of seconds `sleep` accepts), so its command line names it alone.
fn token(case: u32) -> String {
    format!("{}.{}", 3000 + case, std::process::id())
}

async fn start(e: &LocalEngine) -> ExecutionRef {
    e.start(StartRequest::new("t", json!({}), "p"))
        .await
        .expect("start")
        .execution
}

fn run_dir(state: &Path, x: &ExecutionRef) -> PathBuf {
    state.join("runs").join(&x.0)
}

/// The run's supervisor, from its `pid` file (written by the start).
fn supervisor_pid(run: &Path) -> i32 {
    let text = std::fs::read_to_string(run.join("pid")).expect("pid file");
    text.split_whitespace()
        .next()
        .and_then(|p| p.parse().ok())
        .expect("a pid")
}

/// A process as `/proc/<pid>/stat` shows it.
#[derive(Debug, Clone, Copy)]
struct Stat {
    state: char,
    ppid: i32,
    sid: i32,
    started: u64,
}

fn stat(pid: i32) -> Option<Stat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest: Vec<&str> = text[text.rfind(')')? + 1..].split_whitespace().collect();
    Some(Stat {
        state: rest.first()?.chars().next()?,
        ppid: rest.get(1)?.parse().ok()?,
        sid: rest.get(3)?.parse().ok()?,
        started: rest.get(19)?.parse().ok()?,
    })
}

fn alive(stat: &Stat) -> bool {
    !matches!(stat.state, 'Z' | 'X' | 'x')
}

fn pids() -> Vec<i32> {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect()
}

/// Live processes whose command line is `sleep <token>`.
fn sleeping(token: &str) -> Vec<(i32, Stat)> {
    let want = format!("sleep\0{token}\0");
    pids()
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == want.as_bytes())
        })
        .filter_map(|pid| Some((pid, stat(pid)?)))
        .filter(|(_, st)| alive(st))
        .collect()
}

/// Live processes whose environment names `run` as their run folder.
fn of_run(run: &Path) -> Vec<i32> {
    let mut want = b"FLOWGATE_RUN_DIR=".to_vec();
    want.extend_from_slice(run.as_os_str().as_encoded_bytes());
    pids()
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|&b| b == 0).any(|v| v == want.as_slice()))
        })
        .filter(|pid| stat(*pid).is_some_and(|st| alive(&st)))
        .collect()
}

/// Waits (up to 10 s) for a `sleep <token>` that runs on its own: in another session than the
/// run's supervisor (which has the server's), and, with `handed_over`, whose parent is the
/// supervisor (it was handed to it when its own parent ended). Returns its pid and start time.
async fn detached(token: &str, run: &Path, handed_over: bool) -> (i32, u64) {
    let supervisor = supervisor_pid(run);
    let session = stat(supervisor).expect("the supervisor runs").sid;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let found = sleeping(token)
            .into_iter()
            .find(|(_, st)| st.sid != session && (!handed_over || st.ppid == supervisor));
        if let Some((pid, st)) = found {
            return (pid, st.started);
        }
        assert!(
            Instant::now() < deadline,
            "no detached `sleep {token}` (handed to the supervisor: {handed_over}) in 10 s: {:?}",
            sleeping(token)
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Ends the run when a test fails before it did, so a failed test leaves nothing running:
/// SIGTERM to its supervisor, which ends the rest, or, when the supervisor is gone, SIGKILL to
/// every process of the run.
struct EndOnDrop(PathBuf, i32, u64);

impl EndOnDrop {
    fn new(run: &Path) -> Self {
        let pid = supervisor_pid(run);
        EndOnDrop(run.to_owned(), pid, stat(pid).map_or(0, |st| st.started))
    }
}

impl Drop for EndOnDrop {
    fn drop(&mut self) {
        use nix::sys::signal::{Signal, kill};
        use nix::unistd::Pid;
        if still_alive(self.1, self.2) {
            let _ = kill(Pid::from_raw(self.1), Signal::SIGTERM);
            return;
        }
        for pid in of_run(&self.0) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

/// Whether `pid` ignores SIGTERM (bit 15 of `SigIgn` in `/proc/<pid>/status`).
fn ignores_term(pid: i32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_some_and(|mask| mask & (1 << (15 - 1)) != 0)
}

/// Whether process `pid` started at `started` is still alive (not the same pid reused).
fn still_alive(pid: i32, started: u64) -> bool {
    stat(pid).is_some_and(|st| st.started == started && alive(&st))
}

/// Asserts that within [`GONE_WITHIN`] of `since` none of `watched` is alive and no process
/// of the run is, and says what is left otherwise.
async fn assert_all_gone(run: &Path, token: &str, watched: &[(i32, u64)], since: Instant) {
    loop {
        let left: Vec<_> = watched
            .iter()
            .filter(|(pid, started)| still_alive(*pid, *started))
            .collect();
        let of_run = of_run(run);
        let sleeping = sleeping(token);
        if left.is_empty() && of_run.is_empty() && sleeping.is_empty() {
            return;
        }
        assert!(
            since.elapsed() < GONE_WITHIN,
            "{:?} after the end: watched {left:?}, of the run {of_run:?}, sleep {token} {:?} alive",
            since.elapsed(),
            sleeping
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn wait_terminal(e: &LocalEngine, x: &ExecutionRef) -> flowgate_core::ExecutionRecord {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = e.get(x).await.expect("get");
        if r.state.is_terminal() {
            return r;
        }
        assert!(Instant::now() < deadline, "not terminal in 20 s: {r:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Cancels `x` and checks the run reads cancelled and leaves nothing within the grace plus 1 s.
async fn cancel_and_check(
    e: &LocalEngine,
    x: &ExecutionRef,
    run: &Path,
    token: &str,
    watched: &[(i32, u64)],
) {
    let at = Instant::now();
    e.cancel(x).await.expect("cancel");
    assert_all_gone(run, token, watched, at).await;
    assert_eq!(wait_terminal(e, x).await.state, TaskState::Cancelled);
}

#[tokio::test]
async fn cancel_ends_a_child_that_left_with_setsid() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tok = token(1);
    let e = engine(
        dir.path(),
        &format!("setsid sleep {tok} >/dev/null 2>&1 & sleep 300"),
        LeftoverProcesses::Kill,
    );
    let x = start(&e).await;
    let run = run_dir(dir.path(), &x);
    let _end = EndOnDrop::new(&run);
    let child = detached(&tok, &run, false).await;
    assert_ne!(stat(child.0).expect("stat").sid, supervisor_pid(&run));
    cancel_and_check(&e, &x, &run, &tok, &[child]).await;
}

#[tokio::test]
async fn cancel_ends_a_double_forked_daemon_handed_to_the_supervisor() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tok = token(2);
    // The classic daemon: a child that starts a grandchild in a new session and exits at once,
    // so the grandchild is orphaned (and handed to the supervisor, the subreaper).
    let e = engine(
        dir.path(),
        &format!("(setsid sleep {tok} >/dev/null 2>&1 &); sleep 300"),
        LeftoverProcesses::Kill,
    );
    let x = start(&e).await;
    let run = run_dir(dir.path(), &x);
    let _end = EndOnDrop::new(&run);
    let daemon = detached(&tok, &run, true).await;
    cancel_and_check(&e, &x, &run, &tok, &[daemon]).await;
}

#[tokio::test]
async fn cancel_kills_a_detached_child_that_ignores_sigterm_after_the_grace() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tok = token(3);
    let e = engine(
        dir.path(),
        &format!("setsid sh -c 'trap \"\" TERM; exec sleep {tok}' >/dev/null 2>&1 & sleep 300"),
        LeftoverProcesses::Kill,
    );
    let x = start(&e).await;
    let run = run_dir(dir.path(), &x);
    let _end = EndOnDrop::new(&run);
    let child = detached(&tok, &run, false).await;
    assert!(ignores_term(child.0), "the child must ignore SIGTERM");
    let at = Instant::now();
    e.cancel(&x).await.expect("cancel");
    // It ignores the SIGTERM: still there well into the grace, so the SIGKILL after it is what
    // ends it.
    tokio::time::sleep(GRACE / 2).await;
    assert!(
        still_alive(child.0, child.1),
        "the child ignoring SIGTERM ended before the grace was over"
    );
    assert_all_gone(&run, &tok, &[child], at).await;
    assert_eq!(wait_terminal(&e, &x).await.state, TaskState::Cancelled);
}

#[tokio::test]
async fn cancel_ends_a_detached_child_that_keeps_forking_while_it_is_killed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tok = token(4);
    // Ignores SIGTERM and forks a new `sleep` every 10 ms, through the grace and the kill.
    let e = engine(
        dir.path(),
        &format!(
            "setsid sh -c 'trap \"\" TERM; while :; do sleep {tok} & sleep 0.01; done' \
             >/dev/null 2>&1 & sleep 300"
        ),
        LeftoverProcesses::Kill,
    );
    let x = start(&e).await;
    let run = run_dir(dir.path(), &x);
    let _end = EndOnDrop::new(&run);
    detached(&tok, &run, false).await;
    let before = sleeping(&tok).len();
    let at = Instant::now();
    e.cancel(&x).await.expect("cancel");
    tokio::time::sleep(GRACE / 2).await;
    let during = sleeping(&tok).len();
    assert!(
        during > before,
        "the child was to keep forking during the grace ({before} then {during} sleeps)"
    );
    assert_all_gone(&run, &tok, &[], at).await;
    assert_eq!(wait_terminal(&e, &x).await.state, TaskState::Cancelled);
}

/// The command waits for `go` (made by the test once it has seen the detached child on its own)
/// and then exits 0, leaving the child behind.
fn ends_leaving_a_child(tok: &str, go: &Path) -> String {
    format!(
        "setsid sleep {tok} >/dev/null 2>&1 & while [ ! -e '{}' ]; do sleep 0.02; done; echo done",
        go.display()
    )
}

#[tokio::test]
async fn a_run_that_ends_by_itself_ends_what_it_detached() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tok = token(5);
    let go = dir.path().join("go");
    let e = engine(
        dir.path(),
        &ends_leaving_a_child(&tok, &go),
        LeftoverProcesses::Kill,
    );
    let x = start(&e).await;
    let run = run_dir(dir.path(), &x);
    let _end = EndOnDrop::new(&run);
    let child = detached(&tok, &run, false).await;
    let at = Instant::now();
    std::fs::write(&go, b"").expect("go");
    assert_all_gone(&run, &tok, &[child], at).await;
    let r = wait_terminal(&e, &x).await;
    assert_eq!(r.state, TaskState::Completed, "{r:?}");
    assert_eq!(r.output, Some(json!("done")));
}

/// With `leftover_processes: leave` the same detached child outlives the run: the check above
/// sees a child that lives on (this is its counterpart, so it cannot pass by finding nothing).
#[tokio::test]
async fn a_tool_that_may_leave_daemons_leaves_them_when_it_ends_but_not_on_cancel() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tok = token(6);
    let go = dir.path().join("go");
    let e = engine(
        dir.path(),
        &ends_leaving_a_child(&tok, &go),
        LeftoverProcesses::Leave,
    );
    let x = start(&e).await;
    let run = run_dir(dir.path(), &x);
    let child = detached(&tok, &run, false).await;
    std::fs::write(&go, b"").expect("go");
    let r = wait_terminal(&e, &x).await;
    assert_eq!(r.state, TaskState::Completed, "{r:?}");
    tokio::time::sleep(GONE_WITHIN).await;
    assert!(
        still_alive(child.0, child.1),
        "a tool that may leave daemons had its daemon ended"
    );
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.0),
        nix::sys::signal::Signal::SIGKILL,
    );

    // A cancel ends them all the same.
    let tok = token(7);
    let e = engine(
        dir.path(),
        &format!("setsid sleep {tok} >/dev/null 2>&1 & sleep 300"),
        LeftoverProcesses::Leave,
    );
    let x = start(&e).await;
    let run = run_dir(dir.path(), &x);
    let _end = EndOnDrop::new(&run);
    let child = detached(&tok, &run, false).await;
    cancel_and_check(&e, &x, &run, &tok, &[child]).await;
}

/// The server dies right after sending the cancel (its runtime, with the escalation it had
/// scheduled, is gone): the supervisor still ends everything, a child ignoring SIGTERM included.
#[tokio::test]
async fn a_cancel_whose_server_dies_at_once_still_ends_everything() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tok = token(8);
    let state = dir.path().to_owned();
    let script = format!(
        "setsid sh -c 'trap \"\" TERM; exec sleep {tok}' >/dev/null 2>&1 & trap '' TERM; sleep 300"
    );
    let e = engine(&state, &script, LeftoverProcesses::Kill);
    let x = start(&e).await;
    let run = run_dir(&state, &x);
    let _end = EndOnDrop::new(&run);
    let child = detached(&tok, &run, false).await;
    let at = Instant::now();
    let cancelling = (e.clone(), x.clone());
    std::thread::spawn(move || {
        let server = tokio::runtime::Runtime::new().expect("runtime");
        server
            .block_on(cancelling.0.cancel(&cancelling.1))
            .expect("cancel");
        server.shutdown_background();
    })
    .join()
    .expect("the server's thread");
    assert_all_gone(&run, &tok, &[child], at).await;
    let later = engine(&state, "unrelated", LeftoverProcesses::Kill);
    assert_eq!(wait_terminal(&later, &x).await.state, TaskState::Cancelled);
}

/// A server restarted between the start and the cancel: the new one's cancel ends the run
/// started by the old one, detached child included.
#[tokio::test]
async fn a_server_restarted_between_start_and_cancel_still_ends_everything() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tok = token(9);
    let first = engine(
        dir.path(),
        &format!("(setsid sleep {tok} >/dev/null 2>&1 &); sleep 300"),
        LeftoverProcesses::Kill,
    );
    let x = start(&first).await;
    drop(first);
    let run = run_dir(dir.path(), &x);
    let _end = EndOnDrop::new(&run);
    let daemon = detached(&tok, &run, true).await;
    let second = engine(dir.path(), "unrelated", LeftoverProcesses::Kill);
    cancel_and_check(&second, &x, &run, &tok, &[daemon]).await;
}

/// Processes the test started itself, killed when it ends however it ends.
struct Bystanders(Vec<std::process::Child>);

impl Drop for Bystanders {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A supervisor killed from outside cannot end anything: its run reads failed, saying so, and
/// the next server's sweep ends what it left (its command and a detached child), and nothing
/// else: not a process that names another run, nor one whose run folder merely starts alike.
#[tokio::test]
async fn a_supervisor_killed_from_outside_fails_its_run_and_the_sweep_ends_its_processes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path();
    let tok = token(10);
    let e = engine(
        state,
        &format!("setsid sleep {tok} >/dev/null 2>&1 & sleep {tok}"),
        LeftoverProcesses::Kill,
    );
    let x = start(&e).await;
    let run = run_dir(state, &x);
    let _end = EndOnDrop::new(&run);
    let supervisor = supervisor_pid(&run);
    detached(&tok, &run, false).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while sleeping(&tok).len() < 2 {
        assert!(
            Instant::now() < deadline,
            "the command's own sleep never started"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let watched: Vec<(i32, u64)> = sleeping(&tok)
        .into_iter()
        .map(|(pid, st)| (pid, st.started))
        .collect();

    // Bystanders: same user, environments that name a run folder that is not this one.
    let bystander_tok = token(11);
    let mut bystanders: Bystanders = Bystanders(
        [
            format!("{}-other", run.display()),
            state.join("runs").display().to_string(),
        ]
        .into_iter()
        .map(|folder| {
            std::process::Command::new("sleep")
                .arg(&bystander_tok)
                .env("FLOWGATE_RUN_DIR", folder)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .expect("bystander")
        })
        .collect(),
    );

    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(supervisor),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill the supervisor");
    let at = Instant::now();
    // Dead (a zombie until the engine's task reaps it) before the sweep looks.
    while stat(supervisor).is_some_and(|st| alive(&st)) {
        assert!(at.elapsed() < GRACE, "the supervisor outlived SIGKILL");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // The next server: its sweep, first thing.
    let swept = tokio::task::spawn_blocking({
        let state = state.to_owned();
        move || flowgate_local::sweep_expired_runs(&state)
    });
    swept.await.expect("sweep");
    assert_all_gone(&run, &tok, &watched, at).await;
    for bystander in &mut bystanders.0 {
        assert!(
            bystander.try_wait().expect("try_wait").is_none(),
            "the sweep ended a process of no orphaned run"
        );
    }
    let r = wait_terminal(&e, &x).await;
    assert_eq!(r.state, TaskState::Failed, "{r:?}");
    let failure = r.failure.expect("failure");
    assert!(
        failure
            .cause
            .as_deref()
            .is_some_and(|c| c.contains("supervisor was killed")),
        "{failure:?}"
    );
}
