//! The 2025-11-25 tasks dialect, for clients that `initialize` with protocol 2025-11-25 and
//! declare the tasks capability (the shipped form of SEP-1686: the Python `mcp` 1.x and
//! TypeScript SDK 1.x experimental task clients), on every transport.
//!
//! rmcp serves only the 2026-07-28 tasks extension, so this module answers the revision's task
//! requests itself, by calling the same task operations the rmcp handler calls, with the same
//! [`Caller`] (so the same principal opens the same handles), and shaping their answers with
//! `flowgate_core::wire::v2025`: `tools/call` with `params.task` (`{task: Task}`), `tasks/get`
//! (a `Task` with `ttl` and `pollInterval`), `tasks/cancel`, `tasks/list` (through the engines'
//! own list, in pages) and `tasks/result`, which holds until the task ends (the one wait of
//! `crate::wait`) and answers with the tool's result or the task's error. `initialize` gains
//! `capabilities.tasks`, and `tools/list` each tool's `execution.taskSupport` from the
//! manifest's `task:`. Everything else of the revision (a `tools/call` without `task`,
//! notifications, `ping`) is rmcp's.
//!
//! A question the workflow asks reaches the client as the revision says: while `tasks/result`
//! holds, it goes out as an `elicitation/create` request on the transport's outbox (the SSE
//! stream of the `tasks/result` answer on HTTP, stdout on stdio). The request's id is the task
//! and the question's key, sealed for the caller, so the client's answer (a JSON-RPC response)
//! is delivered with `tasks/update` by whichever instance receives it.
//!
//! Nothing here keeps state: task ids are the same sealed handles, and any instance answers.

use std::time::Duration;

use flowgate_core::wire::{self, RpcError, v2025};
use flowgate_manifest::TaskSupport;
use rmcp::ErrorData;
use rmcp::model::{
    CallToolRequestParams, GetTaskParams, InitializeRequestParams, PaginatedRequestParams,
    ProtocolVersion,
};
use serde_json::{Map, Value, json};

use crate::calls::{Call, Called};
use crate::errors::rpc_error;
use crate::jsonrpc::Incoming;
use crate::tasks::known_times;
use crate::wait::{Questions, Waited};
use crate::{Caller, FlowgateServer, params};

/// The revision this module speaks.
pub(crate) const V2025: &str = v2025::REVISION;
/// The longest `tasks/result` holds its request before asking the client to call again.
const RESULT_HOLD: Duration = Duration::from_secs(300);
/// The sealing purpose (and id prefix) of the `elicitation/create` requests sent during
/// `tasks/result`: the id itself carries the task and the question, sealed for the caller, so
/// the client's answer can reach any instance.
const ELICIT: &str = "fge";
/// Tasks in one `tasks/list` page.
const LIST_PAGE: usize = 50;

/// A question `tasks/result` asks the client: an `elicitation/create` request whose id is the
/// sealed task and key.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Question {
    /// The request's id.
    pub(crate) id: String,
    /// The `elicitation/create` params, with the task in `_meta`.
    pub(crate) params: Value,
}

impl Question {
    /// The JSON-RPC request.
    pub(crate) fn to_json(&self) -> Value {
        json!({"jsonrpc": "2.0", "id": self.id, "method": "elicitation/create", "params": self.params})
    }
}

/// Where a transport sends the questions `tasks/result` asks while it holds, and how its
/// hold may end.
#[derive(Clone, Copy)]
pub(crate) struct Outbox<'a> {
    /// Sends one question to the client.
    pub(crate) send: &'a (dyn Fn(Question) + Send + Sync),
    /// The client resumes the request when it ends without an answer (an SSE stream with
    /// event ids: the revision's resumable streams), so a hold that runs out of time (or
    /// ends at a question) ends quietly with [`Handled::Paused`]; otherwise it answers with
    /// an error that says to call again.
    pub(crate) resumable: bool,
    /// End the hold once it has sent questions: the platform delivers the body only when the
    /// request ends (a buffered AWS Lambda response), and the client must see them to answer.
    pub(crate) end_at_question: bool,
}

/// What the dialect made of a message it claimed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Handled {
    /// The answer to the message's id: a result or a JSON-RPC error.
    Reply(Result<Value, ErrorData>),
    /// A response of the client's (to an `elicitation/create`): nothing to answer.
    Accepted,
    /// The caller went away before the answer was ready.
    Gone,
    /// A resumable hold ended without the answer (out of time, or at a question the client
    /// must see first): the transport ends the request, and the client resumes it.
    Paused,
}

