//! Reloading the manifest without a restart: on SIGHUP, and with `--watch` when the manifest's
//! files change.
//!
//! A reload loads and binds the manifest exactly as at start. If that succeeds the new tool set
//! replaces the old one at once (requests already running finish with the tools they began
//! with); if it fails, the tools being served stay, every error is logged with its file, line
//! and column, and `flowgate_manifest_last_reload_successful` drops to 0 until a reload works.

use std::path::{Path, PathBuf};
use std::time::Duration;

use flowgate_core::Registry;
use flowgate_server::{FlowgateServer, ToolSet};
use notify::Watcher as _;
use tokio::sync::mpsc;

/// How long the manifest's files must be quiet before a change is reloaded: an editor's save
/// (write a temporary file, rename it over) or a Kubernetes ConfigMap update (a symlink swap)
/// is several events.
const SETTLE: Duration = Duration::from_millis(300);

/// Why a reload was asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Trigger {
    /// SIGHUP.
    Signal,
    /// A change to the manifest's files (`--watch`).
    Change,
}

impl Trigger {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Trigger::Signal => "SIGHUP",
            Trigger::Change => "a change to the manifest's files",
        }
    }
}

/// Where reload requests come from. Dropping it stops the watch.
#[derive(Debug)]
pub(crate) struct Triggers {
    receiver: mpsc::Receiver<Trigger>,
    _watcher: Option<notify::RecommendedWatcher>,
}

impl Triggers {
    /// SIGHUP, and changes to `watch` (the manifest file or folder) when given.
    ///
    /// # Errors
    /// The signal or the watch cannot be set up (the folder does not exist, no inotify
    /// instances left).
    pub(crate) fn new(watch: Option<&Path>) -> Result<Triggers, String> {
        // One pending request covers every later one: a reload reads the files as they are.
        let (sender, receiver) = mpsc::channel(1);
        #[cfg(unix)]
        {
            let mut hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
                .map_err(|e| format!("cannot listen for SIGHUP: {e}"))?;
            let sender = sender.clone();
            tokio::spawn(async move {
                while hangup.recv().await.is_some() {
                    let _ = sender.try_send(Trigger::Signal);
                }
            });
        }
        let watcher = match watch {
            Some(path) => Some(watch_files(path, sender)?),
            None => None,
        };
        Ok(Triggers {
            receiver,
            _watcher: watcher,
        })
    }

    /// The next reload to make, once the files have settled (`None` when nothing can ask for
    /// one any more).
    pub(crate) async fn next(&mut self) -> Option<Trigger> {
        let mut trigger = self.receiver.recv().await?;
        loop {
            match tokio::time::timeout(SETTLE, self.receiver.recv()).await {
                Ok(Some(again)) => {
                    if again == Trigger::Signal {
                        trigger = again;
                    }
                }
                Ok(None) | Err(_) => return Some(trigger),
            }
        }
    }
}

/// Reloads `manifest` into `server` each time `triggers` asks, binding its tools with
/// `registry`, until nothing can ask any more.
pub(crate) async fn serve(
    server: FlowgateServer,
    manifest: Option<PathBuf>,
    registry: Registry,
    mut triggers: Triggers,
) {
    while let Some(trigger) = triggers.next().await {
        reload(&server, manifest.as_deref(), &registry, trigger);
    }
}

/// One reload: the new tool set served at once, or the old one kept with the errors logged.
fn reload(server: &FlowgateServer, manifest: Option<&Path>, registry: &Registry, why: Trigger) {
    let loaded =
        crate::setup::load(manifest).and_then(|manifest| ToolSet::build(&manifest, registry));
    let metrics = flowgate_telemetry::metrics::get();
    match loaded {
        Ok(tools) => {
            let count = tools.len();
            server.replace_tools(tools);
            if let Some(metrics) = metrics {
                metrics.reloaded(Ok(count));
            }
            tracing::info!(
                tools = count,
                trigger = why.as_str(),
                "reloaded the manifest"
            );
        }
        Err(errors) => {
            for e in &errors {
                tracing::error!(trigger = why.as_str(), "manifest reload: {e}");
            }
            if let Some(metrics) = metrics {
                metrics.reloaded(Err(()));
            }
            tracing::error!(
                errors = errors.len(),
                "the manifest did not load; still serving the tools loaded before"
            );
        }
    }
}

