//! The 2025-11-25 revision's shapes of a task: the shipped form of SEP-1686, which the Python
//! `mcp` 1.x and TypeScript SDK 1.x task clients speak.
//!
//! A pure projection of the same [`WireTask`](super::WireTask) (through its
//! [`Envelope`]) and [`Outcome`] the 2026-07-28 wire shows, so a task has the same status in
//! both revisions ([`super::status`] maps the states once):
//!
//! | 2026-07-28 | 2025-11-25 |
//! |---|---|
//! | `ttlMs` | `ttl` (`null`: unlimited) |
//! | `pollIntervalMs` | `pollInterval` |
//! | a created task: the task with `resultType: "task"` | `{"task": Task}` |
//! | `tasks/get`: the task with its `result`, `error` or `inputRequests` inline | the `Task` alone; `tasks/result` answers with the result (or the error) once the task ends |
//! | questions in `inputRequests`, answered with `tasks/update` | each question sent as an `elicitation/create` request, with the task in `_meta` |

use serde_json::{Map, Value, json};

use super::{Envelope, INTERNAL_ERROR, Outcome, RpcError};

/// The revision these shapes belong to.
pub const REVISION: &str = "2025-11-25";
/// The `_meta` key naming the task a message relates to.
pub const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";

/// A `Task`.
pub fn task(task_id: &str, envelope: &Envelope<'_>) -> Value {
    let mut task = Map::new();
    task.insert("taskId".into(), json!(task_id));
    task.insert("status".into(), json!(envelope.status.as_str()));
    if let Some(message) = envelope.status_message {
        task.insert("statusMessage".into(), json!(message));
    }
    task.insert("createdAt".into(), json!(envelope.created_at));
    task.insert("lastUpdatedAt".into(), json!(envelope.last_updated_at));
    task.insert("ttl".into(), json!(envelope.ttl_ms));
    task.insert("pollInterval".into(), json!(envelope.poll_interval_ms));
    Value::Object(task)
}

/// The answer to a `tools/call` that created a task: `{"task": Task}`.
pub fn created(task_id: &str, envelope: &Envelope<'_>) -> Value {
    json!({ "task": task(task_id, envelope) })
}

/// The answer of `tasks/result` for a task whose outcome is `outcome`, once it has ended: the
/// tool's result with the task in its `_meta`, or the JSON-RPC error the task ended with.
/// `None` while the task has not ended.
pub fn result(task_id: &str, outcome: &Outcome) -> Option<Result<Value, RpcError>> {
    match outcome {
        Outcome::Completed(result) => {
            let mut result = match result {
                Value::Object(map) => Value::Object(map.clone()),
                _ => json!({}),
            };
            result["_meta"][RELATED_TASK] = json!({ "taskId": task_id });
            Some(Ok(result))
        }
        Outcome::Failed(error) => Some(Err(error.clone())),
        Outcome::Cancelled => Some(Err(RpcError::new(INTERNAL_ERROR, "the task was cancelled"))),
        Outcome::Working | Outcome::InputRequired(_) => None,
    }
}

/// The params of the `elicitation/create` request that asks one of a task's questions (a
/// `{method, params}` entry of [`Outcome::InputRequired`]), with the task in `_meta`.
pub fn elicitation(task_id: &str, question: &Value) -> Option<Value> {
    let mut params = question.get("params")?.clone();
    if !params.is_object() {
        return None;
    }
    params["_meta"][RELATED_TASK] = json!({ "taskId": task_id });
    Some(params)
}

/// `capabilities.tasks` of a server that runs tool calls as tasks, lists and cancels them.
pub fn capability() -> Value {
    json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}})
}

#[cfg(test)]
mod tests {
    use super::super::{FailureMode, Presentation, project};
    use super::*;
    use crate::{ExecutionRecord, InputRequest, TaskState};

    fn how() -> Presentation {
        Presentation {
            failure: FailureMode::ToolError,
            structured: false,
            ttl_ms: Some(5000),
            poll_interval_ms: 250,
        }
    }

    fn record(state: TaskState) -> ExecutionRecord {
        let at = chrono::DateTime::from_timestamp(1_764_670_000, 0).expect("time");
        let mut r = ExecutionRecord::new(state, "RAW", at);
        r.status_message = Some("Go?".into());
        r
    }

    #[test]
    fn a_task_has_the_same_status_and_times_as_on_the_2026_wire() {
        let mut r = record(TaskState::InputRequired);
        r.input_requests.push(InputRequest {
            key: "k".into(),
            message: "Go?".into(),
            requested_schema: json!({"type": "object"}),
        });
        let wire = project(&r, &how());
        assert_eq!(
            task("fg1.x", &wire.envelope()),
            json!({"taskId": "fg1.x", "status": "input_required", "statusMessage": "Go?",
                "createdAt": "2025-12-02T10:06:40.000Z", "lastUpdatedAt": "2025-12-02T10:06:40.000Z",
                "ttl": 5000, "pollInterval": 250})
        );
        let mut unlimited = wire.clone();
        unlimited.ttl_ms = None;
        unlimited.status_message = None;
        let t = created("y", &unlimited.envelope());
        assert_eq!(t["task"]["ttl"], Value::Null);
        assert!(t["task"].get("statusMessage").is_none(), "{t}");
    }

    #[test]
    fn the_result_is_the_tools_result_or_the_tasks_error_once_it_ended() {
        let mut done = record(TaskState::Completed);
        done.output = Some(json!("hi"));
        let outcome = project(&done, &how()).outcome;
        let ok = result("t1", &outcome).expect("ended").expect("result");
        assert_eq!(ok["content"][0]["text"], "hi");
        assert_eq!(ok["_meta"][RELATED_TASK]["taskId"], "t1");

        let mut failed = how();
        failed.failure = FailureMode::JsonRpcError;
        let outcome = project(&record(TaskState::Failed), &failed).outcome;
        let e = result("t1", &outcome).expect("ended").expect_err("error");
        assert_eq!(e.code, INTERNAL_ERROR);

        let outcome = project(&record(TaskState::Cancelled), &how()).outcome;
        let e = result("t1", &outcome).expect("ended").expect_err("error");
        assert_eq!(e.message, "the task was cancelled");
        assert!(result("t1", &Outcome::Working).is_none());
    }

    #[test]
    fn a_question_is_asked_with_its_task() {
        let question =
            json!({"method": "elicitation/create", "params": {"mode": "form", "message": "Go?"}});
        let params = elicitation("t1", &question).expect("params");
        assert_eq!(params["message"], "Go?");
        assert_eq!(params["_meta"][RELATED_TASK]["taskId"], "t1");
        assert!(elicitation("t1", &json!({"method": "x"})).is_none());
        assert!(capability()["requests"]["tools"]["call"].is_object());
    }
}