/// Whether the dialect answers `message` (else it is rmcp's).
pub(crate) fn claims(server: &FlowgateServer, message: &Incoming) -> bool {
    // A client's answer to an `elicitation/create` sent during `tasks/result`: in the
    // revision, or without one (an answer may carry no version header).
    if message.method.is_none() {
        return message.revision.as_deref().is_none_or(|r| r == V2025)
            && message
                .id
                .as_ref()
                .and_then(Value::as_str)
                .is_some_and(|id| id.starts_with(ELICIT));
    }
    if !message.is_in(V2025) {
        return false;
    }
    match message.method() {
        "initialize" => decode::<InitializeRequestParams>(message).is_ok(),
        "tools/list" | "tasks/get" | "tasks/result" | "tasks/cancel" | "tasks/list" => true,
        "tools/call" => {
            message.params.get("task").is_some()
                || message
                    .name()
                    .and_then(|n| server.tool_entry(n))
                    .is_some_and(|t| t.spec.task == TaskSupport::Required)
        }
        _ => false,
    }
}

/// Answers a message [`claims`] says is the dialect's, for `caller`; `outbox` is where
/// `tasks/result` sends its questions, when the transport can send the client requests.
pub(crate) async fn handle(
    server: &FlowgateServer,
    caller: &Caller,
    message: &Incoming,
    outbox: Option<Outbox<'_>>,
) -> Handled {
    caller
        .bounded(dispatch(server, caller, message, outbox))
        .await
}

async fn dispatch(
    server: &FlowgateServer,
    caller: &Caller,
    message: &Incoming,
    outbox: Option<Outbox<'_>>,
) -> Handled {
    let answer = match message.method() {
        "" => {
            answered(server, caller, message).await;
            return Handled::Accepted;
        }
        "initialize" => initialize(server, message),
        "tools/list" => tools_list(server, caller, message),
        "tools/call" => call(server, caller, message).await,
        "tasks/get" => get(server, caller, message).await,
        "tasks/cancel" => cancel(server, caller, message).await,
        "tasks/list" => list(server, caller, message).await,
        "tasks/result" => return result(server, caller, message, outbox).await,
        other => Err(ErrorData::new(
            rmcp::model::ErrorCode::METHOD_NOT_FOUND,
            other.to_owned(),
            None,
        )),
    };
    Handled::Reply(answer)
}

/// The answer of `initialize` in the revision: the server's, with `capabilities.tasks`.
pub(crate) fn initialize_result(server: &FlowgateServer) -> Value {
    let mut info = server.info().clone();
    info.protocol_version = ProtocolVersion::V_2025_11_25;
    let mut result = serde_json::to_value(info).unwrap_or_else(|_| json!({}));
    result["capabilities"]["tasks"] = v2025::capability();
    result
}

fn initialize(server: &FlowgateServer, message: &Incoming) -> Result<Value, ErrorData> {
    decode::<InitializeRequestParams>(message)?;
    Ok(initialize_result(server))
}

/// `tools/list`: the caller's tools, each with its `execution.taskSupport`.
fn tools_list(
    server: &FlowgateServer,
    caller: &Caller,
    message: &Incoming,
) -> Result<Value, ErrorData> {
    if !message.params.is_null() {
        decode::<PaginatedRequestParams>(message)?;
    }
    let tools: Vec<Value> = server
        .tools_for(caller)
        .iter()
        .map(|t| {
            let mut tool = serde_json::to_value(&t.tool).unwrap_or_else(|_| json!({}));
            tool["execution"] = json!({"taskSupport": task_support(t.spec.task)});
            tool
        })
        .collect();
    Ok(json!({ "tools": tools }))
}

/// The revision's name of a manifest's `task:`.
fn task_support(task: TaskSupport) -> &'static str {
    match task {
        TaskSupport::Required => "required",
        TaskSupport::Optional => "optional",
        TaskSupport::Forbidden => "forbidden",
    }
}

