//! Reaping orphans when flowgate is PID 1 (a container started without an init), and finding
//! and ending a run's processes wherever they moved (module `supervisor`, and the sweep).
//!
//! A command whose supervisor dies (killed from outside) leaves its processes orphaned; the
//! kernel hands them to PID 1. An init reaps them when they exit; a server that is PID 1 and
//! does not leaves zombies, which still count as members of the run's process group, so the
//! run would read "working" forever and the zombies would pile up.

use std::collections::{HashMap, HashSet};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use rustix::process::Signal;
use tokio::signal::unix::{SignalKind, signal};

/// When this process is PID 1, reaps every child that exits, for as long as the runtime runs.
/// Elsewhere it does nothing: the real init reaps orphans. Call from inside a tokio runtime.
pub fn reap_orphans_when_init() {
    if std::process::id() != 1 {
        return;
    }
    tokio::spawn(async {
        let mut children = signal(SignalKind::child()).ok();
        loop {
            match children.as_mut() {
                Some(s) => {
                    // A missed signal is caught by the next tick.
                    let _ = tokio::time::timeout(Duration::from_secs(5), s.recv()).await;
                }
                None => tokio::time::sleep(Duration::from_secs(1)).await,
            }
            reap_exited();
        }
    });
    tracing::info!("running as PID 1: exited orphans of commands are reaped");
}

/// Collects every exited child without blocking.
fn reap_exited() {
    while let Ok(status) = waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
        if status == WaitStatus::StillAlive {
            break;
        }
    }
}

/// A process as one look at `/proc` found it: its id and its start time (clock ticks after
/// boot), which together name it even after the id is given to another process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Process {
    pub(crate) pid: i32,
    pub(crate) started: u64,
}

/// What `/proc/<pid>/stat` says of a process: its state letter, parent and start time.
struct Stat {
    state: u8,
    ppid: i32,
    started: u64,
}

fn stat(pid: i32) -> Option<Stat> {
    let bytes =
        crate::run_dir::read_small(std::path::Path::new(&format!("/proc/{pid}/stat"))).ok()?;
    let text = std::str::from_utf8(&bytes).ok()?;
    // The fields after the command name (which may hold spaces and parentheses): state is the
    // first of them, the parent the second, the start time the 20th.
    let mut rest = text[text.rfind(')')? + 1..].split_whitespace();
    let state = *rest.next()?.as_bytes().first()?;
    let ppid = rest.next()?.parse().ok()?;
    let started = rest.nth(17)?.parse().ok()?;
    Some(Stat {
        state,
        ppid,
        started,
    })
}

