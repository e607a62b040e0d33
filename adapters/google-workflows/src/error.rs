//! Workflows API errors sorted into flowgate's kinds, by gRPC status code (or HTTP status).

use flowgate_core::{EngineError, kind_for_status};
use google_cloud_gax::error::Error;
use google_cloud_gax::error::rpc::Code;

use crate::KIND;

/// Classifies a client error; `what` names the call and the workflow.
pub(crate) fn classify(err: Error, what: &str) -> EngineError {
    if let Some(status) = err.status() {
        let message = format!("{what}: {}", status.message);
        return match status.code {
            Code::NotFound => EngineError::NotFound {
                engine: KIND,
                what: message,
            },
            Code::PermissionDenied | Code::Unauthenticated => EngineError::Denied {
                engine: KIND,
                message,
            },
            Code::ResourceExhausted => {
                flowgate_core::observe::throttled(KIND);
                EngineError::Throttled {
                    engine: KIND,
                    retry_after: None,
                }
            }
            Code::InvalidArgument
            | Code::FailedPrecondition
            | Code::OutOfRange
            | Code::AlreadyExists => EngineError::InvalidInput {
                engine: KIND,
                message,
            },
            _ => EngineError::Unavailable {
                engine: KIND,
                message,
                source: None,
            },
        };
    }
    if let Some(code) = err.http_status_code() {
        return kind_for_status(KIND, code, format!("{what}: HTTP {code}"));
    }
    let message = if err.is_connect() || err.is_io() || err.is_transport() {
        format!("{what}: the Workflows endpoint could not be reached")
    } else if err.is_timeout() {
        format!("{what}: the call to Workflows timed out")
    } else {
        format!("{what}: the request to Workflows failed")
    };
    EngineError::unavailable(KIND, message, err)
}
