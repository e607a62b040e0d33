//! flowgate's MCP surface: the tools of a manifest, whose calls start workflow executions and
//! answer at once with a task.
//!
//! The server holds configuration, engine clients and the handle keys, and nothing else: no
//! task table. A task id is a sealed handle (see `flowgate_core::handle`); `tasks/get`,
//! `tasks/update` and `tasks/cancel` open it and ask the engine, so any instance answers for any
//! task and a restart loses nothing.
//!
//! - [`FlowgateServer`]: the `rmcp::ServerHandler` (tools/list, tools/call, tasks/*).
//! - [`ToolSet`]: manifest tools bound to their engines, with their compiled schemas.
//! - [`http`]: stateless Streamable HTTP at `/mcp`; [`stdio`]: the same server over stdio.

mod answers;
mod audit;
mod calls;
mod client;
mod errors;
mod handler;
mod hang_up;
pub mod http;
mod mrtr;
mod output;
mod params;
mod principal;
mod retry;
pub mod stdio;
mod tasks;
mod tools;

pub use handler::{FlowgateServer, ServerOptions};
pub use principal::ANONYMOUS;
pub use tools::{ToolEntry, ToolSet};
