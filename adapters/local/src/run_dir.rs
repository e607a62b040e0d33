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
    pub(crate) principal_digest: String,
    /// The kernel boot the process group id belongs to; after a reboot it means nothing.
    pub(crate) boot_id: String,
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
    fs::write(&tmp, contents)?;
    fs::rename(&tmp, path)
}

pub(crate) fn boot_id() -> String {
    fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
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

    pub(crate) fn pgid(&self) -> Option<i32> {
        fs::read_to_string(self.path("pid"))
            .ok()?
            .trim()
            .parse()
            .ok()
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

    /// stdout: JSON when it parses as JSON, else the text without its trailing newline.
    pub(crate) fn output(&self) -> Value {
        let mut text = String::new();
        if let Ok(f) = fs::File::open(self.path("stdout")) {
            let _ = f.take(MAX_STDOUT).read_to_string(&mut text);
        }
        let trimmed = text.trim();
        match serde_json::from_str::<Value>(trimmed) {
            Ok(v @ (Value::Object(_) | Value::Array(_))) => v,
            _ => Value::String(text.trim_end_matches(['\n', '\r']).to_owned()),
        }
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
        fs::create_dir_all(self.questions_dir())?;
        for n in 1.. {
            let dir = self.questions_dir().join(n.to_string());
            match fs::create_dir(&dir) {
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

    /// Records the answer to question `n`, once. `Ok(false)` when there is no such open question.
    pub(crate) fn answer(&self, n: u64, response: &InputResponse) -> io::Result<bool> {
        let dir = self.questions_dir().join(n.to_string());
        if !dir.join("question.json").is_file() {
            return Ok(false);
        }
        match fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(dir.join("answer.lock"))
        {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(false),
            Err(e) => return Err(e),
        }
        write_atomic(&dir.join("answer.json"), &serde_json::to_vec(response)?)?;
        Ok(true)
    }

    /// The answer to question `n`, once there is one.
    pub(crate) fn read_answer(&self, n: u64) -> Option<InputResponse> {
        let bytes = fs::read(self.questions_dir().join(n.to_string()).join("answer.json")).ok()?;
        serde_json::from_slice(&bytes).ok()
    }
}
