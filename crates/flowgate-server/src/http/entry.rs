//! `/mcp`: the one handler of MCP over HTTP. It decides what only HTTP knows, hands the
//! message to the dispatcher (`crate::dispatch`) and writes its reply once.
//!
//! In order, for a request that `authenticate` let through with its [`Caller`]:
//!
//! 1. `Host` and `Origin` ([`Guard`]): 403 (or 400 for a header that is no host) in plain text.
//! 2. The HTTP method: `POST`; a `GET` with `Last-Event-ID` of one of our `tasks/result`
//!    streams resumes it (module `resume`); anything else is 405.
//! 3. `Accept` must name `application/json` and `text/event-stream` (406), except that a
//!    2025-11-25 request needs only JSON (its SDKs ask for a stream only for `tasks/result`);
//!    `Content-Type` must be JSON (415); the body at most the limit (413).
//! 4. The body is parsed once ([`Incoming`]): not JSON is `-32700`, JSON that is no JSON-RPC
//!    message `-32600` (HTTP 400).
//! 5. The MCP request span and count begin (`flowgate_telemetry::Request`); the caller carries
//!    the span, and its end records how the reply says the request ended.
//! 6. The headers against the body (module `headers`): 400.
//! 7. The dispatcher answers; a 2025-11-25 `tasks/result` for a client that takes a stream is
//!    answered as a resumable SSE stream instead, and an open `subscriptions/listen` as an
//!    SSE stream of its messages; the outcome of either is recorded when it ends.
//!
//! An answer of the per-request lifecycle (2026-07-28) gets the status the transport gives
//! its errors: 400 for `-32020`, `-32021`, `-32022` and a malformed `_meta`, 404 for
//! `-32601`, else 200; older revisions' answers are 200. A call of a tool whose scopes the
//! caller lacks is 403 with the identity's challenge naming them.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use flowgate_auth::{Identity, Refused};
use flowgate_telemetry::{Ended, RequestInfo};
use futures::StreamExt as _;
use rmcp::ErrorData;
use rmcp::model::ErrorCode;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::authenticate::refusal;
use super::headers::{self, Refusal};
use super::origins::Guard;
use super::{AnswerLimit, names, resume};
use crate::dialect_2025::{Outbox, Question, V2025};
use crate::dispatch::{self, Request as Dispatched};
use crate::jsonrpc::{self, Incoming};
use crate::reply::{self, Answer, Reply};
use crate::{Caller, FlowgateServer, audit};

/// What the handler needs, shared by every request.
#[derive(Debug)]
pub(crate) struct Entry {
    pub(crate) server: FlowgateServer,
    pub(crate) guard: Guard,
    pub(crate) identity: Option<Arc<dyn Identity>>,
    /// The platform delivers a response body only when the request ends
    /// ([`super::HttpOptions::buffered_responses`]).
    pub(crate) buffered: bool,
    /// The largest body read.
    pub(crate) body_limit: usize,
    /// How much of an answer the platform carries.
    pub(crate) answer_limit: Option<AnswerLimit>,
    /// Cancelled on shutdown: open streams end.
    pub(crate) shutdown: CancellationToken,
}

