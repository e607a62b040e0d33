//! The projection of an [`ExecutionRecord`] onto the MCP tasks extension (2026-07-28).
//!
//! Kept free of any MCP SDK so it can be tested here and shared by every transport. The
//! 2026-07-28 extension has five statuses where the task model has seven:
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

/// The wire status of the 2026-07-28 extension.
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

/// A `DetailedTask` without its id, ready for any SDK to serialize.
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
    match record.state {
        TaskState::Submitted | TaskState::Working => Outcome::Working,
        TaskState::InputRequired if record.input_requests.is_empty() => Outcome::Working,
        TaskState::InputRequired => Outcome::InputRequired(
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
                .collect(),
        ),
        TaskState::Completed => Outcome::Completed(success_result(record.output.as_ref(), how)),
        TaskState::Failed => {
            let (error, cause) = match &record.failure {
                Some(f) => (f.error.as_str(), f.cause.as_deref()),
                None => (record.engine_status.as_str(), None),
            };
            let text = match cause {
                Some(cause) if !cause.is_empty() => format!("{error}: {cause}"),
                _ => error.to_owned(),
            };
            match how.failure {
                FailureMode::ToolError => Outcome::Completed(json!({
                    "content": [{"type": "text", "text": text}],
                    "isError": true,
                })),
                FailureMode::JsonRpcError => Outcome::Failed(RpcError {
                    code: INTERNAL_ERROR,
                    message: text,
                    data: Some(json!({"error": error, "cause": cause})),
                }),
            }
        }
        TaskState::Cancelled => Outcome::Cancelled,
        TaskState::Unknown => Outcome::Failed(RpcError {
            code: INTERNAL_ERROR,
            message: format!(
                "the engine reported a status flowgate does not know: {}",
                record.engine_status
            ),
            data: Some(json!({"engineStatus": record.engine_status})),
        }),
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
    fn cancelled_stays_cancelled() {
        let r = record(TaskState::Cancelled);
        assert_eq!(
            outcome(&r, &how(FailureMode::ToolError, false)).status(),
            WireStatus::Cancelled
        );
    }
}
