//! Run folders being polled, held open with their record between calls.
//!
//! Every call on a run (a poll above all) opened its folder, read and parsed `meta.json` (the
//! creation time, the boot its process group belongs to, the expiry, the argv) and closed the
//! folder: four system calls and a sixth of a poll's instructions before the run's state was
//! looked at. A folder held open instead costs a call one `statx` of its path, which proves
//! the path still names the held folder (while it is held, its inode cannot be given to another,
//! so the same device and inode is the same folder); anything else (no such path, another
//! folder: the run expired and a retried start made it again) opens and reads it afresh.
//!
//! The record is safe to keep with its folder: `meta.json` is renamed into place whole before
//! a start answers (so before any call can name the run), and a start writes it only in a
//! folder without one, so within one folder it never changes. What is kept is that record,
//! never a run's state: the state is read from the run's other files on every call.

use std::collections::HashMap;
use std::ffi::OsString;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};

use rustix::fs::{AtFlags, CWD};

use crate::run_dir::{FolderIdentity, Meta, RunDir, folder_identity};

/// The most folders held at once: each holds a file descriptor (as `leaders` does). Past it,
/// the held folders are let go and the next calls open theirs again.
const MAX_HELD: usize = 256;

/// A held folder: which it is, the folder, and its record.
struct Held {
    identity: FolderIdentity,
    dir: Arc<OwnedFd>,
    meta: Arc<Meta>,
}

/// Held folders, by path (its bytes).
static HELD: LazyLock<Mutex<HashMap<OsString, Held>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

fn held() -> MutexGuard<'static, HashMap<OsString, Held>> {
    HELD.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The run folder at `path`, opened, with its record: the held ones while `path` names the
/// held folder, else opened and read (and held). Errors as [`RunDir::open`] and
/// [`RunDir::meta`] do: `NotFound` when there is no such run or it has no record; a failure
/// holds nothing.
pub(crate) fn open(path: PathBuf) -> io::Result<(RunDir, Arc<Meta>)> {
    let key = path.as_os_str();
    let now = match folder_identity(CWD, &path, AtFlags::empty()) {
        Ok(identity) => identity,
        Err(e) => {
            if e.kind() == io::ErrorKind::NotFound {
                held().remove(key);
            }
            return Err(e);
        }
    };
    if let Some(h) = held().get(key)
        && h.identity == now
    {
        let (dir, meta) = (Arc::clone(&h.dir), Arc::clone(&h.meta));
        return Ok((RunDir::held(path, dir), meta));
    }
    let run = RunDir::open(path)?;
    let meta = Arc::new(run.meta()?);
    // The folder opened, which is held under the identity it has (not the one looked up
    // before: the path may have changed between the two).
    if let (Some(dir), Ok(identity)) = (run.opened(), run.opened_identity()) {
        let mut held = held();
        if held.len() >= MAX_HELD {
            held.clear();
        }
        held.insert(
            run.0.as_os_str().to_owned(),
            Held {
                identity,
                dir: Arc::clone(dir),
                meta: Arc::clone(&meta),
            },
        );
    }
    Ok((run, meta))
}

/// Lets go of the folder at `path` (it was removed).
pub(crate) fn forget(path: &Path) {
    held().remove(path.as_os_str());
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

    /// A folder is opened and read once, then held; a folder removed and made again under the
    /// same name is the new one (with its own record), and a removed folder is not found.
    #[test]
    fn a_held_folder_serves_only_while_its_path_names_it() {
        let root = tempfile::tempdir().expect("dir");
        let dir = root.path().join("run1");
        std::fs::create_dir(&dir).expect("mkdir");
        write_atomic(&dir.join("meta.json"), &record("first")).expect("write");
        let (_, first) = open(dir.clone()).expect("open");
        assert_eq!(first.tool, "first");
        let (run, again) = open(dir.clone()).expect("again");
        assert!(Arc::ptr_eq(&first, &again), "the held record serves");
        assert!(run.seen("meta.json").expect("look").is_some());
        std::fs::remove_dir_all(&dir).expect("rm");
        assert_eq!(
            open(dir.clone()).expect_err("gone").kind(),
            io::ErrorKind::NotFound
        );
        std::fs::create_dir(&dir).expect("mkdir");
        assert_eq!(
            open(dir.clone()).expect_err("no record").kind(),
            io::ErrorKind::NotFound
        );
        write_atomic(&dir.join("meta.json"), &record("second")).expect("write");
        let (run, second) = open(dir.clone()).expect("new folder");
        assert_eq!(second.tool, "second");
        std::fs::write(dir.join("status"), b"x\n").expect("write");
        assert!(
            run.seen("status").expect("look").is_some(),
            "files are looked up in the new folder"
        );
        // Made again while the old one is held: the held one is let go for the new.
        let (_, held_before) = open(dir.clone()).expect("held");
        assert!(Arc::ptr_eq(&second, &held_before));
        std::fs::rename(&dir, root.path().join("old")).expect("move away");
        std::fs::create_dir(&dir).expect("mkdir");
        write_atomic(&dir.join("meta.json"), &record("third")).expect("write");
        assert_eq!(open(dir.clone()).expect("newer").1.tool, "third");
    }
}
