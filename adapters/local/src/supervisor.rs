//! The supervisor: the process that runs a run's command, outlives the server that started it,
//! records the exit status, and ends every process the command started, wherever it moved.
//!
//! It is the flowgate binary itself, run with [`SUPERVISE_ARG`] first (see
//! [`supervise_if_asked`]), started by the engine in a process group of its own, which is the
//! run's group (its `pid` file names the supervisor, its leader). What it does:
//!
//! 1. It makes itself a *child subreaper* (`PR_SET_CHILD_SUBREAPER`): a process the command
//!    starts that detaches (`setsid`, a double fork, a daemon) is handed to the supervisor when
//!    its parent ends, instead of to init, so it stays a descendant of the supervisor, found by
//!    walking `/proc` from it.
//! 2. It runs the command with the run's files as its standard streams and waits for it.
//! 3. On SIGTERM (a cancel; also SIGINT and SIGHUP), and when the command ends by itself (unless
//!    the tool's `leftover_processes` is `leave`), it ends every descendant: SIGTERM, the grace
//!    ([`KILL_GRACE`]), then SIGKILL, looking at `/proc` again until none is left, so a process
//!    that forks while it is being killed does not slip out (module `reaper`).
//! 4. Then it writes the exit status (`exit`): a run reads finished only once nothing it
//!    started is left (with `leave`, once the command itself has ended).
//!
//! All of it happens in the supervisor, so a server that dies during a cancel, or one restarted
//! between a start and a cancel, changes nothing: the cancel's SIGTERM reaches the supervisor
//! and it does the rest. A supervisor killed from outside (SIGKILL) cannot: its run then reads
//! `failed` ("vanished"), and the processes it left (the kernel hands them to init) are ended by
//! the next sweep of a server on the same state folder, which finds them by the run folder in
//! their environment (`FLOWGATE_RUN_DIR`; module `sweep`).
//!
//! Nothing stronger is used, because nothing stronger is there without privileges everywhere
//! flowgate runs. A PID namespace (the kernel kills every process in it when its first process
//! ends) needs `CAP_SYS_ADMIN`, or an unprivileged user namespace, which many distributions and
//! most container runtimes switch off; and inside one the command is PID 1, which ignores
//! SIGTERM unless it installs a handler, so a plain command would no longer stop on a cancel.
//! A cgroup (`cgroup.kill` ends everything in it at once) needs a delegated subtree that the
//! server's user may write, which only a systemd unit with `Delegate=yes` or an administrator
//! sets up. The subreaper needs nothing, and what it cannot cover is said in
//! `docs/engines/local-processes.md`.

use std::ffi::{OsStr, OsString};
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::time::Duration;

use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use rustix::event::{PollFd, PollFlags, poll};

use crate::config::LeftoverProcesses;
use crate::reaper;
use crate::run_dir::write_atomic;

/// The first argument that makes the flowgate binary a run's supervisor instead of its CLI.
/// Not a subcommand a person types: the engine passes it, with the run folder, what to do with
/// leftover processes and the command's argv.
pub const SUPERVISE_ARG: &str = "__flowgate-supervise-run";

/// How long the processes of a run get between SIGTERM and SIGKILL, on a cancel and when the
/// run ends with processes left.
pub(crate) const KILL_GRACE: Duration = Duration::from_secs(3);

/// How long after the grace the server waits for a cancelled run's supervisor to be done
/// before it acts itself (the supervisor needs milliseconds after the grace; more means it is
/// stuck, stopped or killed).
const SUPERVISOR_MARGIN: Duration = Duration::from_secs(2);

/// When this process was started as a run's supervisor ([`SUPERVISE_ARG`] first), supervises
/// the run and returns the exit code to end with; otherwise `None`. The flowgate binary calls
/// it before parsing its command line.
pub fn supervise_if_asked() -> Option<ExitCode> {
    let mut args = std::env::args_os().skip(1);
    if args.next().as_deref() != Some(OsStr::new(SUPERVISE_ARG)) {
        return None;
    }
    let args: Vec<OsString> = args.collect();
    Some(supervise(&args))
}

/// The command that starts a run's supervisor: `program` (the flowgate binary) as supervisor
/// of the run in `run`, running `argv`, in a process group of its own, detached from the
/// server's standard streams, and not killed when the server drops it.
pub(crate) fn command(
    program: &Path,
    run: &Path,
    leftovers: LeftoverProcesses,
    argv: &[String],
) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(program);
    command
        .arg(SUPERVISE_ARG)
        .arg(run)
        .arg(leftovers.as_arg())
        .args(argv)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .kill_on_drop(false);
    command
}

