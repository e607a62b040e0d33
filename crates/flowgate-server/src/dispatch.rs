//! The one table of MCP methods: every method of every revision flowgate serves is decided
//! here, once, for every transport.
//!
//! A transport parses a message once ([`Incoming`]), finds its [`Caller`], and hands both over
//! with what it knows of the client (a stdio session's `initialize`; nothing on stateless
//! HTTP). The dispatcher decides the request's lifecycle, then looks the method up in that
//! lifecycle's table:
//!
//! - **Per request** (2026-07-28): the request's `_meta` names its revision, the client and
//!   its capabilities. An unknown revision is `-32022`; `_meta` without a required key is
//!   `-32602` (a malformed request: [`Answer::malformed`]). The table: `server/discover`,
//!   `tools/list`, `tools/call`, `tasks/get`, `tasks/update`, `tasks/cancel` (the tasks
//!   extension: `-32021` unless the client declared it), `subscriptions/listen` (module
//!   `listen`; `-32021` when it asks for task ids without the extension); `ping` and
//!   everything else is `-32601`.
//! - **Session** (2025-11-25 and older): the revision is the transport's (the
//!   `MCP-Protocol-Version` header, the session's `initialize`). The table: `initialize`,
//!   `ping`, `tools/list`, `tools/call` (synchronous), and in 2025-11-25 the revision's task
//!   methods (module `dialect_2025`).
//!
//! What every entry shares is decided here too: the scope check of `tools/call` (a tool the
//! caller may not use is [`Reply::Forbidden`], which HTTP answers with its challenge), the
//! params decoded with the field at fault named, and results shaped for the revision (cache
//! hints in 2026-07-28, no `resultType` before). Entries answer with a [`Reply`], which each
//! transport writes once; how the request ended is read from it, never from written bytes.

use rmcp::ErrorData;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, ClientCapabilities,
    CreateTaskResult, DiscoverRequestParams, DiscoverResult, GetTaskParams, GetTaskResult,
    InitializeRequestParams, ListToolsResult, PaginatedRequestParams, ProtocolVersion,
    ServerResult, UpdateTaskParams,
};
use serde::Deserialize as _;
use serde_json::Value;
use tracing::Instrument as _;

use crate::calls::{Call, Called};
use crate::dialect_2025::{self, Handled, Outbox, V2025};
use crate::jsonrpc::Incoming;
use crate::reply::{Answer, Payload, Reply};
use crate::{Caller, FlowgateServer, params};

/// The revision an older request is in when nothing says (the Streamable HTTP rule for a
/// request without `MCP-Protocol-Version`).
const DEFAULT_REVISION: &str = "2025-03-26";

/// What a session said of its client at `initialize` (stdio); stateless transports have none.
#[derive(Debug, Clone, Default)]
pub(crate) struct Session {
    /// The revision the session agreed on.
    pub(crate) revision: Option<String>,
    /// The client's capabilities, as it declared them.
    pub(crate) capabilities: Option<ClientCapabilities>,
}

/// One request, as a transport hands it over.
pub(crate) struct Request<'a> {
    /// The message, parsed once.
    pub(crate) message: &'a Incoming,
    /// Who is calling.
    pub(crate) caller: &'a Caller,
    /// The session the request belongs to (stdio).
    pub(crate) session: Option<&'a Session>,
    /// Where a 2025-11-25 `tasks/result` sends the questions it asks while it holds.
    pub(crate) outbox: Option<Outbox<'a>>,
}

/// The request's lifecycle, decided from the message and the session.
enum Lifecycle {
    /// 2026-07-28: the request says everything.
    PerRequest(Declared),
    /// A session's request (or a stateless one of an older revision) in `revision`.
    Session {
        revision: String,
        declared: Declared,
    },
}

