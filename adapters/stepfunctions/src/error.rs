//! Step Functions errors sorted into flowgate's kinds, by the error code AWS returns.

use aws_sdk_sfn::error::{ProvideErrorMetadata, SdkError};
use flowgate_core::EngineError;

use crate::KIND;

/// Whether a failed start means "an execution with this name already exists".
pub(crate) fn already_exists<E: ProvideErrorMetadata, R>(err: &SdkError<E, R>) -> bool {
    err.as_service_error().and_then(|e| e.code()) == Some("ExecutionAlreadyExists")
}

/// Classifies any SDK error; `what` names the call and the tool's target for the message.
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
                SdkError::DispatchFailure(_) => "the Step Functions endpoint could not be reached",
                SdkError::TimeoutError(_) => "the call to Step Functions timed out",
                SdkError::ResponseError(_) => "Step Functions sent an unreadable response",
                _ => "the request to Step Functions could not be made",
            };
            return EngineError::unavailable(KIND, format!("{what}: {message}"), err);
        }
    };
    let message = format!("{what}: {code}: {message}");
    match code.as_str() {
        "ExecutionDoesNotExist"
        | "StateMachineDoesNotExist"
        | "InvalidToken"
        | "TaskDoesNotExist"
        | "TaskTimedOut" => EngineError::NotFound {
            engine: KIND,
            what: message,
        },
        "ThrottlingException" | "TooManyRequestsException" | "ExecutionLimitExceeded" => {
            EngineError::Throttled {
                engine: KIND,
                retry_after: None,
            }
        }
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
