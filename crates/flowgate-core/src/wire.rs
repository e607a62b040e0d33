//! The projection of an [`ExecutionRecord`] onto the MCP tasks wire: the 2026-07-28 tasks
//! extension here, and the 2025-11-25 revision's shapes of the same task in [`v2025`].
//!
//! Kept free of any MCP SDK so it can be tested here and shared by every transport. Both
//! revisions have five statuses where the task model has seven, mapped once, by [`status`]:
//!
//! | record | wire |
//! |---|---|
//! | submitted, working | working |
//! | input_required | input_required, with every outstanding question as a form elicitation |
//! | completed | completed, with the tool result inline |
//! | failed (the workflow failed) | completed with `isError: true`, or failed with a JSON-RPC error when the tool asks for it |
//! | cancelled | cancelled |
//! | unknown | failed with a JSON-RPC error that names the engine status |

use serde_json::{Map, Value, json};

use crate::{ExecutionRecord, TaskState};

pub mod v2025;

/// JSON-RPC "internal error", used for workflow failures reported as protocol errors.
pub const INTERNAL_ERROR: i64 = -32603;

/// How a workflow failure reaches the client.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum FailureMode {
    /// A completed task whose tool result has `isError: true` (the default; the model reads it).
    #[default]
    ToolError,
    /// A failed task carrying a JSON-RPC error.
    JsonRpcError,
}

/// The parts of a tool's manifest that shape its results.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Presentation {
    /// How workflow failures are reported.
    pub failure: FailureMode,
    /// Whether the tool declares an output schema (JSON output becomes `structuredContent`).
    pub structured: bool,
    /// `ttlMs`: how long the engine keeps the execution (`None`: unlimited).
    pub ttl_ms: Option<u64>,
    /// `pollIntervalMs`.
    pub poll_interval_ms: u64,
}

/// The wire status of a task (the same five in both revisions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireStatus {
    /// Running.
    Working,
    /// Waiting on the client.
    InputRequired,
    /// Finished with a result.
    Completed,
    /// Finished with a JSON-RPC error.
    Failed,
    /// Stopped on request.
    Cancelled,
}

impl WireStatus {
    /// The status as both revisions spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            WireStatus::Working => "working",
            WireStatus::InputRequired => "input_required",
            WireStatus::Completed => "completed",
            WireStatus::Failed => "failed",
            WireStatus::Cancelled => "cancelled",
        }
    }

    /// Whether a task with this status has ended (and will not change again).
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            WireStatus::Completed | WireStatus::Failed | WireStatus::Cancelled
        )
    }
}

/// The one mapping of an execution's state onto the wire, for both revisions and for every
/// shape a task takes (a created task, `tasks/get`, a `tasks/list` entry).
pub fn status(state: TaskState, failure: FailureMode) -> WireStatus {
    match state {
        TaskState::Submitted | TaskState::Working => WireStatus::Working,
        TaskState::InputRequired => WireStatus::InputRequired,
        TaskState::Completed => WireStatus::Completed,
        TaskState::Failed => match failure {
            FailureMode::ToolError => WireStatus::Completed,
            FailureMode::JsonRpcError => WireStatus::Failed,
        },
        TaskState::Cancelled => WireStatus::Cancelled,
        TaskState::Unknown => WireStatus::Failed,
    }
}

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    /// The code.
    pub code: i64,
    /// The message.
    pub message: String,
    /// Extra detail.
    pub data: Option<Value>,
}

impl RpcError {
    /// An error without data.
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        RpcError {
            code,
            message: message.into(),
            data: None,
        }
    }

    /// The JSON-RPC error object: `code`, `message`, and `data` when there is some.
    pub fn to_json(&self) -> Map<String, Value> {
        let mut error = Map::new();
        error.insert("code".into(), json!(self.code));
        error.insert("message".into(), json!(self.message));
        if let Some(data) = &self.data {
            error.insert("data".into(), data.clone());
        }
        error
    }
}

