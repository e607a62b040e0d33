//! The 2025-11-25 tasks dialect on HTTP: the messages `crate::dialect_2025` claims are
//! answered here, with the request's [`Caller`]; so is a 2026-07-28 `tasks/get` that rmcp
//! would accept as it stands (module `poll`); everything else goes on to rmcp.
//!
//! `tasks/result` for a client that takes a stream is a resumable SSE stream (module
//! `resume`): a `GET` with one of its event ids in `Last-Event-ID` resumes it here, on any
//! instance. Its hold ends before the caller's deadline, and, where the platform delivers a
//! body only when the request ends, once it has sent a question; then the stream ends without
//! the answer and the client resumes it.
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
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::StreamExt as _;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use super::origins::Guard;
use super::{names, poll, resume};
use crate::dialect_2025::{self, Handled, Outbox, Question};
use crate::jsonrpc::Incoming;
use crate::{Caller, FlowgateServer};

/// What the layer needs: the server, and the transport's `Host` and `Origin` checks (shared:
/// the state is cloned for every request).
#[derive(Debug, Clone)]
pub(crate) struct Dialect {
    pub(crate) server: FlowgateServer,
    pub(crate) guard: Arc<Guard>,
    /// The platform delivers a response body only when the request ends
    /// ([`super::HttpOptions::buffered_responses`]).
    pub(crate) buffered: bool,
}

/// The layer: the dialect's messages are answered here, everything else passes.
pub(crate) async fn serve_2025(
    State(Dialect {
        server,
        guard,
        buffered,
    }): State<Dialect>,
    request: Request,
    next: Next,
) -> Response {
    let extensions = request.extensions();
    // A `GET` resuming a `tasks/result` stream of ours is that `tasks/result` again.
    let resumed = (request.method() == Method::GET)
        .then(|| request.headers().get(names::LAST_EVENT_ID))
        .flatten()
        .and_then(|v| v.to_str().ok())
        .and_then(resume::resumed)
        .map(Arc::new);
    let (Some(message), Some(caller)) = (
        resumed.or_else(|| extensions.get::<Arc<Incoming>>().cloned()),
        extensions.get::<Caller>(),
    ) else {
        return next.run(request).await;
    };
    if !dialect_2025::claims(&server, &message) {
        // A 2026-07-28 poll rmcp would accept as it stands is answered here (module `poll`).
        if let Some(poll) = poll::take(&server, &guard, request.uri(), request.headers(), &message)
        {
            return poll::answer(&server, caller, poll).await;
        }
        return next.run(request).await;
    }
    let caller = caller.clone();
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
        return stream(server, caller, message, buffered);
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
        // A hold without an outbox is not resumable: it answers (module `dialect_2025`).
        Handled::Gone | Handled::Paused => StatusCode::NO_CONTENT.into_response(),
    }
}

/// `tasks/result` as a resumable SSE stream: the priming event, questions as they come, then
/// the answer, or the end of the stream when the hold ends without it (`buffered`: also once it
/// has sent a question). The stream holds the caller: when the client drops it, the hold ends.
fn stream(
    server: FlowgateServer,
    caller: Caller,
    message: Arc<Incoming>,
    buffered: bool,
) -> Response {
    let id = resume::event_id(
        message.name().unwrap_or_default(),
        message.id.as_ref().unwrap_or(&Value::Null),
    );
    let (events, stream) = futures::channel::mpsc::unbounded::<Value>();
    let gone = CancellationToken::new();
    let caller = caller.with_gone(gone.clone());
    tokio::spawn(async move {
        let ask = |question: Question| {
            let _ = events.unbounded_send(question.to_json());
        };
        let outbox = Outbox {
            send: &ask,
            resumable: true,
            end_at_question: buffered,
        };
        let span = caller.span().clone();
        if let Handled::Reply(answer) =
            dialect_2025::handle(&server, &caller, &message, Some(outbox))
                .instrument(span)
                .await
        {
            let _ = events.unbounded_send(dialect_2025::reply_json(message.id.as_ref(), &answer));
        }
    });
    let on_drop = gone.drop_guard();
    let priming = futures::stream::once(std::future::ready(Ok(resume::priming(&id))));
    let body = priming.chain(stream.map(move |message| {
        let _held = &on_drop;
        Ok::<_, std::convert::Infallible>(resume::event(&id, &message))
    }));
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