/// `tools/call` with `params.task` (or of a tool that runs only as a task).
async fn call(
    server: &FlowgateServer,
    caller: &Caller,
    message: &Incoming,
) -> Result<Value, ErrorData> {
    let mut params = message.params_object();
    let as_task = params.remove("task").is_some();
    let request: CallToolRequestParams =
        params::decode(message.method(), Some(&Value::Object(params)))?;
    let name = request.name.into_owned();
    let support = server.tool_entry(&name).map(|t| t.spec.task);
    if !as_task {
        // The revision: a `taskSupport: required` tool called without `task` is -32601.
        return Err(ErrorData::new(
            rmcp::model::ErrorCode::METHOD_NOT_FOUND,
            format!(
                "tool {name} runs only as a task (taskSupport: required): call it with params.task"
            ),
            None,
        ));
    }
    if support == Some(TaskSupport::Forbidden) {
        return Err(ErrorData::new(
            rmcp::model::ErrorCode::METHOD_NOT_FOUND,
            format!("tool {name} does not run as a task (taskSupport: forbidden)"),
            None,
        ));
    }
    let call = Call {
        name: name.clone(),
        arguments: request.arguments.unwrap_or_default(),
        input_responses: request.input_responses,
        request_state: request.request_state,
        takes_tasks: true,
        can_elicit: false,
    };
    match server.call(caller, call).await? {
        Called::Task(view) => Ok(v2025::created(&view.task_id, &view.wire.envelope())),
        // Refused before anything started (invalid arguments, say): a task-augmented call must
        // answer with a task, so the refusal is an error that says why.
        Called::Complete(result) if result.is_error == Some(true) => {
            let why: Vec<String> = result
                .content
                .iter()
                .filter_map(|c| c.as_text().map(|t| t.text.clone()))
                .collect();
            Err(ErrorData::invalid_params(why.join("\n"), None))
        }
        Called::Complete(_) => Err(ErrorData::internal_error(
            format!("tool {name} did not start a task"),
            None,
        )),
        Called::Ask(_) => Err(ErrorData::internal_error(
            format!("tool {name} did not start a task"),
            None,
        )),
    }
}

/// The `taskId` of a `tasks/*` request.
fn task_id(message: &Incoming) -> Result<String, ErrorData> {
    let params: GetTaskParams = decode(message)?;
    Ok(params.task_id)
}

/// `tasks/get`: the `Task` alone.
async fn get(
    server: &FlowgateServer,
    caller: &Caller,
    message: &Incoming,
) -> Result<Value, ErrorData> {
    let task = task_id(message)?;
    let view = server.task_get(caller, &task).await?;
    Ok(v2025::task(&view.task_id, &view.wire.envelope()))
}

/// `tasks/cancel`: refused for a task that has ended; otherwise the task, cancelled (the
/// revision: it is cancelled once the answer says so, whatever the engine still finishes).
async fn cancel(
    server: &FlowgateServer,
    caller: &Caller,
    message: &Incoming,
) -> Result<Value, ErrorData> {
    let task = task_id(message)?;
    let now = server.task_get(caller, &task).await?;
    let status = now.wire.outcome.status();
    if status.is_terminal() {
        return Err(ErrorData::invalid_params(
            format!("task {task} has already ended ({})", status.as_str()),
            None,
        ));
    }
    server.task_cancel(caller, &task).await?;
    let mut ended = now.wire;
    ended.outcome = wire::Outcome::Cancelled;
    ended.status_message = Some("The task was cancelled by request.".to_owned());
    Ok(v2025::task(&task, &ended.envelope()))
}

/// `tasks/list`, in pages of [`LIST_PAGE`]: the cursor is where the next page starts in the
/// caller's tasks, newest first (read afresh from the engines on every page).
async fn list(
    server: &FlowgateServer,
    caller: &Caller,
    message: &Incoming,
) -> Result<Value, ErrorData> {
    let start = match message.params.get("cursor") {
        None | Some(Value::Null) => 0,
        Some(cursor) => cursor
            .as_str()
            .and_then(|c| c.strip_prefix("page-"))
            .and_then(|n| n.parse::<usize>().ok())
            .ok_or_else(|| ErrorData::invalid_params("invalid cursor", None))?,
    };
    let tasks = server.task_list(caller, start + LIST_PAGE + 1).await;
    let more = tasks.len() > start + LIST_PAGE;
    let page: Vec<Value> = tasks
        .iter()
        .skip(start)
        .take(LIST_PAGE)
        .map(|t| v2025::task(&t.task_id, &t.envelope()))
        .collect();
    let mut result = json!({ "tasks": page });
    if more {
        result["nextCursor"] = json!(format!("page-{}", start + LIST_PAGE));
    }
    Ok(result)
}

