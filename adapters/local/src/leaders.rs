//! Process group leaders a poll has already proven to be the ones recorded at spawn, held by a
//! pidfd so that later polls of a running task need not prove it again.
//!
//! Proving a run's group is still its own takes the pid file and `/proc/<pid>/stat` (the leader's
//! start time, against pid reuse) and a `killpg`: nine system calls, and the kernel formats the
//! whole stat line for the one field. That was an eighth of a poll's CPU. A pidfd names one process
//! for as long as it is held, and while that process has not terminated its pid cannot be given to
//! another, so once the leader was proven through it, "the pidfd's process has not terminated" is
//! the same answer as the full proof, from one `poll`: the leader is alive and is a member of the
//! group, which is therefore alive. (The leader is the run's supervisor, which never leaves
//! its group.) Once the leader has terminated, the entry is dropped and the caller proves the group
//! the full way again, so a poll never reports a group alive that the full proof would find gone:
//! this cache cannot show a state the run has left.

use std::collections::HashMap;
use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::{LazyLock, Mutex, MutexGuard};

use rustix::event::{PollFd, PollFlags, Timespec, poll};
use rustix::process::{Pid, PidfdFlags, pidfd_open};

/// The most leaders held at once: each holds a file descriptor, and only the runs being
/// polled need one. Past it, runs are proven the full way.
const MAX_HELD: usize = 256;

/// Held leaders, by run folder (its path's bytes: `Path`'s own hash walks the components, a
/// cost on every poll; docs/benchmarks.md).
static HELD: LazyLock<Mutex<HashMap<OsString, OwnedFd>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

fn held() -> MutexGuard<'static, HashMap<OsString, OwnedFd>> {
    HELD.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Whether `pidfd`'s process has not terminated (a pidfd is readable once it has).
fn running(pidfd: &OwnedFd) -> bool {
    let mut fds = [PollFd::new(pidfd, PollFlags::IN)];
    let now = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    matches!(poll(&mut fds, Some(&now)), Ok(0))
}

/// Whether the held leader of the run in `dir` is still running: `true` proves the run's
/// group alive; `false` means the caller must prove it the full way (nothing held, or the
/// leader has terminated, whose entry is dropped).
pub(crate) fn alive(dir: &Path) -> bool {
    let mut held = held();
    match held.get(dir.as_os_str()).map(running) {
        Some(true) => true,
        Some(false) => {
            held.remove(dir.as_os_str());
            false
        }
        None => false,
    }
}

/// A pidfd of process `pid`, opened before its start time is checked: if the check passes and
/// the process is then found running through it, the pidfd names the process checked.
pub(crate) fn open(pid: i32) -> Option<OwnedFd> {
    pidfd_open(Pid::from_raw(pid)?, PidfdFlags::empty()).ok()
}

/// Holds `pidfd`, the proven leader of the run in `dir`, if it is still running and there is
/// room (terminated leaders are dropped to make it).
pub(crate) fn hold(dir: &Path, pidfd: OwnedFd) {
    if !running(&pidfd) {
        return;
    }
    let mut held = held();
    if held.len() >= MAX_HELD {
        held.retain(|_, fd| running(fd));
    }
    if held.len() < MAX_HELD {
        held.insert(dir.as_os_str().to_owned(), pidfd);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A held leader answers for its run while it runs; once it has ended (and been reaped,
    /// so its pid may be reused) the run is no longer answered for, and its entry is gone.
    #[test]
    fn a_leader_is_held_while_it_runs_and_dropped_once_it_ends() {
        let dir = tempfile::tempdir().expect("dir");
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("spawn");
        let pid = i32::try_from(child.id()).expect("pid");
        assert!(!alive(dir.path()), "nothing held yet");
        hold(dir.path(), open(pid).expect("pidfd"));
        assert!(alive(dir.path()));
        child.kill().expect("kill");
        child.wait().expect("reaped");
        assert!(
            !alive(dir.path()),
            "a terminated leader answers for nothing"
        );
        assert!(!held().contains_key(dir.path().as_os_str()));
    }

    /// A leader that has already ended is never held.
    #[test]
    fn an_ended_leader_is_not_held() {
        let dir = tempfile::tempdir().expect("dir");
        let mut child = std::process::Command::new("true").spawn().expect("spawn");
        let pid = i32::try_from(child.id()).expect("pid");
        let pidfd = open(pid).expect("pidfd");
        child.wait().expect("reaped");
        hold(dir.path(), pidfd);
        assert!(!alive(dir.path()));
    }
}
