//! Lambda's response size limits, kept by flowgate itself: an answer that would not fit is
//! replaced by a JSON-RPC error naming its size, so the client never gets the platform's
//! error (a bare 502 from a Function URL, every time it asks again).
//!
//! What counts is what Lambda carries. In BUFFERED mode that is the function's whole response
//! object, the HTTP body JSON-escaped inside it beside the headers, at most 6,291,556 bytes;
//! output dense in control characters grows six-fold in the first JSON encoding and again in
//! the second. In RESPONSE_STREAM mode it is the streamed bytes, at most 200 MB (Lambda's
//! documented limit for response streaming).

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::Response;
use flowgate_server::http::AnswerTo;
use serde_json::{Value, json};

/// The largest buffered response Lambda returns (its error message names this number).
pub(crate) const BUFFERED_LIMIT: usize = 6_291_556;
/// The largest streamed response (200 MB).
pub(crate) const STREAMING_LIMIT: usize = 200 * 1024 * 1024;
/// What the response object adds besides the escaped body and the headers (status code,
/// field names, `isBase64Encoded`, `cookies`), with room to spare.
const ENVELOPE: usize = 512;

/// How the function's answers reach the client, and so what limits them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InvokeMode {
    /// The whole response object at once (Function URL BUFFERED, API Gateway, ALB).
    Buffered,
    /// The body streamed as it is written (Function URL RESPONSE_STREAM).
    ResponseStream,
}

impl InvokeMode {
    /// The mode `FLOWGATE_LAMBDA_INVOKE_MODE` names (the Function URL's `InvokeMode`); buffered
    /// when unset.
    pub(crate) fn parse(value: Option<&str>) -> Result<InvokeMode, String> {
        match value.map(str::trim).unwrap_or("") {
            "" | "BUFFERED" => Ok(InvokeMode::Buffered),
            "RESPONSE_STREAM" => Ok(InvokeMode::ResponseStream),
            other => Err(format!(
                "FLOWGATE_LAMBDA_INVOKE_MODE is {other:?}; it takes the Function URL's InvokeMode: BUFFERED or RESPONSE_STREAM"
            )),
        }
    }

    /// Whether the client gets the body only when the invocation ends.
    pub(crate) fn is_buffered(self) -> bool {
        self == InvokeMode::Buffered
    }

    /// The largest answer this mode carries, in the bytes it counts.
    pub(crate) fn limit(self) -> usize {
        match self {
            InvokeMode::Buffered => BUFFERED_LIMIT,
            InvokeMode::ResponseStream => STREAMING_LIMIT,
        }
    }
}

/// The middleware: buffers each answer (a streamed server-sent-events answer too: flowgate
/// ends its streams before the invocation's deadline, so they are bounded), measures it as
/// `mode` carries it, and replaces an answer over the limit.
pub(crate) async fn keep_within_limit(
    State(mode): State<InvokeMode>,
    request: Request,
    next: Next,
) -> Response {
    let response = next.run(request).await;
    if mode == InvokeMode::ResponseStream && is_event_stream(&response) {
        // A stream flows as it is written (questions must reach the client while the task
        // waits); flowgate's streams end at the deadline, far below 200 MB.
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let bytes = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(bytes) => bytes,
        Err(e) => {
            tracing::error!(error = %e, "reading an answer failed");
            Bytes::new()
        }
    };
    let size = carried_size(mode, &parts.headers, &bytes);
    if size <= mode.limit() {
        return Response::from_parts(parts, Body::from(bytes));
    }
    tracing::warn!(
        size,
        limit = mode.limit(),
        "an answer over Lambda's payload limit was replaced by an error"
    );
    let event_stream = is_event_stream_headers(&parts.headers);
    let replaced = replace_answer(
        &bytes,
        parts.extensions.get::<AnswerTo>(),
        event_stream,
        size,
        mode,
    );
    parts.headers.remove(header::CONTENT_LENGTH);
    if !event_stream {
        parts.headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
    }
    Response::from_parts(parts, Body::from(replaced))
}

fn is_event_stream(response: &Response) -> bool {
    is_event_stream_headers(response.headers())
}

fn is_event_stream_headers(headers: &axum::http::HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"))
}

/// The bytes Lambda counts for this answer.
pub(crate) fn carried_size(
    mode: InvokeMode,
    headers: &axum::http::HeaderMap,
    body: &[u8],
) -> usize {
    match mode {
        InvokeMode::ResponseStream => body.len(),
        InvokeMode::Buffered => {
            // The body as a JSON string (lambda_http sends text bodies as text; others are
            // base64, 4/3 of their size), and each header twice (headers and
            // multiValueHeaders), escaped.
            let escaped = match std::str::from_utf8(body) {
                Ok(text) => serde_json::to_string(text).map_or(body.len() * 6, |s| s.len()),
                Err(_) => body.len().div_ceil(3) * 4 + 2,
            };
            let headers: usize = headers
                .iter()
                .map(|(k, v)| k.as_str().len() + v.len() + 8)
                .sum();
            escaped + 2 * headers + ENVELOPE
        }
    }
}