/// Answers one message.
pub(crate) async fn dispatch(server: &FlowgateServer, request: Request<'_>) -> Reply {
    let message = request.message;
    let Some(method) = message.method.as_deref() else {
        // A client's answer to a question `tasks/result` asked.
        if dialect_2025::answers_a_question(message) {
            let span = request.caller.span().clone();
            let answered = dialect_2025::answered(server, request.caller, message);
            request.caller.bounded(answered.instrument(span)).await;
            return Reply::Accepted;
        }
        return Reply::Stray;
    };
    if message.id.is_none() {
        // Notifications change nothing in a stateless server; a transport acts on the ones
        // that concern it (stdio: `notifications/cancelled`) before handing them over.
        return Reply::Accepted;
    }
    let lifecycle = match lifecycle(message, request.session) {
        Ok(lifecycle) => lifecycle,
        Err(refused) => return Reply::Answer(refused),
    };
    let span = request.caller.span().clone();
    let answer = async {
        match lifecycle {
            Lifecycle::PerRequest(declared) => {
                per_request(server, &request, method, declared).await
            }
            // Boxed, as `tools/call` is below: a future is as large as the largest one it
            // awaits, and a poll's must not carry room for a session's or a call's.
            Lifecycle::Session { revision, declared } => {
                Box::pin(session(server, &request, method, &revision, declared)).await
            }
        }
    };
    // Every engine call of the request ends by the request's deadline (set here, once).
    request.caller.bounded(answer.instrument(span)).await
}

/// The lifecycle of `message`, or the answer that refuses it.
fn lifecycle(message: &Incoming, session: Option<&Session>) -> Result<Lifecycle, Answer> {
    // `_meta` is read in place: this runs for every request, the polls above all.
    let meta = message.params.get("_meta").and_then(Value::as_object);
    let entry = |key: &str| meta.and_then(|m| m.get(key));
    let method = message.method();
    let requested = entry(META_PROTOCOL_VERSION).and_then(Value::as_str);
    // A request whose `_meta` names its revision is in the per-request lifecycle, where
    // `initialize` no longer exists (-32601, HTTP 404).
    if requested.is_some() || method == "server/discover" {
        if let Some(requested) = requested
            && !ProtocolVersion::KNOWN_VERSIONS
                .iter()
                .any(|v| v.as_str() == requested)
        {
            let requested: ProtocolVersion =
                serde_json::from_value(Value::String(requested.to_owned()))
                    .unwrap_or(ProtocolVersion::V_2026_07_28);
            return Err(Answer {
                outcome: Err(ErrorData::unsupported_protocol_version(
                    requested,
                    ProtocolVersion::KNOWN_VERSIONS,
                )),
                malformed: false,
                per_request: true,
            });
        }
        let declared = entry(META_CLIENT_CAPABILITIES).and_then(Declared::read);
        let missing: Vec<&str> = [
            (requested.is_none(), META_PROTOCOL_VERSION),
            (declared.is_none(), META_CLIENT_CAPABILITIES),
        ]
        .into_iter()
        .filter_map(|(missing, key)| missing.then_some(key))
        .collect();
        let Some(declared) = declared.filter(|_| missing.is_empty()) else {
            return Err(Answer {
                outcome: Err(ErrorData::invalid_params(
                    format!(
                        "request _meta is missing or has malformed required fields: {}",
                        missing.join(", ")
                    ),
                    None,
                )),
                malformed: true,
                per_request: true,
            });
        };
        return Ok(Lifecycle::PerRequest(declared));
    }
    let revision = message
        .revision
        .clone()
        .or_else(|| session.and_then(|s| s.revision.clone()))
        .unwrap_or_else(|| DEFAULT_REVISION.to_owned());
    Ok(Lifecycle::Session {
        revision,
        declared: session
            .and_then(|s| s.capabilities.as_ref())
            .map(Declared::of)
            .unwrap_or_default(),
    })
}

/// The `_meta` keys of a request's revision and its client's capabilities.
const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";

