//! One run's folder: reading and writing the files that are its record.

use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

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

/// A run's folder.
#[derive(Debug, Clone)]
pub(crate) struct RunDir(pub(crate) PathBuf);

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

pub(crate) fn boot_id() -> String {
    fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
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
    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    pub(crate) fn exists(&self) -> bool {
        self.path("meta.json").is_file()
    }

    /// A file of the run, `None` when it does not exist (yet). Any other failure to read it
    /// (a full file table, an I/O error) is an error: a record is never built from a read
    /// that failed, so a passing fault cannot turn into a wrong result.
    fn read(&self, name: &str) -> io::Result<Option<Vec<u8>>> {
        read_optional(&self.path(name))
    }

    pub(crate) fn meta(&self) -> io::Result<Meta> {
        let bytes = self
            .read("meta.json")?
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        serde_json::from_slice(&bytes).map_err(io::Error::other)
    }

    /// The process group id and its leader's start time, as recorded at spawn.
    pub(crate) fn process(&self) -> Option<(i32, u64)> {
        let text = fs::read_to_string(self.path("pid")).ok()?;
        let mut parts = text.split_whitespace();
        let pgid = parts.next()?.parse().ok()?;
        let started = parts.next()?.parse().ok()?;
        Some((pgid, started))
    }

    /// The exit status, once the supervisor has written it (atomically: a file that exists
    /// holds a whole number).
    pub(crate) fn exit_code(&self) -> io::Result<Option<i32>> {
        let Some(bytes) = self.read("exit")? else {
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
        Ok(self.exit_code()?.is_some() || self.modified("cancelled")?.is_some())
    }

    /// When a file of the run last changed, `None` when it does not exist.
    pub(crate) fn modified(&self, name: &str) -> io::Result<Option<SystemTime>> {
        match fs::metadata(self.path(name)).and_then(|m| m.modified()) {
            Ok(t) => Ok(Some(t)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The last non-empty line of the status file.
    pub(crate) fn status_line(&self) -> io::Result<Option<String>> {
        let Some(bytes) = self.read("status")? else {
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
        faults::check(&self.path("stdout"))?;
        match fs::File::open(self.path("stdout")) {
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
        let Some(bytes) = self.read("stderr")? else {
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
            let Some(n) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u64>().ok())
            else {
                continue;
            };
            let Some(bytes) = read_optional(&entry.path().join("question.json"))? else {
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

/// A file's bytes, `None` when it does not exist; other failures are errors.
fn read_optional(path: &Path) -> io::Result<Option<Vec<u8>>> {
    faults::check(path)?;
    match fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
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

    pub(super) fn check(path: &Path) -> io::Result<()> {
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
    pub(super) fn check(_: &std::path::Path) -> std::io::Result<()> {
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
        let run = RunDir(dir.path().to_owned());
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
