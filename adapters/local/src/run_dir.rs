//! One run's folder: reading and writing the files that are its record.

use std::borrow::Cow;
use std::fs;
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rustix::fs::{AtFlags, CWD, Mode, OFlags, StatxFlags};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use flowgate_core::InputResponse;

/// Keep at most this much of stdout as the result, and this much stderr as a failure's cause.
const MAX_STDOUT: u64 = 1 << 20;
const MAX_STDERR_TAIL: u64 = 4 << 10;

/// `meta.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Meta {
    pub(crate) tool: String,
    pub(crate) command: Vec<String>,
    pub(crate) created_at: chrono::DateTime<chrono::Utc>,
    /// The principal tag the run was started for (named `principal_digest` on disk, as runs
    /// recorded before it was called a tag have it).
    #[serde(rename = "principal_digest")]
    pub(crate) principal_tag: String,
    /// The kernel boot the process group id belongs to; after a reboot it means nothing.
    pub(crate) boot_id: String,
    /// When the task's advertised `ttlMs` runs out; a finished run is removed after it.
    /// Absent for no limit (and in runs recorded before flowgate kept it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) expires_at: Option<chrono::DateTime<chrono::Utc>>,
}

/// `questions/<n>/question.json`, written by `flowgate ask`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Question {
    pub(crate) message: String,
    pub(crate) requested_schema: Value,
}

/// A run's folder: its path, and the folder itself when it was opened ([`RunDir::open`]).
///
/// An opened folder is where its files are looked up: each lookup is then one name in it
/// instead of a walk of the whole path from `/` (a poll looks at up to a dozen files, and
/// those walks were most of the cost of its `statx` and `openat` calls). A folder being polled
/// is held open between calls (module `open_runs`), and each call first proves that its path
/// still names the held folder: a folder removed and made again under the same name (a start
/// retried after its run expired) is the new one at the next call.
#[derive(Debug)]
pub(crate) struct RunDir(pub(crate) PathBuf, Option<Arc<OwnedFd>>);

/// What a look at a file of a run found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Seen {
    /// When it last changed.
    pub(crate) modified: SystemTime,
    /// How many bytes it held.
    pub(crate) len: u64,
}

/// Which folder a path named when it was looked at: its device and inode. While a folder is
/// held open its inode stays allocated, so no other folder has the same pair: a path found to
/// name that pair names the held folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FolderIdentity {
    device: u64,
    inode: u64,
}

/// The identity of the folder `path` (looked up in `dir`) names now, following symbolic links
/// as opening it does; with [`AtFlags::EMPTY_PATH`] and an empty `path`, of `dir` itself. One
/// `statx` (`NotFound` when there is nothing there), or `stat` where there is no `statx`.
pub(crate) fn folder_identity(
    dir: BorrowedFd<'_>,
    path: &Path,
    flags: AtFlags,
) -> io::Result<FolderIdentity> {
    match rustix::fs::statx(dir, path, flags | AtFlags::STATX_DONT_SYNC, StatxFlags::INO) {
        Ok(st) => Ok(FolderIdentity {
            device: (u64::from(st.stx_dev_major) << 32) | u64::from(st.stx_dev_minor),
            inode: st.stx_ino,
        }),
        Err(rustix::io::Errno::NOSYS) => {
            let st = rustix::fs::statat(dir, path, flags)?;
            Ok(FolderIdentity {
                device: st.st_dev,
                inode: st.st_ino,
            })
        }
        Err(e) => Err(e.into()),
    }
}

/// Writes `contents` to `path` so that readers see all of it or none of it.
pub(crate) fn write_atomic(path: &Path, contents: &[u8]) -> io::Result<()> {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    write_private(&tmp, contents)?;
    fs::rename(&tmp, path)
}

/// Writes a new file readable by this user only.
pub(crate) fn write_private(path: &Path, contents: &[u8]) -> io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(contents)
}

/// The kernel boot this process runs in. It cannot change while the process runs, so it is
/// read once: every poll of a running task compares a run's boot id with it.
pub(crate) fn boot_id() -> &'static str {
    static BOOT_ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BOOT_ID.get_or_init(|| {
        fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .map(|s| s.trim().to_owned())
            .unwrap_or_default()
    })
}