/// What the client declared that a method needs.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Declared {
    /// The tasks extension.
    tasks: bool,
    /// Form elicitation.
    elicitation: bool,
}

impl Declared {
    fn of(capabilities: &ClientCapabilities) -> Declared {
        Declared {
            tasks: capabilities.supports_tasks(),
            elicitation: capabilities.elicitation.is_some(),
        }
    }

    /// The capabilities `value` declares, or `None` when it is no `ClientCapabilities`. The
    /// shape clients send on every poll (`{"extensions": {...}}`, an object per extension) is
    /// read in place; any other through rmcp's type.
    fn read(value: &Value) -> Option<Declared> {
        if let Some(fields) = value.as_object()
            && fields.len() == 1
            && let Some(Value::Object(extensions)) = fields.get("extensions")
            && extensions.values().all(Value::is_object)
        {
            return Some(Declared {
                tasks: extensions.contains_key(rmcp::model::TASKS_EXTENSION_ID),
                elicitation: false,
            });
        }
        ClientCapabilities::deserialize(value)
            .ok()
            .map(|c| Declared::of(&c))
    }
}

/// The 2026-07-28 table.
async fn per_request(
    server: &FlowgateServer,
    request: &Request<'_>,
    method: &str,
    declared: Declared,
) -> Reply {
    let caller = request.caller;
    let message = request.message;
    let takes_tasks = declared.tasks;
    let outcome = match method {
        "server/discover" => decode_optional::<DiscoverRequestParams>(message).map(|_| {
            Out::typed(ServerResult::DiscoverResult(
                DiscoverResult::from_server_info(
                    ProtocolVersion::KNOWN_VERSIONS.to_vec(),
                    server.info().clone(),
                ),
            ))
        }),
        "tools/list" => tools_list(server, caller, message).map(Out::typed),
        "tools/call" => {
            let can_elicit = declared.elicitation;
            match Box::pin(call(server, caller, message, takes_tasks, can_elicit)).await {
                Ok(Called::Forbidden(scopes)) => return Reply::Forbidden(scopes),
                Ok(Called::Task(view)) => Ok(CallToolResponse::Task(CreateTaskResult::new(
                    crate::shapes::task(&view),
                ))),
                Ok(Called::Complete(result)) => Ok(CallToolResponse::Complete(result)),
                Ok(Called::Refused(why)) => Ok(CallToolResponse::Complete(Called::refusal(why))),
                Ok(Called::Ask(ask)) => Ok(CallToolResponse::InputRequired(ask)),
                Err(e) => Err(e),
            }
            .map(|response| Out::typed(ServerResult::from(response)))
        }
        "tasks/get" | "tasks/update" | "tasks/cancel" => {
            if let Err(e) = tasks_capability(server, takes_tasks, method) {
                return Reply::answer(Err(e), true);
            }
            tasks(server, caller, message, method).await
        }
        "subscriptions/listen" => {
            let opened = crate::listen::open(
                server,
                caller,
                message.id.as_ref(),
                non_null(message),
                || tasks_capability(server, takes_tasks, method),
            );
            return match opened {
                Ok(listener) => Reply::Listen(Box::new(listener)),
                Err(e) => Reply::answer(Err(e), true),
            };
        }
        other => Err(crate::errors::method_not_found(other)),
    };
    Reply::answer(
        outcome.and_then(|out| match out {
            Out::Typed(mut result) => {
                // `tools/list` gets `ttlMs: 0` (re-read it when told: listeners are told of
                // each reload) and a private cache scope (it depends on the caller's scopes).
                result.fill_missing_cache_hints();
                written(&result)
            }
            Out::Written(text) => Ok(Payload::Written(text)),
        }),
        true,
    )
}

