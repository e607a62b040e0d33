//! Run folders being polled: held open with their record between calls, watched for changes,
//! and the last record read from them kept while nothing in them has changed.
//!
//! Every call on a run (a poll above all) opened its folder, read and parsed `meta.json` (the
//! creation time, the boot its process group belongs to, the expiry, the argv) and closed the
//! folder: four system calls and a sixth of a poll's instructions before the run's state was
//! looked at. A folder held open instead costs a call one `statx` of its path, which proves
//! the path still names the held folder (while it is held, its inode cannot be given to another,
//! so the same device and inode is the same folder); anything else (no such path, another
//! folder: the run expired and a retried start made it again) opens and reads it afresh. The
//! record is safe to keep with its folder: `meta.json` is renamed into place whole before a
//! start answers (so before any call can name the run), and a start writes it only in a folder
//! without one, so within one folder it never changes.
//!
//! A poll then looked at the run's six state files (six more `statx` calls, and reads of the
//! ones that changed) to build a record that, between two polls a second apart, is mostly the
//! same. A held folder on a local file system is also watched (inotify): the kernel queues an
//! event for each change to its entries (a write, a rename into it, a new file, a changed time)
//! while the call that makes the change runs, so once the queue has been read, every change
//! that was made before has been counted. A working run's record read after the count was
//! taken is kept with it, and a later poll that finds the count unchanged (and the run's
//! process group still alive, which the caller checks every time) answers it again: it cannot
//! show a state the run has left, as any change since shows in the count. A record with open
//! questions is never kept (their files are one folder down, which the watch does not see);
//! a full queue (an overflow) forgets every kept record.
//!
//! Only folders on a local file system are held and watched. On a network file system another
//! machine's changes raise no event here, and it may remove a folder held here while the
//! server gives the folder's inode number to a new one: such folders are opened and read
//! afresh by every call, as before.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};

use flowgate_core::ExecutionRecord;
use rustix::fs::inotify::{self, ReadFlags, WatchFlags};
use rustix::fs::{AtFlags, CWD};

use crate::run_dir::{FolderIdentity, Meta, RunDir, folder_identity};

/// The most folders held at once: each holds a file descriptor and a watch (as `leaders`
/// holds a pidfd). Past it, a held folder is let go for each new one.
const MAX_HELD: usize = 256;

/// A held folder: which it is, the folder, its record, and what its watch has counted.
struct Held {
    identity: FolderIdentity,
    dir: Arc<OwnedFd>,
    meta: Arc<Meta>,
    /// The folder's watch, while it has one.
    watch: Option<i32>,
    /// Changes the watch has seen.
    changes: u64,
    /// The last working record, with the count it was read after.
    kept: Option<(Look, ExecutionRecord)>,
}

/// What the watches had counted for a folder when a poll began to read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Look {
    changes: u64,
    /// Overflows of the event queue so far (each forgets every count).
    overflows: u64,
}

/// The held folders and their watches.
struct Folders {
    held: HashMap<OsString, Held>,
    /// The held folder of each watch.
    watched: HashMap<i32, OsString>,
    /// The inotify instance, `None` where there is none (then nothing is watched).
    inotify: Option<OwnedFd>,
    overflows: u64,
    /// Whether the runs in each folder of runs are on a local file system (asked once).
    local: HashMap<PathBuf, bool>,
}

static FOLDERS: LazyLock<Mutex<Folders>> = LazyLock::new(|| {
    Mutex::new(Folders {
        held: HashMap::new(),
        watched: HashMap::new(),
        inotify: inotify::init(inotify::CreateFlags::CLOEXEC | inotify::CreateFlags::NONBLOCK).ok(),
        overflows: 0,
        local: HashMap::new(),
    })
});

fn folders() -> MutexGuard<'static, Folders> {
    FOLDERS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The changes a watch reports: anything that changes an entry's contents, times or name.
fn watched_changes() -> WatchFlags {
    WatchFlags::MODIFY
        | WatchFlags::ATTRIB
        | WatchFlags::CLOSE_WRITE
        | WatchFlags::CREATE
        | WatchFlags::DELETE
        | WatchFlags::MOVED_FROM
        | WatchFlags::MOVED_TO
        | WatchFlags::DELETE_SELF
        | WatchFlags::MOVE_SELF
        | WatchFlags::ONLYDIR
}

/// File systems whose changes all pass through this kernel (so raise its events): the local
/// disk and memory file systems and overlays of them. Others (NFS, EFS, SMB, FUSE) are not
/// watched.
pub(crate) fn local_file_system(f_type: i64) -> bool {
    const EXT: i64 = 0xEF53;
    const XFS: i64 = 0x5846_5342;
    const BTRFS: i64 = 0x9123_683E;
    const TMPFS: i64 = 0x0102_1994;
    const RAMFS: i64 = 0x8584_58F6;
    const OVERLAYFS: i64 = 0x794C_7630;
    const F2FS: i64 = 0xF2F5_2010;
    [EXT, XFS, BTRFS, TMPFS, RAMFS, OVERLAYFS, F2FS].contains(&f_type)
}