/// What a finished (or unfinished) execution means for the caller.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Still running.
    Working,
    /// Waiting on answers: key -> `{method, params}` input request.
    InputRequired(Map<String, Value>),
    /// A `CallToolResult` object.
    Completed(Value),
    /// A JSON-RPC error.
    Failed(RpcError),
    /// Cancelled.
    Cancelled,
}

impl Outcome {
    /// The wire status this outcome shows as.
    pub fn status(&self) -> WireStatus {
        match self {
            Outcome::Working => WireStatus::Working,
            Outcome::InputRequired(_) => WireStatus::InputRequired,
            Outcome::Completed(_) => WireStatus::Completed,
            Outcome::Failed(_) => WireStatus::Failed,
            Outcome::Cancelled => WireStatus::Cancelled,
        }
    }
}

/// A `DetailedTask` without its id, ready for any SDK or revision to serialize.
#[derive(Debug, Clone, PartialEq)]
pub struct WireTask {
    /// The status message.
    pub status_message: Option<String>,
    /// RFC 3339 creation time, from the engine.
    pub created_at: String,
    /// RFC 3339 time of the last change, from the engine.
    pub last_updated_at: String,
    /// `ttlMs`.
    pub ttl_ms: Option<u64>,
    /// `pollIntervalMs`.
    pub poll_interval_ms: u64,
    /// The status with its payload.
    pub outcome: Outcome,
}

impl WireTask {
    /// What every shape of this task carries besides its payload.
    pub fn envelope(&self) -> Envelope<'_> {
        Envelope {
            status: self.outcome.status(),
            status_message: self.status_message.as_deref(),
            created_at: &self.created_at,
            last_updated_at: &self.last_updated_at,
            ttl_ms: self.ttl_ms,
            poll_interval_ms: self.poll_interval_ms,
        }
    }
}

/// A task without its payload (result, error or questions): what a created task and a
/// `tasks/list` entry show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Envelope<'a> {
    /// The status.
    pub status: WireStatus,
    /// The status message.
    pub status_message: Option<&'a str>,
    /// RFC 3339 creation time.
    pub created_at: &'a str,
    /// RFC 3339 time of the last change.
    pub last_updated_at: &'a str,
    /// How long the task is kept (`None`: no limit).
    pub ttl_ms: Option<u64>,
    /// How often to poll.
    pub poll_interval_ms: u64,
}

