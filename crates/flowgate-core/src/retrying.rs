//! Retries and deadlines of engine calls, in one decorator: [`Retrying`].
//!
//! Adapters classify their failures and never retry (the [`Engine`] contract); the server puts
//! each tool's engine in a [`Retrying`] when it binds the tool, and the task operations call
//! the engine plainly. It lives here, beside the trait, rather than in the server: the policy
//! is a property of the contract (which [`EngineError`]s pass, that a start may be repeated
//! under its [`StartRequest::idempotency_key`]), it needs nothing but the clock, and the
//! telemetry decorator reads the attempt number from it ([`attempt`]) without depending on
//! the server. (So object_store retries inside its client, not in each of its callers.)
//!
//! The policy, per call:
//!
//! | call | bounded by | retried |
//! |---|---|---|
//! | `start`, `respond`, `cancel` | [`START_DEADLINE`], retries included | passing faults (throttled, unavailable, timed out), [`ATTEMPTS`] in all, with exponential backoff (a throttle's `Retry-After` when it gives one) |
//! | `get`, `list` | [`READ_DEADLINE`], retries included | the same, but not a throttle: the account's quota is spent, and another call now would only spend the next token; the caller reports the task as it stands and asks the client to come back later |
//! | `run_sync` | the request's deadline only (a synchronous run lasts as long as its workflow) | never: the run may have happened even when its answer was lost |
//!
//! Every call also ends by the request's deadline, when the request has one: the transport
//! runs each request inside [`answer_by`] (the platform's deadline less the margin to answer),
//! a task-local this decorator reads. Past either deadline the call is an
//! [`EngineError::Timeout`], like any other: a start may have happened, a read is retried by
//! the client. So a `tasks/get` answers within [`READ_DEADLINE`] (and before its request's
//! deadline) however the engine behaves.
//!
//! Order with telemetry: `Retrying` goes outside the telemetry decorator, so each attempt is
//! an engine call of its own, with its span and its count, marked as a retry from the second
//! on ([`attempt`]); a deadline ends the attempt under way, which is then not counted.

use std::future::Future;
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use crate::{
    Capabilities, Engine, EngineError, ExecutionRecord, ExecutionRef, ExecutionSummary,
    InputResponse, ListFilter, StartRequest, Started,
};

/// Attempts per call, including the first.
pub const ATTEMPTS: u32 = 3;
/// The wait before the second attempt; it doubles for each further one, up to [`MAX_DELAY`].
pub const FIRST_DELAY: Duration = Duration::from_millis(100);
/// The longest wait between two attempts (and the most of a throttle's `Retry-After` waited).
pub const MAX_DELAY: Duration = Duration::from_secs(2);
/// How long a read (`get`, `list`) may take, retries included: a `tasks/get` answers (with the
/// engine-unreachable status, if it comes to that) within 10 s however the engine behaves.
pub const READ_DEADLINE: Duration = Duration::from_secs(8);
/// How long a change (`start`, `respond`, `cancel`) may take, retries included.
pub const START_DEADLINE: Duration = Duration::from_secs(20);

tokio::task_local! {
    /// When the request being served must have its engine calls done.
    static ANSWER_BY: Option<Instant>;
    /// Which attempt of a call the current engine call is (1 for the first).
    static ATTEMPT: u32;
}

/// Runs `work` (a request's operation) so that every engine call in it through [`Retrying`]
/// ends by `by` (`None`: by its own deadline only). Replaces any deadline set around it.
/// (A plain function returning the scope's future: an `async fn` would hold `work` twice, as
/// its argument and inside the scope, and every request's future is wrapped in this one.)
pub fn answer_by<F: Future>(by: Option<Instant>, work: F) -> impl Future<Output = F::Output> {
    ANSWER_BY.scope(by, work)
}

/// When the engine calls of the current request must end, if it set a deadline.
pub fn request_deadline() -> Option<Instant> {
    ANSWER_BY.try_with(|by| *by).ok().flatten()
}

/// Which attempt of an engine call the current one is: 1 for the first (and outside
/// [`Retrying`]), 2 for the first retry.
pub fn attempt() -> u32 {
    ATTEMPT.try_with(|a| *a).unwrap_or(1)
}

/// Which failures a call retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Retry {
    /// Every passing fault.
    Passing,
    /// Passing faults but a throttle.
    NotThrottled,
}

/// An engine whose calls are retried and bounded by the policy of this module.
#[derive(Debug)]
pub struct Retrying<E> {
    inner: E,
}

impl<E: Engine> Retrying<E> {
    /// `inner`, its calls retried and bounded.
    pub fn new(inner: E) -> Self {
        Retrying { inner }
    }

