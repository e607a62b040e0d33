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
    /// Open states whose parameters hold a `flowgate` block but no task token under a key
    /// flowgate reads ([`TOKEN_KEYS`]), by TaskScheduled event id, with the state's name: the
    /// question cannot be asked, and the status message says why.
    tokenless: BTreeMap<i64, String>,
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
    /// A running execution's status message: the state it is in, and, when a state waits with
    /// a `flowgate` block but no task token flowgate can find, which keys it reads (otherwise
    /// the task would stay `working` without a question or a word).
    pub(crate) fn status_message(&self) -> Option<String> {
        if let Some(state) = self.tokenless.values().next() {
            return Some(format!(
                "State {state} holds a `flowgate` block but no task token beside it under {}: \
                 the question cannot be asked. Pass the token next to the block as \
                 \"TaskToken.$\": \"$$.Task.Token\"",
                TOKEN_KEYS.join(", ")
            ));
        }
        self.current_state.as_ref().map(|s| format!("In state {s}"))
    }

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
            HistoryEventType::TaskScheduled => match input_request(e) {
                Some(Ok(pending)) => {
                    self.chains.insert(e.id, e.id);
                    self.open.insert(e.id, pending);
                }
                Some(Err(NoToken)) => {
                    self.chains.insert(e.id, e.id);
                    let state = self.current_state.clone().unwrap_or_default();
                    self.tokenless.insert(e.id, state);
                }
                None => {}
            },
            _ => {}
        }
        let Some(&root) = self.chains.get(&e.previous_event_id) else {
            return;
        };
        if closes_a_task(&e.r#type) {
            self.open.remove(&root);
            self.tokenless.remove(&root);
            self.chains.retain(|_, r| *r != root);
        } else if e.r#type != HistoryEventType::TaskScheduled {
            self.chains.insert(e.id, root);
        }
    }

    fn close_all(&mut self, end: End) {
        self.end = Some(end);
        self.open.clear();
        self.tokenless.clear();
        self.chains.clear();
    }
}

/// The keys a task token is read from, in the object that holds the `flowgate` block.
pub(crate) const TOKEN_KEYS: [&str; 3] = ["TaskToken", "taskToken", "token"];

/// A `flowgate` block with a message but no task token under any of [`TOKEN_KEYS`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct NoToken;

/// The input request a TaskScheduled event carries, if its parameters hold a flowgate block:
/// `Err(NoToken)` when the block is there but its token is not where flowgate reads it.
fn input_request(e: &HistoryEvent) -> Option<Result<PendingInput, NoToken>> {
    let params = e.task_scheduled_event_details.as_ref()?.parameters.as_str();
    let params = serde_json::from_str::<Value>(params).ok()?;
    Some(
        find_input_block(&params)?.map(|(token, message, requested_schema)| PendingInput {
            key: key_for(e.id),
            token,
            message,
            requested_schema,
        }),
    )
}

/// The key an input request has for the TaskScheduled event `id`.
pub(crate) fn key_for(id: i64) -> String {
    format!("sfn-{id}")
}

/// Finds an object holding both a task token and a `flowgate` block, anywhere in the state's
/// resolved parameters; `Err(NoToken)` for a block with a message but no token beside it
/// (when no other object holds both).
fn find_input_block(v: &Value) -> Option<Result<(String, String, Value), NoToken>> {
    match v {
        Value::Object(map) => {
            let mut tokenless = None;
            if let Some(block) = map.get("flowgate").and_then(Value::as_object)
                && let Some(message) = block.get("message").and_then(Value::as_str)
            {
                let token = TOKEN_KEYS
                    .iter()
                    .find_map(|k| map.get(*k).and_then(Value::as_str));
                match token {
                    Some(token) => {
                        let schema = block.get("requestedSchema").cloned().unwrap_or_else(
                            || serde_json::json!({"type": "object", "properties": {}}),
                        );
                        return Some(Ok((token.to_owned(), message.to_owned(), schema)));
                    }
                    None => tokenless = Some(Err(NoToken)),
                }
            }
            let found: Vec<_> = map.values().filter_map(find_input_block).collect();
            found
                .iter()
                .find(|f| f.is_ok())
                .or(found.first())
                .cloned()
                .or(tokenless)
        }
        Value::Array(items) => {
            let found: Vec<_> = items.iter().filter_map(find_input_block).collect();
            found.iter().find(|f| f.is_ok()).or(found.first()).cloned()
        }
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

    /// A `flowgate` block whose token sits under a key flowgate does not read is no question,
    /// but the status message says so and names the keys read, until the state ends.
    #[test]
    fn a_block_without_a_token_where_flowgate_reads_it_is_named_in_the_status() {
        let params = json!({"QueueUrl": "q", "MessageBody": {"Token": "tok-1", "flowgate": {"message": "Go?"}}});
        let mut events = vec![
            event(1, 0, HistoryEventType::ExecutionStarted),
            entered(2, "Approve"),
            scheduled(3, 2, params),
            event(4, 3, HistoryEventType::TaskStarted),
        ];
        let view = read(&events);
        assert_eq!(view.pending().count(), 0);
        let status = view.status_message().expect("a status");
        assert!(
            status.contains("Approve") && status.contains("TaskToken, taskToken, token"),
            "{status}"
        );
        events.push(event(5, 4, HistoryEventType::TaskFailed));
        events.push(entered(6, "Rollback"));
        let view = read(&events);
        assert_eq!(view.status_message().as_deref(), Some("In state Rollback"));
        // A token under a known key elsewhere in the same parameters still makes a question.
        let both = json!({"A": {"flowgate": {"message": "x"}}, "B": {"TaskToken": "t", "flowgate": {"message": "Go?"}}});
        let view = read(&[entered(2, "Ask"), scheduled(3, 2, both)]);
        assert_eq!(view.pending().count(), 1);
        assert_eq!(view.status_message().as_deref(), Some("In state Ask"));
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
