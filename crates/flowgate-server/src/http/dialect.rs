//! The 2025-11-25 tasks dialect on HTTP: the messages `crate::dialect_2025` claims are
//! answered here, with the request's [`Caller`]; everything else goes on to rmcp.
//!
//! Answered before rmcp, these requests first pass the same `Host` and `Origin` checks rmcp
//! makes ([`Guard`]); a refusal is a JSON-RPC error (`-32600`) saying what was refused. An
//! answer is plain JSON, except `tasks/result` for a client that takes a stream (`Accept`
//! names `text/event-stream`): its answer is an SSE stream carrying each question as an
//! `elicitation/create` request, then the result. The caller goes away with the request (or
//! the stream), which ends its hold.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::StreamExt as _;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use super::origins::Guard;
use crate::dialect_2025::{self, Handled, Question};
use crate::jsonrpc::Incoming;
use crate::{Caller, FlowgateServer};

/// What the layer needs: the server, and the transport's `Host` and `Origin` checks (shared:
/// the state is cloned for every request).
#[derive(Debug, Clone)]
pub(crate) struct Dialect {
    pub(crate) server: FlowgateServer,
    pub(crate) guard: Arc<Guard>,
}

/// The layer: the dialect's messages are answered here, everything else passes.
pub(crate) async fn serve_2025(
    State(Dialect { server, guard }): State<Dialect>,
    request: Request,
    next: Next,
) -> Response {
    let extensions = request.extensions();
    let (Some(message), Some(caller)) = (
        extensions.get::<Arc<Incoming>>(),
        extensions.get::<Caller>(),
    ) else {
        return next.run(request).await;
    };
    if !dialect_2025::claims(&server, message) {
        return next.run(request).await;
    }
    let (message, caller) = (Arc::clone(message), caller.clone());
    if let Some((status, why)) = guard.refusal(request.uri(), request.headers()) {
        tracing::warn!(%status, why, "refused a 2025-11-25 request");
        let refused = rmcp::ErrorData::invalid_request(
            format!("the request was refused ({status}): {why}"),
            None,
        );
        let mut response = json(&dialect_2025::reply_json(
            message.id.as_ref(),
            &Err(refused),
        ));
        *response.status_mut() = status;
        return response;
    }
    if message.method() == "tasks/result" && takes_stream(request.headers()) {
        return stream(server, caller, message);
    }
    // The caller is gone when this request is dropped (its connection closed).
    let gone = CancellationToken::new();
    let on_drop = gone.clone().drop_guard();
    let span = caller.span().clone();
    let handled = dialect_2025::handle(&server, &caller.with_gone(gone), &message, None)
        .instrument(span)
        .await;
    on_drop.disarm();
    match handled {
        Handled::Reply(answer) => json(&dialect_2025::reply_json(message.id.as_ref(), &answer)),
        Handled::Accepted => StatusCode::ACCEPTED.into_response(),
        Handled::Gone => StatusCode::NO_CONTENT.into_response(),
    }
}

/// `tasks/result` as an SSE stream: questions as they come, then the answer. The stream
/// holds the caller: when the client drops it, the hold ends.
fn stream(server: FlowgateServer, caller: Caller, message: Arc<Incoming>) -> Response {
    let (events, stream) = futures::channel::mpsc::unbounded::<Value>();
    let gone = CancellationToken::new();
    let caller = caller.with_gone(gone.clone());
    tokio::spawn(async move {
        let ask = |question: Question| {
            let _ = events.unbounded_send(question.to_json());
        };
        let span = caller.span().clone();
        if let Handled::Reply(answer) = dialect_2025::handle(&server, &caller, &message, Some(&ask))
            .instrument(span)
            .await
        {
            let _ = events.unbounded_send(dialect_2025::reply_json(message.id.as_ref(), &answer));
        }
    });
    let on_drop = gone.drop_guard();
    let body = stream.map(move |event| {
        let _held = &on_drop;
        Ok::<_, std::convert::Infallible>(format!("event: message\ndata: {event}\n\n"))
    });
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(body))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

fn takes_stream(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/event-stream"))
}

fn json(answer: &Value) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        answer.to_string(),
    )
        .into_response()
}
