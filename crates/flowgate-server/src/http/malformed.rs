//! JSON-RPC errors for bodies that are not JSON-RPC messages.
//!
//! rmcp answers a POST body it cannot decode with HTTP 415 and a line of plain text. JSON-RPC
//! asks for an error object: `-32700` (parse error) when the body is not JSON, `-32600`
//! (invalid request) when it is JSON but no message. This layer keeps the body, lets rmcp
//! answer, and replaces exactly that 415 with the JSON-RPC error (HTTP 400). Every other
//! answer passes through untouched.

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::ErrorData;
use rmcp::model::{RequestId, ServerJsonRpcMessage};
use serde_json::Value;

/// Applies to `POST`s that say they carry JSON; `limit` is the largest body accepted (rmcp's).
pub(crate) async fn jsonrpc_errors(
    State(limit): State<usize>,
    request: Request,
    next: Next,
) -> Response {
    if request.method() != Method::POST || !says_json(request.headers()) {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, limit).await else {
        return (
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("Payload Too Large: request body exceeds {limit} bytes"),
        )
            .into_response();
    };
    let response = next
        .run(Request::from_parts(parts, Body::from(bytes.clone())))
        .await;
    if response.status() != StatusCode::UNSUPPORTED_MEDIA_TYPE {
        return response;
    }
    error_response(&bytes)
}

fn says_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"))
}

/// The JSON-RPC error for a body that did not decode as a message.
fn error_response(body: &Bytes) -> Response {
    let (error, id) = match serde_json::from_slice::<Value>(body) {
        Err(e) => (
            ErrorData::parse_error(format!("Parse error: {e}"), None),
            None,
        ),
        Ok(value) => {
            let id = value
                .get("id")
                .and_then(|id| serde_json::from_value::<RequestId>(id.clone()).ok());
            let error = ErrorData::invalid_request(
                "Invalid Request: the body is JSON but not a JSON-RPC request or notification",
                None,
            );
            (error, id)
        }
    };
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

    async fn body_json(response: Response) -> Value {
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .expect("body");
        serde_json::from_slice(&bytes).expect("json")
    }

    #[tokio::test]
    async fn not_json_is_a_parse_error_and_json_that_is_no_message_an_invalid_request() {
        let r = error_response(&Bytes::from_static(b"{\"jsonrpc\": "));
        assert_eq!(r.status(), StatusCode::BAD_REQUEST);
        let v = body_json(r).await;
        assert_eq!(v["jsonrpc"], "2.0");
        assert_eq!(v["error"]["code"], -32700);
        assert!(v.get("id").is_none_or(Value::is_null), "{v}");

        let v = body_json(error_response(&Bytes::from_static(
            b"{\"id\": 7, \"x\": 1}",
        )))
        .await;
        assert_eq!(v["error"]["code"], -32600);
        assert_eq!(v["id"], 7);
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
