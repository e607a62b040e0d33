//! Retrying engine calls that failed for a passing reason (throttled, unreachable), with
//! exponential backoff. Adapters only classify errors; this is the one place that retries.

use std::future::Future;
use std::time::Duration;

use flowgate_core::EngineError;

/// Attempts per call, including the first.
const ATTEMPTS: u32 = 3;
const FIRST_DELAY: Duration = Duration::from_millis(100);
const MAX_DELAY: Duration = Duration::from_secs(2);

/// Runs `call` until it succeeds, fails for good, or has failed [`ATTEMPTS`] times.
pub(crate) async fn retrying<T, F, Fut>(mut call: F) -> Result<T, EngineError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, EngineError>>,
{
    let mut delay = FIRST_DELAY;
    let mut attempt = 1;
    loop {
        match call().await {
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
