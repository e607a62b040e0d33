//! Workflows API errors sorted into flowgate's kinds, by gRPC status code (or HTTP status), the
//! way flowgate-http sorts the REST calls' failures: a call that got no answer in time is a
//! `Timeout` (it may have taken effect), a quota refusal `Throttled` with the delay the service
//! asked for (its `RetryInfo`, the gRPC form of `Retry-After`).

use std::time::Duration;

use flowgate_core::{EngineError, kind_for_status};
use google_cloud_gax::error::Error;
use google_cloud_gax::error::rpc::{Code, Status, StatusDetails};

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
                    retry_after: retry_delay(status),
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
    if err.is_timeout() {
        return EngineError::Timeout {
            engine: KIND,
            message: format!("{what}: no answer within the call's deadline"),
        };
    }
    let message = if err.is_connect() || err.is_io() || err.is_transport() {
        format!("{what}: the Workflows endpoint could not be reached")
    } else {
        format!("{what}: the request to Workflows failed")
    };
    EngineError::unavailable(KIND, message, err)
}

/// The wait a refusal asks for (`google.rpc.RetryInfo.retryDelay`), if it names one.
fn retry_delay(status: &Status) -> Option<Duration> {
    status.details.iter().find_map(|d| match d {
        StatusDetails::RetryInfo(info) => info.retry_delay.and_then(|d| Duration::try_from(d).ok()),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use google_cloud_rpc::model::RetryInfo;

    #[test]
    fn a_quota_refusal_waits_as_asked_and_a_deadline_is_a_timeout() {
        let delay = google_cloud_wkt::Duration::clamp(7, 0);
        let status = Status::default()
            .set_code(Code::ResourceExhausted)
            .set_message("Quota exceeded")
            .set_details([StatusDetails::RetryInfo(
                RetryInfo::new().set_retry_delay(delay),
            )]);
        let e = classify(Error::service(status), "executions.get");
        assert!(
            matches!(e, EngineError::Throttled { retry_after: Some(d), .. } if d == Duration::from_secs(7)),
            "{e:?}"
        );
        let plain = Status::default().set_code(Code::ResourceExhausted);
        let e = classify(Error::service(plain), "executions.get");
        assert!(
            matches!(
                e,
                EngineError::Throttled {
                    retry_after: None,
                    ..
                }
            ),
            "{e:?}"
        );
        let e = classify(Error::timeout("attempt deadline"), "executions.create");
        assert!(matches!(e, EngineError::Timeout { .. }), "{e:?}");
    }
}
