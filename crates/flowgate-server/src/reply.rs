//! What the dispatcher answers ([`Reply`]), and the one writer of a JSON-RPC answer's bytes
//! that every transport uses.
//!
//! A reply says how the request ended ([`Reply::ended`]), so telemetry and the audit read the
//! outcome from it, never from bytes already written.

use flowgate_telemetry::Ended;
use rmcp::ErrorData;
use serde_json::{Map, Value, json};

/// How the dispatcher answered a message.
#[derive(Debug)]
pub(crate) enum Reply {
    /// The answer to the request's id.
    Answer(Answer),
    /// A `tools/call` of a tool whose scopes the caller lacks (the scopes): HTTP answers 403
    /// with the identity's challenge naming them.
    Forbidden(Vec<String>),
    /// Nothing to answer: a notification, or the client's answer to a question of ours.
    Accepted,
    /// A response that answers no question of ours.
    Stray,
    /// The caller went away before the answer was ready.
    Gone,
    /// A resumable hold ended without the answer; the client resumes it.
    Paused,
    /// A `subscriptions/listen`, open: the transport runs it on a stream of its own
    /// (`Listener::run`), which carries the acknowledgement, the notifications and, at a
    /// graceful end, the request's result.
    Listen(Box<crate::listen::Listener>),
}

/// A result or an error, and what the transport needs to write it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Answer {
    /// The result, or the JSON-RPC error.
    pub(crate) outcome: Result<Payload, ErrorData>,
    /// The request was refused for how it is made rather than for what it asks (`_meta`
    /// without a required key): HTTP answers 400.
    pub(crate) malformed: bool,
    /// The request was in the per-request lifecycle (2026-07-28), whose errors HTTP maps to
    /// statuses.
    pub(crate) per_request: bool,
}

/// A result, as JSON or already written.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Payload {
    /// The result object.
    Json(Value),
    /// The result object's JSON text, written once from the types that hold it.
    Written(String),
}

impl Reply {
    /// An answer of `outcome`.
    pub(crate) fn answer(outcome: Result<Payload, ErrorData>, per_request: bool) -> Reply {
        Reply::Answer(Answer {
            outcome,
            malformed: false,
            per_request,
        })
    }

    /// How the request ended, for metrics, the request's span and the audit.
    pub(crate) fn ended(&self) -> Ended {
        match self {
            Reply::Answer(Answer {
                outcome: Err(e), ..
            }) => Ended::Error(i64::from(e.code.0)),
            Reply::Forbidden(_) => Ended::Refused(403),
            _ => Ended::Ok,
        }
    }
}

/// The JSON-RPC answer to request `id` (`None`: the request's id could not be read), as
/// bytes: `{"jsonrpc":"2.0","id":…,"result":…}` or `…"error":{"code","message","data"}`.
pub(crate) fn bytes(id: Option<&Value>, outcome: &Result<Payload, ErrorData>) -> Vec<u8> {
    let written = match outcome {
        Ok(Payload::Written(text)) => text.len(),
        _ => 0,
    };
    let mut out = Vec::with_capacity(64 + written);
    out.extend_from_slice(br#"{"jsonrpc":"2.0""#);
    if let Some(id) = id {
        out.extend_from_slice(br#","id":"#);
        // Writing a JSON value to a vector cannot fail.
        let _ = serde_json::to_writer(&mut out, id);
    }
    match outcome {
        Ok(Payload::Written(text)) => {
            out.extend_from_slice(br#","result":"#);
            out.extend_from_slice(text.as_bytes());
        }
        Ok(Payload::Json(value)) => {
            out.extend_from_slice(br#","result":"#);
            let _ = serde_json::to_writer(&mut out, value);
        }
        Err(error) => {
            out.extend_from_slice(br#","error":"#);
            let _ = serde_json::to_writer(&mut out, &error_json(error));
        }
    }
    out.push(b'}');
    out
}

/// The answer as text (a message inside an SSE stream).
pub(crate) fn text(id: Option<&Value>, outcome: &Result<Payload, ErrorData>) -> String {
    // The writer writes JSON, which is UTF-8.
    String::from_utf8_lossy(&bytes(id, outcome)).into_owned()
}

/// An error object: code, message, and data when there is some.
fn error_json(error: &ErrorData) -> Value {
    let mut object = Map::new();
    object.insert("code".into(), json!(error.code.0));
    object.insert("message".into(), json!(error.message));
    if let Some(data) = &error.data {
        object.insert("data".into(), data.clone());
    }
    Value::Object(object)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{ErrorCode, RequestId, ServerJsonRpcMessage, ServerResult};

    /// The writer writes what rmcp's message types write, for results and errors, with and
    /// without an id.
    #[test]
    fn an_answer_is_written_as_rmcps_types_write_it() {
        let result = ServerResult::empty(());
        let written = serde_json::to_string(&result).expect("json");
        let ours = bytes(Some(&json!(7)), &Ok(Payload::Written(written)));
        let theirs = serde_json::to_vec(&ServerJsonRpcMessage::response(
            result,
            RequestId::Number(7),
        ))
        .expect("json");
        assert_eq!(
            serde_json::from_slice::<Value>(&ours).expect("ours"),
            serde_json::from_slice::<Value>(&theirs).expect("theirs")
        );
        let error = ErrorData::new(ErrorCode(-32602), "bad", Some(json!({"x": 1})));
        for id in [Some(json!("a")), None] {
            let ours = bytes(id.as_ref(), &Err(error.clone()));
            let request_id = id
                .as_ref()
                .map(|i| RequestId::String(i.as_str().expect("s").into()));
            let theirs =
                serde_json::to_vec(&ServerJsonRpcMessage::error(error.clone(), request_id))
                    .expect("json");
            assert_eq!(
                serde_json::from_slice::<Value>(&ours).expect("ours"),
                serde_json::from_slice::<Value>(&theirs).expect("theirs")
            );
        }
    }
}