/// The handler of `/mcp`.
pub(crate) async fn serve(State(entry): State<Arc<Entry>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    if let Some((status, why)) = entry.guard.refusal(&parts.uri, &parts.headers) {
        tracing::warn!(%status, why, "refused a request");
        return (status, why).into_response();
    }
    let caller = parts
        .extensions
        .get::<Caller>()
        .cloned()
        .unwrap_or_else(|| Caller::anonymous(""));
    if parts.method == Method::GET {
        // A `GET` resuming a `tasks/result` stream of ours is that `tasks/result` again.
        let resumed = parts
            .headers
            .get(names::LAST_EVENT_ID)
            .and_then(|v| v.to_str().ok())
            .and_then(resume::resumed);
        return match resumed {
            Some(message) => {
                let observed = observe(&message, &caller, &parts.headers);
                let caller = with_span(caller, observed.as_ref());
                stream(&entry, caller, Arc::new(message), observed)
            }
            None => method_not_allowed(),
        };
    }
    if parts.method != Method::POST {
        return method_not_allowed();
    }
    let revision = parts
        .headers
        .get(names::MCP_PROTOCOL_VERSION)
        .and_then(|v| v.to_str().ok());
    let (takes_json, sse) = accepted(&parts.headers);
    if !takes_json || !(sse || revision == Some(V2025)) {
        return (
            StatusCode::NOT_ACCEPTABLE,
            "Not Acceptable: Client must accept both application/json and text/event-stream",
        )
            .into_response();
    }
    if !says_json(&parts.headers) {
        return (
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "Unsupported Media Type: Content-Type must be application/json",
        )
            .into_response();
    }
    let Ok(bytes) = axum::body::to_bytes(body, entry.body_limit).await else {
        return (
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "Payload Too Large: request body exceeds {} bytes",
                entry.body_limit
            ),
        )
            .into_response();
    };
    let message = match Incoming::parse(&bytes, revision) {
        Ok(message) if message.is_message() => message,
        Ok(message) => {
            return json(
                StatusCode::BAD_REQUEST,
                message.id.as_ref(),
                jsonrpc::not_a_message(),
            );
        }
        Err(e) => return json(StatusCode::BAD_REQUEST, None, jsonrpc::not_json(&e)),
    };
    let observed = observe(&message, &caller, &parts.headers);
    let caller = with_span(caller, observed.as_ref());
    let server = &entry.server;
    let checked = headers::check(&parts.headers, &message, |tool| {
        server
            .tool_entry(tool)
            .map(|t| std::sync::Arc::clone(&t.tool.input_schema))
    });
    if let Err(refusal) = checked {
        let (response, ended) = match refusal {
            Refusal::Text(text) => (
                (StatusCode::BAD_REQUEST, text).into_response(),
                Ended::Refused(400),
            ),
            Refusal::Error(error) => {
                let code = i64::from(error.code.0);
                (
                    json(StatusCode::BAD_REQUEST, message.id.as_ref(), error),
                    Ended::Error(code),
                )
            }
        };
        end(observed, ended);
        return response;
    }
    if message.method() == "tasks/result" && message.is_in(V2025) && sse {
        return stream(&entry, caller, Arc::new(message), observed);
    }
    // The caller is gone when this request is dropped (its connection closed).
    let gone = CancellationToken::new();
    let on_drop = gone.clone().drop_guard();
    let caller = caller.with_gone(gone);
    let reply = dispatch::dispatch(
        server,
        Dispatched {
            message: &message,
            caller: &caller,
            session: None,
            outbox: None,
        },
    )
    .await;
    on_drop.disarm();
    if let Reply::Listen(listener) = reply {
        return listen(&entry, caller, *listener, observed);
    }
    end(observed, reply.ended());
    write(&entry, &caller, message.id.as_ref(), reply)
}

/// `subscriptions/listen` as an SSE stream: each message the listener writes is one event. The
/// stream holds the caller: when the client drops it, the listener reads and writes nothing
/// more. On shutdown the listener ends gracefully (its result is the last event), so the
/// client opens it again, on this instance or another; the request's outcome is recorded when
/// the stream ends.
fn listen(
    entry: &Entry,
    caller: Caller,
    listener: crate::listen::Listener,
    observed: Option<flowgate_telemetry::Request>,
) -> Response {
    let listener = if entry.buffered {
        listener.ending_at_first_push()
    } else {
        listener
    };
    let (events, stream) = futures::channel::mpsc::unbounded::<Value>();
    let gone = CancellationToken::new();
    let caller = caller.with_gone(gone.clone());
    let server = entry.server.clone();
    let shutdown = entry.shutdown.clone();
    tokio::spawn(async move {
        let closing = listener.closing();
        let mut send = |message: Value| {
            let _ = events.unbounded_send(message);
        };
        tokio::select! {
            _ = listener.run(&server, &caller, &mut send) => {}
            () = shutdown.cancelled() => send(closing),
        }
    });
    let held = Held {
        gone: Some(gone.drop_guard()),
        observed,
        ended: Arc::new(std::sync::Mutex::new(Ended::Ok)),
    };
    let body = stream.map(move |message| {
        let _held = &held;
        Ok::<_, std::convert::Infallible>(format!("event: message\ndata: {message}\n\n"))
    });
    event_stream(body)
}