/// The room [`read_small`] starts with: a run's small files (meta, pid, status) and a
/// process's `/proc/<pid>/stat` fit, so each is read with one open and two reads.
const SMALL_FILE: usize = 1024;

/// A file's bytes, read without asking for its size first (`fs::read` does, one more system
/// call on every read of every poll); larger files than [`SMALL_FILE`] grow the buffer.
pub(crate) fn read_small(path: &Path) -> io::Result<Vec<u8>> {
    read_file(fs::File::open(path)?, None)
}

/// The bytes of `file`: up to its end, or, given the length `seen` that a look at the file
/// just found, up to the first read that returns less than it had room for once at least
/// `seen` bytes are in.
///
/// Confirming the end takes one more `read` that returns nothing. Once the bytes the look saw
/// are in, the file has been read as far as that look saw it, which is all a poll reports (a
/// poll is the run as its look at the files saw it), so that `read` is left out. It is left out
/// only then: a file found shorter than the look saw (rewritten meanwhile) is read to its end.
fn read_file(mut file: fs::File, seen: Option<u64>) -> io::Result<Vec<u8>> {
    // Room for what was seen and one byte more, so that a file that has not grown since is
    // read by one `read` that does not fill it.
    let room = seen.map_or(SMALL_FILE, |seen| {
        usize::try_from(seen.saturating_add(1))
            .unwrap_or(usize::MAX)
            .clamp(SMALL_FILE, MAX_STDOUT as usize)
    });
    let mut bytes = vec![0; room];
    let mut len = 0;
    loop {
        if len == bytes.len() {
            bytes.resize(len * 2, 0);
        }
        match file.read(&mut bytes[len..]) {
            Ok(0) => break,
            Ok(n) => {
                len += n;
                if seen.is_some_and(|seen| len as u64 >= seen) && len < bytes.len() {
                    break;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    bytes.truncate(len);
    Ok(bytes)
}

/// A file time as the kernel gives it: seconds from the epoch (negative before it) and
/// nanoseconds.
fn system_time(secs: i64, nanos: u32) -> io::Result<SystemTime> {
    let whole = Duration::from_secs(secs.unsigned_abs());
    let at = if secs >= 0 {
        SystemTime::UNIX_EPOCH.checked_add(whole)
    } else {
        SystemTime::UNIX_EPOCH.checked_sub(whole)
    };
    at.and_then(|at| at.checked_add(Duration::from_nanos(u64::from(nanos))))
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "a file time out of range"))
}

/// The text of at most [`MAX_STDOUT`] bytes of a `total`-byte output, and notes on what was
/// changed: a cut (at a character boundary) and invalid UTF-8 (replaced with U+FFFD).
fn decode_output(bytes: &[u8], total: u64) -> (String, Vec<String>) {
    let mut notes = Vec::new();
    let mut keep = bytes;
    if total > bytes.len() as u64 {
        // A cut may split a character: drop its partial tail (at most 3 bytes).
        if let Err(e) = std::str::from_utf8(&bytes[bytes.len().saturating_sub(4)..])
            && e.error_len().is_none()
        {
            keep = &bytes[..bytes.len() - (bytes.len().min(4) - e.valid_up_to())];
        }
        notes.push(format!(
            "output cut at {} of {total} bytes; {} bytes were dropped",
            keep.len(),
            total - keep.len() as u64
        ));
    }
    let text = match std::str::from_utf8(keep) {
        Ok(s) => s.to_owned(),
        Err(_) => {
            notes.insert(
                0,
                "the output was not valid UTF-8; invalid bytes are shown as U+FFFD".to_owned(),
            );
            String::from_utf8_lossy(keep).into_owned()
        }
    };
    (text, notes)
}

impl RunDir {
    /// The run folder at `path`, not opened: each file is looked up by its whole path. For
    /// one-off uses (a start, a sweep, `flowgate ask`) that look at a file or two.
    pub(crate) fn new(path: PathBuf) -> Self {
        RunDir(path, None)
    }

    /// The run folder at `path`, opened (`O_PATH`: for looking up names in it only) so that
    /// its files are looked up in it. Errors as opening the folder fails: `NotFound` when
    /// there is no such run, `NotADirectory` when the path is not a folder.
    pub(crate) fn open(path: PathBuf) -> io::Result<Self> {
        let dir = rustix::fs::open(
            &path,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(RunDir(path, Some(Arc::new(dir))))
    }

    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    /// Where the file `name` of the run is looked up: by name in the opened folder, or by
    /// its whole path.
    fn at<'a>(&'a self, name: &'a str) -> (BorrowedFd<'a>, Cow<'a, Path>) {
        match &self.1 {
            Some(dir) => (dir.as_fd(), Cow::Borrowed(Path::new(name))),
            None => (CWD, Cow::Owned(self.path(name))),
        }
    }

    /// The file `name` of the run, opened for reading.
    fn open_file(&self, name: &str) -> io::Result<fs::File> {
        let (dir, path) = self.at(name);
        let fd = rustix::fs::openat(dir, &*path, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())?;
        Ok(fs::File::from(fd))
    }

    /// A file of the run, `None` when it does not exist (yet). Any other failure to read it
    /// (a full file table, an I/O error) is an error: a record is never built from a read
    /// that failed, so a passing fault cannot turn into a wrong result. `seen` is the length a
    /// look at it just found, if any ([`read_file`]).
    fn read(&self, name: &str, seen: Option<u64>) -> io::Result<Option<Vec<u8>>> {
        faults::check(&self.0, name)?;
        match self.open_file(name).and_then(|f| read_file(f, seen)) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The run's record, `NotFound` when there is none.
    ///
    /// In an opened folder (a call on an existing run: a poll, an answer, a cancel) the read
    /// ends at its first `read` that does not fill the room it had, as if that `read` had been
    /// told the length of the file: `meta.json` is written whole before it is renamed into
    /// place and never changes, so that `read` has reached its end; were it ever cut short,
    /// what it holds is not a whole JSON object, an error, and those calls answer a read error
    /// with an error (retried), never with a record. A start, which would run the command again
    /// when the record cannot be read, reads to the confirmed end.
    pub(crate) fn meta(&self) -> io::Result<Meta> {
        let seen = self.1.as_ref().map(|_| 0);
        let bytes = self
            .read("meta.json", seen)?
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        serde_json::from_slice(&bytes).map_err(io::Error::other)
    }

    /// The process group id and its leader's start time, as recorded at spawn.
    pub(crate) fn process(&self) -> Option<(i32, u64)> {
        let bytes = read_file(self.open_file("pid").ok()?, None).ok()?;
        let mut parts = std::str::from_utf8(&bytes).ok()?.split_whitespace();
        let pgid = parts.next()?.parse().ok()?;
        let started = parts.next()?.parse().ok()?;
        Some((pgid, started))
    }

    /// The exit status, once the supervisor has written it (atomically: a file that exists
    /// holds a whole number). `seen` is what a look at the file just found, if any.
    pub(crate) fn exit_code(&self, seen: Option<Seen>) -> io::Result<Option<i32>> {
        let Some(bytes) = self.read("exit", seen.map(|s| s.len))? else {
            return Ok(None);
        };
        String::from_utf8_lossy(&bytes)
            .trim()
            .parse()
            .map(Some)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
    }

    /// Whether the run has exited or been cancelled.
    pub(crate) fn has_ended(&self) -> io::Result<bool> {
        Ok(self.exit_code(None)?.is_some() || self.seen("cancelled")?.is_some())
    }

    /// When a file of the run last changed and how long it was, `None` when it does not
    /// exist. One `statx` asking for these two only (`fs::metadata` asks for everything), and
    /// not syncing with a network file system's server (a poll is a look, not a barrier).
    pub(crate) fn seen(&self, name: &str) -> io::Result<Option<Seen>> {
        let (dir, path) = self.at(name);
        let found = match rustix::fs::statx(
            dir,
            &*path,
            AtFlags::STATX_DONT_SYNC,
            StatxFlags::MTIME | StatxFlags::SIZE,
        ) {
            Ok(st) => Ok((st.stx_mtime.tv_sec, st.stx_mtime.tv_nsec, st.stx_size)),
            // A kernel (or a sandbox) without statx: the older call.
            Err(rustix::io::Errno::NOSYS) => {
                rustix::fs::statat(dir, &*path, AtFlags::empty()).map(|st| {
                    (
                        st.st_mtime,
                        u32::try_from(st.st_mtime_nsec).unwrap_or(0),
                        u64::try_from(st.st_size).unwrap_or(0),
                    )
                })
            }
            Err(e) => Err(e),
        }
        .map_err(io::Error::from)
        .and_then(|(secs, nanos, len)| {
            Ok(Seen {
                modified: system_time(secs, nanos)?,
                len,
            })
        });
        match found {
            Ok(seen) => Ok(Some(seen)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The run folder at `path`, opened by an earlier call and held since (module
    /// `open_runs`, which proves that `path` still names it).
    pub(crate) fn held(path: PathBuf, dir: Arc<OwnedFd>) -> Self {
        RunDir(path, Some(dir))
    }

    /// The opened folder itself (for holding it), `None` when it was not opened.
    pub(crate) fn opened(&self) -> Option<&Arc<OwnedFd>> {
        self.1.as_ref()
    }

    /// Which folder was opened: its device and inode (one `statx` of the open folder).
    pub(crate) fn opened_identity(&self) -> io::Result<FolderIdentity> {
        match &self.1 {
            Some(dir) => folder_identity(dir.as_fd(), Path::new(""), AtFlags::EMPTY_PATH),
            None => folder_identity(CWD, &self.0, AtFlags::empty()),
        }
    }

    /// The last non-empty line of the status file, as a look at it just found it (`seen`):
    /// an empty file is not opened.
    pub(crate) fn status_line(&self, seen: Seen) -> io::Result<Option<String>> {
        if seen.len == 0 {
            return Ok(None);
        }
        let Some(bytes) = self.read("status", Some(seen.len))? else {
            return Ok(None);
        };
        let text = String::from_utf8_lossy(&bytes);
        Ok(text
            .lines()
            .rev()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .map(|line| line.chars().take(500).collect()))
    }

    /// stdout: JSON when it parses as JSON, else the text without its trailing newline. No
    /// byte is dropped silently: invalid UTF-8 becomes U+FFFD and output past the cap is cut at
    /// a character boundary, each with a note at the end saying so.
    pub(crate) fn output(&self) -> io::Result<Value> {
        let mut bytes = Vec::new();
        let mut total = 0;
        faults::check(&self.0, "stdout")?;
        match self.open_file("stdout") {
            Ok(f) => {
                total = f.metadata()?.len();
                f.take(MAX_STDOUT).read_to_end(&mut bytes)?;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let (text, notes) = decode_output(&bytes, total);
        let trimmed = text.trim();
        if notes.is_empty()
            && let Ok(v @ (Value::Object(_) | Value::Array(_))) =
                serde_json::from_str::<Value>(trimmed)
        {
            return Ok(v);
        }
        let mut text = text.trim_end_matches(['\n', '\r']).to_owned();
        for note in notes {
            text.push_str("\n[flowgate: ");
            text.push_str(&note);
            text.push(']');
        }
        Ok(Value::String(text))
    }

    /// The last few KiB of stderr.
    pub(crate) fn stderr_tail(&self) -> io::Result<String> {
        let Some(bytes) = self.read("stderr", None)? else {
            return Ok(String::new());
        };
        let start = bytes.len().saturating_sub(MAX_STDERR_TAIL as usize);
        Ok(String::from_utf8_lossy(&bytes[start..]).trim().to_owned())
    }

    fn questions_dir(&self) -> PathBuf {
        self.path("questions")
    }

    /// Every question asked so far, by number, with whether it has been answered. A question
    /// whose folder exists but whose `question.json` is not there yet (`flowgate ask` is
    /// between the two steps) is not asked yet.
    pub(crate) fn questions(&self) -> io::Result<Vec<(u64, Question, bool)>> {
        let entries = match fs::read_dir(self.questions_dir()) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut out = Vec::new();
        for entry in entries {
            let entry = entry?;
            let name = entry.file_name();
            let Some((name, n)) = name
                .to_str()
                .and_then(|name| Some((name, name.parse::<u64>().ok()?)))
            else {
                continue;
            };
            let Some(bytes) = self.read(&format!("questions/{name}/question.json"), None)? else {
                continue;
            };
            let q: Question = serde_json::from_slice(&bytes).map_err(io::Error::other)?;
            let answered = entry.path().join("answer.json").try_exists()?;
            out.push((n, q, answered));
        }
        out.sort_by_key(|(n, _, _)| *n);
        Ok(out)
    }

    /// Records a question under the next free number and returns that number.
    pub(crate) fn ask(&self, question: &Question) -> io::Result<u64> {
        crate::state_dir::create_private_dir(&self.questions_dir())?;
        for n in 1.. {
            let dir = self.questions_dir().join(n.to_string());
            match std::os::unix::fs::DirBuilderExt::mode(&mut fs::DirBuilder::new(), 0o700)
                .create(&dir)
            {
                Ok(()) => {
                    write_atomic(&dir.join("question.json"), &serde_json::to_vec(question)?)?;
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        Err(io::Error::other("no free question number"))
    }

    /// Records the answer to question `n`, once: the first answer wins, and an answer is either
    /// wholly published or not at all (written to a private file, then linked into place, which
    /// fails if an answer is already there). `Ok(false)` when there is no such open question.
    pub(crate) fn answer(&self, n: u64, response: &InputResponse) -> io::Result<bool> {
        let dir = self.questions_dir().join(n.to_string());
        if !dir.join("question.json").is_file() {
            return Ok(false);
        }
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let tmp = dir.join(format!(
            "answer.{}.{}.tmp",
            std::process::id(),
            NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        write_private(&tmp, &serde_json::to_vec(response)?)?;
        let linked = fs::hard_link(&tmp, dir.join("answer.json"));
        let _ = fs::remove_file(&tmp);
        match linked {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The answer to question `n`, once there is one.
    pub(crate) fn read_answer(&self, n: u64) -> Option<InputResponse> {
        let bytes = fs::read(self.questions_dir().join(n.to_string()).join("answer.json")).ok()?;
        serde_json::from_slice(&bytes).ok()
    }
}

/// Transient read faults staged by the tests (the conformance suite's
/// `TransientReadFault`): a read of a run's file under an armed state folder fails once
/// `skip` reads have passed. Outside tests every check passes.
#[cfg(test)]
pub(crate) mod faults {
    use std::io;
    use std::path::{Path, PathBuf};
    use std::sync::Mutex;

    static ARMED: Mutex<Vec<(PathBuf, u32)>> = Mutex::new(Vec::new());

    /// Arms (`Some(skip)`) or disarms (`None`) a fault for the runs under `root`.
    pub(crate) fn arm(root: &Path, skip: Option<u32>) {
        let mut armed = ARMED.lock().unwrap_or_else(|p| p.into_inner());
        armed.retain(|(r, _)| r != root);
        if let Some(skip) = skip {
            armed.push((root.to_owned(), skip));
        }
    }

    /// Whether the read of the file `name` in the folder `dir` may go ahead.
    pub(super) fn check(dir: &Path, name: &str) -> io::Result<()> {
        let path = dir.join(name);
        let mut armed = ARMED.lock().unwrap_or_else(|p| p.into_inner());
        let Some(i) = armed.iter().position(|(root, _)| path.starts_with(root)) else {
            return Ok(());
        };
        if armed[i].1 == 0 {
            armed.remove(i);
            return Err(io::Error::other("a staged transient read fault"));
        }
        armed[i].1 -= 1;
        Ok(())
    }
}

#[cfg(not(test))]
mod faults {
    #[inline(always)]
    pub(super) fn check(_: &std::path::Path, _: &str) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A crash while answering leaves at most a private temp file: the question can still be
    /// answered, the first answer wins, and what is published is whole.
    #[test]
    fn an_answer_is_published_whole_once_even_after_a_crash_mid_answer() {
        let dir = tempfile::tempdir().expect("tempdir");
        let run = RunDir::new(dir.path().to_owned());
        let question = Question {
            message: "Go?".into(),
            requested_schema: serde_json::json!({"type": "object"}),
        };
        let n = run.ask(&question).expect("ask");
        let qdir = run.questions_dir().join(n.to_string());
        // What a writer that died between writing and publishing leaves behind.
        fs::write(qdir.join("answer.999.0.tmp"), b"{\"action\": \"acc").expect("stray");
        let first = InputResponse {
            action: flowgate_core::Action::Accept,
            content: Some(serde_json::json!({"go": true})),
        };
        let second = InputResponse {
            action: flowgate_core::Action::Decline,
            content: None,
        };
        assert!(
            run.answer(n, &first).expect("answer"),
            "the question must stay answerable"
        );
        assert!(
            !run.answer(n, &second).expect("second answer"),
            "first answer wins"
        );
        assert_eq!(run.read_answer(n), Some(first));
        assert!(run.questions().expect("questions")[0].2);
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(qdir.join("answer.json"))
            .expect("answer")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    /// `read_small` starts with room for small files only: a larger file (a run's stdout)
    /// still comes back whole, and an empty one empty.
    #[test]
    fn read_small_reads_files_larger_than_its_first_buffer_whole() {
        let dir = tempfile::tempdir().expect("tempdir");
        let big: Vec<u8> = (0..3 * SMALL_FILE + 7).map(|i| (i % 251) as u8).collect();
        fs::write(dir.path().join("big"), &big).expect("write");
        fs::write(dir.path().join("empty"), b"").expect("write");
        assert_eq!(read_small(&dir.path().join("big")).expect("read"), big);
        assert!(
            read_small(&dir.path().join("empty"))
                .expect("read")
                .is_empty()
        );
        assert_eq!(
            read_small(&dir.path().join("missing")).map_err(|e| e.kind()),
            Err(io::ErrorKind::NotFound)
        );
    }

    /// Reading up to what a look saw: a file as long as seen, one that grew past the first
    /// buffer since, and one rewritten shorter since all come back whole.
    #[test]
    fn a_file_read_after_a_look_comes_back_whole() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f");
        let open = || fs::File::open(&path).expect("open");
        fs::write(&path, b"step 1\n").expect("write");
        assert_eq!(read_file(open(), Some(7)).expect("read"), b"step 1\n");
        let big: Vec<u8> = (0..3 * SMALL_FILE + 7).map(|i| (i % 251) as u8).collect();
        fs::write(&path, &big).expect("write");
        assert_eq!(read_file(open(), Some(7)).expect("read"), big);
        fs::write(&path, b"2").expect("write");
        assert_eq!(read_file(open(), Some(7)).expect("read"), b"2");
        assert_eq!(read_file(open(), Some(0)).expect("read"), b"2");
    }

    /// An opened run folder looks files up in it: the same times and lengths as by path, and
    /// `None` for a file that is not there; a folder that is not there is `NotFound`.
    #[test]
    fn an_opened_run_folder_sees_what_its_path_sees() {
        let dir = tempfile::tempdir().expect("tempdir");
        fs::write(dir.path().join("status"), b"copying\n").expect("write");
        let opened = RunDir::open(dir.path().to_owned()).expect("open");
        let by_path = RunDir::new(dir.path().to_owned());
        let seen = opened.seen("status").expect("seen").expect("there");
        assert_eq!(by_path.seen("status").expect("seen"), Some(seen));
        let metadata = fs::metadata(dir.path().join("status")).expect("metadata");
        assert_eq!(seen.modified, metadata.modified().expect("mtime"));
        assert_eq!(seen.len, 8);
        assert_eq!(
            opened.status_line(seen).expect("status"),
            Some("copying".into())
        );
        assert_eq!(opened.seen("exit").expect("seen"), None);
        assert_eq!(opened.exit_code(None).expect("exit"), None);
        assert_eq!(
            RunDir::open(dir.path().join("gone"))
                .map_err(|e| e.kind())
                .err(),
            Some(io::ErrorKind::NotFound)
        );
    }

    #[test]
    fn output_that_is_not_utf8_keeps_every_byte_and_says_so() {
        let (text, notes) = decode_output(b"caf\xe9 ok", 7);
        assert_eq!(text, "caf\u{fffd} ok");
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].contains("not valid UTF-8"), "{notes:?}");
    }

    #[test]
    fn a_cut_lands_on_a_character_boundary_and_says_how_much_was_dropped() {
        // "é" is two bytes; a cap after its first byte must not leave half of it.
        let (text, notes) = decode_output("abé".as_bytes()[..3].as_ref(), 10);
        assert_eq!(text, "ab");
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].contains("8 bytes were dropped"), "{notes:?}");
        let (text, notes) = decode_output(b"plain", 5);
        assert_eq!((text.as_str(), notes.len()), ("plain", 0));
    }
}