/// `tasks/result`: held until the task ends, then its result or its error. With an `outbox`,
/// each question the workflow asks meanwhile is sent as `elicitation/create`; without one the
/// client answers questions with `tasks/update` (it sees them nowhere else, so in practice
/// this holds until the task ends some other way). The hold takes one of the caller's hold
/// slots (module `holds`) and ends before the caller's deadline (module `wait`).
async fn result(
    server: &FlowgateServer,
    caller: &Caller,
    message: &Incoming,
    outbox: Option<Outbox<'_>>,
) -> Handled {
    let task = match task_id(message) {
        Ok(task) => task,
        Err(e) => return Handled::Reply(Err(e)),
    };
    let (handle, entry) = match server.open(caller, &task) {
        Ok(opened) => opened,
        Err(e) => return Handled::Reply(Err(e)),
    };
    let _slot = match server.hold(caller) {
        Ok(slot) => slot,
        Err(limit) => return Handled::Reply(Err(crate::holds::too_many_holds(limit))),
    };
    let mut ask = |key: &str, request: &Value| {
        let Some(params) = v2025::elicitation(&task, request) else {
            return;
        };
        let sealed = server.inner.keys.seal_bytes(
            ELICIT,
            json!({"t": task, "k": key}).to_string().as_bytes(),
            caller.principal_key(),
        );
        if let Some(outbox) = outbox {
            (outbox.send)(Question { id: sealed, params });
        }
    };
    let questions = match outbox {
        Some(outbox) => Questions::Forward {
            ask: &mut ask,
            then_end: outbox.end_at_question,
        },
        None => Questions::Wait,
    };
    let waited = server
        .wait_until_finished(caller, &entry, &handle.execution, RESULT_HOLD, questions)
        .await;
    let resumable = outbox.is_some_and(|o| o.resumable);
    Handled::Reply(match waited {
        Waited::Finished(mut record) => {
            known_times(&mut record, &handle);
            let outcome = entry.project(&record).outcome;
            match v2025::result(&task, &outcome) {
                Some(Ok(result)) => Ok(result),
                Some(Err(e)) => Err(rpc(&e)),
                None => Err(ErrorData::internal_error("the task did not end", None)),
            }
        }
        Waited::Gone => return Handled::Gone,
        Waited::Failed(e) => Err(rpc_error(&entry.spec.name, &e)),
        Waited::OutOfTime(_) | Waited::Asked if resumable => return Handled::Paused,
        Waited::OutOfTime(_) | Waited::Asked => Err(ErrorData::internal_error(
            "the task is still running; call tasks/result again",
            None,
        )),
    })
}

/// A client's answer to one of the `elicitation/create` requests: delivered to the task with
/// `tasks/update` (an error answer is a dismissal). An id that does not open for this caller
/// is dropped.
async fn answered(server: &FlowgateServer, caller: &Caller, message: &Incoming) {
    let sealed = message.id.as_ref().and_then(Value::as_str).unwrap_or("");
    let opened = server
        .inner
        .keys
        .open_bytes(ELICIT, sealed, caller.principal_key())
        .ok()
        .and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok());
    let Some(opened) = opened else {
        tracing::info!("an elicitation answer whose id does not open was dropped");
        return;
    };
    let (Some(task), Some(key)) = (opened["t"].as_str(), opened["k"].as_str()) else {
        return;
    };
    let answer = message
        .result
        .clone()
        .unwrap_or_else(|| json!({"action": "cancel"}));
    let responses = [(key.to_owned(), answer)].into_iter().collect();
    if let Err(e) = server.task_update(caller, task, responses).await {
        tracing::info!(error = %e.message, "an elicitation answer was not delivered");
    }
}

/// The message's params as a `T`, or `-32602` naming the field.
fn decode<T: serde::de::DeserializeOwned>(message: &Incoming) -> Result<T, ErrorData> {
    params::decode(message.method(), Some(&message.params))
}

fn rpc(e: &RpcError) -> ErrorData {
    ErrorData::new(
        rmcp::model::ErrorCode(i32::try_from(e.code).unwrap_or(-32603)),
        e.message.clone(),
        e.data.clone(),
    )
}

/// The JSON-RPC answer to `id`: `result`, or `error` (one error shape:
/// `flowgate_core::wire::RpcError`).
pub(crate) fn reply_json(id: Option<&Value>, answer: &Result<Value, ErrorData>) -> Value {
    let mut message = Map::new();
    message.insert("jsonrpc".into(), json!("2.0"));
    message.insert("id".into(), id.cloned().unwrap_or(Value::Null));
    match answer {
        Ok(result) => message.insert("result".into(), result.clone()),
        Err(e) => {
            let mut error = RpcError::new(i64::from(e.code.0), e.message.clone());
            error.data = e.data.clone();
            message.insert("error".into(), Value::Object(error.to_json()))
        }
    };
    Value::Object(message)
}
