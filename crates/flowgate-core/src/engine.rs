//! The contract between the server and a workflow engine.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{EngineError, ExecutionRecord, InputResponse, TaskState};

/// The engine's own reference to one execution (a run id, an execution ARN, a resource name).
///
/// Opaque to the server, which only seals it into a task handle and hands it back.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ExecutionRef(pub String);

impl std::fmt::Display for ExecutionRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The one key of one tool call, made before its first start attempt and sent with every
/// retry, so that an engine reaches the same execution however often the start is retried
/// (an answer lost after the engine accepted the start must not run the workflow twice).
///
/// 32 lowercase hex digits (128 random bits): valid as it is in a Step Functions execution
/// name, a Google Cloud label value, a CI variable or a workflow input.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    /// A fresh random key, for a new call.
    pub fn new() -> Self {
        IdempotencyKey(format!("{:032x}", rand::random::<u128>()))
    }

    /// A key from its text, if it has the key's form (32 lowercase hex digits).
    pub fn parse(text: &str) -> Option<Self> {
        let ok = text.len() == 32 && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        ok.then(|| IdempotencyKey(text.to_owned()))
    }

    /// The key's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for IdempotencyKey {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a tool call hands the engine to start an execution.
#[derive(Debug, Clone, PartialEq)]
pub struct StartRequest {
    /// The manifest tool being called.
    pub tool: String,
    /// The validated call arguments.
    pub arguments: Value,
    /// The caller's principal tag: the one digest of the principal (16 lowercase hex digits,
    /// `flowgate_auth::principal::digest`), never the principal itself. Valid as it is in a
    /// Step Functions execution name, a Google Cloud label value, a CI variable or a workflow
    /// input: every adapter marks the execution with it verbatim, and [`ListFilter`] filters by
    /// it verbatim, so one principal has one tag in every engine.
    pub principal_tag: String,
    /// The call's key: every attempt to start this call carries the same one, and an engine
    /// must reach the same execution for it (never start a second).
    pub idempotency_key: IdempotencyKey,
    /// How long the server told the client it keeps this task (`ttlMs`, counted from
    /// creation), `None` for no limit. Engines with their own retention ignore it; the local
    /// engine, whose runs nothing else would ever remove, deletes a finished run after it.
    pub ttl_ms: Option<u64>,
}

impl StartRequest {
    /// A request for `tool` with `arguments`, for the principal tagged `principal_tag`, with a
    /// fresh idempotency key.
    pub fn new(
        tool: impl Into<String>,
        arguments: Value,
        principal_tag: impl Into<String>,
    ) -> Self {
        StartRequest {
            tool: tool.into(),
            arguments,
            principal_tag: principal_tag.into(),
            idempotency_key: IdempotencyKey::new(),
            ttl_ms: None,
        }
    }

    /// The request with the task's advertised `ttlMs` (`None`: no limit).
    #[must_use]
    pub fn with_ttl_ms(mut self, ttl_ms: Option<u64>) -> Self {
        self.ttl_ms = ttl_ms;
        self
    }
}

/// The engine's acknowledgement of a start: the execution exists and `get` will find it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Started {
    /// The new execution.
    pub execution: ExecutionRef,
    /// When the engine created it.
    pub created_at: DateTime<Utc>,
}

/// Which optional operations an engine supports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Capabilities {
    /// `cancel` really stops the execution.
    pub cancel: bool,
    /// Executions can ask questions that `respond` answers.
    pub inputs: bool,
    /// `list` finds executions this server started.
    pub list: bool,
    /// Executions only run synchronously ([`Engine::run_sync`]); never offered as tasks.
    pub synchronous_only: bool,
}

impl Capabilities {
    /// Every capability of an engine whose executions run as tasks.
    pub fn all() -> Self {
        Capabilities {
            cancel: true,
            inputs: true,
            list: true,
            synchronous_only: false,
        }
    }
}

/// A filter for [`Engine::list`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ListFilter {
    /// Only executions started for this principal tag ([`StartRequest::principal_tag`]).
    pub principal_tag: Option<String>,
    /// At most this many (the engine may return fewer).
    pub limit: Option<usize>,
}

