//! The rmcp handler: routes each MCP method to the code that serves it.

use std::sync::Arc;
use std::time::Duration;

use flowgate_core::handle::Keyring;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, CustomRequest, CustomResult,
    GetTaskParams, GetTaskResult, Implementation, ListToolsResult, PaginatedRequestParams,
    ServerCapabilities, ServerConfig, Tool, UpdateTaskParams,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};

use crate::ToolSet;

/// Server behaviour that is not per tool.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// How long a call waits for its execution when the client cannot take a task.
    pub sync_wait: Duration,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            sync_wait: Duration::from_secs(60),
        }
    }
}

/// The MCP server. Cheap to clone: the HTTP transport makes one per request.
#[derive(Debug, Clone)]
pub struct FlowgateServer {
    pub(crate) inner: Arc<Inner>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) tools: ToolSet,
    pub(crate) keys: Keyring,
    pub(crate) options: ServerOptions,
    pub(crate) info: ServerConfig,
}

impl FlowgateServer {
    /// A server offering `tools`, sealing task handles with `keys`.
    pub fn new(tools: ToolSet, keys: Keyring, options: ServerOptions) -> Self {
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_tasks()
            .build();
        let info = ServerConfig::new(capabilities)
            .with_server_info(Implementation::new("flowgate", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Each tool starts a workflow execution. Clients that speak the MCP tasks extension \
                 get a task at once: poll tasks/get, answer questions with tasks/update, stop it \
                 with tasks/cancel.",
            );
        FlowgateServer {
            inner: Arc::new(Inner {
                tools,
                keys,
                options,
                info,
            }),
        }
    }
}

impl ServerHandler for FlowgateServer {
    fn get_info(&self) -> ServerConfig {
        self.inner.info.clone()
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        // A caller sees only the tools its token's scopes let it call.
        let caller = crate::principal::caller(&ctx);
        Ok(ListToolsResult::with_all_items(
            self.inner
                .tools
                .iter()
                .filter(|t| crate::http::allowed(caller, &t.spec.scopes))
                .map(|t| t.tool.clone())
                .collect(),
        ))
    }

    /// Lets rmcp check `Mcp-Param-*` headers against tools whose input schema marks
    /// parameters with `x-mcp-header` (SEP-2243).
    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.inner.tools.get(name).map(|t| t.tool.clone())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.call(request, ctx).await
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        self.task_get(&request.task_id, &ctx).await
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.task_update(&request.task_id, request.input_responses, &ctx)
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

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.task_cancel(&request.task_id, &ctx).await
    }
}
