//! `tasks/get` on the 2026-07-28 wire, answered before rmcp.
//!
//! A poll is the request a client repeats most, and rmcp's stateless path costs it several
//! times what answering it does: the body decoded a second time into rmcp's types and once
//! more re-encoded to check the standard headers, a service with channels and a spawned
//! serve loop per request, the server's whole configuration cloned for the capability check.
//! So a poll that rmcp would accept as it stands is answered here, from the message parsed
//! once (`parse`), with the same operation (`FlowgateServer::task_get`: the handle opened for
//! the caller, the engine asked) and the same answer, built from rmcp's own types the way rmcp
//! builds it: the same body and the same HTTP status for a result and for each error.
//!
//! Only a request that passes every check rmcp makes is taken, with nothing left to
//! interpret: the same `Host` and `Origin` checks ([`Guard`]), `Accept` naming both JSON and
//! SSE without parameters, exactly one `MCP-Protocol-Version: 2026-07-28`, `Mcp-Method:
//! tasks/get` and an `Mcp-Name` equal to `params.taskId`, no `Mcp-Param-*` header, a JSON-RPC
//! 2.0 request whose id is an integer or a string, `params._meta` holding the revision (the
//! header's), the client's info and capabilities that declare the tasks extension, and
//! nothing else. Anything else, including every request rmcp refuses, goes on to rmcp, which
//! answers it as before.

use axum::http::{HeaderMap, HeaderName, StatusCode, header};
use axum::response::{IntoResponse, Response};
use flowgate_core::wire::Outcome;
use flowgate_telemetry::Ended;
use rmcp::model::{
    ClientCapabilities, ErrorCode, GetTaskResult, RequestId, ServerJsonRpcMessage, ServerResult,
    TASKS_EXTENSION_ID,
};
use serde::Deserialize as _;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use super::names;
use super::origins::Guard;
use crate::jsonrpc::Incoming;
use crate::tasks::TaskView;
use crate::{Caller, FlowgateServer};

/// The revision this path serves.
const REVISION: &str = "2026-07-28";
/// The `_meta` keys a 2026-07-28 request carries (and all this path accepts).
const PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
const CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
const CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";

/// A poll this path takes: its id and task id, read from the message.
#[derive(Debug, PartialEq)]
pub(crate) struct Poll<'a> {
    id: RequestId,
    task_id: &'a str,
}

/// The poll `message` is, when it is one rmcp would accept as it stands (see the module);
/// `None` sends the request on to rmcp.
pub(crate) fn take<'a>(
    server: &FlowgateServer,
    guard: &Guard,
    uri: &axum::http::Uri,
    headers: &HeaderMap,
    message: &'a Incoming,
) -> Option<Poll<'a>> {
    if message.method() != "tasks/get"
        || !message.jsonrpc_2_0
        || message.result.is_some()
        || message.error.is_some()
        || !message.is_in(REVISION)
        || !server.info().capabilities.supports_tasks()
    {
        return None;
    }
    let task_id = message.params.get("taskId")?.as_str()?;
    let id = match message.id.as_ref()? {
        id @ Value::String(_) => RequestId::deserialize(id).ok()?,
        id @ Value::Number(n) if n.is_i64() => RequestId::deserialize(id).ok()?,
        _ => return None,
    };
    let params = message.params.as_object()?;
    if params.len() != 2 {
        return None;
    }
    let meta = params.get("_meta")?.as_object()?;
    let declares_tasks = meta.len() == 3
        && meta.get(PROTOCOL_VERSION)?.as_str()? == REVISION
        && meta.get(CLIENT_INFO)?.is_object()
        && declares_tasks(meta.get(CLIENT_CAPABILITIES)?)?;
    let plain_headers = only(headers, &names::MCP_PROTOCOL_VERSION, REVISION)
        && only(headers, &names::MCP_METHOD, "tasks/get")
        && only(headers, &names::MCP_NAME, task_id)
        && !headers
            .keys()
            .any(|name| name.as_str().starts_with("mcp-param-"))
        && accepts_json_and_sse(headers);
    if !declares_tasks || !plain_headers || guard.refusal(uri, headers).is_some() {
        return None;
    }
    Some(Poll { id, task_id })
}