/// The older revisions' table (2025-11-25 with its tasks dialect).
async fn session(
    server: &FlowgateServer,
    request: &Request<'_>,
    method: &str,
    revision: &str,
    declared: Declared,
) -> Reply {
    let caller = request.caller;
    let message = request.message;
    if revision == V2025 && dialect_2025::serves(server, message) {
        return match dialect_2025::handle(server, caller, message, request.outbox).await {
            Handled::Reply(outcome) => Reply::answer(outcome.map(Payload::Json), false),
            Handled::Forbidden(scopes) => Reply::Forbidden(scopes),
            Handled::Gone => Reply::Gone,
            Handled::Paused => Reply::Paused,
        };
    }
    let outcome = match method {
        "initialize" => initialize(server, message).map(Out::typed),
        "ping" => Ok(Out::typed(ServerResult::empty(()))),
        "tools/list" => tools_list(server, caller, message).map(Out::typed),
        "tools/call" => match call(server, caller, message, false, false).await {
            Ok(Called::Forbidden(scopes)) => return Reply::Forbidden(scopes),
            Ok(Called::Complete(result)) => Ok(Out::typed(ServerResult::from(
                CallToolResponse::Complete(result),
            ))),
            Ok(Called::Refused(why)) => Ok(Out::typed(ServerResult::from(
                CallToolResponse::Complete(Called::refusal(why)),
            ))),
            // Neither is given to a client that cannot take it.
            Ok(Called::Task(_) | Called::Ask(_)) => Err(ErrorData::internal_error(
                "the call did not run synchronously",
                None,
            )),
            Err(e) => Err(e),
        },
        // The tasks extension is the 2026-07-28 revision's; a session declares it at
        // `initialize` (never, before 2026-07-28).
        "tasks/get" | "tasks/update" | "tasks/cancel" => {
            match tasks_capability(server, declared.tasks, method) {
                Ok(()) => tasks(server, caller, message, method).await,
                Err(e) => Err(e),
            }
        }
        other => Err(crate::errors::method_not_found(other)),
    };
    Reply::answer(
        outcome.and_then(|out| match out {
            Out::Typed(mut result) => {
                result.strip_result_type_for_legacy_peer();
                result.strip_non_object_output_for_legacy_peer();
                written(&result)
            }
            Out::Written(text) => Ok(Payload::Written(text)),
        }),
        false,
    )
}

impl Out {
    fn typed(result: ServerResult) -> Out {
        Out::Typed(Box::new(result))
    }
}

/// A result, typed or already written.
enum Out {
    /// rmcp's type, shaped for the revision before it is written.
    Typed(Box<ServerResult>),
    /// Written in place (a `tasks/get` result).
    Written(String),
}

/// `initialize`: the server's description, in the revision agreed on (the client's when
/// flowgate speaks it, else the newest with a handshake).
fn initialize(server: &FlowgateServer, message: &Incoming) -> Result<ServerResult, ErrorData> {
    let request: InitializeRequestParams = params::decode(message.method(), non_null(message))?;
    let mut info = server.info().clone();
    info.protocol_version = negotiated(&request.protocol_version);
    Ok(ServerResult::InitializeResult(info))
}

/// The revision `initialize` settles on when the client asks for `requested`: that one when
/// flowgate speaks it, else the newest with a handshake. (A session keeps it: `stdio`.)
pub(crate) fn negotiated(requested: &ProtocolVersion) -> ProtocolVersion {
    if requested.has_initialize() && ProtocolVersion::KNOWN_VERSIONS.contains(requested) {
        return requested.clone();
    }
    ProtocolVersion::KNOWN_VERSIONS
        .iter()
        .filter(|v| v.has_initialize())
        .max_by(|a, b| a.as_str().cmp(b.as_str()))
        .cloned()
        .unwrap_or(ProtocolVersion::V_2025_11_25)
}

/// `tools/list`: the tools the caller's scopes let it call.
fn tools_list(
    server: &FlowgateServer,
    caller: &Caller,
    message: &Incoming,
) -> Result<ServerResult, ErrorData> {
    decode_optional::<PaginatedRequestParams>(message)?;
    Ok(ServerResult::ListToolsResult(
        ListToolsResult::with_all_items(
            server
                .tools_for(caller)
                .iter()
                .map(|t| t.tool.clone())
                .collect(),
        ),
    ))
}

