//! The Google Cloud Workflows engine: a tool names a workflow, a call creates an execution,
//! and the execution is the task.
//!
//! | flowgate | Workflows Executions API (v1) |
//! |---|---|
//! | start | `executions.create` with the arguments as the execution argument and labels `flowgate-tool`, `flowgate-principal` (the principal's tag) |
//! | get | `executions.get`; while ACTIVE also `executions.callbacks.list` (REST, not in the client crate) |
//! | respond | an HTTP request to the waiting callback's URL with its method |
//! | cancel | `executions.cancel` |
//! | list | `executions.list` filtered on flowgate's labels |
//!
//! Status mapping: QUEUED -> submitted, ACTIVE -> working (input_required while a callback has
//! a waiter), SUCCEEDED -> completed, FAILED -> failed (the error payload and context reach the
//! result), CANCELLED -> cancelled, UNAVAILABLE and anything else -> unknown.
//!
//! **Input through callbacks.** A workflow that runs `events.create_callback_endpoint` and
//! then `events.await_callback` in a step makes the task `input_required` while it waits. The
//! manifest says what to ask for each waiting step (`inputs: {<step>: {message,
//! requested_schema}}`, or `"*"` for any step); the key is the callback id. `tasks/update` sends
//! the MCP elicitation result to the callback URL as its JSON body:
//! `{"action": "accept" | "decline" | "cancel", "content": {...}}`; the workflow reads it at
//! `<result>.http_request.body`.

mod callbacks;
mod config;
mod engine;
mod error;
mod mapping;

pub use config::{CallLogLevel, CredentialsKind, GcwTarget, InputSpec};
pub use engine::WorkflowsEngine;

/// The engine kind manifests name: `engine: google-workflows`.
pub const KIND: &str = "google-workflows";

/// Registers the Workflows engine under [`KIND`].
pub fn register(registry: &mut flowgate_core::Registry) {
    registry.register(
        KIND,
        Box::new(|spec| {
            let target = GcwTarget::from_manifest(spec.config)?;
            Ok(std::sync::Arc::new(WorkflowsEngine::new(target))
                as std::sync::Arc<dyn flowgate_core::Engine>)
        }),
    );
}

mod policy;
pub use policy::roles;

#[cfg(feature = "testing")]
pub mod testing;