/// Answers `poll` for `caller`: the task as the engine has it now, or the error, as rmcp
/// would have answered it. The caller is gone when this future is dropped (the client hung
/// up), as rmcp's request token is.
pub(crate) async fn answer(server: &FlowgateServer, caller: &Caller, poll: Poll<'_>) -> Response {
    #[cfg(test)]
    TAKEN.with(|n| n.set(n.get() + 1));
    let gone = CancellationToken::new();
    let on_drop = gone.clone().drop_guard();
    let caller = caller.clone().with_gone(gone);
    // Inside the request's span, as rmcp's handler runs it (module `observe` made the span and
    // records the answer's outcome; `task_get` counts the poll by tool).
    let span = caller.span().clone();
    let got = caller
        .bounded(server.task_get(&caller, poll.task_id))
        .instrument(span)
        .await;
    on_drop.disarm();
    // The answer is written in place where it can be, else through rmcp's types; how it ended
    // goes with it, for `observe` (which would otherwise read the answer back).
    let (mut response, ended) = match got {
        Ok(view) => {
            let response = match written(&view, &poll.id) {
                Some(body) => json(StatusCode::OK, body),
                None => respond(&ServerJsonRpcMessage::response(
                    ServerResult::GetTaskResult(GetTaskResult::new(crate::mcp::detailed(view))),
                    poll.id,
                )),
            };
            (response, Ended::Ok)
        }
        Err(error) => {
            let code = i64::from(error.code.0);
            let message = ServerJsonRpcMessage::error(error, Some(poll.id));
            (respond(&message), Ended::Error(code))
        }
    };
    response.extensions_mut().insert(ended);
    response
}

