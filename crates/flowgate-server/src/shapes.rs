//! Tasks in the 2026-07-28 wire's shapes: rmcp's `Task` (a created task) and `DetailedTask`
//! (`tasks/get`), and a `tasks/get` result written in place from the view.

use flowgate_core::wire::{Outcome, WireStatus};
use rmcp::model::{DetailedTask, InputRequests, Task, TaskPayload, TaskStatus};
use serde_json::Value;

use crate::tasks::TaskView;

/// rmcp's status for the wire's.
fn status(status: WireStatus) -> TaskStatus {
    match status {
        WireStatus::Working => TaskStatus::Working,
        WireStatus::InputRequired => TaskStatus::InputRequired,
        WireStatus::Completed => TaskStatus::Completed,
        WireStatus::Failed => TaskStatus::Failed,
        WireStatus::Cancelled => TaskStatus::Cancelled,
    }
}

/// The task without its payload, as rmcp's `Task` (a created task).
pub(crate) fn task(view: &TaskView) -> Task {
    let envelope = view.wire.envelope();
    let mut task = Task::new(
        view.task_id.clone(),
        status(envelope.status),
        envelope.created_at.to_owned(),
        envelope.last_updated_at.to_owned(),
    )
    .with_poll_interval_ms(envelope.poll_interval_ms);
    if let Some(ttl) = envelope.ttl_ms {
        task = task.with_ttl_ms(ttl);
    }
    if let Some(message) = envelope.status_message {
        task = task.with_status_message(message.to_owned());
    }
    task
}

/// The task with its payload, as rmcp's `DetailedTask` (`tasks/get`).
pub(crate) fn detailed(view: TaskView) -> DetailedTask {
    let task = task(&view);
    let payload = match view.wire.outcome {
        Outcome::Working => TaskPayload::Working,
        Outcome::InputRequired(map) => {
            let input_requests: InputRequests =
                serde_json::from_value(Value::Object(map)).unwrap_or_default();
            TaskPayload::InputRequired { input_requests }
        }
        Outcome::Completed(result) => TaskPayload::Completed {
            result: match result {
                Value::Object(map) => map,
                _ => Default::default(),
            },
        },
        Outcome::Failed(e) => TaskPayload::Failed { error: e.to_json() },
        Outcome::Cancelled => TaskPayload::Cancelled,
    };
    DetailedTask::new(task, payload)
}

/// The `tasks/get` result rmcp writes for `view` (a `GetTaskResult`), written from the view
/// in place: rmcp's result is built from owned copies of every field and written through two
/// `flatten`s, which buffer each field (what that cost and this costs: docs/benchmarks.md).
/// `None` for what is not plainly JSON in the view (questions, which rmcp's types normalise;
/// a result that is not an object, which rmcp replaces): those go through rmcp's types. The
/// test holds the two to the same bytes.
pub(crate) fn written(view: &TaskView) -> Option<String> {
    let envelope = view.wire.envelope();
    let (result, error) = match &view.wire.outcome {
        Outcome::Working | Outcome::Cancelled => (None, None),
        Outcome::Completed(Value::Object(result)) => (Some(result), None),
        Outcome::Failed(error) => (None, Some(error.to_json())),
        Outcome::InputRequired(_) | Outcome::Completed(_) => return None,
    };
    let written = Written {
        result_type: "complete",
        task_id: &view.task_id,
        status: envelope.status.as_str(),
        status_message: envelope.status_message,
        created_at: envelope.created_at,
        last_updated_at: envelope.last_updated_at,
        ttl_ms: envelope.ttl_ms,
        poll_interval_ms: envelope.poll_interval_ms,
        result,
        error,
    };
    serde_json::to_string(&written).ok()
}

/// rmcp's `GetTaskResult` without `_meta` (this server sets none), its `DetailedTask`'s
/// fields in the order rmcp writes them.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct Written<'a> {
    result_type: &'static str,
    task_id: &'a str,
    status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    status_message: Option<&'a str>,
    created_at: &'a str,
    last_updated_at: &'a str,
    ttl_ms: Option<u64>,
    poll_interval_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<&'a serde_json::Map<String, Value>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<serde_json::Map<String, Value>>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use flowgate_core::wire::{RpcError, WireTask};
    use rmcp::model::{GetTaskResult, ServerResult};
    use serde_json::json;

    /// The result written in place is rmcp's, byte for byte, for every outcome it writes (with
    /// and without a status message and a TTL); questions and a result that is not an object
    /// are left to rmcp.
    #[test]
    fn a_written_result_is_the_bytes_rmcp_writes() {
        let wire = |outcome: Outcome, message: Option<&str>, ttl: Option<u64>| TaskView {
            task_id: "fg1.k.abc-_".into(),
            wire: WireTask {
                status_message: message.map(str::to_owned),
                created_at: "2026-12-05T01:02:03.456Z".into(),
                last_updated_at: "2026-12-05T01:02:04Z".into(),
                ttl_ms: ttl,
                poll_interval_ms: 1000,
                outcome,
            },
        };
        let failed = RpcError {
            code: -32603,
            message: "it \"broke\"\n".into(),
            data: Some(json!({"stage": 2, "why": ["a", null]})),
        };
        let result = json!({"content": [{"type": "text", "text": "done é"}], "isError": false});
        let views = [
            wire(Outcome::Working, None, None),
            wire(Outcome::Working, Some("step 3 of 7"), Some(86_400_000)),
            wire(Outcome::Cancelled, Some("stopped"), None),
            wire(Outcome::Completed(result), None, Some(1)),
            wire(Outcome::Failed(failed.clone()), None, None),
            wire(
                Outcome::Failed(RpcError {
                    data: None,
                    ..failed
                }),
                Some("x"),
                None,
            ),
        ];
        for view in views {
            let ours = written(&view).expect("written");
            let rmcp = serde_json::to_string(&ServerResult::GetTaskResult(GetTaskResult::new(
                detailed(view.clone()),
            )))
            .expect("rmcp");
            assert_eq!(ours, rmcp);
        }
        let mut questions = serde_json::Map::new();
        questions.insert(
            "q".into(),
            json!({"method": "elicitation/create", "params": {}}),
        );
        for outcome in [
            Outcome::InputRequired(questions),
            Outcome::Completed(json!(5)),
        ] {
            assert!(written(&wire(outcome, None, None)).is_none());
        }
    }
}
