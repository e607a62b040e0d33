//! Tolerating a missing `Mcp-Name` header on `tasks/*` requests.
//!
//! SEP-2663 asks clients to mirror `params.taskId` into `Mcp-Name` on `tasks/get`,
//! `tasks/update` and `tasks/cancel`, so that routing intermediaries need not read the body.
//! flowgate routes nothing on it (any instance answers for any task), and shipped clients omit
//! it (the Python `mcp` 2.3 client with `fastmcp-tasks`), so a request without the header is
//! served as if the client had sent it. A header that is present and disagrees with the body
//! is still refused by rmcp with -32020: tolerance covers absence, never contradiction.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use serde_json::Value;

/// The methods whose `Mcp-Name` is the task id.
const TASK_METHODS: [&str; 3] = ["tasks/get", "tasks/update", "tasks/cancel"];

/// Adds `Mcp-Name: <params.taskId>` to a `tasks/*` request that lacks it; `limit` is the
/// largest body accepted (rmcp's).
pub(crate) async fn fill_task_name(
    State(limit): State<usize>,
    request: Request,
    next: Next,
) -> Response {
    if request.method() != Method::POST || request.headers().contains_key("mcp-name") {
        return next.run(request).await;
    }
    let (mut parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, limit).await else {
        return (
            axum::http::StatusCode::PAYLOAD_TOO_LARGE,
            format!("Payload Too Large: request body exceeds {limit} bytes"),
        )
            .into_response();
    };
    if let Some(value) = task_name(&bytes) {
        tracing::debug!("tasks request without Mcp-Name; using params.taskId");
        parts.headers.insert("mcp-name", value);
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

/// The header value for a `tasks/*` body's `params.taskId`, encoded as SEP-2243 asks when
/// it is not a plain header value.
fn task_name(body: &[u8]) -> Option<HeaderValue> {
    let message: Value = serde_json::from_slice(body).ok()?;
    let method = message.get("method")?.as_str()?;
    if !TASK_METHODS.contains(&method) {
        return None;
    }
    let id = message.get("params")?.get("taskId")?.as_str()?;
    let plain = !id.is_empty() && id.trim() == id && id.bytes().all(|b| (0x20..0x7f).contains(&b));
    if plain {
        HeaderValue::from_str(id).ok()
    } else {
        let encoded = base64::engine::general_purpose::STANDARD.encode(id);
        HeaderValue::from_str(&format!("=?base64?{encoded}?=")).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::task_name;

    #[test]
    fn only_task_methods_with_a_string_id_get_a_name() {
        let get =
            br#"{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"fg1.k.abc"}}"#;
        assert_eq!(task_name(get).expect("name"), "fg1.k.abc");
        let odd =
            br#"{"jsonrpc":"2.0","id":1,"method":"tasks/cancel","params":{"taskId":" x\u00e9"}}"#;
        assert_eq!(task_name(odd).expect("name"), "=?base64?IHjDqQ==?=");
        for other in [
            &br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t"}}"#[..],
            br#"{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":7}}"#,
            br#"not json"#,
        ] {
            assert_eq!(task_name(other), None);
        }
    }
}
