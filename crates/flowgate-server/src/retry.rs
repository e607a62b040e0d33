//! Retrying engine calls that failed for a passing reason (throttled, unreachable), with
//! exponential backoff. Adapters only classify errors; this is the one place that retries.
//!
//! Every engine call a request makes is bounded twice: by its own deadline ([`READ_DEADLINE`],
//! [`START_DEADLINE`]) and by the request's ([`Caller::bound`]: the platform's deadline less
//! the margin to answer), whichever comes first. A call cut short by the request's deadline is
//! a `Timeout` like any other: the start may have happened, the read is retried by the client.

use std::future::Future;
use std::time::Duration;

use flowgate_core::EngineError;

use crate::Caller;

/// Attempts per call, including the first.
const ATTEMPTS: u32 = 3;
const FIRST_DELAY: Duration = Duration::from_millis(100);
const MAX_DELAY: Duration = Duration::from_secs(2);

/// How long `tasks/get` may spend asking the engine, retries included: the client gets an
/// answer (the engine-unreachable status) within 10 s however the engine behaves.
pub(crate) const READ_DEADLINE: Duration = Duration::from_secs(8);
/// How long `tools/call` may spend starting an execution, retries included.
pub(crate) const START_DEADLINE: Duration = Duration::from_secs(20);

/// Runs `call` until it succeeds, fails for good, or has failed [`ATTEMPTS`] times.
pub(crate) async fn retrying<T, F, Fut>(call: F) -> Result<T, EngineError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, EngineError>>,
{
    attempts(call, true).await
}

/// [`retrying`] within `deadline` and the caller's own deadline: past either, a `Timeout`
/// (the call may have taken effect).
pub(crate) async fn within<T, F, Fut>(
    deadline: Duration,
    caller: &Caller,
    engine: &'static str,
    call: F,
) -> Result<T, EngineError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, EngineError>>,
{
    timed(caller.bound(deadline), engine, attempts(call, true)).await
}

/// A read (`tasks/get`) within [`READ_DEADLINE`] and the caller's deadline. A throttled read
/// is not retried: the account's quota is spent, and another call now would only spend the
/// next token; the caller reports the task as it stands and asks the client to come back later.
pub(crate) async fn reading<T, F, Fut>(
    caller: &Caller,
    engine: &'static str,
    call: F,
) -> Result<T, EngineError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, EngineError>>,
{
    timed(caller.bound(READ_DEADLINE), engine, attempts(call, false)).await
}

async fn timed<T>(
    deadline: Duration,
    engine: &'static str,
    work: impl Future<Output = Result<T, EngineError>>,
) -> Result<T, EngineError> {
    match tokio::time::timeout(deadline, work).await {
        Ok(result) => result,
        Err(_) => Err(EngineError::Timeout {
            engine,
            message: format!(
                "the engine did not answer within {:.1} s",
                deadline.as_secs_f32()
            ),
        }),
    }
}

async fn attempts<T, F, Fut>(mut call: F, retry_throttled: bool) -> Result<T, EngineError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, EngineError>>,
{
    let mut delay = FIRST_DELAY;
    let mut attempt = 1;
    loop {
        // The engine's span says which attempt this is.
        match flowgate_telemetry::attempt(attempt, call()).await {
            Err(e @ EngineError::Throttled { .. }) if !retry_throttled => return Err(e),
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[tokio::test(start_paused = true)]
    async fn retries_passing_failures_then_gives_up() {
        let calls = AtomicU32::new(0);
        let r: Result<(), _> = retrying(|| async {
            calls.fetch_add(1, Ordering::SeqCst);
            Err(EngineError::Unavailable {
                engine: "x",
                message: "down".into(),
                source: None,
            })
        })
        .await;
        assert!(r.is_err());
        assert_eq!(calls.load(Ordering::SeqCst), ATTEMPTS);
    }

    #[tokio::test(start_paused = true)]
    async fn does_not_retry_lasting_failures() {
        let calls = AtomicU32::new(0);
        let r: Result<(), _> = retrying(|| async {
            calls.fetch_add(1, Ordering::SeqCst);
            Err(EngineError::NotFound {
                engine: "x",
                what: "y".into(),
            })
        })
        .await;
        assert!(r.is_err());
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn reads_are_not_retried_when_throttled_and_end_by_the_deadline() {
        let calls = AtomicU32::new(0);
        let caller = Caller::anonymous("r");
        let r: Result<(), _> = reading(&caller, "x", || async {
            calls.fetch_add(1, Ordering::SeqCst);
            Err(EngineError::Throttled {
                engine: "x",
                retry_after: None,
            })
        })
        .await;
        assert!(matches!(r, Err(EngineError::Throttled { .. })));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        let hung: Result<(), _> = reading(&caller, "x", std::future::pending).await;
        assert!(matches!(hung, Err(EngineError::Timeout { .. })), "{hung:?}");
        let slow: Result<(), _> = within(START_DEADLINE, &caller, "x", std::future::pending).await;
        assert!(matches!(slow, Err(EngineError::Timeout { .. })), "{slow:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn engine_calls_end_before_the_callers_deadline() {
        let now = tokio::time::Instant::now();
        let caller = Caller::anonymous("r").with_deadline(Some(now + Duration::from_millis(5_000)));
        let slow: Result<(), _> = within(START_DEADLINE, &caller, "x", std::future::pending).await;
        assert!(matches!(slow, Err(EngineError::Timeout { .. })), "{slow:?}");
        assert_eq!(
            now.elapsed(),
            Duration::from_millis(3_000),
            "the deadline less the margin"
        );
        let now = tokio::time::Instant::now();
        let hung: Result<(), _> = reading(&caller, "x", std::future::pending).await;
        assert!(matches!(hung, Err(EngineError::Timeout { .. })), "{hung:?}");
        assert_eq!(now.elapsed(), Duration::ZERO, "past the margin: at once");
        // A later deadline leaves the call's own.
        let now = tokio::time::Instant::now();
        let caller = Caller::anonymous("r").with_deadline(Some(now + Duration::from_secs(600)));
        let hung: Result<(), _> = reading(&caller, "x", std::future::pending).await;
        assert!(matches!(hung, Err(EngineError::Timeout { .. })), "{hung:?}");
        assert_eq!(now.elapsed(), READ_DEADLINE);
    }

    #[tokio::test(start_paused = true)]
    async fn succeeds_after_a_passing_failure() {
        let calls = AtomicU32::new(0);
        let r = retrying(|| async {
            if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                Err(EngineError::Throttled {
                    engine: "x",
                    retry_after: None,
                })
            } else {
                Ok(7)
            }
        })
        .await;
        assert_eq!(r.expect("ok"), 7);
    }
}
