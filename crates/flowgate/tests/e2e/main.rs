//! End-to-end tests of the `flowgate` binary with real MCP clients: rmcp's client over HTTP and
//! stdio, and raw JSON-RPC over HTTP for what a well-behaved client would never send.
//!
//! One test binary with modules, because each file under `tests/` links its own binary.

mod airflow;
mod audit;
mod bad_input;
mod conformance;
mod deploy;
mod dialect_2025;
mod first_day;
mod github_actions;
mod gitlab_ci;
mod google_identity;
mod google_workflows;
mod http_mode;
mod http_tasks;
mod lambda;
mod listen;
mod local_engine;
mod oauth;
mod protocol_edges;
mod reload;
mod restart;
mod safe_defaults;
mod stdio;
mod stepfunctions;
mod support;
mod task_headers;
mod telemetry;
mod transports;
