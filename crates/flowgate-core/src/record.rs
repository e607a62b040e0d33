//! What an engine reports about one execution.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::TaskState;

/// One execution as its engine sees it right now. Read fresh from the engine on every poll;
/// flowgate never stores it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecutionRecord {
    /// The mapped state.
    pub state: TaskState,
    /// The engine's own word for the state (for logs and for `unknown`).
    pub engine_status: String,
    /// Human-readable progress: the current step, the last status line.
    pub status_message: Option<String>,
    /// When the engine created the execution.
    pub created_at: DateTime<Utc>,
    /// When the engine last changed it.
    pub updated_at: DateTime<Utc>,
    /// The result, once completed.
    pub output: Option<Value>,
    /// The engine-reported failure of the workflow, if it failed.
    pub failure: Option<EngineFailure>,
    /// The questions the execution is waiting on, in the order asked.
    pub input_requests: Vec<InputRequest>,
    /// A link to the engine's own page for this execution.
    pub console_url: Option<String>,
    /// Poll this execution no more often than this (its data is unavailable for a while, the
    /// engine is backlogged): the advertised `pollIntervalMs` is at least this long.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_poll_interval: Option<std::time::Duration>,
}

/// An engine-reported failure: the workflow ran and failed, as opposed to flowgate failing to
/// reach the engine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EngineFailure {
    /// The short error name (`States.TaskFailed`, `exit status 3`).
    pub error: String,
    /// The longer cause (a stack, the tail of stderr).
    pub cause: Option<String>,
}

/// A question an execution asks the client, shown as a form elicitation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InputRequest {
    /// Unique for the execution's whole life, derived from engine ids, never reused.
    pub key: String,
    /// What to ask.
    pub message: String,
    /// A JSON Schema object of the answer's fields (MCP elicitation's restricted subset).
    pub requested_schema: Value,
}

/// The client's answer to an [`InputRequest`], as MCP's `ElicitResult`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InputResponse {
    /// What the person chose.
    pub action: Action,
    /// The form's content when accepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Value>,
}

/// The three answers an elicitation can get.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Answered with content.
    Accept,
    /// Refused.
    Decline,
    /// Dismissed without a choice.
    Cancel,
}

impl ExecutionRecord {
    /// A fresh record in `state`, created and updated at `at`, with nothing else set.
    pub fn new(state: TaskState, engine_status: impl Into<String>, at: DateTime<Utc>) -> Self {
        ExecutionRecord {
            state,
            engine_status: engine_status.into(),
            status_message: None,
            created_at: at,
            updated_at: at,
            output: None,
            failure: None,
            input_requests: Vec::new(),
            console_url: None,
            min_poll_interval: None,
        }
    }
}