/// Cancels the run whose supervisor leads process group `pgid` (proven the run's by the
/// caller): SIGTERM to the group, so the command gets it at once and the supervisor ends
/// everything else. Should the supervisor still be there past the grace and a margin (stopped,
/// or stuck), the server kills the group and ends the processes marked as the run's itself.
pub(crate) fn cancel(pgid: i32, run: PathBuf) {
    let group = Pid::from_raw(pgid);
    let _ = nix::sys::signal::killpg(group, Signal::SIGTERM);
    let leader = crate::leaders::open(pgid);
    tokio::spawn(async move {
        let deadline = tokio::time::Instant::now() + KILL_GRACE + SUPERVISOR_MARGIN;
        while tokio::time::Instant::now() < deadline {
            if !group_alive(pgid) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // Only while the leader is the supervisor that was signalled: its pidfd says so.
        let Some(leader) = leader else { return };
        if rustix::process::pidfd_send_signal(&leader, rustix::process::Signal::KILL).is_err() {
            return;
        }
        let _ = nix::sys::signal::killpg(group, Signal::SIGKILL);
        let _ = tokio::task::spawn_blocking(move || crate::sweep::end_marked(&run)).await;
    });
}

fn group_alive(pgid: i32) -> bool {
    !matches!(
        nix::sys::signal::killpg(Pid::from_raw(pgid), None),
        Err(nix::errno::Errno::ESRCH)
    )
}

/// The supervisor's work, given its arguments after [`SUPERVISE_ARG`]: the run folder, what to
/// do with leftover processes, and the command's argv. Ends with the command's exit code.
fn supervise(args: &[OsString]) -> ExitCode {
    let [run, leftovers, argv @ ..] = args else {
        return ExitCode::from(2);
    };
    let Some(leftovers) = leftovers.to_str().and_then(LeftoverProcesses::from_arg) else {
        return ExitCode::from(2);
    };
    if argv.is_empty() {
        return ExitCode::from(2);
    }
    let run = Path::new(run);
    // Signals are taken from a signalfd, never handled asynchronously: blocked from here on
    // (the command starts with none blocked: the standard library clears the mask it inherits).
    let mut mask = SigSet::empty();
    for signal in [
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGCHLD,
    ] {
        mask.add(signal);
    }
    let signals = mask
        .thread_block()
        .and_then(|()| SignalFd::with_flags(&mask, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC));
    let mut stderr = create(run, "stderr", true).ok();
    let mut note = |message: &str| {
        if let Some(f) = stderr.as_mut() {
            let _ = writeln!(f, "flowgate: {message}");
        }
    };
    let signals = match signals {
        Ok(signals) => signals,
        Err(e) => {
            note(&format!("the run's supervisor cannot take signals: {e}"));
            return ExitCode::from(1);
        }
    };
    if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
        // Still supervised: the command and whatever stays attached to it are ended; detached
        // processes are the ones that could escape (kernels before 3.4 only).
        note(&format!(
            "detached processes of this run cannot be tracked (PR_SET_CHILD_SUBREAPER: {e})"
        ));
    }
    let me = std::process::id() as i32;
    let spawned = streams(run).and_then(|streams| {
        match spawn(argv, &streams, &mask) {
            // A script without a `#!` line: run by the shell, as a shell would (and as the
            // shell supervisor before this one did).
            Err(e) if e.raw_os_error() == Some(nix::errno::Errno::ENOEXEC as i32) => {
                let mut with_shell = vec![OsString::from("/bin/sh")];
                with_shell.extend(argv.iter().cloned());
                spawn(&with_shell, &streams, &mask)
            }
            spawned => spawned,
        }
    });
    let code = match spawned {
        Ok(pid) => {
            let mut code = None;
            let cancelled = wait(&signals, pid, &mut code);
            let mut left = Vec::new();
            if cancelled || leftovers == LeftoverProcesses::Kill {
                left = reaper::end_all(
                    || reaper::descendants(me),
                    KILL_GRACE,
                    || reap(pid, &mut code),
                );
            }
            if !left.is_empty() {
                let pids: Vec<String> = left.iter().map(|p| p.pid.to_string()).collect();
                note(&format!(
                    "processes of this run could not be ended (another user's, or stuck in \
                     the kernel): {}",
                    pids.join(" ")
                ));
            }
            if code.is_none() && !left.iter().any(|p| p.pid == pid) {
                // Ended above, or before; collected now.
                code = status(waitpid(Pid::from_raw(pid), None));
            }
            reap(pid, &mut code);
            code.unwrap_or(255)
        }
        Err(e) => {
            let (code, why) = match e.kind() {
                io::ErrorKind::NotFound => (127, "not found"),
                _ => (126, "cannot run"),
            };
            note(&format!("{}: {why}: {e}", argv[0].to_string_lossy()));
            code
        }
    };
    let _ = write_atomic(&run.join("exit"), format!("{code}\n").as_bytes());
    ExitCode::from(u8::try_from(code).unwrap_or(255))
}

