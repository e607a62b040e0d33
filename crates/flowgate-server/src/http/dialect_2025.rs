//! The 2025-11-25 tasks dialect, for clients that `initialize` with protocol 2025-11-25 and
//! declare the tasks capability (the shipped form of SEP-1686: the Python `mcp` 1.x and
//! TypeScript SDK 1.x experimental task clients).
//!
//! rmcp serves only the 2026-07-28 tasks extension, so this layer translates: a 2025-11-25
//! `tools/call` with `params.task`, `tasks/get` and `tasks/cancel` become 2026-07-28 requests
//! to the same rmcp service (with the caller's extensions, so the same principal opens the
//! same handles), and their answers are reshaped (`{task: Task}` for a created task; a flat
//! `Task` with `ttl` and `pollInterval`). `tasks/result` polls until the task ends and answers
//! with the tool's result (or the task's error); `tasks/list` lists the caller's executions
//! through the engines' own list. The `initialize` answer gains `capabilities.tasks`, and
//! `tools/list` each tool's `execution.taskSupport` from the manifest's `task:`.
//!
//! A question the workflow asks reaches the client as the revision says: `tasks/result`
//! answers with a stream, and the question goes out on it as `elicitation/create`. The
//! request's id is the task and the question's key, sealed for the caller, so the client's
//! answer (a JSON-RPC response POSTed to `/mcp`) is delivered by whichever instance receives it.
//!
//! Nothing here keeps state: task ids are the same sealed handles, and any instance answers.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use flowgate_manifest::TaskSupport;
use serde_json::{Map, Value, json};
use tower::ServiceExt;

use crate::FlowgateServer;

/// The protocol revision this layer speaks.
pub(crate) const V2025: &str = "2025-11-25";
/// The revision the translated requests use.
const V2026: &str = "2026-07-28";
/// The longest `tasks/result` holds its request before asking the client to call again.
const RESULT_HOLD: Duration = Duration::from_secs(300);
/// `_meta` key of the task a message relates to.
const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";
/// The sealing purpose (and id prefix) of the `elicitation/create` requests sent during
/// `tasks/result`: the id itself carries the task and the question, sealed for the caller, so
/// the client's answer can reach any instance.
const ELICIT: &str = "fge";
/// Tasks in one `tasks/list` page.
const LIST_PAGE: usize = 50;

/// What the layer needs: the rmcp service to send translated requests to, the server (for
/// `tasks/list`), and the manifest's task support per tool.
#[derive(Clone)]
pub(crate) struct Dialect {
    /// The rmcp service behind `/mcp`, cloned per request.
    pub(crate) service: axum::routing::Router,
    pub(crate) server: FlowgateServer,
    pub(crate) task_support: Arc<HashMap<String, TaskSupport>>,
    pub(crate) limit: usize,
}