/// Watches the folder that holds the manifest (a file's folder, or the manifest folder itself):
/// a file is often replaced rather than written (a rename over it, a symlink swap), which only
/// its folder sees.
fn watch_files(
    path: &Path,
    sender: mpsc::Sender<Trigger>,
) -> Result<notify::RecommendedWatcher, String> {
    let path = std::fs::canonicalize(path)
        .map_err(|e| format!("--watch: cannot watch {}: {e}", path.display()))?;
    let (folder, file) = if path.is_dir() {
        (path.clone(), None)
    } else {
        let folder = path.parent().map(Path::to_path_buf).unwrap_or_default();
        (folder, path.file_name().map(ToOwned::to_owned))
    };
    let relevant = move |changed: &Path| -> bool {
        let Some(name) = changed.file_name() else {
            return false;
        };
        // Kubernetes mounts a ConfigMap's files as symlinks into `..data`, swapped on update.
        if name.to_string_lossy().starts_with("..") {
            return true;
        }
        match &file {
            Some(file) => name == file.as_os_str(),
            None => matches!(
                changed.extension().and_then(|e| e.to_str()),
                Some("yaml" | "yml")
            ),
        }
    };
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        let Ok(event) = event else {
            return;
        };
        if event.kind.is_access() {
            return;
        }
        if event.paths.iter().any(|p| relevant(p)) {
            let _ = sender.try_send(Trigger::Change);
        }
    })
    .map_err(|e| format!("--watch: {e}"))?;
    watcher
        .watch(&folder, notify::RecursiveMode::NonRecursive)
        .map_err(|e| format!("--watch: cannot watch {}: {e}", folder.display()))?;
    tracing::info!(folder = %folder.display(), "watching the manifest for changes");
    Ok(watcher)
}

/// The manifest `--watch` watches: the given path (an inline or bundled manifest has no files).
pub(crate) fn watched(manifest: Option<&Path>, watch: bool) -> Result<Option<PathBuf>, String> {
    match (watch, manifest) {
        (false, _) => Ok(None),
        (true, Some(path)) => Ok(Some(path.to_path_buf())),
        (true, None) => {
            Err("--watch needs a manifest file or folder (--manifest or FLOWGATE_MANIFEST)".into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_burst_of_changes_is_one_reload_once_the_files_settle() {
        let folder = tempfile::tempdir().expect("tempdir");
        let manifest = folder.path().join("tools.yaml");
        std::fs::write(&manifest, "tools: []\n").expect("write");
        let mut triggers = Triggers::new(Some(&manifest)).expect("watch");
        // A save by rename, as editors do, and an unrelated file beside it.
        let temporary = folder.path().join(".tools.yaml.swp");
        std::fs::write(&temporary, "tools: []\n# saved\n").expect("write");
        std::fs::rename(&temporary, &manifest).expect("rename");
        std::fs::write(&manifest, "tools: []\n# again\n").expect("write");
        let first = tokio::time::timeout(Duration::from_secs(10), triggers.next())
            .await
            .expect("a reload within 10 s");
        assert_eq!(first, Some(Trigger::Change));
        // The burst was one reload: nothing more is pending.
        let more = tokio::time::timeout(SETTLE * 3, triggers.next()).await;
        assert!(more.is_err(), "a second reload for one burst: {more:?}");
        // Another file in the folder is not the manifest.
        std::fs::write(folder.path().join("notes.txt"), "x").expect("write");
        let other = tokio::time::timeout(SETTLE * 3, triggers.next()).await;
        assert!(other.is_err(), "reloaded for another file: {other:?}");
    }

    #[test]
    fn watching_needs_files() {
        assert!(watched(None, true).is_err());
        assert_eq!(watched(None, false), Ok(None));
        assert_eq!(
            watched(Some(Path::new("m.yaml")), true),
            Ok(Some(PathBuf::from("m.yaml")))
        );
    }
}
