//! The server's state: configuration, engine clients and the handle keys, and nothing else.
//! Every task operation is a method of [`FlowgateServer`] taking a [`Caller`](crate::Caller)
//! (modules `calls`, `tasks`, `wait`); the transports and dialects call them.

use std::sync::Arc;
use std::time::Duration;

use flowgate_core::handle::Keyring;
use rmcp::model::{Implementation, ServerCapabilities, ServerConfig, Tool};

use crate::holds::Holds;
use crate::{Caller, ToolSet};

/// Server behaviour that is not per tool.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// How long a call waits for its execution when the client cannot take a task.
    pub sync_wait: Duration,
    /// How many requests one principal may hold open at once (`tasks/result` holds and
    /// synchronous calls): one more is refused (module `holds`).
    pub max_holds_per_caller: usize,
}

/// The default of [`ServerOptions::max_holds_per_caller`].
pub const DEFAULT_MAX_HOLDS_PER_CALLER: usize = 10;

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            sync_wait: Duration::from_secs(60),
            max_holds_per_caller: DEFAULT_MAX_HOLDS_PER_CALLER,
        }
    }
}

/// The MCP server. Cheap to clone.
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
    /// The requests each principal holds open now.
    pub(crate) holds: Holds,
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
                holds: Holds::default(),
            }),
        }
    }

    /// A hold slot for `caller` (module `holds`), or `Err(limit)` when it already holds the
    /// most it may.
    pub(crate) fn hold(&self, caller: &Caller) -> Result<crate::holds::HoldSlot, usize> {
        self.inner
            .holds
            .take(caller, self.inner.options.max_holds_per_caller)
    }

    /// What the server says about itself in `initialize` and `server/discover`.
    pub(crate) fn info(&self) -> &ServerConfig {
        &self.inner.info
    }

    /// The tools `caller` may see and call (its scopes allow them), in manifest order.
    pub(crate) fn tools_for<'a>(
        &'a self,
        caller: &'a Caller,
    ) -> impl Iterator<Item = &'a crate::ToolEntry> + 'a {
        self.inner
            .tools
            .iter()
            .filter(|t| caller.may_use(&t.spec.scopes))
    }

    /// The MCP description of the tool called `name`.
    pub(crate) fn tool(&self, name: &str) -> Option<&Tool> {
        self.inner.tools.get(name).map(|t| &t.tool)
    }
}
