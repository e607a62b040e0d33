//! Parsing each request once.
//!
//! A `POST` that says it carries JSON is read and parsed here, once: its [`Incoming`] message
//! (method, id, tool or task name, protocol revision, params) goes in the request's
//! extensions, where the scope check and the 2025-11-25 dialect read it, and the body goes on
//! to rmcp unchanged. Two more concerns live here because they only need the parsed message:
//!
//! - **A body that is no JSON-RPC message.** rmcp answers a body it cannot decode with HTTP
//!   415 and a line of plain text; JSON-RPC asks for an error object: `-32700` (parse error)
//!   when the body is not JSON, `-32600` (invalid request) when it is JSON but no message. rmcp
//!   still answers first (so its other checks keep their answers), and exactly that 415 is
//!   replaced with the JSON-RPC error (HTTP 400).
//! - **A `tasks/*` request without `Mcp-Name`.** SEP-2663 asks clients to mirror
//!   `params.taskId` into `Mcp-Name` on `tasks/get`, `tasks/update` and `tasks/cancel`, so that
//!   routing intermediaries need not read the body. flowgate routes nothing on it (any
//!   instance answers for any task), and shipped clients omit it (the Python `mcp` 2.3 client
//!   with `fastmcp-tasks`), so a request without the header is served as if the client had
//!   sent it. A header that is present and disagrees with the body is still refused by rmcp
//!   with -32020: tolerance covers absence, never contradiction.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use rmcp::ErrorData;
use rmcp::model::{RequestId, ServerJsonRpcMessage};

use super::names;
use crate::jsonrpc::Incoming;

/// The methods whose `Mcp-Name` is the task id.
const TASK_METHODS: [&str; 3] = ["tasks/get", "tasks/update", "tasks/cancel"];

/// Applies to `POST`s that say they carry JSON; `limit` is the largest body accepted (rmcp's).
pub(crate) async fn parse(State(limit): State<usize>, request: Request, next: Next) -> Response {
    if request.method() != Method::POST || !says_json(request.headers()) {
        return next.run(request).await;
    }
    let (mut parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, limit).await else {
        return (
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("Payload Too Large: request body exceeds {limit} bytes"),
        )
            .into_response();
    };
    let revision = parts
        .headers
        .get(names::MCP_PROTOCOL_VERSION)
        .and_then(|v| v.to_str().ok());
    let parsed = Incoming::parse(&bytes, revision);
    let id = match &parsed {
        Ok(message) => {
            if !parts.headers.contains_key(names::MCP_NAME)
                && let Some(name) = task_name(message)
            {
                tracing::debug!("tasks request without Mcp-Name; using params.taskId");
                parts.headers.insert(names::MCP_NAME, name);
            }
            message.id.clone()
        }
        Err(_) => None,
    };
    let parse_error = match parsed {
        Ok(message) => {
            parts.extensions.insert(Arc::new(message));
            None
        }
        Err(e) => Some(e),
    };
    let response = next
        .run(Request::from_parts(parts, Body::from(bytes)))
        .await;
    if response.status() != StatusCode::UNSUPPORTED_MEDIA_TYPE {
        return response;
    }
    let error = match parse_error {
        Some(e) => ErrorData::parse_error(format!("Parse error: {e}"), None),
        None => ErrorData::invalid_request(
            "Invalid Request: the body is JSON but not a JSON-RPC request or notification",
            None,
        ),
    };
    let id = id.and_then(|id| serde_json::from_value::<RequestId>(id).ok());
    error_response(error, id)
}

fn says_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"))
}

/// The `Mcp-Name` for a `tasks/*` message's `params.taskId`, encoded as SEP-2243 asks when it
/// is not a plain header value.
fn task_name(message: &Incoming) -> Option<HeaderValue> {
    if !TASK_METHODS.contains(&message.method()) {
        return None;
    }
    let id = message.name()?;
    let plain = !id.is_empty() && id.trim() == id && id.bytes().all(|b| (0x20..0x7f).contains(&b));
    if plain {
        HeaderValue::from_str(id).ok()
    } else {
        let encoded = base64::engine::general_purpose::STANDARD.encode(id);
        HeaderValue::from_str(&format!("=?base64?{encoded}?=")).ok()
    }
}

/// A JSON-RPC error answer, HTTP 400.
fn error_response(error: ErrorData, id: Option<RequestId>) -> Response {
    let message = ServerJsonRpcMessage::error(error, id);
    match serde_json::to_vec(&message) {
        Ok(json) => (
            StatusCode::BAD_REQUEST,
            [(header::CONTENT_TYPE, "application/json")],
            json,
        )
            .into_response(),
        Err(_) => StatusCode::BAD_REQUEST.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    #[test]
    fn only_task_methods_with_a_string_id_get_a_name() {
        let name = |v: Value| task_name(&Incoming::from_value(v, None));
        let get =
            json!({"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"fg1.k.abc"}});
        assert_eq!(name(get).expect("name"), "fg1.k.abc");
        let odd =
            json!({"jsonrpc":"2.0","id":1,"method":"tasks/cancel","params":{"taskId":" x\u{e9}"}});
        assert_eq!(name(odd).expect("name"), "=?base64?IHjDqQ==?=");
        for other in [
            json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t"}}),
            json!({"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":7}}),
            json!({"jsonrpc":"2.0","id":1,"method":"tasks/result","params":{"taskId":"x"}}),
        ] {
            assert_eq!(name(other), None);
        }
    }

    #[test]
    fn only_json_bodies_are_looked_at() {
        let mut h = HeaderMap::new();
        assert!(!says_json(&h));
        h.insert(
            header::CONTENT_TYPE,
            "Application/JSON; charset=utf-8".parse().expect("value"),
        );
        assert!(says_json(&h));
        h.insert(header::CONTENT_TYPE, "text/plain".parse().expect("value"));
        assert!(!says_json(&h));
    }
}
