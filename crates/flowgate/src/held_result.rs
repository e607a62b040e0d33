//! A 2025-11-25 `tasks/result` held no longer than the platform lets a request run, resumed
//! the way the shipped 2025-11-25 clients resume a stream (the revision's resumable SSE
//! streams; Python `mcp` 1.x and the TypeScript SDK 1.x implement them).
//!
//! The answer stream opens with a priming event (an event id, a `retry` delay, no data). Before
//! the platform's deadline (and, where the platform delivers a body only when it ends, right
//! after a question) the stream is closed without the response; the client then reconnects
//! with `GET` and `Last-Event-ID`, and the id names the task and the JSON-RPC request, so any
//! instance resumes the hold: the request becomes the same `tasks/result` again, and its answer
//! carries the original request id. Nothing is kept between requests.
//!
//! The event id holds no secret: the task id in it is a sealed handle that opens only for its
//! caller, and the resumed request goes through the same authentication as any other.

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, header};
use axum::middleware::Next;
use axum::response::Response;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use futures::StreamExt as _;
use serde_json::{Value, json};
use tokio::time::Instant;

use flowgate_server::http::Deadline;

/// What marks flowgate's event ids (and versions their content).
const PREFIX: &str = "fgr1.";
/// How long before the deadline the stream is closed (the client's reconnect must not be
/// the request the platform ends).
const MARGIN: Duration = Duration::from_secs(3);
/// The reconnection delay the stream asks for, in milliseconds.
const RETRY_MS: u64 = 500;
/// A `tasks/result` request is small; a larger body is not one and passes unread.
const SMALL_BODY: usize = 64 * 1024;

/// How long holds may last where this runs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HoldPolicy {
    /// End the stream after the first question: the platform delivers the body only when the
    /// request ends (a buffered Lambda response), so a question must end it to be seen.
    pub(crate) end_at_question: bool,
}

/// The event id for the `tasks/result` of `task` asked as JSON-RPC request `id`.
fn event_id(task: &str, id: &Value) -> String {
    let inner = json!({"t": task, "i": id}).to_string();
    format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(inner))
}

/// The task and request id an event id of ours names.
fn resumes(last_event_id: &str) -> Option<(String, Value)> {
    let encoded = last_event_id.strip_prefix(PREFIX)?;
    let bytes = URL_SAFE_NO_PAD.decode(encoded).ok()?;
    let inner: Value = serde_json::from_slice(&bytes).ok()?;
    let task = inner.get("t")?.as_str()?.to_owned();
    let id = inner.get("i")?.clone();
    (id.is_string() || id.is_number()).then_some((task, id))
}

/// A `tasks/result` request for `task` as request `id`, in place of `request` (a reconnect).
fn result_request(request: Request, task: &str, id: &Value) -> Request {
    let (mut parts, _) = request.into_parts();
    let body =
        json!({"jsonrpc": "2.0", "id": id, "method": "tasks/result", "params": {"taskId": task}})
            .to_string();
    parts.method = Method::POST;
    parts.headers.remove("last-event-id");
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    parts.headers.insert(
        header::ACCEPT,
        HeaderValue::from_static("application/json, text/event-stream"),
    );
    parts
        .headers
        .insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
    Request::from_parts(parts, Body::from(body))
}

/// The middleware.
pub(crate) async fn hold_within_deadline(
    State(policy): State<HoldPolicy>,
    request: Request,
    next: Next,
) -> Response {
    let resumed = request
        .headers()
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(resumes);
    let (request, task, id) = match (request.method(), resumed) {
        (&Method::GET, Some((task, id))) => (result_request(request, &task, &id), task, id),
        (&Method::POST, _) => {
            let small = request
                .headers()
                .get(header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<usize>().ok())
                .is_some_and(|n| n <= SMALL_BODY);
            if !small {
                return next.run(request).await;
            }
            let (parts, body) = request.into_parts();
            let bytes = axum::body::to_bytes(body, SMALL_BODY)
                .await
                .unwrap_or_default();
            let message: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            let request = Request::from_parts(parts, Body::from(bytes));
            let task = message["params"]["taskId"].as_str().map(str::to_owned);
            match (message["method"].as_str(), task, message.get("id")) {
                (Some("tasks/result"), Some(task), Some(id)) => {
                    let id = id.clone();
                    (request, task, id)
                }
                _ => return next.run(request).await,
            }
        }
        _ => return next.run(request).await,
    };
    let deadline = request
        .extensions()
        .get::<Deadline>()
        .map(|d| d.0.checked_sub(MARGIN).unwrap_or(d.0));
    let response = next.run(request).await;
    let streams = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    if !streams {
        return response;
    }
    let (parts, body) = response.into_parts();
    let stream = held(body, event_id(&task, &id), deadline, policy);
    Response::from_parts(parts, Body::from_stream(stream))
}

/// What one server-sent event of the answer is.
#[derive(Debug, PartialEq, Eq)]
enum Event {
    /// `elicitation/create` (or any request to the client).
    Question,
    /// The JSON-RPC response: the last event.
    Answer,
    Other,
}

