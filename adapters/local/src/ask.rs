//! `flowgate ask`: how a running command asks the client a question and waits for the answer.
//!
//! The command's environment names its run folder (`FLOWGATE_RUN_DIR`). Asking writes a
//! question there; the task turns `input_required`; `tasks/update` writes the answer; the
//! waiting `ask` reads it. Several asks may wait at once (each gets its own key).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use flowgate_core::{Action, InputResponse};
use serde_json::{Value, json};

use crate::run_dir::{Question, RunDir};

/// The environment variable that names the run folder inside a command.
pub const RUN_DIR_ENV: &str = "FLOWGATE_RUN_DIR";
/// The environment variable that names the status file inside a command.
pub const STATUS_FILE_ENV: &str = "FLOWGATE_STATUS_FILE";

/// The schema asked for when none is given: one required string, `answer`.
pub fn default_schema() -> Value {
    json!({"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]})
}

/// Why an ask did not get an accepted answer.
#[derive(Debug, thiserror::Error)]
pub enum AskError {
    /// Not running under the local engine.
    #[error(
        "`flowgate ask` and `flowgate status` are for the commands the local engine runs as tools: \
         `ask` puts a question to the task's client and prints the answer, `status` sets the \
         task's status message. Here there is no run to talk to ({RUN_DIR_ENV} is not set); \
         call them from a tool's command under `flowgate serve`"
    )]
    NoRunDir,
    /// The question could not be written or read.
    #[error("cannot ask: {0}")]
    Io(#[from] std::io::Error),
    /// The person declined.
    #[error("the question was declined")]
    Declined,
    /// The person dismissed the question.
    #[error("the question was cancelled")]
    Cancelled,
    /// No answer in time.
    #[error("no answer within {0:?}")]
    TimedOut(Duration),
    /// The recorded answer is not a form answer to the question (the server checks every
    /// answer before recording it; this guards a run folder written some other way).
    #[error("the answer is not a form answer to the question: {0}")]
    Malformed(String),
}

/// The run folder named by the environment.
///
/// # Errors
/// [`AskError::NoRunDir`] outside a local-engine command.
pub fn run_dir_from_env() -> Result<PathBuf, AskError> {
    std::env::var_os(RUN_DIR_ENV)
        .map(PathBuf::from)
        .ok_or(AskError::NoRunDir)
}

/// Asks `message` with `schema` in the run at `run_dir`, waits for the answer, and returns the
/// accepted content: a flat object holding only the asked fields (MCP's form answer shape,
/// checked again here), `{}` for an accepted empty form.
///
/// # Errors
/// Declined, cancelled, timed out, or the run folder is unusable.
pub fn ask(
    run_dir: PathBuf,
    message: &str,
    schema: Value,
    timeout: Option<Duration>,
) -> Result<Value, AskError> {
    let run = RunDir::new(run_dir);
    let n = run.ask(&Question {
        message: message.to_owned(),
        requested_schema: schema.clone(),
    })?;
    let started = Instant::now();
    loop {
        if let Some(response) = run.read_answer(n) {
            let problems = response.form_problems(&schema);
            if !problems.is_empty() {
                return Err(AskError::Malformed(problems.join("; ")));
            }
            let InputResponse { action, content } = response;
            return match action {
                Action::Accept => Ok(content.unwrap_or_else(|| json!({}))),
                Action::Decline => Err(AskError::Declined),
                Action::Cancel => Err(AskError::Cancelled),
            };
        }
        if let Some(limit) = timeout
            && started.elapsed() >= limit
        {
            return Err(AskError::TimedOut(limit));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Sets the run's status line (what `tasks/get` shows as `statusMessage`).
///
/// # Errors
/// Outside a local-engine command, or when the file cannot be written.
pub fn set_status(message: &str) -> Result<(), AskError> {
    let path = match std::env::var_os(STATUS_FILE_ENV) {
        Some(p) => PathBuf::from(p),
        None => run_dir_from_env()?.join("status"),
    };
    crate::run_dir::write_atomic(&path, format!("{message}\n").as_bytes())?;
    Ok(())
}