/// `tools/call`, for a client that takes tasks (or not) and answers form elicitations (or
/// not).
async fn call(
    server: &FlowgateServer,
    caller: &Caller,
    message: &Incoming,
    takes_tasks: bool,
    can_elicit: bool,
) -> Result<Called, ErrorData> {
    let request: CallToolRequestParams = params::decode(message.method(), non_null(message))?;
    let call = Call {
        name: request.name.into_owned(),
        arguments: request.arguments.unwrap_or_default(),
        input_responses: request.input_responses,
        request_state: request.request_state,
        takes_tasks,
        can_elicit,
    };
    server.call(caller, call).await
}

/// `tasks/get`, `tasks/update`, `tasks/cancel` of the tasks extension.
async fn tasks(
    server: &FlowgateServer,
    caller: &Caller,
    message: &Incoming,
    method: &str,
) -> Result<Out, ErrorData> {
    match method {
        "tasks/get" => {
            // The most frequent request: its one param read in place.
            let task_id = match message.params.get("taskId").and_then(Value::as_str) {
                Some(id) => std::borrow::Cow::Borrowed(id),
                None => params::decode::<GetTaskParams>(method, non_null(message))?
                    .task_id
                    .into(),
            };
            let view = server.task_get(caller, &task_id).await?;
            // The most frequent request: written in place from the view when it can be.
            if let Some(text) = crate::shapes::written(&view) {
                return Ok(Out::Written(text));
            }
            Ok(Out::typed(ServerResult::GetTaskResult(GetTaskResult::new(
                crate::shapes::detailed(view),
            ))))
        }
        "tasks/update" => {
            let request: UpdateTaskParams = params::decode(method, non_null(message))?;
            server
                .task_update(caller, &request.task_id, request.input_responses)
                .await?;
            Ok(Out::typed(ServerResult::task_ack(())))
        }
        _ => {
            let request: CancelTaskParams = params::decode(method, non_null(message))?;
            server.task_cancel(caller, &request.task_id).await?;
            Ok(Out::typed(ServerResult::task_ack(())))
        }
    }
}

/// The tasks extension's methods exist when the server serves tasks (else `-32601`), for a
/// client that declared the extension (else `-32021`, naming it).
fn tasks_capability(
    server: &FlowgateServer,
    declared: bool,
    method: &str,
) -> Result<(), ErrorData> {
    if !server.info().capabilities.supports_tasks() {
        return Err(crate::errors::method_not_found(method));
    }
    if declared {
        Ok(())
    } else {
        Err(ErrorData::missing_required_client_capability(
            ClientCapabilities::builder().enable_tasks().build(),
        ))
    }
}

/// The params, `None` when the message has none.
fn non_null(message: &Incoming) -> Option<&Value> {
    Some(&message.params).filter(|p| !p.is_null())
}

/// Params that may be absent, decoded when present.
fn decode_optional<T: serde::de::DeserializeOwned>(message: &Incoming) -> Result<(), ErrorData> {
    match non_null(message) {
        None => Ok(()),
        Some(Value::Object(params)) => {
            // `_meta` is the request's, not the method's params.
            let mut params = params.clone();
            params.remove("_meta");
            params::decode::<T>(message.method(), Some(&Value::Object(params))).map(|_| ())
        }
        Some(params) => params::decode::<T>(message.method(), Some(params)).map(|_| ()),
    }
}

/// A result of rmcp's types, written once.
fn written(result: &ServerResult) -> Result<Payload, ErrorData> {
    serde_json::to_string(result)
        .map(Payload::Written)
        .map_err(|e| ErrorData::internal_error(format!("an answer did not serialise: {e}"), None))
}
