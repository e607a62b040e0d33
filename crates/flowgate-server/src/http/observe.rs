//! The MCP request span and the request's count: read from what `parse` put in the extensions
//! (the JSON-RPC message) and what `authenticate` put there (the [`Caller`]), never from the
//! body again.
//!
//! The span (`flowgate_telemetry::Request`) has the trace context the request names as its
//! parent (`params._meta`, else the `traceparent` header). The request's [`Caller`] carries
//! it: the task operations run inside it (engine calls are its children) and name the tool of
//! a task they opened on it. Only they enter it, never rmcp's machinery around them, whose
//! spans (and tasks) may outlive the answer by a moment: the request's span closes with the
//! answer, so on AWS Lambda the export at the end of the invocation has it. How the request ended is read
//! from the answer: the JSON-RPC error's code in a JSON answer, a refusal's HTTP status, or ok.
//! With traces and metrics both off this layer passes the request on untouched.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderMap, header};
use axum::middleware::Next;
use axum::response::Response;
use flowgate_telemetry::{Ended, RequestInfo};

use crate::Caller;
use crate::jsonrpc::Incoming;

/// The largest answer read for its JSON-RPC error code (rmcp's JSON answers are whole in
/// memory already; a larger one is not an error object).
const ERROR_BODY_LIMIT: usize = 1 << 20;

/// Middleware on `/mcp`, inside `parse`.
pub(crate) async fn observe(mut request: Request, next: Next) -> Response {
    if !flowgate_telemetry::request::active() {
        return next.run(request).await;
    }
    let Some(message) = request.extensions().get::<Arc<Incoming>>() else {
        // Not a JSON-RPC message (a GET, a body `parse` answered): no MCP request to observe.
        return next.run(request).await;
    };
    let caller = request.extensions().get::<Caller>();
    let info = RequestInfo {
        method: message.method(),
        id: message.id.as_ref().map(|id| id as &dyn std::fmt::Display),
        tool: message.tool(),
        revision: message.revision.as_deref(),
        issuer: caller
            .and_then(Caller::identity)
            .map(|who| who.principal.issuer.as_str()),
        transport: "tcp",
    };
    let observed = flowgate_telemetry::Request::begin(info, || {
        flowgate_telemetry::traces::remote_parent(
            message.params.get("_meta").and_then(|m| m.as_object()),
            Some(request.headers()),
        )
    });
    // A request that is not traced keeps its caller as it is (its span is already none).
    if !observed.span().is_disabled()
        && let Some(caller) = request.extensions().get::<Caller>().cloned()
    {
        request
            .extensions_mut()
            .insert(caller.with_span(observed.span().clone()));
    }
    let response = next.run(request).await;
    // An answer made here (`poll`, the most frequent) says how it ended in its extensions; any
    // other is read by `ended`, a future of its own (boxed: its code, which reads a body, stays
    // out of this future's, which every observed request runs).
    let (ended, response) = match response.extensions().get::<Ended>() {
        Some(ended) => (*ended, response),
        None => {
            let reading: futures::future::BoxFuture<'static, (Ended, Response)> =
                Box::pin(ended(response));
            reading.await
        }
    };
    observed.end(ended);
    response
}

/// How the request ended, as its answer says, and the answer (rebuilt when its body was read).
async fn ended(response: Response) -> (Ended, Response) {
    let status = response.status();
    if !is_json(response.headers()) {
        // An SSE stream (its events are the handler's) or an empty 202 for a notification.
        let ended = if status.is_success() {
            Ended::Ok
        } else {
            Ended::Refused(status.as_u16())
        };
        return (ended, response);
    }
    let (parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, ERROR_BODY_LIMIT).await else {
        // Not readable whole: answered as it could be.
        return (
            Ended::Refused(status.as_u16()),
            Response::from_parts(parts, Body::empty()),
        );
    };
    let ended = match error_code(&bytes) {
        Some(code) => Ended::Error(code),
        None if status.is_success() => Ended::Ok,
        None => Ended::Refused(status.as_u16()),
    };
    (ended, Response::from_parts(parts, Body::from(bytes)))
}

fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"))
}

/// The code of a JSON-RPC error answer (`None`: a result, or no JSON-RPC answer).
fn error_code(body: &[u8]) -> Option<i64> {
    #[derive(serde::Deserialize)]
    struct Answer {
        error: Option<Error>,
    }
    #[derive(serde::Deserialize)]
    struct Error {
        code: i64,
    }
    serde_json::from_slice::<Answer>(body)
        .ok()?
        .error
        .map(|e| e.code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_is_an_error_only_when_it_carries_one() {
        assert_eq!(
            error_code(br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"no"}}"#),
            Some(-32602)
        );
        // A failed task's error inside a result is the task's, not the request's.
        assert_eq!(
            error_code(br#"{"jsonrpc":"2.0","id":1,"result":{"error":{"code":-32603}}}"#),
            None
        );
        assert_eq!(error_code(br#"{"error":"unauthorized"}"#), None);
        assert_eq!(error_code(b"not json"), None);
    }
}
