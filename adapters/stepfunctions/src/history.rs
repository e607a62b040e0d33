//! Reading an execution's history: which state it is in, and which flowgate input states wait
//! on a task token.

use std::collections::{HashMap, HashSet};

use aws_sdk_sfn::types::{HistoryEvent, HistoryEventType};
use serde_json::Value;

/// A `.waitForTaskToken` state waiting for the client.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PendingInput {
    /// `sfn-<TaskScheduled event id>`: unique for the execution's life.
    pub(crate) key: String,
    pub(crate) token: String,
    pub(crate) message: String,
    pub(crate) requested_schema: Value,
}

/// What the history says about a running execution.
#[derive(Debug, Default)]
pub(crate) struct HistoryView {
    pub(crate) current_state: Option<String>,
    pub(crate) pending: Vec<PendingInput>,
    pub(crate) last_event: Option<aws_sdk_sfn::primitives::DateTime>,
}

/// The key an input request has for the TaskScheduled event `id`.
pub(crate) fn key_for(id: i64) -> String {
    format!("sfn-{id}")
}

fn closes_a_task(t: &HistoryEventType) -> bool {
    matches!(
        t,
        HistoryEventType::TaskSucceeded
            | HistoryEventType::TaskFailed
            | HistoryEventType::TaskTimedOut
            | HistoryEventType::TaskStartFailed
            | HistoryEventType::TaskSubmitFailed
    )
}

/// Reads a page of history (in any order).
pub(crate) fn read(events: &[HistoryEvent]) -> HistoryView {
    let mut view = HistoryView::default();
    let prev: HashMap<i64, i64> = events.iter().map(|e| (e.id, e.previous_event_id)).collect();
    let kind: HashMap<i64, &HistoryEventType> = events.iter().map(|e| (e.id, &e.r#type)).collect();
    // Every TaskScheduled that a later success, failure or time-out closes, found by walking the
    // previous-event chain back from the closing event.
    let mut closed = HashSet::new();
    for e in events.iter().filter(|e| closes_a_task(&e.r#type)) {
        let mut id = e.previous_event_id;
        for _ in 0..16 {
            match kind.get(&id) {
                Some(HistoryEventType::TaskScheduled) => {
                    closed.insert(id);
                    break;
                }
                Some(_) => id = prev.get(&id).copied().unwrap_or(0),
                None => break,
            }
        }
    }
    let mut sorted: Vec<&HistoryEvent> = events.iter().collect();
    sorted.sort_by_key(|e| e.id);
    for e in sorted {
        view.last_event = Some(e.timestamp);
        if let Some(d) = &e.state_entered_event_details {
            view.current_state = Some(d.name.clone());
        }
        if e.r#type != HistoryEventType::TaskScheduled || closed.contains(&e.id) {
            continue;
        }
        let Some(params) = e
            .task_scheduled_event_details
            .as_ref()
            .map(|d| d.parameters.as_str())
        else {
            continue;
        };
        let Ok(params) = serde_json::from_str::<Value>(params) else {
            continue;
        };
        if let Some((token, message, requested_schema)) = find_input_block(&params) {
            view.pending.push(PendingInput {
                key: key_for(e.id),
                token,
                message,
                requested_schema,
            });
        }
    }
    view
}

/// Finds an object holding both a task token and a `flowgate` block, anywhere in the state's
/// resolved parameters.
fn find_input_block(v: &Value) -> Option<(String, String, Value)> {
    match v {
        Value::Object(map) => {
            if let Some(block) = map.get("flowgate").and_then(Value::as_object) {
                let token = ["TaskToken", "taskToken", "token"]
                    .iter()
                    .find_map(|k| map.get(*k).and_then(Value::as_str));
                if let (Some(token), Some(message)) =
                    (token, block.get("message").and_then(Value::as_str))
                {
                    let schema = block
                        .get("requestedSchema")
                        .cloned()
                        .unwrap_or_else(|| serde_json::json!({"type": "object", "properties": {}}));
                    return Some((token.to_owned(), message.to_owned(), schema));
                }
            }
            map.values().find_map(find_input_block)
        }
        Value::Array(items) => items.iter().find_map(find_input_block),
        // Some integrations carry the message body as a JSON string.
        Value::String(s) if s.starts_with('{') => serde_json::from_str(s)
            .ok()
            .as_ref()
            .and_then(find_input_block),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_sfn::primitives::DateTime;
    use aws_sdk_sfn::types::{StateEnteredEventDetails, TaskScheduledEventDetails};
    use serde_json::json;

    fn event(id: i64, prev: i64, t: HistoryEventType) -> HistoryEvent {
        HistoryEvent::builder()
            .id(id)
            .previous_event_id(prev)
            .r#type(t)
            .timestamp(DateTime::from_secs(1_000 + id))
            .build()
            .expect("event")
    }

    fn scheduled(id: i64, prev: i64, params: Value) -> HistoryEvent {
        let mut e = event(id, prev, HistoryEventType::TaskScheduled);
        e.task_scheduled_event_details = Some(
            TaskScheduledEventDetails::builder()
                .resource_type("sqs")
                .resource("sendMessage.waitForTaskToken")
                .region("us-east-1")
                .parameters(params.to_string())
                .build()
                .expect("details"),
        );
        e
    }

    fn entered(id: i64, name: &str) -> HistoryEvent {
        let mut e = event(id, id - 1, HistoryEventType::TaskStateEntered);
        e.state_entered_event_details = Some(
            StateEnteredEventDetails::builder()
                .name(name)
                .build()
                .expect("d"),
        );
        e
    }

    fn ask(token: &str) -> Value {
        json!({"QueueUrl": "q", "MessageBody": {"TaskToken": token, "flowgate": {"message": "Go?", "requestedSchema": {"type": "object"}}}})
    }

    #[test]
    fn an_open_input_state_is_pending_and_named() {
        let events = vec![
            event(1, 0, HistoryEventType::ExecutionStarted),
            entered(2, "Approve"),
            scheduled(3, 2, ask("tok-1")),
            event(4, 3, HistoryEventType::TaskStarted),
            event(5, 4, HistoryEventType::TaskSubmitted),
        ];
        let view = read(&events);
        assert_eq!(view.current_state.as_deref(), Some("Approve"));
        assert_eq!(view.pending.len(), 1);
        assert_eq!(view.pending[0].key, "sfn-3");
        assert_eq!(view.pending[0].token, "tok-1");
        assert_eq!(view.pending[0].message, "Go?");
    }

    #[test]
    fn a_closed_input_state_is_not_pending_in_any_order() {
        let mut events = vec![
            entered(2, "Approve"),
            scheduled(3, 2, ask("tok-1")),
            event(4, 3, HistoryEventType::TaskStarted),
            event(5, 4, HistoryEventType::TaskSubmitted),
            event(6, 5, HistoryEventType::TaskSucceeded),
            entered(7, "Deploy"),
        ];
        events.reverse();
        let view = read(&events);
        assert!(view.pending.is_empty());
        assert_eq!(view.current_state.as_deref(), Some("Deploy"));
    }

    #[test]
    fn tasks_without_a_flowgate_block_are_not_questions() {
        let events = vec![scheduled(
            3,
            2,
            json!({"FunctionName": "f", "Payload": {"TaskToken": "t"}}),
        )];
        assert!(read(&events).pending.is_empty());
        let as_string = json!({"MessageBody": ask("tok-2")["MessageBody"].to_string()});
        assert_eq!(
            read(&[scheduled(3, 2, as_string)]).pending[0].token,
            "tok-2"
        );
    }
}