fn kind(event: &str) -> Event {
    let data: String = event
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(str::trim_start)
        .collect();
    match serde_json::from_str::<Value>(&data) {
        Ok(m) if m.get("method").is_some() && m.get("id").is_some() => Event::Question,
        Ok(m) if m.get("result").is_some() || m.get("error").is_some() => Event::Answer,
        _ => Event::Other,
    }
}

/// The answer stream with a priming event first, each event carrying the resumption id, and
/// closed early where the policy or the deadline says.
fn held(
    body: Body,
    id: String,
    deadline: Option<Instant>,
    policy: HoldPolicy,
) -> impl futures::Stream<Item = Result<Bytes, axum::Error>> + Send {
    let priming = Bytes::from(format!("id: {id}\nretry: {RETRY_MS}\ndata: \n\n"));
    struct Held<S> {
        inner: S,
        buffer: String,
        id: String,
        deadline: Option<Instant>,
        policy: HoldPolicy,
        done: bool,
    }
    let state = Held {
        inner: body.into_data_stream(),
        buffer: String::new(),
        id,
        deadline,
        policy,
        done: false,
    };
    let rest = futures::stream::unfold(state, |mut s| async move {
        loop {
            if s.done {
                return None;
            }
            // A whole event in the buffer goes out with our id.
            if let Some(end) = s.buffer.find("\n\n") {
                let event: String = s.buffer.drain(..end + 2).collect();
                let kind = kind(&event);
                let body = event
                    .lines()
                    .filter(|l| !l.starts_with("id:") && !l.is_empty())
                    .collect::<Vec<_>>()
                    .join("\n");
                let out = Bytes::from(format!("id: {}\n{body}\n\n", s.id));
                s.done =
                    kind == Event::Answer || (kind == Event::Question && s.policy.end_at_question);
                return Some((Ok(out), s));
            }
            let next = match s.deadline {
                Some(at) => tokio::select! {
                    chunk = s.inner.next() => chunk,
                    () = tokio::time::sleep_until(at) => {
                        // Out of time: close without the answer; the client reconnects.
                        return None;
                    }
                },
                None => s.inner.next().await,
            };
            match next {
                Some(Ok(chunk)) => s.buffer.push_str(&String::from_utf8_lossy(&chunk)),
                Some(Err(e)) => return Some((Err(e), Held { done: true, ..s })),
                None => return None,
            }
        }
    });
    futures::stream::once(async move { Ok(priming) }).chain(rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_id_names_the_task_and_the_request() {
        let id = event_id("fg1.k1.abc", &json!(7));
        assert!(id.starts_with(PREFIX));
        assert_eq!(resumes(&id), Some(("fg1.k1.abc".to_owned(), json!(7))));
        assert_eq!(resumes("fg1.k1.abc"), None);
        assert_eq!(resumes("fgr1.!!!"), None);
    }

    async fn collect(
        events: Vec<&'static str>,
        deadline: Option<Instant>,
        policy: HoldPolicy,
    ) -> String {
        let inner = futures::stream::iter(
            events
                .into_iter()
                .map(|e| Ok::<_, std::convert::Infallible>(Bytes::from(e))),
        )
        .chain(futures::stream::pending());
        let stream = held(Body::from_stream(inner), "fgr1.x".into(), deadline, policy);
        let chunks: Vec<_> = stream.collect().await;
        chunks
            .into_iter()
            .filter_map(Result::ok)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .collect()
    }

    #[tokio::test]
    async fn a_buffered_platform_gets_the_stream_up_to_the_first_question() {
        let out = collect(
            vec![
                "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":\"q\",\"method\":\"elicitation/create\",\"params\":{}}\n\n",
                "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n",
            ],
            None,
            HoldPolicy {
                end_at_question: true,
            },
        )
        .await;
        assert!(
            out.starts_with("id: fgr1.x\nretry: 500\ndata: \n\n"),
            "{out}"
        );
        assert!(out.contains("elicitation/create"), "{out}");
        assert!(!out.contains("\"result\""), "{out}");
    }

    #[tokio::test]
    async fn a_stream_ends_with_its_answer_or_at_the_deadline() {
        let out = collect(
            vec![
                "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":\"q\",\"method\":\"elicitation/create\",\"params\":{}}\n\n",
                "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n",
            ],
            None,
            HoldPolicy {
                end_at_question: false,
            },
        )
        .await;
        assert!(
            out.contains("elicitation/create") && out.contains("\"result\""),
            "{out}"
        );
        let started = Instant::now();
        let out = collect(
            vec![],
            Some(Instant::now() + Duration::from_millis(200)),
            HoldPolicy {
                end_at_question: false,
            },
        )
        .await;
        assert!(started.elapsed() < Duration::from_secs(2));
        assert_eq!(out, "id: fgr1.x\nretry: 500\ndata: \n\n");
    }
}