/// Starts `argv` (its program looked up on `PATH`) with `streams` as its standard input, output
/// and error, and the supervisor's environment; returns its pid.
///
/// Through `posix_spawn`, because the command must not start with what the supervisor set up
/// for itself: the signals it takes from a signalfd (`blocked`) are blocked in it, a mask that
/// `exec` keeps and that the standard library's `Command` leaves as it is (a shell whose
/// SIGCHLD is blocked waits forever in `wait`); they, and SIGPIPE (which the Rust runtime
/// ignores), start unblocked and at their default action.
fn spawn(argv: &[OsString], streams: &(File, File, File), blocked: &SigSet) -> io::Result<i32> {
    use nix::spawn::{PosixSpawnAttr, PosixSpawnFileActions, PosixSpawnFlags, posix_spawnp};
    use std::ffi::CString;
    use std::os::fd::AsRawFd;
    use std::os::unix::ffi::OsStrExt;
    let c_string = |bytes: &[u8]| {
        CString::new(bytes).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
    };
    let args = argv
        .iter()
        .map(|a| c_string(a.as_bytes()))
        .collect::<io::Result<Vec<_>>>()?;
    let env = std::env::vars_os()
        .map(|(name, value)| {
            let mut var = name.as_bytes().to_vec();
            var.push(b'=');
            var.extend_from_slice(value.as_bytes());
            c_string(&var)
        })
        .collect::<io::Result<Vec<_>>>()?;
    let Some(program) = args.first() else {
        return Err(io::ErrorKind::InvalidInput.into());
    };
    let mut actions = PosixSpawnFileActions::init()?;
    let (stdin, stdout, stderr) = streams;
    actions.add_dup2(stdin.as_raw_fd(), 0)?;
    actions.add_dup2(stdout.as_raw_fd(), 1)?;
    actions.add_dup2(stderr.as_raw_fd(), 2)?;
    let mut attr = PosixSpawnAttr::init()?;
    let mut defaults = *blocked;
    defaults.add(Signal::SIGPIPE);
    attr.set_sigmask(&SigSet::empty())?;
    attr.set_sigdefault(&defaults)?;
    attr.set_flags(
        PosixSpawnFlags::POSIX_SPAWN_SETSIGMASK | PosixSpawnFlags::POSIX_SPAWN_SETSIGDEF,
    )?;
    Ok(posix_spawnp(program, &actions, &attr, &args, &env)?.as_raw())
}

/// Opens the run's files as the command's standard streams (stdout emptied, the status file
/// made, every file readable by this user only).
fn streams(run: &Path) -> io::Result<(File, File, File)> {
    let stdout = create(run, "stdout", true)?;
    let stderr = OpenOptions::new().append(true).open(run.join("stderr"))?;
    create(run, "status", false)?;
    let stdin = File::open(run.join("input.json"))?;
    Ok((stdin, stdout, stderr))
}

/// Creates (or, with `empty`, empties) the run's file `name`, readable by this user only.
fn create(run: &Path, name: &str, empty: bool) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(empty)
        .append(!empty)
        .mode(0o600)
        .open(run.join(name))
}

/// Waits until the command (process `pid`) has ended, with its exit code in `code`, or a
/// signal asks the run to stop: then returns `true`.
fn wait(signals: &SignalFd, pid: i32, code: &mut Option<i32>) -> bool {
    loop {
        reap(pid, code);
        if code.is_some() {
            return false;
        }
        let mut fds = [PollFd::new(signals, PollFlags::IN)];
        // Interrupted or failed: the loop looks again.
        let _ = poll(&mut fds, None);
        while let Ok(Some(info)) = signals.read_signal() {
            if info.ssi_signo != Signal::SIGCHLD as u32 {
                return true;
            }
        }
    }
}

/// Collects every child that has ended (the command, and detached processes handed to the
/// supervisor), keeping the command's exit code in `code`.
fn reap(pid: i32, code: &mut Option<i32>) {
    loop {
        let reaped = waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG));
        match reaped {
            Ok(WaitStatus::StillAlive) | Err(_) => return,
            Ok(ws) if ws.pid() == Some(Pid::from_raw(pid)) => {
                *code = status(Ok(ws)).or(*code);
            }
            Ok(_) => {}
        }
    }
}

/// The exit code a shell would report for a wait's result: the status, or 128 plus the signal.
fn status(ws: nix::Result<WaitStatus>) -> Option<i32> {
    match ws {
        Ok(WaitStatus::Exited(_, code)) => Some(code),
        Ok(WaitStatus::Signaled(_, signal, _)) => Some(128 + signal as i32),
        _ => None,
    }
}
