//! Reaping orphans when flowgate is PID 1 (a container started without an init).
//!
//! A command whose supervisor dies (killed from outside) leaves its processes orphaned; the
//! kernel hands them to PID 1. An init reaps them when they exit; a server that is PID 1 and
//! does not leaves zombies, which still count as members of the run's process group, so the
//! run would read "working" forever and the zombies would pile up.

use std::time::Duration;

use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
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
