//! The rmcp `ServerHandler`: the MCP methods rmcp decodes (the 2026-07-28 wire over HTTP, and
//! every revision on stdio), each mapped onto the task operations with the [`Caller`] the
//! transport established. Nothing here reads a transport's types: the transport hands over a
//! function that finds the caller of a request.

mod client;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, CreateTaskResult, CustomRequest,
    CustomResult, DetailedTask, GetTaskParams, GetTaskResult, InputRequests, ListToolsResult,
    PaginatedRequestParams, ServerConfig, Task, TaskPayload, TaskStatus, Tool, UpdateTaskParams,
};
use std::sync::Arc;

use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use tracing::Instrument as _;

use crate::calls::{Call, Called};
use crate::tasks::TaskView;
use crate::{Caller, FlowgateServer};
use flowgate_core::wire::{Outcome, WireStatus};

/// How a transport finds the caller of an rmcp request.
pub(crate) type CallerOf = Arc<dyn Fn(&RequestContext<RoleServer>) -> Caller + Send + Sync>;

/// The server as rmcp serves it on one transport.
#[derive(Clone)]
pub(crate) struct McpService {
    server: FlowgateServer,
    caller_of: CallerOf,
}

impl std::fmt::Debug for McpService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpService")
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}

impl McpService {
    /// `server` on a transport whose callers `caller_of` finds.
    pub(crate) fn new(server: FlowgateServer, caller_of: CallerOf) -> Self {
        McpService { server, caller_of }
    }
}

impl ServerHandler for McpService {
    fn get_info(&self) -> ServerConfig {
        self.server.info().clone()
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        // A caller sees only the tools its scopes let it call.
        let caller = (self.caller_of)(&ctx);
        Ok(ListToolsResult::with_all_items(
            self.server
                .tools_for(&caller)
                .iter()
                .map(|t| t.tool.clone())
                .collect(),
        ))
    }

    /// Lets rmcp check `Mcp-Param-*` headers against tools whose input schema marks
    /// parameters with `x-mcp-header` (SEP-2243).
    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.server.tool(name)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let caller = (self.caller_of)(&ctx);
        let call = Call {
            name: request.name.into_owned(),
            arguments: request.arguments.unwrap_or_default(),
            input_responses: request.input_responses,
            request_state: request.request_state,
            takes_tasks: client::takes_tasks(&ctx),
            can_elicit: client::can_elicit(&ctx),
        };
        // Engine calls are children of the request's span (rmcp runs handlers on tasks of
        // their own).
        let span = caller.span().clone();
        Ok(
            match caller
                .bounded(self.server.call(&caller, call))
                .instrument(span)
                .await?
            {
                Called::Task(view) => CallToolResponse::Task(CreateTaskResult::new(task(&view))),
                Called::Complete(result) => CallToolResponse::Complete(result),
                Called::Ask(ask) => CallToolResponse::InputRequired(ask),
            },
        )
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        let caller = (self.caller_of)(&ctx);
        let span = caller.span().clone();
        let view = caller
            .bounded(self.server.task_get(&caller, &request.task_id))
            .instrument(span)
            .await?;
        Ok(GetTaskResult::new(detailed(view)))
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let caller = (self.caller_of)(&ctx);
        let span = caller.span().clone();
        let update = self
            .server
            .task_update(&caller, &request.task_id, request.input_responses);
        caller.bounded(update).instrument(span).await
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let caller = (self.caller_of)(&ctx);
        let span = caller.span().clone();
        caller
            .bounded(self.server.task_cancel(&caller, &request.task_id))
            .instrument(span)
            .await
    }

    /// Requests rmcp could not decode into a method's params land here: `-32602` for methods
    /// flowgate serves, `-32601` for the rest.
    async fn on_custom_request(
        &self,
        request: CustomRequest,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        Err(crate::params::unrouted(&request))
    }
}

/// rmcp's status for the wire's.
fn status(status: WireStatus) -> TaskStatus {
    match status {
        WireStatus::Working => TaskStatus::Working,
        WireStatus::InputRequired => TaskStatus::InputRequired,
        WireStatus::Completed => TaskStatus::Completed,
        WireStatus::Failed => TaskStatus::Failed,
        WireStatus::Cancelled => TaskStatus::Cancelled,
    }
}

/// The task without its payload, as rmcp's `Task` (a created task).
fn task(view: &TaskView) -> Task {
    let envelope = view.wire.envelope();
    let mut task = Task::new(
        view.task_id.clone(),
        status(envelope.status),
        envelope.created_at.to_owned(),
        envelope.last_updated_at.to_owned(),
    )
    .with_poll_interval_ms(envelope.poll_interval_ms);
    if let Some(ttl) = envelope.ttl_ms {
        task = task.with_ttl_ms(ttl);
    }
    if let Some(message) = envelope.status_message {
        task = task.with_status_message(message.to_owned());
    }
    task
}

/// The task with its payload, as rmcp's `DetailedTask` (`tasks/get`).
pub(crate) fn detailed(view: TaskView) -> DetailedTask {
    let task = task(&view);
    let payload = match view.wire.outcome {
        Outcome::Working => TaskPayload::Working,
        Outcome::InputRequired(map) => {
            let input_requests: InputRequests =
                serde_json::from_value(serde_json::Value::Object(map)).unwrap_or_default();
            TaskPayload::InputRequired { input_requests }
        }
        Outcome::Completed(result) => TaskPayload::Completed {
            result: match result {
                serde_json::Value::Object(map) => map,
                _ => Default::default(),
            },
        },
        Outcome::Failed(e) => TaskPayload::Failed { error: e.to_json() },
        Outcome::Cancelled => TaskPayload::Cancelled,
    };
    DetailedTask::new(task, payload)
}
