//! Reading an execution's history: which state it is in, and which flowgate input states wait
//! on a task token.

use std::collections::{BTreeMap, HashMap};

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

/// How an execution ended, from its closing history event.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum End {
    /// `ExecutionSucceeded`; `output` is `None` when the event's copy was truncated (or left
    /// out), so the output must be read with DescribeExecution.
    Succeeded { output: Option<String> },
    /// `ExecutionFailed`.
    Failed {
        error: Option<String>,
        cause: Option<String>,
    },
    /// `ExecutionTimedOut`.
    TimedOut {
        error: Option<String>,
        cause: Option<String>,
    },
    /// `ExecutionAborted` (StopExecution).
    Aborted,
}

/// What the history says about an execution, folded in event by event. A history only grows,
/// so a scan up to event `n` stays true: the next read needs only the events after `n`
/// (usually one page, one API call), however long the history is.
#[derive(Debug, Clone, Default)]
pub(crate) struct Scan {
    /// Whether the whole history up to `last_id` has been read (the first read of a long
    /// history takes several polls; until then nothing is known for sure).
    pub(crate) complete: bool,
    /// Where the first read, oldest first, goes on (its `nextToken`).
    pub(crate) resume: Option<String>,
    /// The newest event folded in (0: none).
    pub(crate) last_id: i64,
    pub(crate) started: Option<aws_sdk_sfn::primitives::DateTime>,
    pub(crate) current_state: Option<String>,
    pub(crate) last_event: Option<aws_sdk_sfn::primitives::DateTime>,
    pub(crate) end: Option<End>,
    /// Open input states, by their TaskScheduled event id.
    open: BTreeMap<i64, PendingInput>,
    /// Every event that continues an open input state's chain (its TaskScheduled, TaskStarted,
    /// TaskSubmitted, ...), mapped to that TaskScheduled id: an event whose previous event is
    /// in here belongs to the same state, wherever it is in a Parallel's interleaving.
    chains: HashMap<i64, i64>,
}

/// The events that end a task state's wait for its token.
fn closes_a_task(t: &HistoryEventType) -> bool {
    matches!(
        t,
        HistoryEventType::TaskSucceeded
            | HistoryEventType::TaskFailed
            | HistoryEventType::TaskTimedOut
            | HistoryEventType::TaskStartFailed
            | HistoryEventType::TaskSubmitFailed
            | HistoryEventType::TaskStateAborted
            | HistoryEventType::TaskStateExited
    )
}

impl Scan {
    /// The open input states, oldest first.
    pub(crate) fn pending(&self) -> impl Iterator<Item = &PendingInput> {
        self.open.values()
    }

    /// Folds in `events`, in any order; events at or before [`Scan::last_id`] are skipped.
    pub(crate) fn fold(&mut self, events: &[HistoryEvent]) {
        let mut new: Vec<&HistoryEvent> = events.iter().filter(|e| e.id > self.last_id).collect();
        new.sort_by_key(|e| e.id);
        for e in new {
            self.fold_one(e);
        }
    }

    fn fold_one(&mut self, e: &HistoryEvent) {
        self.last_id = e.id;
        self.last_event = Some(e.timestamp);
        if let Some(d) = &e.state_entered_event_details {
            self.current_state = Some(d.name.clone());
        }
        match &e.r#type {
            HistoryEventType::ExecutionStarted => self.started = Some(e.timestamp),
            HistoryEventType::ExecutionSucceeded => {
                let d = e.execution_succeeded_event_details.as_ref();
                let truncated = d
                    .and_then(|d| d.output_details.as_ref())
                    .is_some_and(|o| o.truncated);
                let output = d.and_then(|d| d.output.clone()).filter(|_| !truncated);
                self.close_all(End::Succeeded { output });
            }
            HistoryEventType::ExecutionFailed => {
                let d = e.execution_failed_event_details.as_ref();
                self.close_all(End::Failed {
                    error: d.and_then(|d| d.error.clone()),
                    cause: d.and_then(|d| d.cause.clone()),
                });
            }
            HistoryEventType::ExecutionTimedOut => {
                let d = e.execution_timed_out_event_details.as_ref();
                self.close_all(End::TimedOut {
                    error: d.and_then(|d| d.error.clone()),
                    cause: d.and_then(|d| d.cause.clone()),
                });
            }
            HistoryEventType::ExecutionAborted => self.close_all(End::Aborted),
            // A redrive runs the failed states again: the execution is open once more.
            HistoryEventType::ExecutionRedriven => self.end = None,
            HistoryEventType::TaskScheduled => {
                if let Some(pending) = input_request(e) {
                    self.chains.insert(e.id, e.id);
                    self.open.insert(e.id, pending);
                }
            }
            _ => {}
        }
        let Some(&root) = self.chains.get(&e.previous_event_id) else {
            return;
        };
        if closes_a_task(&e.r#type) {
            self.open.remove(&root);
            self.chains.retain(|_, r| *r != root);
        } else if e.r#type != HistoryEventType::TaskScheduled {
            self.chains.insert(e.id, root);
        }
    }

    fn close_all(&mut self, end: End) {
        self.end = Some(end);
        self.open.clear();
        self.chains.clear();
    }
}

