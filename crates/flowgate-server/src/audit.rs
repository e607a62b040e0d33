//! The audit trail: one structured log line (target `flowgate::audit`, message `audit`) per
//! task event, so who started, answered, cancelled or was refused what can be answered from
//! the logs alone.
//!
//! Fields (stable names; a field is left out when it does not apply):
//!
//! | field | what |
//! |---|---|
//! | `event` | `refused`, `started`, `answered`, `cancelled`, `finished`, `subscribed` |
//! | `principalIssuer` | the caller's issuer (the token's `iss`, or the platform: `aws:iam`, …); absent when unauthenticated |
//! | `principalSubject` | the caller's subject within it; `anonymous` when nothing authenticated the caller |
//! | `tool` | the tool |
//! | `execution` | the engine's execution reference (ARN, execution name, run id) |
//! | `requestId` | the caller's request id: on HTTP the platform's trace id or a fresh one, on stdio the JSON-RPC id |
//! | `argumentsSha256` | SHA-256 (hex) of the canonical JSON of the call's arguments (`started`, `refused`) or of the delivered answers (`answered`): sorted keys, no whitespace |
//! | `answers` | how many answers were delivered (`answered`) |
//! | `tasks` | how many of the caller's tasks a `subscriptions/listen` follows (`subscribed`; the ids are left out) |
//! | `status` | the terminal state seen (`finished`: completed, failed, cancelled) |
//! | `reason` | what a listener follows besides tasks (`subscribed`: `tools_list_changed`), why flowgate stopped an execution itself (`cancelled`: `hung_up`, `sync_wait`), or why a request was refused: `unauthenticated`, `invalid_token`, `not_allowed`, `keys_unavailable`, `insufficient_scope`, `unknown_tool`, `tasks_required`, `invalid_arguments`, `task_not_found` |
//!
//! Each task event also counts in the process's metrics, when they are on
//! (`flowgate_tasks_started_total`, `_answered_total`, `_cancelled_total`, `_finished_total`).
//!
//! Never in it: argument or answer values, tokens, or any other credential. `finished` is
//! logged the first time this instance sees the execution terminal (a bounded, process-local
//! memory; another instance, or this one after a restart, logs it once more).

use std::collections::{HashSet, VecDeque};
use std::sync::{LazyLock, Mutex};

use flowgate_auth::{Authenticated, principal};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::Caller;

/// How many finished executions an instance remembers having logged.
const REMEMBERED: usize = 4096;

/// One audit line; `None` fields are left out.
#[derive(Default)]
struct Line<'a> {
    event: &'a str,
    caller: Option<&'a Authenticated>,
    tool: Option<&'a str>,
    execution: Option<&'a str>,
    request_id: Option<&'a str>,
    arguments: Option<&'a str>,
    answers: Option<usize>,
    tasks: Option<usize>,
    status: Option<&'a str>,
    reason: Option<&'a str>,
}

impl<'a> Line<'a> {
    fn of(event: &'a str, caller: &'a Caller) -> Self {
        Line {
            event,
            caller: caller.identity(),
            request_id: Some(caller.request_id()),
            ..Line::default()
        }
    }
}

fn emit(line: &Line<'_>) {
    let issuer = line.caller.map(|c| c.principal.issuer.as_str());
    let subject = line
        .caller
        .map_or(principal::ANONYMOUS, |c| c.principal.subject.as_str());
    tracing::info!(
        target: "flowgate::audit",
        event = line.event,
        principalIssuer = issuer,
        principalSubject = subject,
        tool = line.tool,
        execution = line.execution,
        requestId = line.request_id,
        argumentsSha256 = line.arguments,
        answers = line.answers,
        tasks = line.tasks,
        status = line.status,
        reason = line.reason,
        "audit"
    );
}