/// The answer's JSON-RPC responses turned into an error naming the size (a JSON body, or the
/// response events of a server-sent-events body; other events stay).
/// `answer_to` is the request the JSON answer answers (what the transport says: the answer
/// is not read back for it).
fn replace_answer(
    body: &[u8],
    answer_to: Option<&AnswerTo>,
    event_stream: bool,
    size: usize,
    mode: InvokeMode,
) -> Vec<u8> {
    if !event_stream {
        let id = answer_to.and_then(|a| a.0.clone()).unwrap_or(Value::Null);
        return too_large(&id, size, mode).to_string().into_bytes();
    }
    let text = String::from_utf8_lossy(body);
    let mut out = String::new();
    for event in text.split("\n\n").filter(|e| !e.trim().is_empty()) {
        let data: String = event
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(str::trim_start)
            .collect::<Vec<_>>()
            .join("\n");
        let message = serde_json::from_str::<Value>(&data).ok();
        let is_response = message
            .as_ref()
            .is_some_and(|m| m.get("result").is_some() || m.get("error").is_some());
        if is_response {
            let id = message
                .as_ref()
                .and_then(|m| m.get("id").cloned())
                .unwrap_or(Value::Null);
            for line in event.lines().filter(|l| !l.starts_with("data:")) {
                out.push_str(line);
                out.push('\n');
            }
            out.push_str("data: ");
            out.push_str(&too_large(&id, size, mode).to_string());
            out.push_str("\n\n");
        } else {
            out.push_str(event);
            out.push_str("\n\n");
        }
    }
    out.into_bytes()
}

/// The JSON-RPC error for an answer of `size` bytes.
fn too_large(id: &Value, size: usize, mode: InvokeMode) -> Value {
    let (what, limit) = match mode {
        InvokeMode::Buffered => ("a BUFFERED Lambda response", BUFFERED_LIMIT),
        InvokeMode::ResponseStream => ("a streamed Lambda response", STREAMING_LIMIT),
    };
    json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {
            "code": -32603,
            "message": format!(
                "the answer is {size} bytes as Lambda carries it, over the {limit}-byte limit of {what}; \
                 the result stays with the workflow run (read it where the engine keeps it, or serve \
                 this tool where answers may be larger)"
            ),
            "data": {"size": size, "limit": limit},
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_invoke_mode_is_the_urls() {
        assert_eq!(InvokeMode::parse(None), Ok(InvokeMode::Buffered));
        assert_eq!(
            InvokeMode::parse(Some("RESPONSE_STREAM")),
            Ok(InvokeMode::ResponseStream)
        );
        let e = InvokeMode::parse(Some("streaming")).expect_err("a typo");
        assert!(e.contains("RESPONSE_STREAM"), "{e}");
    }

    #[test]
    fn control_characters_count_as_lambda_carries_them() {
        let body = serde_json::to_vec(&json!({"text": "\u{1}".repeat(1000)})).expect("json");
        let headers = axum::http::HeaderMap::new();
        let size = carried_size(InvokeMode::Buffered, &headers, &body);
        // Each byte is \u0001 (6) once, \\u0001 (7) twice.
        assert!(size >= 7000, "{size}");
        assert_eq!(
            carried_size(InvokeMode::ResponseStream, &headers, &body),
            body.len()
        );
    }

    #[test]
    fn a_response_event_is_replaced_and_questions_stay() {
        let body = "id: 1\ndata: {\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"elicitation/create\",\"params\":{}}\n\n\
                    id: 2\ndata: {\"jsonrpc\":\"2.0\",\"id\":4,\"result\":{\"big\":true}}\n\n";
        let out = String::from_utf8(replace_answer(
            body.as_bytes(),
            None,
            true,
            7_000_000,
            InvokeMode::Buffered,
        ))
        .expect("utf8");
        assert!(out.contains("elicitation/create"), "{out}");
        assert!(out.contains("\"id\":4") && out.contains("7000000"), "{out}");
        assert!(!out.contains("\"big\""), "{out}");
        let json = String::from_utf8(replace_answer(
            br#"{"jsonrpc":"2.0","id":"a","result":{}}"#,
            Some(&AnswerTo(Some(Value::from("a")))),
            false,
            7_000_000,
            InvokeMode::Buffered,
        ))
        .expect("utf8");
        let v: Value = serde_json::from_str(&json).expect("json");
        assert_eq!(v["id"], "a");
        assert_eq!(v["error"]["data"]["limit"], BUFFERED_LIMIT);
    }
}