/// The input request a TaskScheduled event carries, if its parameters hold a flowgate block.
fn input_request(e: &HistoryEvent) -> Option<PendingInput> {
    let params = e.task_scheduled_event_details.as_ref()?.parameters.as_str();
    let params = serde_json::from_str::<Value>(params).ok()?;
    let (token, message, requested_schema) = find_input_block(&params)?;
    Some(PendingInput {
        key: key_for(e.id),
        token,
        message,
        requested_schema,
    })
}

/// The key an input request has for the TaskScheduled event `id`.
pub(crate) fn key_for(id: i64) -> String {
    format!("sfn-{id}")
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

    fn read(events: &[HistoryEvent]) -> Scan {
        let mut scan = Scan::default();
        scan.fold(events);
        scan
    }
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
        let pending: Vec<_> = view.pending().collect();
        assert_eq!(pending.len(), 1);
        assert_eq!(pending[0].key, "sfn-3");
        assert_eq!(pending[0].token, "tok-1");
        assert_eq!(pending[0].message, "Go?");
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
        assert_eq!(view.pending().count(), 0);
        assert_eq!(view.current_state.as_deref(), Some("Deploy"));
    }

    #[test]
    fn tasks_without_a_flowgate_block_are_not_questions() {
        let events = vec![scheduled(
            3,
            2,
            json!({"FunctionName": "f", "Payload": {"TaskToken": "t"}}),
        )];
        assert_eq!(read(&events).pending().count(), 0);
        let as_string = json!({"MessageBody": ask("tok-2")["MessageBody"].to_string()});
        let view = read(&[scheduled(3, 2, as_string)]);
        assert_eq!(
            view.pending().next().map(|p| p.token.as_str()),
            Some("tok-2")
        );
    }

    /// A Parallel: branch A waits on a token, branch B writes hundreds of events in between,
    /// read in pages of 50 the way the engine reads them (newest first, folded oldest first).
    #[test]
    fn a_wait_stays_open_behind_a_chatty_branch_whatever_the_paging() {
        let mut events = vec![
            event(1, 0, HistoryEventType::ExecutionStarted),
            entered(2, "Approve"),
            scheduled(3, 2, ask("tok-1")),
            event(4, 3, HistoryEventType::TaskStarted),
            event(5, 4, HistoryEventType::TaskSubmitted),
        ];
        // Branch B: a chain of its own, starting from event 2's sibling.
        for id in 6..600 {
            let prev = if id == 6 { 1 } else { id - 1 };
            events.push(event(id, prev, HistoryEventType::PassStateExited));
        }
        let mut scan = Scan::default();
        for chunk in events.chunks(50) {
            scan.fold(chunk);
            assert_eq!(
                scan.pending().count(),
                1,
                "open after event {}",
                scan.last_id
            );
        }
        // Branch B fails; the Parallel aborts branch A's task state.
        scan.fold(&[event(600, 5, HistoryEventType::TaskStateAborted)]);
        assert_eq!(scan.pending().count(), 0);
        // Events already folded are never folded twice.
        scan.fold(&events);
        assert_eq!(scan.pending().count(), 0);
        assert_eq!(scan.last_id, 600);
    }

    #[test]
    fn a_timed_out_wait_closes_and_the_end_is_read() {
        let mut scan = Scan::default();
        scan.fold(&[
            event(1, 0, HistoryEventType::ExecutionStarted),
            entered(2, "Approve"),
            scheduled(3, 2, ask("tok-1")),
            event(4, 3, HistoryEventType::TaskStarted),
            event(5, 4, HistoryEventType::TaskSubmitted),
        ]);
        assert_eq!(scan.pending().count(), 1);
        scan.fold(&[event(6, 5, HistoryEventType::TaskTimedOut)]);
        assert_eq!(scan.pending().count(), 0);
        assert!(scan.end.is_none());
        scan.fold(&[event(7, 6, HistoryEventType::ExecutionAborted)]);
        assert_eq!(scan.end, Some(End::Aborted));
        assert_eq!(scan.started, Some(DateTime::from_secs(1_001)));
    }
}
