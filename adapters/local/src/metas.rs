//! The `meta.json` of runs being polled, kept while the file is the one that was read.
//!
//! Every call on a run (each poll above all) needs its record: the creation time, the boot the
//! process group belongs to, the expiry. Reading it took three system calls and parsing it
//! (two timestamps, the argv) a sixth of a poll's instructions. The record is written once,
//! whole, before the run's first call can name it (renamed into place at the start) and never
//! changed, so a record read once stays the run's record for as long as `meta.json` is the same
//! file: one `statx` ([`RunDir::identity`]) tells, and any difference (another inode, size or
//! time: a run folder removed and made again under the same name, by a start retried after its
//! run expired) reads the file again. What is kept is what the file says, never a run's state:
//! the state is read from the run's other files on every call.

use std::collections::HashMap;
use std::ffi::OsString;
use std::io;
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};

use crate::run_dir::{FileIdentity, Meta, RunDir};

/// The most records kept: a few hundred bytes each. Past it the whole set is dropped and
/// refilled by the next polls (rare: a server polls that many runs only under a load that
/// reads them again at once).
const MAX_KEPT: usize = 4096;

/// Kept records, by run folder (its path's bytes).
static KEPT: LazyLock<Mutex<HashMap<OsString, (FileIdentity, Arc<Meta>)>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

fn kept() -> MutexGuard<'static, HashMap<OsString, (FileIdentity, Arc<Meta>)>> {
    KEPT.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The record of the opened run `run`: the kept one while `meta.json` is the file it was read
/// from, else read (and kept). Errors as [`RunDir::meta`] does (`NotFound` when there is no
/// record); a read that fails keeps nothing.
pub(crate) fn meta(run: &RunDir) -> io::Result<Arc<Meta>> {
    let key = run.0.as_os_str();
    let identity = run.identity("meta.json")?;
    if let Some((kept_identity, meta)) = kept().get(key)
        && *kept_identity == identity
    {
        return Ok(Arc::clone(meta));
    }
    let meta = Arc::new(run.meta()?);
    // Kept only if the file is still the one looked at before the read (a record replaced in
    // between is read again by the next call).
    if run.identity("meta.json")? == identity {
        let mut kept = kept();
        if kept.len() >= MAX_KEPT {
            kept.clear();
        }
        kept.insert(key.to_owned(), (identity, Arc::clone(&meta)));
    }
    Ok(meta)
}

/// Drops the kept record of `run` (its folder was removed).
pub(crate) fn forget(run: &RunDir) {
    kept().remove(run.0.as_os_str());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run_dir::write_atomic;

    fn record(tool: &str) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({
            "tool": tool,
            "command": ["/bin/true"],
            "created_at": "2026-12-04T00:00:00Z",
            "principal_digest": "p",
            "boot_id": "b",
        }))
        .expect("json")
    }

    /// A record is read once and kept; a folder made again under the same name with another
    /// record is read again, and a folder without a record is not found.
    #[test]
    fn a_record_is_kept_only_while_its_file_is_the_same() {
        let root = tempfile::tempdir().expect("dir");
        let dir = root.path().join("run1");
        std::fs::create_dir(&dir).expect("mkdir");
        write_atomic(&dir.join("meta.json"), &record("first")).expect("write");
        let run = RunDir::open(dir.clone()).expect("open");
        let first = meta(&run).expect("meta");
        assert_eq!(first.tool, "first");
        assert!(
            Arc::ptr_eq(&first, &meta(&run).expect("again")),
            "the kept record serves the next call"
        );
        std::fs::remove_dir_all(&dir).expect("rm");
        std::fs::create_dir(&dir).expect("mkdir");
        let run = RunDir::open(dir.clone()).expect("open");
        assert_eq!(
            meta(&run).expect_err("no record").kind(),
            io::ErrorKind::NotFound
        );
        write_atomic(&dir.join("meta.json"), &record("second")).expect("write");
        assert_eq!(meta(&run).expect("meta").tool, "second");
        // Replaced in place by a rename, as a start writes it.
        write_atomic(&dir.join("meta.json"), &record("third")).expect("write");
        assert_eq!(meta(&run).expect("meta").tool, "third");
    }
}
