//! The sweep, when the server starts and then on an interval: it ends the processes left by
//! runs whose supervisor was killed from outside, and removes finished runs whose ttl has run
//! out, so the `ttlMs` a task advertises is true: nothing else ever deletes a run folder. A
//! handle to a swept run answers like an unknown one.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use chrono::Utc;

use crate::ask::RUN_DIR_ENV;
use crate::engine::expired;
use crate::reaper;
use crate::run_dir::{RunDir, boot_id};
use crate::supervisor::KILL_GRACE;

/// Removes every expired, finished run under `state_dir` and returns how many it removed.
/// Runs it cannot read are left alone. First it ends the processes of runs whose supervisor
/// is gone without recording an exit (function `end_orphans`), so that no run is removed with
/// processes of its own still running.
pub fn sweep_expired_runs(state_dir: &Path) -> usize {
    let ended = end_orphans(state_dir);
    if ended > 0 {
        tracing::warn!(
            processes = ended,
            "ended processes left by runs whose supervisor was killed from outside flowgate"
        );
    }
    let Ok(entries) = std::fs::read_dir(state_dir.join("runs")) else {
        return 0;
    };
    let now = Utc::now();
    entries
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| RunDir::new(e.path()))
        .filter(|run| run.meta().is_ok_and(|meta| expired(run, &meta, now)))
        .filter(|run| std::fs::remove_dir_all(&run.0).is_ok())
        .inspect(|run| crate::open_runs::forget(&run.0))
        .count()
}

/// Whether the run was orphaned: started on this boot, its supervisor recorded, and that
/// supervisor gone without writing the exit status (killed from outside flowgate). A run
/// still being started (no `pid` yet), running, or finished is not.
fn orphaned(run: &RunDir) -> bool {
    let Ok(meta) = run.meta() else { return false };
    if meta.boot_id != boot_id() || !matches!(run.exit_code(None), Ok(None)) {
        return false;
    }
    let Some((pid, started)) = run.process() else {
        return false;
    };
    reaper::start_time(pid) != Some(started)
}

/// Ends every process still running of the orphaned runs under `state_dir` (found by their
/// run folder in their environment, `FLOWGATE_RUN_DIR`, and this user's only: SIGTERM, the
/// grace, then SIGKILL) and returns how many there were.
pub(crate) fn end_orphans(state_dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(state_dir.join("runs")) else {
        return 0;
    };
    let runs: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| RunDir::new(e.path()))
        .filter(orphaned)
        .map(|run| run.0)
        .collect();
    end_marked_in(&runs)
}

/// Ends every process marked as one of `runs`' and returns how many were found first.
fn end_marked_in(runs: &[PathBuf]) -> usize {
    let first = reaper::marked(RUN_DIR_ENV, runs).len();
    if first > 0 {
        let left = reaper::end_all(|| reaper::marked(RUN_DIR_ENV, runs), KILL_GRACE, || {});
        if !left.is_empty() {
            let pids: Vec<i32> = left.iter().map(|p| p.pid).collect();
            tracing::warn!(?pids, "processes of orphaned runs could not be ended");
        }
    }
    first
}

/// Ends every process marked as the run's in `run` (blocking, up to the grace and a little).
pub(crate) fn end_marked(run: &Path) -> usize {
    end_marked_in(&[run.to_owned()])
}

/// Runs whose leftovers a background task is ending now, so polls of one do not start more.
static ENDING: LazyLock<Mutex<HashSet<PathBuf>>> = LazyLock::new(|| Mutex::new(HashSet::new()));

/// When the run in `run` is orphaned, ends its leftover processes in the background of the
/// current tokio runtime (a poll that finds a run vanished calls it, so a supervisor killed
/// while a server runs does not wait for the next sweep).
pub(crate) fn end_orphans_of(run: &Path) {
    let run = run.to_owned();
    {
        let mut ending = ENDING.lock().unwrap_or_else(|p| p.into_inner());
        if !ending.insert(run.clone()) {
            return;
        }
    }
    tokio::task::spawn_blocking(move || {
        if orphaned(&RunDir::new(run.clone())) {
            end_marked(&run);
        }
        ENDING
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&run);
    });
}

/// Sweeps now and then every `every`, in the background of the current tokio runtime.
pub fn spawn_expiry_sweeper(state_dir: PathBuf, every: Duration) {
    tokio::spawn(async move {
        loop {
            let dir = state_dir.clone();
            match tokio::task::spawn_blocking(move || sweep_expired_runs(&dir)).await {
                Ok(0) | Err(_) => {}
                Ok(n) => tracing::info!(removed = n, "removed finished runs past their ttl"),
            }
            tokio::time::sleep(every).await;
        }
    });
}