/// The ids of every process now running, from `/proc`.
fn all_pids() -> Vec<i32> {
    std::fs::read_dir("/proc")
        .map(|entries| {
            entries
                .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Whether a process in this state has ended (a zombie waiting to be reaped, or dead): it can
/// neither run nor fork, and signals cannot reach it.
fn ended(state: u8) -> bool {
    matches!(state, b'Z' | b'X' | b'x')
}

/// Every live descendant of process `root` (not `root` itself), from one look at `/proc`.
///
/// A process that left its group or session (`setsid`, a double fork) is still found: its
/// parent is a descendant, or, once that parent has ended, `root` itself when `root` is a child
/// subreaper (the supervisor is), to which the kernel then hands it.
pub(crate) fn descendants(root: i32) -> Vec<Process> {
    let mut children: HashMap<i32, Vec<(i32, Stat)>> = HashMap::new();
    for pid in all_pids() {
        if let Some(st) = stat(pid) {
            children.entry(st.ppid).or_default().push((pid, st));
        }
    }
    let mut found = Vec::new();
    let mut parents = vec![root];
    while let Some(parent) = parents.pop() {
        for (pid, st) in children.remove(&parent).unwrap_or_default() {
            parents.push(pid);
            if !ended(st.state) {
                found.push(Process {
                    pid,
                    started: st.started,
                });
            }
        }
    }
    found
}

/// Every live process of this user whose environment holds `name=value` exactly (one of its
/// variables, not a part of one) with `value` naming one of `folders`. A process whose
/// environment cannot be read (another user's, or one that ended meanwhile) is not one.
pub(crate) fn marked(name: &str, folders: &[PathBuf]) -> Vec<Process> {
    if folders.is_empty() {
        return Vec::new();
    }
    let me = nix::unistd::geteuid().as_raw();
    let myself = std::process::id().to_string();
    let prefix = format!("{name}=");
    let canonical: Vec<PathBuf> = folders
        .iter()
        .filter_map(|f| std::fs::canonicalize(f).ok())
        .collect();
    let names_one = |value: &[u8]| {
        let value = Path::new(std::ffi::OsStr::from_bytes(value));
        folders.iter().any(|f| f == value)
            || std::fs::canonicalize(value).is_ok_and(|v| canonical.contains(&v))
    };
    let mut found = Vec::new();
    for pid in all_pids() {
        let dir = PathBuf::from(format!("/proc/{pid}"));
        if pid.to_string() == myself || std::fs::metadata(&dir).map(|m| m.uid()).ok() != Some(me) {
            continue;
        }
        let Ok(environ) = std::fs::read(dir.join("environ")) else {
            continue;
        };
        let ours = environ
            .split(|&b| b == 0)
            .filter_map(|var| var.strip_prefix(prefix.as_bytes()))
            .any(names_one);
        if let (true, Some(st)) = (ours, stat(pid))
            && !ended(st.state)
        {
            found.push(Process {
                pid,
                started: st.started,
            });
        }
    }
    found
}

/// The start time of process `pid` while it has not ended (a zombie has).
pub(crate) fn start_time(pid: i32) -> Option<u64> {
    stat(pid).filter(|st| !ended(st.state)).map(|st| st.started)
}

/// Sends `signal` to `process` if it is still the process that was found: the id is pinned by
/// a pidfd first and the start time checked through it, so a process that ended and whose id
/// was given to another is never signalled. Where there are no pidfds (Linux before 5.3), the
/// start time is checked just before a plain `kill`.
pub(crate) fn send(process: Process, signal: Signal) {
    let Some(pid) = rustix::process::Pid::from_raw(process.pid) else {
        return;
    };
    let still_it = || stat(process.pid).is_some_and(|st| st.started == process.started);
    match rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()) {
        Ok(pidfd) => {
            if still_it() {
                let _ = rustix::process::pidfd_send_signal(&pidfd, signal);
            }
        }
        Err(rustix::io::Errno::NOSYS) => {
            if still_it() {
                let _ = rustix::process::kill_process(pid, signal);
            }
        }
        Err(_) => {}
    }
}

/// How often the processes being ended are looked for again.
const RESCAN: Duration = Duration::from_millis(20);

/// How long past the grace SIGKILL is sent again to processes still found before they are
/// given up on: a process that cannot be signalled (another user's, made so by `sudo` or a
/// setuid program) or that takes long to die (stuck in the kernel, on a hung network file
/// system) must not hold the run open forever.
pub(crate) const KILL_PATIENCE: Duration = Duration::from_secs(2);

/// Ends every process `find` finds: SIGTERM (and SIGCONT, so a stopped one can act on it) to
/// each, as soon as it is found; after `grace`, SIGKILL to each one still found, looking again
/// until none is, so a process that forks while it is being ended does not slip out (its child
/// is found by the next look). `between` runs after each look (the supervisor reaps there).
/// Returns once `find` finds nothing, or, past the grace and [`KILL_PATIENCE`], what it still
/// finds.
pub(crate) fn end_all(
    find: impl Fn() -> Vec<Process>,
    grace: Duration,
    mut between: impl FnMut(),
) -> Vec<Process> {
    let deadline = Instant::now() + grace;
    let mut warned = HashSet::new();
    loop {
        let found = find();
        if found.is_empty() || Instant::now() >= deadline + KILL_PATIENCE {
            return found;
        }
        let killing = Instant::now() >= deadline;
        for process in found {
            if killing {
                send(process, Signal::KILL);
            } else if warned.insert(process) {
                send(process, Signal::TERM);
                send(process, Signal::CONT);
            }
        }
        between();
        std::thread::sleep(RESCAN);
    }
}