impl ListFilter {
    /// Executions started for `principal_tag`, at most `limit` of them.
    pub fn for_principal(principal_tag: impl Into<String>, limit: Option<usize>) -> Self {
        ListFilter {
            principal_tag: Some(principal_tag.into()),
            limit,
        }
    }
}

/// One line of [`Engine::list`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutionSummary {
    /// The execution.
    pub execution: ExecutionRef,
    /// Its mapped state.
    pub state: TaskState,
    /// When the engine created it.
    pub created_at: DateTime<Utc>,
}

/// A workflow engine, bound to one tool's target (a state machine, a workflow, a command).
///
/// The engine is the task store: every method answers from it. An adapter may keep a
/// process-local copy of what the engine already said when that cannot go stale (a history
/// that only grows, a finished execution) or only for a moment (a record reused for a second
/// by concurrent polls), never anything another instance could not read from the engine.
/// Implementations classify their failures into [`EngineError`] kinds and never retry on their
/// own; retries with backoff, and the calls' deadlines, are the
/// [`Retrying`](crate::retrying::Retrying) decorator's policy.
#[async_trait]
pub trait Engine: Send + Sync + std::fmt::Debug + 'static {
    /// The engine kind (`local`, `stepfunctions`, ...), as written in manifests.
    fn kind(&self) -> &'static str;

    /// What this engine can do beyond start and get.
    fn capabilities(&self) -> Capabilities;

    /// How long the engine keeps an execution (the task's `ttlMs` unless the manifest says),
    /// `None` when the engine does not say.
    fn retention_ms(&self) -> Option<u64> {
        None
    }

    /// The least time between polls this engine asks for right now (from the rate limits it
    /// has seen: remaining quota, resets, throttling), `None` when it has no opinion. The
    /// server advertises the larger of this and the tool's own `pollIntervalMs`.
    fn pacing(&self) -> Option<Duration> {
        None
    }

    /// What, beside a reference's locator, names this tool's executions: the state machine,
    /// the repository, the workflow, the run folder. Task ids are bound to it (module
    /// [`handle`](crate::handle)), so a tool that a reload points elsewhere is another tool to
    /// its old ids. Empty by default.
    fn reference_scope(&self) -> String {
        String::new()
    }

    /// The part of `execution` a task id carries: the reference less what the tool's scope
    /// fixes (an execution name, a run number). `None` when the reference is not one of this
    /// tool's. Task ids hold at most [`handle::LOCATOR_MAX`](crate::handle::LOCATOR_MAX) bytes
    /// of packed locator, so each engine keeps its longest locator within that and tests it
    /// ([`handle::task_id_fits`](crate::handle::task_id_fits)). The whole reference by default.
    fn locator<'a>(&self, execution: &'a ExecutionRef) -> Option<&'a str> {
        Some(&execution.0)
    }

    /// The reference at `locator`: what [`Engine::locator`] took away, put back.
    fn reference_at(&self, locator: &str) -> ExecutionRef {
        ExecutionRef(locator.to_owned())
    }

    /// Runs an execution to its end and returns its final record, for engines whose
    /// executions are synchronous only ([`Capabilities::synchronous_only`]).
    ///
    /// # Errors
    /// `Unsupported` by default; otherwise as [`Engine::start`].
    async fn run_sync(&self, request: StartRequest) -> Result<ExecutionRecord, EngineError> {
        let _ = request;
        Err(EngineError::Unsupported {
            engine: self.kind(),
            operation: "run_sync",
        })
    }

    /// Starts an execution. Returns only once [`Engine::get`] would find it.
    ///
    /// Exactly once per [`StartRequest::idempotency_key`]: a second call with the same key
    /// (a retry after a lost answer, a timeout, a crash) returns the execution the first one
    /// started, and never starts another.
    ///
    /// # Errors
    /// `InvalidInput` when the engine refuses the arguments, `Denied`, `Throttled`,
    /// `Unavailable`, `Timeout` (the start may or may not have happened: retry with the same key).
    async fn start(&self, request: StartRequest) -> Result<Started, EngineError>;

    /// Where a start of `request` would be, for engines whose execution references follow
    /// from the request alone (a named execution): when a start times out, the server hands
    /// the client this task to check instead of leaving it to guess. `None` by default.
    fn execution_for(&self, request: &StartRequest) -> Option<ExecutionRef> {
        let _ = request;
        None
    }

    /// Reads the execution's current record.
    ///
    /// # Errors
    /// `NotFound` for a reference the engine does not know (or has expired), never a panic.
    async fn get(&self, execution: &ExecutionRef) -> Result<ExecutionRecord, EngineError>;

    /// Delivers the answer to one outstanding input request.
    ///
    /// # Errors
    /// `NotFound` when the execution or the key is not (or no longer) outstanding.
    async fn respond(
        &self,
        execution: &ExecutionRef,
        key: &str,
        response: InputResponse,
    ) -> Result<(), EngineError>;

    /// Asks the engine to stop the execution. Stopping a finished execution is not an error.
    ///
    /// # Errors
    /// `NotFound` for an unknown execution; `Unsupported` when the engine cannot cancel.
    async fn cancel(&self, execution: &ExecutionRef) -> Result<(), EngineError>;

    /// Lists executions started through flowgate.
    ///
    /// # Errors
    /// `Unsupported` by default.
    async fn list(&self, filter: ListFilter) -> Result<Vec<ExecutionSummary>, EngineError> {
        let _ = filter;
        Err(EngineError::Unsupported {
            engine: self.kind(),
            operation: "list",
        })
    }
}