/// An SSE answer of `body`'s events.
fn event_stream<S>(body: S) -> Response
where
    S: futures::Stream<Item = Result<String, std::convert::Infallible>> + Send + 'static,
{
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(body))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// The HTTP answer of `reply`.
fn write(entry: &Entry, caller: &Caller, id: Option<&Value>, reply: Reply) -> Response {
    match reply {
        Reply::Answer(Answer {
            outcome,
            malformed,
            per_request,
        }) => {
            let status = match &outcome {
                Err(e) if per_request => match e.code {
                    ErrorCode::UNSUPPORTED_PROTOCOL_VERSION
                    | ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY
                    | ErrorCode::HEADER_MISMATCH => StatusCode::BAD_REQUEST,
                    ErrorCode::INVALID_PARAMS if malformed => StatusCode::BAD_REQUEST,
                    ErrorCode::METHOD_NOT_FOUND => StatusCode::NOT_FOUND,
                    _ => StatusCode::OK,
                },
                _ => StatusCode::OK,
            };
            let mut body = reply::bytes(id, &outcome);
            if let Some(limit) = &entry.answer_limit {
                let size = (limit.measure)(&json_headers(), &body);
                if size > limit.limit {
                    tracing::warn!(
                        size,
                        limit = limit.limit,
                        "an answer over the platform's limit was replaced by an error"
                    );
                    body = reply::bytes(id, &Err(rpc((limit.too_large)(size))));
                }
            }
            bytes_response(status, body)
        }
        Reply::Forbidden(scopes) => {
            if let Some(metrics) = flowgate_telemetry::metrics::get() {
                metrics.auth_refused("insufficient_scope");
            }
            match &entry.identity {
                Some(identity) => refusal(
                    identity.as_ref(),
                    &Refused::insufficient_scope(
                        &scopes,
                        "the access token lacks a scope this tool requires",
                    ),
                ),
                // Without an identity every caller may call every tool; should one not, it
                // is told as an unknown tool.
                None => {
                    audit::refused(caller, "insufficient_scope", None, None);
                    let error = ErrorData::invalid_params("unknown tool", None);
                    json(StatusCode::OK, id, error)
                }
            }
        }
        Reply::Accepted => StatusCode::ACCEPTED.into_response(),
        Reply::Stray => json(
            StatusCode::BAD_REQUEST,
            None,
            ErrorData::invalid_request("stateless server does not accept JSON-RPC responses", None),
        ),
        // A hold without an outbox is not resumable: it answers (module `dialect_2025`).
        Reply::Gone | Reply::Paused => StatusCode::NO_CONTENT.into_response(),
        // Written as a stream by `serve`, never here.
        Reply::Listen(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

/// `tasks/result` as a resumable SSE stream: the priming event, questions as they come, then
/// the answer, or the end of the stream when the hold ends without it (`buffered`: also once it
/// has sent a question). The stream holds the caller: when the client drops it, the hold ends,
/// and the request's outcome is recorded when the stream ends.
fn stream(
    entry: &Entry,
    caller: Caller,
    message: Arc<Incoming>,
    observed: Option<flowgate_telemetry::Request>,
) -> Response {
    let id = resume::event_id(
        message.name().unwrap_or_default(),
        message.id.as_ref().unwrap_or(&Value::Null),
    );
    let (events, stream) = futures::channel::mpsc::unbounded::<Event>();
    let answer_to = message.id.clone();
    let gone = CancellationToken::new();
    let caller = caller.with_gone(gone.clone());
    let server = entry.server.clone();
    let buffered = entry.buffered;
    let ended = Arc::new(std::sync::Mutex::new(Ended::Ok));
    let outcome = Arc::clone(&ended);
    tokio::spawn(async move {
        let ask = |question: Question| {
            let _ = events.unbounded_send(Event::Question(question.to_json()));
        };
        let outbox = Outbox {
            send: &ask,
            resumable: true,
            end_at_question: buffered,
        };
        let reply = dispatch::dispatch(
            &server,
            Dispatched {
                message: &message,
                caller: &caller,
                session: None,
                outbox: Some(outbox),
            },
        )
        .await;
        *outcome.lock().unwrap_or_else(|p| p.into_inner()) = reply.ended();
        if let Reply::Answer(answer) = reply {
            let _ = events.unbounded_send(Event::Answer(answer.outcome));
        }
    });
    // Dropped with the stream: the hold ends, and the request's span and count end with how
    // the dispatcher said it ended.
    let held = Held {
        gone: Some(gone.drop_guard()),
        observed,
        ended,
    };
    let shutdown = entry.shutdown.clone();
    let priming = resume::priming(&id);
    // What the platform has been sent so far, when it carries a stream whole.
    let limit = entry.answer_limit.filter(|l| l.streams);
    let mut sent = limit.map(|_| priming.clone().into_bytes());
    let priming = futures::stream::once(std::future::ready(Ok(priming)));
    let body = priming
        .chain(stream.map(move |event| {
            let _held = &held;
            let text = match event {
                Event::Question(question) => resume::event(&id, &question.to_string()),
                Event::Answer(outcome) => {
                    let answer = resume::event(&id, &reply::text(answer_to.as_ref(), &outcome));
                    match (limit, sent.as_ref()) {
                        (Some(limit), Some(sent)) => {
                            let whole = [sent.as_slice(), answer.as_bytes()].concat();
                            let size = (limit.measure)(&headers_of("text/event-stream"), &whole);
                            if size > limit.limit {
                                tracing::warn!(
                                    size,
                                    limit = limit.limit,
                                    "an answer over the platform's limit was replaced by an error"
                                );
                                let refused = Err(rpc((limit.too_large)(size)));
                                resume::event(&id, &reply::text(answer_to.as_ref(), &refused))
                            } else {
                                answer
                            }
                        }
                        _ => answer,
                    }
                }
            };
            if let Some(sent) = sent.as_mut() {
                sent.extend_from_slice(text.as_bytes());
            }
            Ok::<_, std::convert::Infallible>(text)
        }))
        .take_until(async move { shutdown.cancelled().await });
    event_stream(body)
}

/// The JSON-RPC error `error` is.
fn rpc(error: flowgate_core::wire::RpcError) -> ErrorData {
    ErrorData::new(
        ErrorCode(i32::try_from(error.code).unwrap_or(-32603)),
        error.message,
        error.data,
    )
}

/// One message of a `tasks/result` stream.
enum Event {
    /// A question the workflow asks: its `elicitation/create` request.
    Question(Value),
    /// The answer.
    Answer(Result<crate::reply::Payload, ErrorData>),
}

/// What a stream holds until it is dropped.
struct Held {
    gone: Option<tokio_util::sync::DropGuard>,
    observed: Option<flowgate_telemetry::Request>,
    ended: Arc<std::sync::Mutex<Ended>>,
}

impl Drop for Held {
    fn drop(&mut self) {
        drop(self.gone.take());
        let ended = *self.ended.lock().unwrap_or_else(|p| p.into_inner());
        end(self.observed.take(), ended);
    }
}

/// The MCP request's span and count, begun (`None` when traces and metrics are off). Its
/// parent is the trace context the request names (`params._meta`, else `traceparent`).
fn observe(
    message: &Incoming,
    caller: &Caller,
    headers: &HeaderMap,
) -> Option<flowgate_telemetry::Request> {
    if !flowgate_telemetry::request::active() {
        return None;
    }
    let info = RequestInfo {
        method: message.method(),
        id: message.id.as_ref().map(|id| id as &dyn std::fmt::Display),
        tool: message.tool(),
        revision: message.revision.as_deref(),
        issuer: caller.identity().map(|who| who.principal.issuer.as_str()),
        transport: "tcp",
    };
    Some(flowgate_telemetry::Request::begin(info, || {
        flowgate_telemetry::traces::remote_parent(
            message.params.get("_meta").and_then(|m| m.as_object()),
            Some(headers),
        )
    }))
}

/// The caller, inside the request's span when it is traced.
fn with_span(caller: Caller, observed: Option<&flowgate_telemetry::Request>) -> Caller {
    match observed {
        Some(observed) if !observed.span().is_disabled() => {
            caller.with_span(observed.span().clone())
        }
        _ => caller,
    }
}

fn end(observed: Option<flowgate_telemetry::Request>, ended: Ended) {
    if let Some(observed) = observed {
        observed.end(ended);
    }
}

/// Whether `Accept` names JSON and SSE (a media range weighted 0 is refused).
fn accepted(headers: &HeaderMap) -> (bool, bool) {
    // What clients send, judged at once.
    let mut values = headers.get_all(header::ACCEPT).iter();
    if let (Some(value), None) = (values.next(), values.next())
        && value.as_bytes() == b"application/json, text/event-stream"
    {
        return (true, true);
    }
    let (mut json, mut sse) = (false, false);
    for value in headers.get_all(header::ACCEPT) {
        let Ok(value) = value.to_str() else {
            continue;
        };
        for entry in value.split(',') {
            let mut parts = entry.split(';');
            let essence = parts.next().unwrap_or("").trim();
            let refused = parts.any(|p| {
                p.trim()
                    .strip_prefix("q=")
                    .is_some_and(|q| q.trim().parse::<f32>().is_ok_and(|q| q <= 0.0))
            });
            if refused {
                continue;
            }
            json |= essence.eq_ignore_ascii_case("application/json");
            sse |= essence.eq_ignore_ascii_case("text/event-stream");
        }
    }
    (json, sse)
}

fn says_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"))
}

fn method_not_allowed() -> Response {
    (
        StatusCode::METHOD_NOT_ALLOWED,
        [(header::ALLOW, "GET, POST")],
        "Method Not Allowed",
    )
        .into_response()
}

/// A JSON-RPC error answer.
fn json(status: StatusCode, id: Option<&Value>, error: ErrorData) -> Response {
    bytes_response(status, reply::bytes(id, &Err(error)))
}

fn bytes_response(status: StatusCode, body: Vec<u8>) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// The headers of an answer of `content_type`, as its size is measured.
fn headers_of(content_type: &'static str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static(content_type),
    );
    headers
}

fn json_headers() -> HeaderMap {
    headers_of("application/json")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_names_each_media_type_unless_weighted_zero() {
        let accept = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::ACCEPT, v.parse().expect("value"));
            accepted(&h)
        };
        assert_eq!(accept("application/json, text/event-stream"), (true, true));
        assert_eq!(
            accept("Application/JSON;q=0.9, text/event-stream;q=0.5"),
            (true, true)
        );
        assert_eq!(
            accept("application/json, text/event-stream;q=0"),
            (true, false)
        );
        assert_eq!(accept("application/json"), (true, false));
        assert_eq!(accept("*/*"), (false, false));
    }
}