/// Projects `record` onto the 2026-07-28 wire.
pub fn project(record: &ExecutionRecord, how: &Presentation) -> WireTask {
    WireTask {
        status_message: status_message(record),
        created_at: rfc3339(record.created_at),
        last_updated_at: rfc3339(record.updated_at),
        ttl_ms: how.ttl_ms,
        poll_interval_ms: record.min_poll_interval.map_or(how.poll_interval_ms, |d| {
            how.poll_interval_ms
                .max(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        }),
        outcome: outcome(record, how),
    }
}

/// What the record means for the caller, without the task envelope (also the synchronous
/// answer for clients that do not speak tasks).
pub fn outcome(record: &ExecutionRecord, how: &Presentation) -> Outcome {
    match status(record.state, how.failure) {
        WireStatus::Working => Outcome::Working,
        // Input required with nothing to ask yet (a question being set up) reads as working.
        WireStatus::InputRequired if record.input_requests.is_empty() => Outcome::Working,
        WireStatus::InputRequired => Outcome::InputRequired(questions(record)),
        WireStatus::Completed if record.state == TaskState::Failed => Outcome::Completed(json!({
            "content": [{"type": "text", "text": failure_text(record)}],
            "isError": true,
        })),
        WireStatus::Completed => Outcome::Completed(success_result(record.output.as_ref(), how)),
        WireStatus::Failed if record.state == TaskState::Failed => {
            let (error, cause) = failure_parts(record);
            Outcome::Failed(RpcError {
                code: INTERNAL_ERROR,
                message: failure_text(record),
                data: Some(json!({"error": error, "cause": cause})),
            })
        }
        WireStatus::Failed => Outcome::Failed(RpcError {
            code: INTERNAL_ERROR,
            message: format!(
                "the engine reported a status flowgate does not know: {}",
                record.engine_status
            ),
            data: Some(json!({"engineStatus": record.engine_status})),
        }),
        WireStatus::Cancelled => Outcome::Cancelled,
    }
}

/// Every outstanding question as a form elicitation: key -> `{method, params}`.
fn questions(record: &ExecutionRecord) -> Map<String, Value> {
    record
        .input_requests
        .iter()
        .map(|r| {
            let request = json!({
                "method": "elicitation/create",
                "params": {
                    "mode": "form",
                    "message": r.message,
                    "requestedSchema": r.requested_schema,
                }
            });
            (r.key.clone(), request)
        })
        .collect()
}

/// A failed execution's error and cause.
fn failure_parts(record: &ExecutionRecord) -> (&str, Option<&str>) {
    match &record.failure {
        Some(f) => (f.error.as_str(), f.cause.as_deref()),
        None => (record.engine_status.as_str(), None),
    }
}

/// A failed execution in one line: `error: cause`.
fn failure_text(record: &ExecutionRecord) -> String {
    match failure_parts(record) {
        (error, Some(cause)) if !cause.is_empty() => format!("{error}: {cause}"),
        (error, _) => error.to_owned(),
    }
}

/// The `CallToolResult` for a successful output.
pub fn success_result(output: Option<&Value>, how: &Presentation) -> Value {
    let output = output.unwrap_or(&Value::Null);
    let text = match output {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    };
    let mut result = json!({"content": [{"type": "text", "text": text}], "isError": false});
    if how.structured && output.is_object() {
        result["structuredContent"] = output.clone();
    }
    result
}

fn status_message(record: &ExecutionRecord) -> Option<String> {
    match (&record.status_message, record.state) {
        (Some(m), _) => Some(m.clone()),
        (None, TaskState::Submitted) => Some("Queued".to_owned()),
        (None, TaskState::Failed) => record.failure.as_ref().map(|f| f.error.clone()),
        (None, TaskState::Unknown) => {
            Some(format!("Unknown engine status {}", record.engine_status))
        }
        _ => None,
    }
}

fn rfc3339(t: chrono::DateTime<chrono::Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{EngineFailure, InputRequest};

    fn how(failure: FailureMode, structured: bool) -> Presentation {
        Presentation {
            failure,
            structured,
            ttl_ms: Some(86_400_000),
            poll_interval_ms: 1000,
        }
    }

    fn record(state: TaskState) -> ExecutionRecord {
        let at = chrono::DateTime::from_timestamp(1_764_670_000, 0).expect("time");
        ExecutionRecord::new(state, "RAW", at)
    }

    #[test]
    fn submitted_shows_as_working_with_a_message() {
        let t = project(
            &record(TaskState::Submitted),
            &how(FailureMode::ToolError, false),
        );
        assert_eq!(t.outcome, Outcome::Working);
        assert_eq!(t.status_message.as_deref(), Some("Queued"));
        assert_eq!(t.created_at, "2025-12-02T10:06:40.000Z");
    }

    #[test]
    fn completed_inlines_the_result_and_structures_objects_when_declared() {
        let mut r = record(TaskState::Completed);
        r.output = Some(json!({"rows": 3}));
        let Outcome::Completed(plain) = outcome(&r, &how(FailureMode::ToolError, false)) else {
            panic!("not completed")
        };
        assert_eq!(plain["content"][0]["text"], "{\"rows\":3}");
        assert_eq!(plain["isError"], false);
        assert!(plain.get("structuredContent").is_none());
        let Outcome::Completed(structured) = outcome(&r, &how(FailureMode::ToolError, true)) else {
            panic!("not completed")
        };
        assert_eq!(structured["structuredContent"], json!({"rows": 3}));
    }

    #[test]
    fn workflow_failure_is_a_tool_error_or_a_jsonrpc_error_on_request() {
        let mut r = record(TaskState::Failed);
        r.failure = Some(EngineFailure {
            error: "exit status 3".into(),
            cause: Some("boom".into()),
        });
        let Outcome::Completed(res) = outcome(&r, &how(FailureMode::ToolError, false)) else {
            panic!("not completed")
        };
        assert_eq!(res["isError"], true);
        assert_eq!(res["content"][0]["text"], "exit status 3: boom");
        let Outcome::Failed(err) = outcome(&r, &how(FailureMode::JsonRpcError, false)) else {
            panic!("not failed")
        };
        assert_eq!(err.code, INTERNAL_ERROR);
        assert_eq!(
            err.data,
            Some(json!({"error": "exit status 3", "cause": "boom"}))
        );
    }

    #[test]
    fn unknown_is_failed_naming_the_engine_status() {
        let Outcome::Failed(err) = outcome(
            &record(TaskState::Unknown),
            &how(FailureMode::ToolError, false),
        ) else {
            panic!("not failed")
        };
        assert!(err.message.contains("RAW"));
    }

    #[test]
    fn input_required_lists_every_question_as_a_form_elicitation() {
        let mut r = record(TaskState::InputRequired);
        for key in ["q1", "q2"] {
            r.input_requests.push(InputRequest {
                key: key.into(),
                message: format!("ask {key}"),
                requested_schema: json!({"type": "object", "properties": {}}),
            });
        }
        let Outcome::InputRequired(map) = outcome(&r, &how(FailureMode::ToolError, false)) else {
            panic!("not input_required")
        };
        assert_eq!(map.len(), 2);
        assert_eq!(map["q2"]["method"], "elicitation/create");
        assert_eq!(map["q2"]["params"]["message"], "ask q2");
        assert_eq!(map["q2"]["params"]["mode"], "form");
    }

    #[test]
    fn an_execution_can_ask_for_slower_polls() {
        let mut r = record(TaskState::Working);
        let how = how(FailureMode::ToolError, false);
        assert_eq!(project(&r, &how).poll_interval_ms, 1000);
        r.min_poll_interval = Some(std::time::Duration::from_secs(30));
        assert_eq!(project(&r, &how).poll_interval_ms, 30_000);
        r.min_poll_interval = Some(std::time::Duration::from_millis(10));
        assert_eq!(project(&r, &how).poll_interval_ms, 1000);
    }

    #[test]
    fn one_mapping_of_states_gives_every_shape_its_status() {
        for failure in [FailureMode::ToolError, FailureMode::JsonRpcError] {
            for state in TaskState::ALL {
                let mut r = record(state);
                r.input_requests.push(InputRequest {
                    key: "k".into(),
                    message: "?".into(),
                    requested_schema: json!({"type": "object"}),
                });
                let projected = project(&r, &how(failure, false));
                assert_eq!(
                    projected.outcome.status(),
                    status(state, failure),
                    "{state:?} {failure:?}"
                );
                assert_eq!(projected.envelope().status, status(state, failure));
            }
        }
        // A failed workflow is a completed task unless the tool asks for JSON-RPC errors.
        assert_eq!(
            status(TaskState::Failed, FailureMode::ToolError).as_str(),
            "completed"
        );
        assert_eq!(
            status(TaskState::Failed, FailureMode::JsonRpcError).as_str(),
            "failed"
        );
        assert!(status(TaskState::Unknown, FailureMode::ToolError).is_terminal());
        assert!(!status(TaskState::InputRequired, FailureMode::ToolError).is_terminal());
    }

    #[test]
    fn errors_have_one_json_shape() {
        let plain = RpcError::new(-32603, "boom").to_json();
        assert_eq!(
            Value::Object(plain),
            json!({"code": -32603, "message": "boom"})
        );
        let mut detailed = RpcError::new(-32603, "boom");
        detailed.data = Some(json!({"x": 1}));
        assert_eq!(detailed.to_json()["data"], json!({"x": 1}));
    }

    #[test]
    fn cancelled_stays_cancelled() {
        let r = record(TaskState::Cancelled);
        assert_eq!(
            outcome(&r, &how(FailureMode::ToolError, false)).status(),
            WireStatus::Cancelled
        );
    }
}
