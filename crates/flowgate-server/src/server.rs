//! The server's state: configuration, engine clients and the handle keys, and nothing else.
//! The tool set is swapped whole when the manifest is reloaded ([`FlowgateServer::replace_tools`]).
//! Every task operation is a method of [`FlowgateServer`] taking a [`Caller`](crate::Caller)
//! (modules `calls`, `tasks`, `wait`); the transports and dialects call them.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use flowgate_core::handle::{Keyring, ToolTag};
use rmcp::model::{Implementation, ServerCapabilities, ServerConfig};

use crate::holds::Holds;
use crate::{Caller, ToolEntry, ToolSet};

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
    /// The tools being served; a request takes the set as it is when it asks, so a reload
    /// never changes the tools under a request.
    tools: RwLock<Arc<ToolSet>>,
    /// Tools a reload took away (or moved to another engine or scope), by task-id tag: their
    /// tasks still answer through the engine that started them.
    retired: RwLock<HashMap<ToolTag, Arc<ToolEntry>>>,
    pub(crate) keys: Keyring,
    pub(crate) options: ServerOptions,
    pub(crate) info: ServerConfig,
    /// The requests each principal holds open now.
    pub(crate) holds: Holds,
    /// The tool set's generation, moved on by each reload: open listeners that asked for
    /// `toolsListChanged` watch it (module `listen`).
    tools_changed: tokio::sync::watch::Sender<u64>,
}

impl FlowgateServer {
    /// A server offering `tools`, sealing task handles with `keys`.
    pub fn new(tools: ToolSet, keys: Keyring, options: ServerOptions) -> Self {
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
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
                tools: RwLock::new(Arc::new(tools)),
                retired: RwLock::new(HashMap::new()),
                keys,
                options,
                info,
                holds: Holds::default(),
                tools_changed: tokio::sync::watch::Sender::new(0),
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

    /// The tools being served now.
    pub fn tools(&self) -> Arc<ToolSet> {
        Arc::clone(&self.inner.tools.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// Serves `tools` from now on, in place of the tools being served: requests already
    /// running finish with the entries they took. Tasks of a tool that `tools` lacks, or binds
    /// to another engine or scope (its task-id tag changed), keep answering through the engine
    /// that started them.
    pub fn replace_tools(&self, tools: ToolSet) {
        let new = Arc::new(tools);
        let old = std::mem::replace(
            &mut *self.inner.tools.write().unwrap_or_else(|p| p.into_inner()),
            Arc::clone(&new),
        );
        let mut retired = self
            .inner
            .retired
            .write()
            .unwrap_or_else(|p| p.into_inner());
        for entry in old.iter() {
            if new.by_tag(&entry.tag).is_none() {
                retired.insert(entry.tag, Arc::clone(entry));
            }
        }
        // A tool served again answers through its new entry.
        retired.retain(|tag, _| new.by_tag(tag).is_none());
        drop(retired);
        // Listeners push `notifications/tools/list_changed` (a client re-reads `tools/list`).
        self.inner
            .tools_changed
            .send_modify(|generation| *generation += 1);
    }

    /// A watch of the tool set's generation, which each reload moves on; changes after this
    /// call are seen.
    pub(crate) fn tools_changed(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.tools_changed.subscribe()
    }

    /// The entry that answers for tasks whose ids carry `tag`: the one being served, or one a
    /// reload retired.
    pub(crate) fn entry_by_tag(&self, tag: &ToolTag) -> Option<Arc<ToolEntry>> {
        if let Some(entry) = self.tools().by_tag(tag) {
            return Some(Arc::clone(entry));
        }
        self.inner
            .retired
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(tag)
            .map(Arc::clone)
    }

    /// The entry that answers for tasks of `tool` started on `engine` (ids sealed before
    /// they were compact name their tool): the one being served, or one a reload retired.
    pub(crate) fn entry_for(&self, tool: &str, engine: &str) -> Option<Arc<ToolEntry>> {
        if let Some(entry) = self.tools().get(tool).filter(|e| e.engine.kind() == engine) {
            return Some(Arc::clone(entry));
        }
        self.inner
            .retired
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .find(|e| e.spec.name == tool && e.engine.kind() == engine)
            .map(Arc::clone)
    }

    /// The tools `caller` may see and call (its scopes allow them), in manifest order.
    pub(crate) fn tools_for(&self, caller: &Caller) -> Vec<Arc<ToolEntry>> {
        self.tools()
            .iter()
            .filter(|t| caller.may_use(&t.spec.scopes))
            .cloned()
            .collect()
    }

    /// The entry of the tool called `name`, being served now.
    pub(crate) fn tool_entry(&self, name: &str) -> Option<Arc<ToolEntry>> {
        self.tools().get(name).cloned()
    }
}
