//! Removing finished runs whose ttl has run out, so the `ttlMs` a task advertises is true:
//! nothing else ever deletes a run folder. A sweep runs when the server starts and then on an
//! interval; a handle to a swept run answers like an unknown one.

use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::Utc;

use crate::engine::expired;
use crate::run_dir::RunDir;

/// Removes every expired, finished run under `state_dir` and returns how many it removed.
/// Runs it cannot read are left alone.
pub fn sweep_expired_runs(state_dir: &Path) -> usize {
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