/// The layer: 2025-11-25 task requests are answered here, everything else passes.
pub(crate) async fn serve_2025(State(d): State<Dialect>, request: Request, next: Next) -> Response {
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    let version = request.headers().get("mcp-protocol-version");
    let header_2025 = version.is_some_and(|v| v.as_bytes() == V2025.as_bytes());
    // Another revision's request passes unread (an `initialize` carries no header yet).
    if version.is_some() && !header_2025 {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, d.limit).await else {
        return (StatusCode::PAYLOAD_TOO_LARGE, "Payload Too Large").into_response();
    };
    let message: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let method = message["method"].as_str().unwrap_or_default().to_owned();
    // A client's answer to an `elicitation/create` this layer sent during `tasks/result`.
    if method.is_empty()
        && let Some(sealed) = message["id"].as_str().filter(|id| id.starts_with(ELICIT))
    {
        return d.answered(&parts, sealed, &message).await;
    }
    let pass = |parts: Parts| Request::from_parts(parts, Body::from(bytes.clone()));
    let id = message.get("id").cloned().unwrap_or(Value::Null);
    let params = message.get("params").cloned().unwrap_or(Value::Null);
    if method == "initialize" && params["protocolVersion"] == V2025 {
        let response = next.run(pass(parts)).await;
        return edit_result(response, |result| {
            if result["protocolVersion"] == V2025 {
                result["capabilities"]["tasks"] = json!({
                    "list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}
                });
            }
        })
        .await;
    }
    if !header_2025 {
        return next.run(pass(parts)).await;
    }
    match method.as_str() {
        "tools/list" => {
            let response = next.run(pass(parts)).await;
            let support = d.task_support.clone();
            edit_result(response, move |result| {
                for tool in result["tools"].as_array_mut().into_iter().flatten() {
                    let mode = tool["name"].as_str().and_then(|n| support.get(n)).map_or(
                        "forbidden",
                        |s| match s {
                            TaskSupport::Required => "required",
                            TaskSupport::Optional => "optional",
                            TaskSupport::Forbidden => "forbidden",
                        },
                    );
                    tool["execution"] = json!({"taskSupport": mode});
                }
            })
            .await
        }
        "tools/call" if params.get("task").is_some() => d.create(&parts, &id, &params).await,
        // The revision: a `taskSupport: required` tool called without `task` is -32601.
        "tools/call"
            if params["name"].as_str().and_then(|n| d.task_support.get(n))
                == Some(&TaskSupport::Required) =>
        {
            reply(
                &id,
                Err(rpc_error(
                    -32601,
                    &format!(
                        "tool {} runs only as a task (taskSupport: required): call it with params.task",
                        params["name"].as_str().unwrap_or_default()
                    ),
                )),
            )
        }
        "tasks/get" => d.get(&parts, &id, &params).await,
        "tasks/result" => d.result(&parts, &id, &params).await,
        "tasks/cancel" => d.cancel(&parts, &id, &params).await,
        "tasks/list" => d.list(&parts, &id, &params).await,
        _ => next.run(pass(parts)).await,
    }
}

