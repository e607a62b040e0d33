//! flowgate's MCP surface: the tools of a manifest, whose calls start workflow executions and
//! answer at once with a task.
//!
//! The server holds configuration, engine clients and the handle keys, and nothing else: no
//! task table. A task id is a sealed handle (see `flowgate_core::handle`); `tasks/get`,
//! `tasks/update` and `tasks/cancel` open it and ask the engine, so any instance answers for any
//! task and a restart loses nothing.
//!
//! Layered from the engines up, each module depending only on those below it:
//!
//! - [`ToolSet`] (`tools`, `output`): manifest tools bound to their engines, with their
//!   compiled schemas and the output schema enforced on every result.
//! - [`Caller`]: who is calling, as the transport established it.
//! - [`FlowgateServer`] (`server`) and the task operations, which take a [`Caller`] and no
//!   transport's types: `calls` (`tools/call`, with `mrtr` for arguments asked for first),
//!   `tasks` (`tasks/get`, `update`, `cancel`, the listing), `wait` (the one wait until an
//!   execution finishes), with `retry`, `errors`, `answers`, `hang_up` and `audit` beneath.
//! - The dialects: `mcp`, rmcp's `ServerHandler` (the 2026-07-28 wire, and older clients'
//!   synchronous calls), and `dialect_2025` (the 2025-11-25 tasks revision), both over the
//!   same operations; `jsonrpc` is the one parse of a message they share.
//! - The transports: [`http`] (stateless Streamable HTTP at `/mcp`) and [`stdio`].

mod answers;
mod audit;
mod caller;
mod calls;
mod dialect_2025;
mod errors;
mod hang_up;
pub mod http;
mod jsonrpc;
mod mcp;
mod mrtr;
mod output;
mod params;
mod retry;
mod server;
pub mod stdio;
mod tasks;
mod tools;
mod wait;

pub use caller::Caller;
pub use flowgate_auth::principal::ANONYMOUS;
pub use server::{FlowgateServer, ServerOptions};
pub use tools::{ToolEntry, ToolSet};