impl Folders {
    /// Counts the events queued since the last look: each is a change to a watched folder
    /// (or, for an overflow, possibly to any).
    fn drain(&mut self) {
        let Some(fd) = &self.inotify else {
            return;
        };
        let mut buf = [MaybeUninit::<u8>::uninit(); 4096];
        let mut events = inotify::Reader::new(fd.as_fd(), &mut buf);
        while let Ok(event) = events.next() {
            let flags = event.events();
            if flags.contains(ReadFlags::QUEUE_OVERFLOW) {
                self.overflows += 1;
                continue;
            }
            let wd = event.wd();
            let Some(key) = self.watched.get(&wd) else {
                continue;
            };
            if let Some(held) = self.held.get_mut(key) {
                held.changes += 1;
                if flags.contains(ReadFlags::IGNORED) {
                    // The watch is gone (its folder was removed): nothing is kept any more.
                    held.watch = None;
                    held.kept = None;
                }
            }
            if flags.contains(ReadFlags::IGNORED) {
                self.watched.remove(&wd);
            }
        }
    }

    /// A watch of the opened folder `dir` (by its descriptor, so it is this folder whatever
    /// its path names meanwhile).
    fn watch(&mut self, dir: &OwnedFd) -> Option<i32> {
        let inotify = self.inotify.as_ref()?;
        let by_descriptor = format!("/proc/self/fd/{}", dir.as_raw_fd());
        let wd = inotify::add_watch(inotify, by_descriptor.as_str(), watched_changes()).ok()?;
        // The same folder held under another path shares the watch: the first holder keeps it
        // and this one is not watched (an event names one holder).
        (!self.watched.contains_key(&wd)).then_some(wd)
    }

    /// Whether the run folder at `path` is on a local file system, asked once per folder of
    /// runs. Only such folders are held: on a network file system another machine may remove
    /// a folder that is held here, and the server may give its inode number to a new one.
    fn local(&mut self, path: &Path) -> bool {
        let Some(parent) = path.parent() else {
            return false;
        };
        if let Some(local) = self.local.get(parent) {
            return *local;
        }
        let local = rustix::fs::statfs(parent).is_ok_and(|s| local_file_system(s.f_type));
        self.local.insert(parent.to_owned(), local);
        local
    }

    /// Lets go of the held folder `key`, and of its watch.
    fn release(&mut self, key: &OsStr) {
        if let Some(held) = self.held.remove(key)
            && let Some(wd) = held.watch
        {
            self.watched.remove(&wd);
            if let Some(inotify) = &self.inotify {
                let _ = inotify::remove_watch(inotify, wd);
            }
        }
    }
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
                folders().release(key);
            }
            return Err(e);
        }
    };
    if let Some(h) = folders().held.get(key)
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
        let key = run.0.as_os_str().to_owned();
        let mut folders = folders();
        folders.release(&key);
        if !folders.local(&run.0) {
            return Ok((run, meta));
        }
        // Full: one held folder (any) makes room, so that a server polling a few more runs
        // than it can hold keeps most of them held.
        if folders.held.len() >= MAX_HELD
            && let Some(other) = folders.held.keys().next().cloned()
        {
            folders.release(&other);
        }
        let watch = folders.watch(dir);
        if let Some(wd) = watch {
            folders.watched.insert(wd, key.clone());
        }
        folders.held.insert(
            key,
            Held {
                identity,
                dir: Arc::clone(dir),
                meta: Arc::clone(&meta),
                watch,
                changes: 0,
                kept: None,
            },
        );
    }
    Ok((run, meta))
}

/// What the watches have counted for the held folder at `path` as a poll begins, when it is
/// watched, and the record kept for it if nothing in the folder has changed since that record
/// was read (the caller still checks that the run's process group is alive). A poll that reads
/// the folder reads it after this count, and may keep what it read with it ([`keep`]).
pub(crate) fn look(path: &Path) -> (Option<Look>, Option<ExecutionRecord>) {
    let mut folders = folders();
    folders.drain();
    let overflows = folders.overflows;
    let Some(held) = folders.held.get(path.as_os_str()) else {
        return (None, None);
    };
    if held.watch.is_none() {
        return (None, None);
    }
    let now = Look {
        changes: held.changes,
        overflows,
    };
    let kept = match &held.kept {
        Some((then, record)) if *then == now => Some(record.clone()),
        _ => None,
    };
    #[cfg(test)]
    if kept.is_some() {
        SERVED.with(|n| n.set(n.get() + 1));
    }
    (Some(now), kept)
}

#[cfg(test)]
thread_local! {
    /// Kept records this thread handed out (tests: a `#[tokio::test]` runs on its own thread).
    pub(crate) static SERVED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Keeps `record`, a working run's record read from the folder at `path` after `look`; a
/// later poll answers it again only while the count is still `look`'s.
pub(crate) fn keep(path: &Path, look: Look, record: &ExecutionRecord) {
    if let Some(held) = folders().held.get_mut(path.as_os_str())
        && held.watch.is_some()
    {
        held.kept = Some((look, record.clone()));
    }
}

/// Lets go of the folder at `path` (it was removed).
pub(crate) fn forget(path: &Path) {
    folders().release(path.as_os_str());
}

#[cfg(test)]
mod tests;