impl Dialect {
    /// Sends `method` with `params` to rmcp as a 2026-07-28 request of a client that declares
    /// the tasks extension; `name` is its `Mcp-Name`. The JSON-RPC `result`, or `error`.
    async fn dispatch(
        &self,
        parts: &Parts,
        method: &str,
        mut params: Value,
        name: &str,
    ) -> Result<Value, Value> {
        if !params.is_object() {
            params = json!({});
        }
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": V2026,
            "io.modelcontextprotocol/clientInfo": {"name": "flowgate-2025-11-25-bridge", "version": env!("CARGO_PKG_VERSION")},
            "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
        });
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let mut builder = axum::http::Request::builder()
            .method(Method::POST)
            .uri(parts.uri.clone());
        for (k, v) in &parts.headers {
            // The translated request says its own type, what it accepts and its MCP headers
            // (`header` appends: a client's own would come first and be the one read).
            if !matches!(
                k.as_str(),
                "content-length"
                    | "content-type"
                    | "accept"
                    | "mcp-protocol-version"
                    | "mcp-method"
                    | "mcp-name"
            ) {
                builder = builder.header(k, v);
            }
        }
        let header = |v: &str| HeaderValue::from_str(v).unwrap_or(HeaderValue::from_static(""));
        let mut request = builder
            .header("mcp-protocol-version", V2026)
            .header("mcp-method", method)
            .header("mcp-name", header(name))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(Body::from(body.to_string()))
            .map_err(|e| rpc_error(-32603, &format!("cannot forward the request: {e}")))?;
        *request.extensions_mut() = parts.extensions.clone();
        let response = self
            .service
            .clone()
            .oneshot(request)
            .await
            .map_err(|e| rpc_error(-32603, &format!("cannot forward the request: {e}")))?;
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .map_err(|_| rpc_error(-32603, "unreadable answer"))?;
        let answer: Value = serde_json::from_slice(&bytes).map_err(|_| {
            // Not a JSON-RPC answer: the transport refused the request (a foreign Origin, a
            // Host not allowed); say so, in its own words, rather than as an internal error.
            let text: String = String::from_utf8_lossy(&bytes).chars().take(200).collect();
            let code = if status.is_client_error() {
                -32600
            } else {
                -32603
            };
            rpc_error(code, &format!("the request was refused ({status}): {text}"))
        })?;
        match answer.get("error") {
            Some(error) => Err(error.clone()),
            None => Ok(answer["result"].clone()),
        }
    }

    async fn create(&self, parts: &Parts, id: &Value, params: &Value) -> Response {
        let name = params["name"].as_str().unwrap_or_default();
        if self.task_support.get(name) == Some(&TaskSupport::Forbidden) {
            return reply(
                id,
                Err(rpc_error(
                    -32601,
                    &format!("tool {name} does not run as a task (taskSupport: forbidden)"),
                )),
            );
        }
        let mut forwarded = params.clone();
        if let Some(p) = forwarded.as_object_mut() {
            p.remove("task");
        }
        let answer = self
            .dispatch(parts, "tools/call", forwarded, name)
            .await
            .and_then(|result| {
                if result["resultType"] == "task" {
                    Ok(json!({"task": task_2025(&result)}))
                } else if result["isError"] == true {
                    // Refused before anything started (invalid arguments): a task-augmented
                    // call must answer with a task, so the refusal is an error saying why.
                    let text: Vec<&str> = result["content"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|c| c["text"].as_str())
                        .collect();
                    Err(rpc_error(-32602, &text.join("\n")))
                } else {
                    Err(rpc_error(
                        -32603,
                        &format!("tool {name} did not start a task"),
                    ))
                }
            });
        reply(id, answer)
    }

    async fn get(&self, parts: &Parts, id: &Value, params: &Value) -> Response {
        let task = params["taskId"].as_str().unwrap_or_default();
        let answer = self
            .dispatch(parts, "tasks/get", json!({"taskId": task}), task)
            .await
            .map(|t| task_2025(&t));
        reply(id, answer)
    }

    async fn cancel(&self, parts: &Parts, id: &Value, params: &Value) -> Response {
        let task = params["taskId"].as_str().unwrap_or_default();
        let answer = async {
            let now = self
                .dispatch(parts, "tasks/get", json!({"taskId": task}), task)
                .await?;
            if matches!(
                now["status"].as_str(),
                Some("completed" | "failed" | "cancelled")
            ) {
                return Err(rpc_error(
                    -32602,
                    &format!("task {task} has already ended ({})", now["status"]),
                ));
            }
            self.dispatch(parts, "tasks/cancel", json!({"taskId": task}), task)
                .await?;
            // The revision: the task is cancelled once the answer says so, whatever the
            // engine still finishes.
            let mut t = task_2025(&now);
            t["status"] = json!("cancelled");
            t["statusMessage"] = json!("The task was cancelled by request.");
            Ok(t)
        }
        .await;
        reply(id, answer)
    }

    /// `tasks/result`: held until the task ends. The answer is a stream (SSE) when the client
    /// takes one: a question the workflow asks meanwhile goes out on it as `elicitation/create`
    /// (with the task's related-task meta), and the client's answer, POSTed to any instance,
    /// is delivered with `tasks/update` (see [`Dialect::answered`]).
    async fn result(&self, parts: &Parts, id: &Value, params: &Value) -> Response {
        let task = params["taskId"].as_str().unwrap_or_default().to_owned();
        let streams = parts
            .headers
            .get("accept")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.contains("text/event-stream"));
        if !streams {
            let answer = self.wait_for_end(parts, &task, None).await;
            return reply(id, answer);
        }
        let (tx, rx) =
            futures::channel::mpsc::unbounded::<Result<String, std::convert::Infallible>>();
        let this = self.clone();
        let parts = clone_parts(parts);
        let id = id.clone();
        tokio::spawn(async move {
            let answer = this.wait_for_end(&parts, &task, Some(&tx)).await;
            let _ = tx.unbounded_send(Ok(sse_event(&envelope(&id, answer))));
        });
        Response::builder()
            .status(StatusCode::OK)
            .header("content-type", "text/event-stream")
            .header("cache-control", "no-cache")
            .body(Body::from_stream(rx))
            .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
    }

    /// Polls `task` until it ends; with `stream`, each new question is sent on it.
    async fn wait_for_end(
        &self,
        parts: &Parts,
        task: &str,
        stream: Option<
            &futures::channel::mpsc::UnboundedSender<Result<String, std::convert::Infallible>>,
        >,
    ) -> Result<Value, Value> {
        let started = Instant::now();
        let mut asked = std::collections::HashSet::new();
        loop {
            let now = self
                .dispatch(parts, "tasks/get", json!({"taskId": task}), task)
                .await?;
            match now["status"].as_str() {
                Some("completed") => {
                    let mut result = now["result"].clone();
                    if !result.is_object() {
                        result = json!({});
                    }
                    result["_meta"][RELATED_TASK] = json!({"taskId": task});
                    return Ok(result);
                }
                Some("failed") => {
                    let error = now["error"].clone();
                    return Err(if error.is_object() {
                        error
                    } else {
                        rpc_error(-32603, "the task failed")
                    });
                }
                Some("cancelled") => return Err(rpc_error(-32603, "the task was cancelled")),
                _ if started.elapsed() >= RESULT_HOLD => {
                    return Err(rpc_error(
                        -32603,
                        "the task is still running; call tasks/result again",
                    ));
                }
                Some("input_required") if stream.is_some() => {
                    let principal = principal_of(parts);
                    for (key, request) in now["inputRequests"].as_object().into_iter().flatten() {
                        if !asked.insert(key.clone()) {
                            continue;
                        }
                        let sealed = self.server.inner.keys.seal_bytes(
                            ELICIT,
                            json!({"t": task, "k": key}).to_string().as_bytes(),
                            &principal,
                        );
                        let mut params = request["params"].clone();
                        if !params.is_object() {
                            continue;
                        }
                        params["_meta"][RELATED_TASK] = json!({"taskId": task});
                        let ask = json!({"jsonrpc": "2.0", "id": sealed, "method": "elicitation/create", "params": params});
                        if let Some(tx) = stream {
                            let _ = tx.unbounded_send(Ok(sse_event(&ask)));
                        }
                    }
                }
                _ => {}
            }
            let interval = now["pollIntervalMs"].as_u64().unwrap_or(1000);
            tokio::time::sleep(Duration::from_millis(interval.clamp(200, 5000))).await;
        }
    }

    /// A client's answer to one of the `elicitation/create` requests: delivered to the task
    /// with `tasks/update` (an error answer is a dismissal). 202 whatever happens, as for any
    /// response a client posts; an id that does not open for this caller is dropped.
    async fn answered(&self, parts: &Parts, sealed: &str, message: &Value) -> Response {
        let principal = principal_of(parts);
        let opened = self
            .server
            .inner
            .keys
            .open_bytes(ELICIT, sealed, &principal)
            .ok()
            .and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok());
        let Some(opened) = opened else {
            tracing::info!("an elicitation answer whose id does not open was dropped");
            return StatusCode::ACCEPTED.into_response();
        };
        let (task, key) = (
            opened["t"].as_str().unwrap_or_default(),
            opened["k"].as_str().unwrap_or_default(),
        );
        let answer = match message.get("result") {
            Some(result) => result.clone(),
            None => json!({"action": "cancel"}),
        };
        let mut responses = Map::new();
        responses.insert(key.to_owned(), answer);
        if let Err(e) = self
            .dispatch(
                parts,
                "tasks/update",
                json!({"taskId": task, "inputResponses": responses}),
                task,
            )
            .await
        {
            tracing::info!(error = %e, "an elicitation answer was not delivered");
        }
        StatusCode::ACCEPTED.into_response()
    }

    /// `tasks/list`, in pages of [`LIST_PAGE`]: the cursor is where the next page starts in
    /// the caller's tasks, newest first (read afresh from the engines on every page).
    async fn list(&self, parts: &Parts, id: &Value, params: &Value) -> Response {
        let start = match params.get("cursor") {
            None | Some(Value::Null) => 0,
            Some(cursor) => match cursor
                .as_str()
                .and_then(|c| c.strip_prefix("page-"))
                .and_then(|n| n.parse::<usize>().ok())
            {
                Some(n) => n,
                None => return reply(id, Err(rpc_error(-32602, "invalid cursor"))),
            },
        };
        let principal = principal_of(parts);
        let tasks = self
            .server
            .list_tasks_2025(&principal, start + LIST_PAGE + 1)
            .await;
        let more = tasks.len() > start + LIST_PAGE;
        let page: Vec<Value> = tasks.into_iter().skip(start).take(LIST_PAGE).collect();
        let mut result = json!({"tasks": page});
        if more {
            result["nextCursor"] = json!(format!("page-{}", start + LIST_PAGE));
        }
        reply(id, Ok(result))
    }
}

