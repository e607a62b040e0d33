//! The task model of flowgate, with no network code.
//!
//! A workflow engine is flowgate's task store: this crate holds the vocabulary every part of the
//! server shares with every engine adapter.
//!
//! - [`TaskState`]: the seven states of the SEP-1686 design and the moves allowed between them.
//! - [`ExecutionRecord`]: what an engine reports about one execution, read fresh on every poll.
//! - [`Engine`]: the contract an adapter implements (start, get, respond, cancel, list).
//! - [`finished`]: ended executions' records, kept so a final answer costs no engine read.
//! - [`handle`]: task handles, the sealed tokens that are the task ids clients hold.
//! - [`observe`]: what adapters report to the operator's telemetry (throttles, the trace).
//! - [`pacing`]: a poll interval an account's API quota affords, for token-bucket engines.
//! - [`retrying`]: the decorator that retries engine calls after passing faults and ends each
//!   by its deadline and the request's, so neither adapters nor the task operations do.
//! - [`template`]: the one template language engines render call arguments with.
//! - [`wire`]: the projection of a record onto the MCP tasks extension (2026-07-28).
//! - `conformance` and `testing` (feature `testing`): the engine conformance suite and an
//!   in-memory [`Engine`] that runs it on every `cargo test`.

mod engine;
mod error;
pub mod finished;
pub mod handle;
pub mod observe;
pub mod pacing;
mod record;
mod registry;
pub mod retrying;
mod state;
pub mod template;
pub mod wire;

#[cfg(any(test, feature = "testing"))]
pub mod conformance;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use engine::{
    Capabilities, Engine, ExecutionRef, ExecutionSummary, IdempotencyKey, ListFilter, StartRequest,
    Started,
};
pub use error::{EngineError, kind_for_status};
pub use record::{Action, EngineFailure, ExecutionRecord, InputRequest, InputResponse};
pub use registry::{Factory, Registry, TargetError, TargetSpec, parse_target};
pub use state::TaskState;
