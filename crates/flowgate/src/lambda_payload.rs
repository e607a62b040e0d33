//! Lambda's response size limits, kept by flowgate itself: an answer that would not fit is
//! replaced by a JSON-RPC error naming its size, so the client never gets the platform's
//! error (a bare 502 from a Function URL, every time it asks again).
//!
//! What counts is what Lambda carries. In BUFFERED mode that is the function's whole response
//! object, the HTTP body JSON-escaped inside it beside the headers, at most 6,291,556 bytes;
//! output dense in control characters grows six-fold in the first JSON encoding and again in
//! the second. In RESPONSE_STREAM mode it is the streamed bytes, at most 200 MB (Lambda's
//! documented limit for response streaming). The HTTP transport keeps the limit where it
//! writes each answer (`flowgate_server::http::AnswerLimit`); this module says what Lambda
//! counts and what the client is told.

use flowgate_core::wire::RpcError;
use flowgate_server::http::AnswerLimit;
use serde_json::json;

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

    /// What this mode carries, as the HTTP transport keeps it: a buffered response whole (an
    /// event stream too: Lambda sends it at the end), a streamed one as it is written (its
    /// event streams flow; flowgate ends them at the deadline, far below 200 MB).
    pub(crate) fn answer_limit(self) -> Option<AnswerLimit> {
        Some(match self {
            InvokeMode::Buffered => AnswerLimit {
                measure: |headers, body| carried_size(InvokeMode::Buffered, headers, body),
                limit: BUFFERED_LIMIT,
                streams: true,
                too_large: |size| too_large(size, InvokeMode::Buffered),
            },
            InvokeMode::ResponseStream => AnswerLimit {
                measure: |headers, body| carried_size(InvokeMode::ResponseStream, headers, body),
                limit: STREAMING_LIMIT,
                streams: false,
                too_large: |size| too_large(size, InvokeMode::ResponseStream),
            },
        })
    }
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

/// The JSON-RPC error for an answer of `size` bytes.
fn too_large(size: usize, mode: InvokeMode) -> RpcError {
    let (what, limit) = match mode {
        InvokeMode::Buffered => ("a BUFFERED Lambda response", BUFFERED_LIMIT),
        InvokeMode::ResponseStream => ("a streamed Lambda response", STREAMING_LIMIT),
    };
    let mut error = RpcError::new(
        -32603,
        format!(
            "the answer is {size} bytes as Lambda carries it, over the {limit}-byte limit of {what}; \
             the result stays with the workflow run (read it where the engine keeps it, or serve \
             this tool where answers may be larger)"
        ),
    );
    error.data = Some(json!({"size": size, "limit": limit}));
    error
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
    fn an_answer_over_the_limit_is_an_error_naming_its_size() {
        let limit = InvokeMode::Buffered.answer_limit().expect("a limit");
        let e = (limit.too_large)(7_000_000);
        assert_eq!(e.code, -32603);
        assert!(e.message.contains("7000000"), "{}", e.message);
        assert_eq!(
            e.data,
            Some(json!({"size": 7_000_000, "limit": BUFFERED_LIMIT}))
        );
        let streamed = InvokeMode::ResponseStream.answer_limit().expect("a limit");
        assert!(limit.streams && !streamed.streams);
    }
}