/// SHA-256 (hex) of the canonical JSON of `value`: object keys sorted, no whitespace.
pub(crate) fn digest(value: &Value) -> String {
    let mut text = String::new();
    canonical(value, &mut text);
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                canonical(&map[key], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// A request refused, before or after it reached the task operations (no or bad credential,
/// missing scope, unknown tool, invalid arguments, a handle that does not open).
pub(crate) fn refused(
    caller: &Caller,
    reason: &str,
    tool: Option<&str>,
    arguments: Option<&Value>,
) {
    let arguments = arguments.map(digest);
    emit(&Line {
        tool,
        arguments: arguments.as_deref(),
        reason: Some(reason),
        ..Line::of("refused", caller)
    });
}

/// A `subscriptions/listen` was opened: how many of the caller's tasks it follows (the ids
/// are left out: each is a credential to its task), and whether it follows the tool list.
pub(crate) fn subscribed(caller: &Caller, tasks: usize, tools_list_changed: bool) {
    emit(&Line {
        tasks: Some(tasks),
        reason: tools_list_changed.then_some("tools_list_changed"),
        ..Line::of("subscribed", caller)
    });
}

/// An execution was started for a call.
pub(crate) fn started(caller: &Caller, tool: &str, execution: Option<&str>, arguments: &Value) {
    if let Some(metrics) = flowgate_telemetry::metrics::get() {
        metrics.task_started(tool);
    }
    let arguments = digest(arguments);
    emit(&Line {
        tool: Some(tool),
        execution,
        arguments: Some(&arguments),
        ..Line::of("started", caller)
    });
}

/// Answers were delivered to an execution's questions.
pub(crate) fn answered(
    caller: &Caller,
    tool: &str,
    execution: &str,
    answers: &Value,
    count: usize,
) {
    if let Some(metrics) = flowgate_telemetry::metrics::get() {
        metrics.task_answered(tool);
    }
    let digest = digest(answers);
    emit(&Line {
        tool: Some(tool),
        execution: Some(execution),
        arguments: Some(&digest),
        answers: Some(count),
        ..Line::of("answered", caller)
    });
}

/// The engine accepted a cancellation.
pub(crate) fn cancelled(caller: &Caller, tool: &str, execution: &str) {
    if let Some(metrics) = flowgate_telemetry::metrics::get() {
        metrics.task_cancelled(tool, "client");
    }
    emit(&Line {
        tool: Some(tool),
        execution: Some(execution),
        ..Line::of("cancelled", caller)
    });
}

/// flowgate itself stopped an execution of a synchronous call: `reason` is `hung_up` (the
/// caller went away) or `sync_wait` (no result within the synchronous wait, or a question only
/// a task could answer).
pub(crate) fn stopped(caller: &Caller, tool: &str, execution: &str, reason: &'static str) {
    if let Some(metrics) = flowgate_telemetry::metrics::get() {
        metrics.task_cancelled(tool, reason);
    }
    emit(&Line {
        tool: Some(tool),
        execution: Some(execution),
        reason: Some(reason),
        ..Line::of("cancelled", caller)
    });
}

/// A poll saw the execution terminal: logged the first time this instance sees it. (A
/// synchronous run, which has no reference, is seen exactly once anyway.)
pub(crate) fn finished(caller: &Caller, tool: &str, execution: Option<&str>, status: &'static str) {
    if execution.is_some_and(|e| !first_sight(e)) {
        return;
    }
    if let Some(metrics) = flowgate_telemetry::metrics::get() {
        metrics.task_finished(tool, status);
    }
    emit(&Line {
        tool: Some(tool),
        execution,
        status: Some(status),
        ..Line::of("finished", caller)
    });
}

/// Whether `execution` is seen finished for the first time (remembering the last
/// [`REMEMBERED`] ones).
fn first_sight(execution: &str) -> bool {
    static SEEN: LazyLock<Mutex<(HashSet<String>, VecDeque<String>)>> =
        LazyLock::new(|| Mutex::new((HashSet::new(), VecDeque::new())));
    let mut seen = SEEN.lock().unwrap_or_else(|p| p.into_inner());
    let (set, order) = &mut *seen;
    if !set.insert(execution.to_owned()) {
        return false;
    }
    order.push_back(execution.to_owned());
    if order.len() > REMEMBERED
        && let Some(old) = order.pop_front()
    {
        set.remove(&old);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::{digest, first_sight};
    use serde_json::json;

    #[test]
    fn the_digest_ignores_key_order_but_not_values() {
        let a = digest(&json!({"b": [1, {"y": 2, "x": "s"}], "a": null}));
        let b = digest(&json!({"a": null, "b": [1, {"x": "s", "y": 2}]}));
        assert_eq!(a, b);
        assert_eq!(a.len(), 64);
        assert_ne!(a, digest(&json!({"a": null, "b": [1, {"x": "t", "y": 2}]})));
        // The canonical text of {"a":1} is hashed, not some other rendering.
        assert_eq!(
            digest(&json!({"a": 1})),
            "015abd7f5cc57a2dd94b7590f04ad8084273905ee33ec5cebeae62276a97f862"
        );
    }

    #[test]
    fn finished_is_reported_once_per_execution() {
        assert!(first_sight("exec-audit-test-1"));
        assert!(!first_sight("exec-audit-test-1"));
        assert!(first_sight("exec-audit-test-2"));
    }
}