/// A 2026-07-28 task (created or detailed) as a 2025-11-25 `Task`.
pub(crate) fn task_2025(t: &Value) -> Value {
    let mut out = Map::new();
    for key in [
        "taskId",
        "status",
        "statusMessage",
        "createdAt",
        "lastUpdatedAt",
    ] {
        if let Some(v) = t.get(key) {
            out.insert(key.to_owned(), v.clone());
        }
    }
    out.insert("ttl".into(), t.get("ttlMs").cloned().unwrap_or(Value::Null));
    if let Some(p) = t.get("pollIntervalMs") {
        out.insert("pollInterval".into(), p.clone());
    }
    Value::Object(out)
}

/// The caller's principal, as `crate::principal::of` finds it for rmcp's requests.
fn principal_of(parts: &Parts) -> String {
    crate::http::caller(parts).map_or_else(
        || crate::principal::ANONYMOUS.to_owned(),
        |c| c.principal.key(),
    )
}

/// The parts of a request, for a task that outlives it (the body is not needed).
fn clone_parts(parts: &Parts) -> Parts {
    let mut request = axum::http::Request::builder()
        .method(parts.method.clone())
        .uri(parts.uri.clone())
        .version(parts.version)
        .body(())
        .unwrap_or_default();
    *request.headers_mut() = parts.headers.clone();
    *request.extensions_mut() = parts.extensions.clone();
    request.into_parts().0
}

