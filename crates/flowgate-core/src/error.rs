//! The one error type engines return, sorted by what the caller should do about it.

use std::time::Duration;

type Source = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why an engine call did not succeed.
///
/// The kinds separate what the server must treat differently: a missing execution is a task
/// that does not exist (`-32602`), bad input is the caller's to fix, a throttle or an outage is
/// retried with backoff and reported on the task without losing it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// The execution (or the thing it names) does not exist, or has expired.
    #[error("{engine}: not found: {what}")]
    NotFound {
        /// The engine kind.
        engine: &'static str,
        /// What was looked for.
        what: String,
    },
    /// The engine refused the input as invalid.
    #[error("{engine}: invalid input: {message}")]
    InvalidInput {
        /// The engine kind.
        engine: &'static str,
        /// What was wrong.
        message: String,
    },
    /// The engine refused flowgate's credentials or permissions.
    #[error("{engine}: permission denied: {message}")]
    Denied {
        /// The engine kind.
        engine: &'static str,
        /// What the engine said.
        message: String,
    },
    /// The engine asked flowgate to slow down; try again later.
    #[error("{engine}: throttled")]
    Throttled {
        /// The engine kind.
        engine: &'static str,
        /// How long the engine asked to wait, when it said.
        retry_after: Option<Duration>,
    },
    /// The engine could not be reached or failed on its side; try again later.
    #[error("{engine}: unavailable: {message}")]
    Unavailable {
        /// The engine kind.
        engine: &'static str,
        /// What happened.
        message: String,
        /// The underlying cause.
        #[source]
        source: Option<Source>,
    },
    /// The engine did not answer within the call's deadline. Unlike `Unavailable`, the call
    /// may have taken effect: only an idempotent call (a start with the same key, a get) may
    /// simply be tried again.
    #[error("{engine}: no answer in time: {message}")]
    Timeout {
        /// The engine kind.
        engine: &'static str,
        /// Which call, and how long it waited.
        message: String,
    },
    /// The tool's setup is wrong in a way only an operator can fix: the workflow lacks what
    /// flowgate needs, the credentials cannot see or may not change what the tool names. Calling
    /// again, with any arguments, gets the same answer; the message says what to fix.
    #[error("{engine}: the tool is not set up right (tell an operator): {message}")]
    Misconfigured {
        /// The engine kind.
        engine: &'static str,
        /// What is wrong, and how to fix it.
        message: String,
    },
    /// The engine cannot do this at all.
    #[error("{engine}: {operation} is not supported")]
    Unsupported {
        /// The engine kind.
        engine: &'static str,
        /// The operation asked for.
        operation: &'static str,
    },
}

impl EngineError {
    /// Whether the same call may succeed if tried again later.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            EngineError::Throttled { .. }
                | EngineError::Unavailable { .. }
                | EngineError::Timeout { .. }
        )
    }

    /// Whether the error means "there is no such execution".
    pub fn is_not_found(&self) -> bool {
        matches!(self, EngineError::NotFound { .. })
    }

    /// An [`EngineError::Unavailable`] carrying `source` as its cause.
    pub fn unavailable(
        engine: &'static str,
        message: impl Into<String>,
        source: impl Into<Source>,
    ) -> Self {
        EngineError::Unavailable {
            engine,
            message: message.into(),
            source: Some(source.into()),
        }
    }
}

/// Maps an HTTP status an engine's API answered onto the kind of error it means.
///
/// One table for every HTTP-based adapter, so they agree on what 404 or 429 mean.
pub fn kind_for_status(engine: &'static str, status: u16, message: String) -> EngineError {
    match status {
        400 | 409 | 422 => EngineError::InvalidInput { engine, message },
        401 | 403 => EngineError::Denied { engine, message },
        404 | 410 => EngineError::NotFound {
            engine,
            what: message,
        },
        429 => {
            crate::observe::throttled(engine);
            EngineError::Throttled {
                engine,
                retry_after: None,
            }
        }
        _ => EngineError::Unavailable {
            engine,
            message,
            source: None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_map_to_kinds() {
        let kind = |s| kind_for_status("x", s, String::new());
        assert!(matches!(kind(400), EngineError::InvalidInput { .. }));
        assert!(matches!(kind(403), EngineError::Denied { .. }));
        assert!(kind(404).is_not_found());
        assert!(matches!(kind(429), EngineError::Throttled { .. }));
        assert!(kind(429).is_retryable());
        assert!(kind(503).is_retryable());
        assert!(!kind(400).is_retryable());
    }

    #[test]
    fn a_misconfigured_tool_is_for_an_operator_and_never_retried() {
        let e = EngineError::Misconfigured {
            engine: "x",
            message: "add a trigger".into(),
        };
        assert!(!e.is_retryable() && !e.is_not_found());
        assert!(e.to_string().contains("tell an operator"), "{e}");
    }
}
