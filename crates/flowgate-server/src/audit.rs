//! The audit trail: one structured log line (target `flowgate::audit`, message `audit`) per
//! task event, so who started, answered, cancelled or was refused what can be answered from
//! the logs alone.
//!
//! Fields (stable names; a field is left out when it does not apply):
//!
//! | field | what |
//! |---|---|
//! | `event` | `refused`, `started`, `answered`, `cancelled`, `finished` |
//! | `principalIssuer` | the caller's issuer (the token's `iss`, or the platform: `aws:iam`, …); absent when unauthenticated |
//! | `principalSubject` | the caller's subject within it; `anonymous` when nothing authenticated the caller |
//! | `tool` | the tool |
//! | `execution` | the engine's execution reference (ARN, execution name, run id) |
//! | `requestId` | the HTTP request id (platform trace id or a fresh one), or the JSON-RPC id on stdio |
//! | `argumentsSha256` | SHA-256 (hex) of the canonical JSON of the call's arguments (`started`, `refused`) or of the delivered answers (`answered`): sorted keys, no whitespace |
//! | `answers` | how many answers were delivered (`answered`) |
//! | `status` | the terminal state seen (`finished`: completed, failed, cancelled) |
//! | `reason` | why flowgate stopped an execution itself (`cancelled`: `hung_up`, `sync_wait`), or why a request was refused: `unauthenticated`, `invalid_token`, `not_allowed`, `keys_unavailable`, `insufficient_scope`, `unknown_tool`, `tasks_required`, `invalid_arguments`, `task_not_found` |
//!
//! Never in it: argument or answer values, tokens, or any other credential. `finished` is
//! logged the first time this instance sees the execution terminal (a bounded, process-local
//! memory; another instance, or this one after a restart, logs it once more).

use std::collections::{HashSet, VecDeque};
use std::sync::{LazyLock, Mutex};

use axum::http::request::Parts;
use flowgate_auth::Authenticated;
use rmcp::RoleServer;
use rmcp::service::RequestContext;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// The id of an HTTP request, put in its extensions by the request span so that audit lines
/// carry the same id as every other line of the request.
#[derive(Debug, Clone)]
pub(crate) struct RequestId(pub(crate) String);

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
    status: Option<&'a str>,
    reason: Option<&'a str>,
}

fn emit(line: &Line<'_>) {
    let issuer = line.caller.map(|c| c.principal.issuer.as_str());
    let subject = line.caller.map_or(crate::principal::ANONYMOUS, |c| {
        c.principal.subject.as_str()
    });
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
        status = line.status,
        reason = line.reason,
        "audit"
    );
}

/// The request id of an MCP request: the HTTP one, else (stdio) the JSON-RPC id.
fn request_id(ctx: &RequestContext<RoleServer>) -> String {
    ctx.extensions
        .get::<Parts>()
        .and_then(|p| p.extensions.get::<RequestId>())
        .map(|r| r.0.clone())
        .unwrap_or_else(|| match serde_json::to_value(&ctx.id) {
            Ok(Value::String(s)) => s,
            Ok(v) => v.to_string(),
            Err(_) => String::new(),
        })
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

/// A request refused before it reached the MCP handler (no or bad credential, missing scope).
pub(crate) fn refused_request(parts: &Parts, reason: &str, tool: Option<&str>) {
    emit(&Line {
        event: "refused",
        caller: parts.extensions.get::<Authenticated>(),
        tool,
        request_id: parts.extensions.get::<RequestId>().map(|r| r.0.as_str()),
        reason: Some(reason),
        ..Line::default()
    });
}

/// A call or task request the handler refused.
pub(crate) fn refused(
    ctx: &RequestContext<RoleServer>,
    reason: &str,
    tool: Option<&str>,
    arguments: Option<&Value>,
) {
    let id = request_id(ctx);
    let arguments = arguments.map(digest);
    emit(&Line {
        event: "refused",
        caller: crate::principal::caller(ctx),
        tool,
        request_id: Some(&id),
        arguments: arguments.as_deref(),
        reason: Some(reason),
        ..Line::default()
    });
}

/// An execution was started for a call.
pub(crate) fn started(
    ctx: &RequestContext<RoleServer>,
    tool: &str,
    execution: Option<&str>,
    arguments: &Value,
) {
    let id = request_id(ctx);
    let arguments = digest(arguments);
    emit(&Line {
        event: "started",
        caller: crate::principal::caller(ctx),
        tool: Some(tool),
        execution,
        request_id: Some(&id),
        arguments: Some(&arguments),
        ..Line::default()
    });
}

/// Answers were delivered to an execution's questions.
pub(crate) fn answered(
    ctx: &RequestContext<RoleServer>,
    tool: &str,
    execution: &str,
    answers: &Value,
    count: usize,
) {
    let id = request_id(ctx);
    let digest = digest(answers);
    emit(&Line {
        event: "answered",
        caller: crate::principal::caller(ctx),
        tool: Some(tool),
        execution: Some(execution),
        request_id: Some(&id),
        arguments: Some(&digest),
        answers: Some(count),
        ..Line::default()
    });
}

/// The engine accepted a cancellation.
pub(crate) fn cancelled(ctx: &RequestContext<RoleServer>, tool: &str, execution: &str) {
    let id = request_id(ctx);
    emit(&Line {
        event: "cancelled",
        caller: crate::principal::caller(ctx),
        tool: Some(tool),
        execution: Some(execution),
        request_id: Some(&id),
        ..Line::default()
    });
}

/// Who made a request, kept past the request (for an execution flowgate stops later on the
/// caller's behalf).
#[derive(Debug, Clone, Default)]
pub(crate) struct Origin {
    caller: Option<Authenticated>,
    request_id: String,
}

impl Origin {
    /// The caller and request id of `ctx`.
    pub(crate) fn of(ctx: &RequestContext<RoleServer>) -> Self {
        Origin {
            caller: crate::principal::caller(ctx).cloned(),
            request_id: request_id(ctx),
        }
    }
}

/// flowgate itself stopped an execution of a synchronous call: `reason` is `hung_up` (the
/// caller went away) or `sync_wait` (no result within the synchronous wait, or a question only
/// a task could answer).
pub(crate) fn stopped(origin: &Origin, tool: &str, execution: &str, reason: &str) {
    emit(&Line {
        event: "cancelled",
        caller: origin.caller.as_ref(),
        tool: Some(tool),
        execution: Some(execution),
        request_id: Some(&origin.request_id),
        reason: Some(reason),
        ..Line::default()
    });
}

/// A poll saw the execution terminal: logged the first time this instance sees it. (A
/// synchronous run, which has no reference, is seen exactly once anyway.)
pub(crate) fn finished(
    ctx: &RequestContext<RoleServer>,
    tool: &str,
    execution: Option<&str>,
    status: &str,
) {
    if execution.is_some_and(|e| !first_sight(e)) {
        return;
    }
    let id = request_id(ctx);
    emit(&Line {
        event: "finished",
        caller: crate::principal::caller(ctx),
        tool: Some(tool),
        execution,
        request_id: Some(&id),
        status: Some(status),
        ..Line::default()
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
