//! Step Functions errors sorted into flowgate's kinds, by the error code AWS returns.

use aws_sdk_sfn::error::{ProvideErrorMetadata, SdkError};
use flowgate_core::EngineError;

use crate::KIND;

/// Whether a failed start means "an execution with this name already exists".
pub(crate) fn already_exists<E: ProvideErrorMetadata, R>(err: &SdkError<E, R>) -> bool {
    err.as_service_error().and_then(|e| e.code()) == Some("ExecutionAlreadyExists")
}

/// Classifies any SDK error; `what` names the call and the tool's state machine (by name: the
/// text reaches clients, so it never holds an ARN or an account id). The error as AWS sent it
/// goes to the log only.
pub(crate) fn classify<E, R>(err: SdkError<E, R>, what: &str) -> EngineError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    let (code, message) = match err.as_service_error() {
        Some(e) => (
            e.code().unwrap_or("").to_owned(),
            e.message().unwrap_or("").to_owned(),
        ),
        None => {
            let message = match &err {
                SdkError::DispatchFailure(d) if d.is_timeout() => {
                    "the Step Functions endpoint did not accept the connection in time"
                }
                SdkError::DispatchFailure(_) => "the Step Functions endpoint could not be reached",
                SdkError::TimeoutError(_) => "Step Functions did not answer in time",
                SdkError::ResponseError(_) => "Step Functions sent an unreadable response",
                _ => "the request to Step Functions could not be made",
            };
            tracing::warn!(call = what, error = ?err, "Step Functions call failed");
            if matches!(err, SdkError::TimeoutError(_)) {
                return EngineError::Timeout {
                    engine: KIND,
                    message: format!("{what}: {message}"),
                };
            }
            return EngineError::unavailable(KIND, format!("{what}: {message}"), err);
        }
    };
    if code != "ThrottlingException" {
        tracing::info!(call = what, code, message, "Step Functions refused a call");
    }
    let message = format!("{what}: {code}: {}", redact(&message));
    match code.as_str() {
        "ExecutionDoesNotExist"
        | "StateMachineDoesNotExist"
        | "InvalidToken"
        | "TaskDoesNotExist"
        | "TaskTimedOut" => EngineError::NotFound {
            engine: KIND,
            what: message,
        },
        "ThrottlingException" | "TooManyRequestsException" => {
            flowgate_core::observe::throttled(KIND);
            EngineError::Throttled {
                engine: KIND,
                retry_after: None,
            }
        }
        // An account's open executions are at their limit: starting again later may work, but
        // not within a retry's backoff.
        "ExecutionLimitExceeded" => EngineError::Unavailable {
            engine: KIND,
            message,
            source: None,
        },
        "AccessDeniedException"
        | "UnrecognizedClientException"
        | "InvalidSignatureException"
        | "ExpiredTokenException"
        | "InvalidClientTokenId"
        | "MissingAuthenticationToken" => EngineError::Denied {
            engine: KIND,
            message,
        },
        "InvalidArn"
        | "InvalidName"
        | "InvalidExecutionInput"
        | "InvalidOutput"
        | "ValidationException"
        | "StateMachineTypeNotSupported"
        | "StateMachineDeleting"
        | "InvalidParameterValue" => EngineError::InvalidInput {
            engine: KIND,
            message,
        },
        _ => EngineError::Unavailable {
            engine: KIND,
            message,
            source: None,
        },
    }
}

/// AWS's message with every ARN cut to its resource part (`execution:etl:run-1`,
/// `assumed-role/flowgate/session`) and every other 12-digit account id masked: client-facing
/// text names what failed, not the account it lives in.
pub(crate) fn redact(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(at) = rest.find("arn:") {
        out.push_str(&rest[..at]);
        let arn_len = rest[at..]
            .find(|c: char| c.is_whitespace() || matches!(c, '\'' | '"' | ',' | ')' | '('))
            .unwrap_or(rest.len() - at);
        let arn = &rest[at..at + arn_len];
        match arn.match_indices(':').nth(4) {
            Some((colon, _)) => out.push_str(&arn[colon + 1..]),
            None => out.push_str(arn),
        }
        rest = &rest[at + arn_len..];
    }
    out.push_str(rest);
    mask_account_ids(&out)
}

fn mask_account_ids(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut digits = String::new();
    let flush = |digits: &mut String, out: &mut String| {
        if digits.len() == 12 {
            out.push_str("************");
        } else {
            out.push_str(digits);
        }
        digits.clear();
    };
    for c in text.chars() {
        if c.is_ascii_digit() {
            digits.push(c);
        } else {
            flush(&mut digits, &mut out);
            out.push(c);
        }
    }
    flush(&mut digits, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_text_keeps_resources_and_drops_accounts() {
        let aws = "User: arn:aws:sts::123456789012:assumed-role/flowgate/s1 is not authorized to \
                   perform: states:StartExecution on resource: \
                   arn:aws:states:us-east-1:123456789012:stateMachine:etl because no policy";
        let r = redact(aws);
        assert!(!r.contains("123456789012"), "{r}");
        assert!(!r.contains("arn:"), "{r}");
        assert!(r.contains("assumed-role/flowgate/s1"), "{r}");
        assert!(r.contains("stateMachine:etl because"), "{r}");
        let r = redact(
            "Execution Does Not Exist: 'arn:aws:states:eu-west-1:111122223333:execution:etl:x'",
        );
        assert_eq!(r, "Execution Does Not Exist: 'execution:etl:x'");
        assert_eq!(
            redact("account 111122223333 is over"),
            "account ************ is over"
        );
        assert_eq!(redact("took 1234 ms"), "took 1234 ms");
    }
}
