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

    pub(crate) fn meta(&self) -> io::Result<Meta> {
        let bytes = fs::read(self.path("meta.json"))?;
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

    /// The exit status, once the supervisor has written it.
    pub(crate) fn exit_code(&self) -> Option<i32> {
        fs::read_to_string(self.path("exit"))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    pub(crate) fn modified(&self, name: &str) -> Option<SystemTime> {
        fs::metadata(self.path(name))
            .and_then(|m| m.modified())
            .ok()
    }

    /// The last non-empty line of the status file.
    pub(crate) fn status_line(&self) -> Option<String> {
        let text = fs::read_to_string(self.path("status")).ok()?;
        let line = text.lines().rev().map(str::trim).find(|l| !l.is_empty())?;
        Some(line.chars().take(500).collect())
    }

    /// stdout: JSON when it parses as JSON, else the text without its trailing newline. No
    /// byte is dropped silently: invalid UTF-8 becomes U+FFFD and output past the cap is cut at
    /// a character boundary, each with a note at the end saying so.
    pub(crate) fn output(&self) -> Value {
        let mut bytes = Vec::new();
        let mut total = 0;
        if let Ok(f) = fs::File::open(self.path("stdout")) {
            total = f.metadata().map(|m| m.len()).unwrap_or_default();
            let _ = f.take(MAX_STDOUT).read_to_end(&mut bytes);
        }
        let (text, notes) = decode_output(&bytes, total);
        let trimmed = text.trim();
        if notes.is_empty()
            && let Ok(v @ (Value::Object(_) | Value::Array(_))) =
                serde_json::from_str::<Value>(trimmed)
        {
            return v;
        }
        let mut text = text.trim_end_matches(['\n', '\r']).to_owned();
        for note in notes {
            text.push_str("\n[flowgate: ");
            text.push_str(&note);
            text.push(']');
        }
        Value::String(text)
    }

    /// The last few KiB of stderr.
    pub(crate) fn stderr_tail(&self) -> String {
        let Ok(bytes) = fs::read(self.path("stderr")) else {
            return String::new();
        };
        let start = bytes.len().saturating_sub(MAX_STDERR_TAIL as usize);
        String::from_utf8_lossy(&bytes[start..]).trim().to_owned()
    }

    fn questions_dir(&self) -> PathBuf {
        self.path("questions")
    }

    /// Every question asked so far, by number, with whether it has been answered.
    pub(crate) fn questions(&self) -> Vec<(u64, Question, bool)> {
        let Ok(entries) = fs::read_dir(self.questions_dir()) else {
            return Vec::new();
        };
        let mut out: Vec<_> = entries
            .filter_map(Result::ok)
            .filter_map(|e| {
                let n: u64 = e.file_name().to_str()?.parse().ok()?;
                let bytes = fs::read(e.path().join("question.json")).ok()?;
                let q: Question = serde_json::from_slice(&bytes).ok()?;
                let answered = e.path().join("answer.json").exists();
                Some((n, q, answered))
            })
            .collect();
        out.sort_by_key(|(n, _, _)| *n);
        out
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
        assert!(run.questions()[0].2);
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
