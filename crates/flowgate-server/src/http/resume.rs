//! Resumable `tasks/result` streams (the 2025-11-25 revision's resumable SSE streams, which
//! Python `mcp` 1.x and the TypeScript SDK 1.x implement).
//!
//! A `tasks/result` stream opens with a priming event (an event id, a `retry` delay, no data),
//! and every event carries the same id. When the hold ends without the answer (before the
//! platform's deadline, or right after a question where the platform delivers a body only when
//! the request ends), the stream just ends; the client reconnects with `GET` and
//! `Last-Event-ID`. The id names the task and the JSON-RPC request, so any instance resumes the
//! hold: the `GET` becomes the same `tasks/result` again, whose answer carries the original
//! request id. Nothing is kept between requests.
//!
//! The id holds no secret: the task id in it is a sealed handle that opens only for its caller,
//! and the resumed request goes through the same authentication as any other.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};

use crate::dialect_2025::V2025;
use crate::jsonrpc::Incoming;

/// What marks flowgate's event ids (and versions their content).
const PREFIX: &str = "fgr1.";
/// The reconnection delay the stream asks for, in milliseconds.
const RETRY_MS: u64 = 500;

/// The event id of the `tasks/result` of `task` asked as JSON-RPC request `id`.
pub(crate) fn event_id(task: &str, id: &Value) -> String {
    let inner = json!({"t": task, "i": id}).to_string();
    format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(inner))
}

/// The priming event a stream with event id `id` opens with.
pub(crate) fn priming(id: &str) -> String {
    format!("id: {id}\nretry: {RETRY_MS}\ndata:\n\n")
}

/// One message of the stream (its JSON text), with its id.
pub(crate) fn event(id: &str, message: &str) -> String {
    format!("id: {id}\nevent: message\ndata: {message}\n\n")
}

/// The `tasks/result` request an event id of ours resumes; `None` for any other id.
pub(crate) fn resumed(last_event_id: &str) -> Option<Incoming> {
    let encoded = last_event_id.strip_prefix(PREFIX)?;
    let bytes = URL_SAFE_NO_PAD.decode(encoded).ok()?;
    let inner: Value = serde_json::from_slice(&bytes).ok()?;
    let task = inner.get("t")?.as_str()?;
    let id = inner.get("i")?;
    if !(id.is_string() || id.is_number()) {
        return None;
    }
    let request =
        json!({"jsonrpc": "2.0", "id": id, "method": "tasks/result", "params": {"taskId": task}});
    Some(Incoming::from_value(request, Some(V2025)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_id_resumes_the_tasks_result_it_names() {
        let id = event_id("fg1.k1.abc", &json!(7));
        assert!(id.starts_with(PREFIX));
        let again = resumed(&id).expect("ours");
        assert_eq!(again.method(), "tasks/result");
        assert_eq!(again.name(), Some("fg1.k1.abc"));
        assert_eq!(again.id, Some(json!(7)));
        assert!(again.is_in(V2025));
        for other in [
            "fg1.k1.abc",
            "fgr1.!!!",
            "",
            &event_id("t", &json!({"x": 1})),
        ] {
            assert!(resumed(other).is_none(), "{other}");
        }
        assert_eq!(priming(&id), format!("id: {id}\nretry: 500\ndata:\n\n"));
    }
}