    /// The engine being decorated.
    pub fn inner(&self) -> &E {
        &self.inner
    }

    /// `call`, retried as `retry` says, within `limit` and the request's deadline.
    async fn bounded<T, F, Fut>(
        &self,
        limit: Duration,
        retry: Retry,
        call: F,
    ) -> Result<T, EngineError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, EngineError>>,
    {
        timed(self.inner.kind(), Some(limit), attempts(retry, call)).await
    }
}

/// `work`, ended by `limit` (if any) and the request's deadline (if any), whichever is first:
/// past it, a `Timeout`.
async fn timed<T>(
    engine: &'static str,
    limit: Option<Duration>,
    work: impl Future<Output = Result<T, EngineError>>,
) -> Result<T, EngineError> {
    let now = Instant::now();
    let end = match (limit.map(|l| now + l), request_deadline()) {
        (Some(own), Some(request)) => own.min(request),
        (Some(end), None) | (None, Some(end)) => end,
        (None, None) => return work.await,
    };
    match tokio::time::timeout_at(end, work).await {
        Ok(result) => result,
        Err(_) => Err(EngineError::Timeout {
            engine,
            message: format!(
                "the engine did not answer within {:.1} s",
                end.saturating_duration_since(now).as_secs_f32()
            ),
        }),
    }
}

/// Runs `call` until it succeeds, fails for good, or has failed [`ATTEMPTS`] times.
async fn attempts<T, F, Fut>(retry: Retry, mut call: F) -> Result<T, EngineError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, EngineError>>,
{
    let mut delay = FIRST_DELAY;
    let mut attempt = 1;
    loop {
        match ATTEMPT.scope(attempt, call()).await {
            Err(e @ EngineError::Throttled { .. }) if retry == Retry::NotThrottled => {
                return Err(e);
            }
            Err(e) if e.is_retryable() && attempt < ATTEMPTS => {
                let wait = match &e {
                    EngineError::Throttled {
                        retry_after: Some(after),
                        ..
                    } => (*after).min(MAX_DELAY),
                    _ => delay,
                };
                tracing::debug!(error = %e, attempt, ?wait, "engine call failed; retrying");
                tokio::time::sleep(wait).await;
                delay = (delay * 2).min(MAX_DELAY);
                attempt += 1;
            }
            other => return other,
        }
    }
}

#[deny(clippy::missing_trait_methods)]
#[async_trait]
impl<E: Engine> Engine for Retrying<E> {
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn retention_ms(&self) -> Option<u64> {
        self.inner.retention_ms()
    }

    fn pacing(&self) -> Option<Duration> {
        self.inner.pacing()
    }

    fn reference_scope(&self) -> String {
        self.inner.reference_scope()
    }

    fn locator<'a>(&self, execution: &'a ExecutionRef) -> Option<&'a str> {
        self.inner.locator(execution)
    }

    fn reference_at(&self, locator: &str) -> ExecutionRef {
        self.inner.reference_at(locator)
    }

    async fn run_sync(&self, request: StartRequest) -> Result<ExecutionRecord, EngineError> {
        timed(self.inner.kind(), None, self.inner.run_sync(request)).await
    }

    async fn start(&self, request: StartRequest) -> Result<Started, EngineError> {
        // Every attempt carries the request's one idempotency key: at most one execution.
        self.bounded(START_DEADLINE, Retry::Passing, || {
            self.inner.start(request.clone())
        })
        .await
    }

    fn execution_for(&self, request: &StartRequest) -> Option<ExecutionRef> {
        self.inner.execution_for(request)
    }

    async fn get(&self, execution: &ExecutionRef) -> Result<ExecutionRecord, EngineError> {
        self.bounded(READ_DEADLINE, Retry::NotThrottled, || {
            self.inner.get(execution)
        })
        .await
    }

    async fn respond(
        &self,
        execution: &ExecutionRef,
        key: &str,
        response: InputResponse,
    ) -> Result<(), EngineError> {
        self.bounded(START_DEADLINE, Retry::Passing, || {
            self.inner.respond(execution, key, response.clone())
        })
        .await
    }

    async fn cancel(&self, execution: &ExecutionRef) -> Result<(), EngineError> {
        self.bounded(START_DEADLINE, Retry::Passing, || {
            self.inner.cancel(execution)
        })
        .await
    }

    async fn list(&self, filter: ListFilter) -> Result<Vec<ExecutionSummary>, EngineError> {
        self.bounded(READ_DEADLINE, Retry::NotThrottled, || {
            self.inner.list(filter.clone())
        })
        .await
    }
}

#[cfg(test)]
mod tests;