macro_rules! forward_engine {
    ($ty:ty) => {
        #[deny(clippy::missing_trait_methods)]
        #[async_trait]
        impl<E: Engine + ?Sized> Engine for $ty {
            fn kind(&self) -> &'static str {
                (**self).kind()
            }
            fn capabilities(&self) -> Capabilities {
                (**self).capabilities()
            }
            fn retention_ms(&self) -> Option<u64> {
                (**self).retention_ms()
            }
            fn pacing(&self) -> Option<Duration> {
                (**self).pacing()
            }
            fn reference_scope(&self) -> String {
                (**self).reference_scope()
            }
            fn locator<'a>(&self, execution: &'a ExecutionRef) -> Option<&'a str> {
                (**self).locator(execution)
            }
            fn reference_at(&self, locator: &str) -> ExecutionRef {
                (**self).reference_at(locator)
            }
            async fn run_sync(
                &self,
                request: StartRequest,
            ) -> Result<ExecutionRecord, EngineError> {
                (**self).run_sync(request).await
            }
            async fn start(&self, request: StartRequest) -> Result<Started, EngineError> {
                (**self).start(request).await
            }
            fn execution_for(&self, request: &StartRequest) -> Option<ExecutionRef> {
                (**self).execution_for(request)
            }
            async fn get(&self, execution: &ExecutionRef) -> Result<ExecutionRecord, EngineError> {
                (**self).get(execution).await
            }
            async fn respond(
                &self,
                execution: &ExecutionRef,
                key: &str,
                response: InputResponse,
            ) -> Result<(), EngineError> {
                (**self).respond(execution, key, response).await
            }
            async fn cancel(&self, execution: &ExecutionRef) -> Result<(), EngineError> {
                (**self).cancel(execution).await
            }
            async fn list(&self, filter: ListFilter) -> Result<Vec<ExecutionSummary>, EngineError> {
                (**self).list(filter).await
            }
        }
    };
}

forward_engine!(Arc<E>);
forward_engine!(Box<E>);

#[cfg(test)]
mod tests {
    use super::*;

    fn takes_engine<E: Engine>(_: &E) {}

    #[test]
    fn dyn_engine_is_usable_behind_arc_and_box() {
        let e: Arc<dyn Engine> = Arc::new(crate::testing::FakeEngine::new());
        takes_engine(&e);
        let b: Box<dyn Engine> = Box::new(crate::testing::FakeEngine::new());
        takes_engine(&b);
    }
}