/// One SSE event carrying a JSON-RPC message.
fn sse_event(message: &Value) -> String {
    format!("event: message\ndata: {message}\n\n")
}

fn envelope(id: &Value, answer: Result<Value, Value>) -> Value {
    match answer {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err(error) => json!({"jsonrpc": "2.0", "id": id, "error": error}),
    }
}

fn rpc_error(code: i64, message: &str) -> Value {
    json!({"code": code, "message": message})
}

/// A JSON-RPC answer to `id`.
fn reply(id: &Value, answer: Result<Value, Value>) -> Response {
    let body = envelope(id, answer);
    (
        StatusCode::OK,
        [("content-type", "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// `response` with its JSON-RPC `result` changed by `edit` (other answers unchanged).
async fn edit_result(response: Response, edit: impl FnOnce(&mut Value)) -> Response {
    let (mut parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return StatusCode::BAD_GATEWAY.into_response();
    };
    let Ok(mut message) = serde_json::from_slice::<Value>(&bytes) else {
        return Response::from_parts(parts, Body::from(bytes));
    };
    if let Some(result) = message.get_mut("result") {
        edit(result);
    }
    let text = message.to_string();
    parts.headers.remove("content-length");
    Response::from_parts(parts, Body::from(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_2026_task_reads_as_a_2025_task() {
        let t = json!({"resultType": "complete", "taskId": "fg1.x", "status": "input_required",
            "statusMessage": "Go?", "createdAt": "a", "lastUpdatedAt": "b", "ttlMs": 5000,
            "pollIntervalMs": 250, "inputRequests": {"k": {}}});
        assert_eq!(
            task_2025(&t),
            json!({"taskId": "fg1.x", "status": "input_required", "statusMessage": "Go?",
                "createdAt": "a", "lastUpdatedAt": "b", "ttl": 5000, "pollInterval": 250})
        );
        assert_eq!(task_2025(&json!({"taskId": "y"}))["ttl"], Value::Null);
    }
}