#[cfg(test)]
thread_local! {
    /// Polls this thread answered here: the tests tell the fast path from rmcp's by it
    /// (`#[tokio::test]` runs a test's requests on its own thread).
    static TAKEN: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// How many polls this thread answered here (tests).
#[cfg(test)]
pub(crate) fn taken_here() -> usize {
    TAKEN.with(std::cell::Cell::get)
}

/// The HTTP answer rmcp gives a 2026-07-28 request's one message: JSON, with HTTP 400 for
/// the protocol's header and capability errors, 404 for an unknown method, else 200.
fn respond(message: &ServerJsonRpcMessage) -> Response {
    let status = match message {
        ServerJsonRpcMessage::Error(e) => match e.error.code {
            ErrorCode::UNSUPPORTED_PROTOCOL_VERSION
            | ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY
            | ErrorCode::HEADER_MISMATCH => StatusCode::BAD_REQUEST,
            ErrorCode::METHOD_NOT_FOUND => StatusCode::NOT_FOUND,
            _ => StatusCode::OK,
        },
        _ => StatusCode::OK,
    };
    match serde_json::to_vec(message) {
        Ok(body) => json(status, body),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

fn json(status: StatusCode, body: Vec<u8>) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// The bytes rmcp writes for `view` as the result of request `id` (a `JsonRpcResponse` of a
/// `GetTaskResult`), written from the view in place: rmcp's message is built from owned
/// copies of every field and written through two `flatten`s, which buffer each field (what
/// that cost and this costs: docs/benchmarks.md). `None` for what is not plainly JSON in the view
/// (questions, which rmcp's types normalise; a result that is not an object, which rmcp
/// replaces): those go through rmcp's types. The test holds the two to the same bytes.
fn written(view: &TaskView, id: &RequestId) -> Option<Vec<u8>> {
    let envelope = view.wire.envelope();
    let (result, error) = match &view.wire.outcome {
        Outcome::Working | Outcome::Cancelled => (None, None),
        Outcome::Completed(Value::Object(result)) => (Some(result), None),
        Outcome::Failed(error) => (None, Some(error.to_json())),
        Outcome::InputRequired(_) | Outcome::Completed(_) => return None,
    };
    let answer = Answer {
        jsonrpc: "2.0",
        id,
        result: Written {
            result_type: "complete",
            task_id: &view.task_id,
            status: envelope.status.as_str(),
            status_message: envelope.status_message,
            created_at: envelope.created_at,
            last_updated_at: envelope.last_updated_at,
            ttl_ms: envelope.ttl_ms,
            poll_interval_ms: envelope.poll_interval_ms,
            result,
            error,
        },
    };
    // Sized for the answer of a working task at once (the vector grew four times).
    let mut body = Vec::with_capacity(320 + view.task_id.len());
    serde_json::to_writer(&mut body, &answer).ok()?;
    Some(body)
}

/// rmcp's `JsonRpcResponse`, borrowed.
#[derive(serde::Serialize)]
struct Answer<'a> {
    jsonrpc: &'static str,
    id: &'a RequestId,
    result: Written<'a>,
}

/// rmcp's `GetTaskResult` without `_meta` (this server sets none), its `DetailedTask`'s
/// fields in the order rmcp writes them.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct Written<'a> {
    result_type: &'static str,
    task_id: &'a str,
    status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    status_message: Option<&'a str>,
    created_at: &'a str,
    last_updated_at: &'a str,
    ttl_ms: Option<u64>,
    poll_interval_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<&'a serde_json::Map<String, Value>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<serde_json::Map<String, Value>>,
}

/// Whether client capabilities that rmcp accepts declare the tasks extension; `None` when
/// rmcp would not accept them. The shape clients send, `{"extensions": {...}}` with an object
/// per extension, is read in place (what rmcp's `ClientCapabilities` makes of it, without
/// building one); any other shape is read by rmcp's type.
fn declares_tasks(capabilities: &Value) -> Option<bool> {
    if let Some(fields) = capabilities.as_object()
        && fields.len() == 1
        && let Some(Value::Object(extensions)) = fields.get("extensions")
        && extensions.values().all(Value::is_object)
    {
        return Some(extensions.contains_key(TASKS_EXTENSION_ID));
    }
    ClientCapabilities::deserialize(capabilities)
        .ok()
        .map(|c| c.supports_tasks())
}

/// Whether `name` has exactly one value, and it is `expected`.
fn only(headers: &HeaderMap, name: &HeaderName, expected: &str) -> bool {
    let mut values = headers.get_all(name).iter();
    values
        .next()
        .is_some_and(|v| v.as_bytes() == expected.as_bytes())
        && values.next().is_none()
}

/// Whether `Accept` names both `application/json` and `text/event-stream`, with no media type
/// parameters anywhere (a weight of 0 would refuse one: rmcp judges those).
fn accepts_json_and_sse(headers: &HeaderMap) -> bool {
    // What clients send, judged at once.
    let mut values = headers.get_all(header::ACCEPT).iter();
    if let (Some(value), None) = (values.next(), values.next())
        && value.as_bytes() == b"application/json, text/event-stream"
    {
        return true;
    }
    let (mut json, mut sse) = (false, false);
    for value in headers.get_all(header::ACCEPT) {
        let Ok(value) = value.to_str() else {
            return false;
        };
        for entry in value.split(',') {
            let entry = entry.trim();
            if entry.contains([';', '"']) {
                return false;
            }
            json |= entry.eq_ignore_ascii_case("application/json");
            sse |= entry.eq_ignore_ascii_case("text/event-stream");
        }
    }
    json && sse
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{HeaderValue, Uri};
    use flowgate_core::handle::{HandleKey, Keyring};
    use serde_json::json;

    fn server() -> FlowgateServer {
        let manifest = flowgate_manifest::parse_str(
            "tools:\n  - name: open\n    target: { engine: fake }\n",
            std::path::Path::new("m.yaml"),
        )
        .expect("manifest");
        let mut registry = flowgate_core::Registry::new();
        flowgate_core::testing::register(&mut registry, flowgate_core::testing::FakeEngine::new());
        let tools = crate::ToolSet::build(&manifest, &registry).expect("tools");
        let keys = Keyring::new(HandleKey::random("k").expect("key"), vec![]);
        FlowgateServer::new(tools, keys, crate::ServerOptions::default())
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                axum::http::HeaderName::from_bytes(k.as_bytes()).expect("name"),
                HeaderValue::from_str(v).expect("value"),
            );
        }
        h
    }

    /// The answer written in place is rmcp's, byte for byte, for every outcome it writes
    /// (with and without a status message and a TTL, for integer and string ids); questions
    /// and a result that is not an object are left to rmcp.
    #[test]
    fn a_written_answer_is_the_bytes_rmcp_writes() {
        use flowgate_core::wire::{RpcError, WireTask};
        let wire = |outcome: Outcome, message: Option<&str>, ttl: Option<u64>| TaskView {
            task_id: "fg1.k.abc-_".into(),
            wire: WireTask {
                status_message: message.map(str::to_owned),
                created_at: "2026-12-05T01:02:03.456Z".into(),
                last_updated_at: "2026-12-05T01:02:04Z".into(),
                ttl_ms: ttl,
                poll_interval_ms: 1000,
                outcome,
            },
        };
        let failed = RpcError {
            code: -32603,
            message: "it \"broke\"\n".into(),
            data: Some(json!({"stage": 2, "why": ["a", null]})),
        };
        let result = json!({"content": [{"type": "text", "text": "done é"}], "isError": false});
        let views = [
            wire(Outcome::Working, None, None),
            wire(Outcome::Working, Some("step 3 of 7"), Some(86_400_000)),
            wire(Outcome::Cancelled, Some("stopped"), None),
            wire(Outcome::Completed(result), None, Some(1)),
            wire(Outcome::Failed(failed.clone()), None, None),
            wire(
                Outcome::Failed(RpcError {
                    data: None,
                    ..failed
                }),
                Some("x"),
                None,
            ),
        ];
        for view in views {
            for id in [RequestId::Number(7), RequestId::String("r-1".into())] {
                let written = written(&view, &id).expect("written");
                let rmcp = serde_json::to_vec(&ServerJsonRpcMessage::response(
                    ServerResult::GetTaskResult(GetTaskResult::new(crate::mcp::detailed(
                        view.clone(),
                    ))),
                    id,
                ))
                .expect("rmcp");
                assert_eq!(
                    String::from_utf8_lossy(&written),
                    String::from_utf8_lossy(&rmcp)
                );
            }
        }
        let mut questions = serde_json::Map::new();
        questions.insert(
            "q".into(),
            json!({"method": "elicitation/create", "params": {}}),
        );
        for outcome in [
            Outcome::InputRequired(questions),
            Outcome::Completed(json!(5)),
        ] {
            assert!(written(&wire(outcome, None, None), &RequestId::Number(1)).is_none());
        }
    }

    /// The benchmark's poll is taken; each departure from what rmcp accepts as it stands sends
    /// the request on to rmcp.
    #[test]
    fn only_a_poll_rmcp_would_accept_as_it_stands_is_taken() {
        let server = server();
        let guard = Guard::new(&["localhost".into(), "127.0.0.1".into()], None);
        let uri: Uri = "/mcp".parse().expect("uri");
        let meta = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "c", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
        });
        let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tasks/get",
            "params": {"taskId": "t1", "_meta": meta}});
        let plain = [
            ("host", "127.0.0.1:8080"),
            ("accept", "application/json, text/event-stream"),
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tasks/get"),
            ("mcp-name", "t1"),
        ];
        let taken = |body: &Value, pairs: &[(&str, &str)]| {
            let message = Incoming::from_value(body.clone(), Some("2026-07-28"));
            take(&server, &guard, &uri, &headers(pairs), &message).is_some()
        };
        assert!(taken(&body, &plain));
        fn with<'a>(
            plain: &[(&'a str, &'a str)],
            key: &'a str,
            value: &'a str,
        ) -> Vec<(&'a str, &'a str)> {
            let mut pairs: Vec<_> = plain.iter().copied().filter(|(k, _)| *k != key).collect();
            if !value.is_empty() {
                pairs.push((key, value));
            }
            pairs
        }
        for pairs in [
            with(&plain, "host", "evil.example"),
            with(&plain, "accept", "application/json"),
            with(&plain, "accept", "application/json;q=0, text/event-stream"),
            with(&plain, "mcp-method", "tasks/cancel"),
            with(&plain, "mcp-method", ""),
            with(&plain, "mcp-name", "t2"),
            with(&plain, "mcp-name", "=?base64?dDE=?="),
            [plain.as_slice(), &[("mcp-name", "t1")]].concat(),
            [plain.as_slice(), &[("mcp-param-x", "1")]].concat(),
        ] {
            assert!(!taken(&body, &pairs), "{pairs:?}");
        }
        let mut bodies = Vec::new();
        for (pointer, value) in [
            ("/jsonrpc", json!("1.0")),
            ("/id", json!(1.5)),
            ("/id", json!(null)),
            ("/params/taskId", json!(5)),
            ("/params/extra", json!(1)),
            (
                "/params/_meta/io.modelcontextprotocol~1protocolVersion",
                json!("2025-11-25"),
            ),
            (
                "/params/_meta/io.modelcontextprotocol~1clientCapabilities",
                json!({}),
            ),
            (
                "/params/_meta/io.modelcontextprotocol~1clientCapabilities",
                json!({"extensions": {"io.modelcontextprotocol/tasks": true}}),
            ),
            (
                "/params/_meta/io.modelcontextprotocol~1clientCapabilities",
                json!({"extensions": {"io.modelcontextprotocol/tasks": {}}, "roots": 5}),
            ),
            ("/params/_meta/progressToken", json!(1)),
        ] {
            let mut b = body.clone();
            match b.pointer_mut(pointer) {
                Some(slot) => *slot = value,
                None => {
                    let (parent, key) = pointer.rsplit_once('/').expect("pointer");
                    b.pointer_mut(parent).expect("parent")[key] = value;
                }
            }
            bodies.push(b);
        }
        for b in bodies {
            assert!(!taken(&b, &plain), "{b}");
        }
        let message = Incoming::from_value(body.clone(), Some("2025-11-25"));
        assert!(take(&server, &guard, &uri, &headers(&plain), &message).is_none());
    }
}
