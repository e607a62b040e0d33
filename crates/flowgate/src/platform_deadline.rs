//! When the platform ends a request, read from where the platform says it: the Lambda
//! invocation's deadline (`Lambda-Runtime-Deadline-Ms`, which lambda_http hands over as the
//! request's [`lambda_http::Context`]), or on Cloud Run the service's `timeoutSeconds`, which
//! the service passes as `FLOWGATE_REQUEST_TIMEOUT_SECS` (a request may run that long from
//! its arrival).
//!
//! The middleware here puts the deadline in the request's extensions, where the server's
//! request pipeline gives it to the request's caller: every wait of the request (a
//! synchronous call, a `tasks/result` hold, an engine call) ends before it.

use std::time::{Duration, SystemTime};

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use flowgate_server::http::Deadline;
use tokio::time::Instant;

/// Where a request's deadline comes from.
#[derive(Debug, Clone, Copy)]
pub(crate) enum DeadlineSource {
    /// The Lambda invocation's deadline.
    #[cfg(feature = "lambda")]
    LambdaInvocation,
    /// A fixed time from the request's arrival (Cloud Run's `timeoutSeconds`).
    RequestTimeout(Duration),
}

/// The `FLOWGATE_REQUEST_TIMEOUT_SECS` setting: none when unset or empty.
pub(crate) fn request_timeout(value: Option<&str>) -> Result<Option<Duration>, String> {
    match value.map(str::trim).filter(|v| !v.is_empty()) {
        None => Ok(None),
        Some(v) => match v.parse::<u64>() {
            Ok(secs) if (1..=3600).contains(&secs) => Ok(Some(Duration::from_secs(secs))),
            _ => Err(format!(
                "FLOWGATE_REQUEST_TIMEOUT_SECS is {v:?}; it takes the platform's request timeout in \
                 seconds (Cloud Run's timeoutSeconds: 1 to 3600)"
            )),
        },
    }
}

/// The instant `deadline` (a wall-clock time) falls on, on the monotonic clock; `None` for a
/// time this process cannot represent.
pub(crate) fn instant_of(deadline: SystemTime) -> Instant {
    let now = Instant::now();
    match deadline.duration_since(SystemTime::now()) {
        Ok(left) => now + left,
        // Already past: due now.
        Err(_) => now,
    }
}

/// The deadline of `request` by `source`, if it has one.
fn deadline_of(source: DeadlineSource, request: &Request) -> Option<Instant> {
    match source {
        #[cfg(feature = "lambda")]
        DeadlineSource::LambdaInvocation => request
            .extensions()
            .get::<lambda_http::Context>()
            .map(|context| instant_of(context.deadline())),
        DeadlineSource::RequestTimeout(timeout) => {
            let _ = request;
            Some(Instant::now() + timeout)
        }
    }
}

/// The middleware: the request's deadline into its extensions as the server's [`Deadline`],
/// which the request's caller carries (every wait of the request ends before it).
pub(crate) async fn with_deadline(
    State(source): State<DeadlineSource>,
    mut request: Request,
    next: Next,
) -> Response {
    if let Some(deadline) = deadline_of(source, &request) {
        request.extensions_mut().insert(Deadline(deadline));
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_timeout_is_checked_at_start() {
        assert_eq!(request_timeout(None), Ok(None));
        assert_eq!(request_timeout(Some("")), Ok(None));
        assert_eq!(
            request_timeout(Some("300")),
            Ok(Some(Duration::from_secs(300)))
        );
        for bad in ["0", "5m", "3601"] {
            let e = request_timeout(Some(bad)).expect_err(bad);
            assert!(e.contains("timeoutSeconds"), "{e}");
        }
    }

    #[test]
    fn a_wall_clock_deadline_maps_onto_the_monotonic_clock() {
        let soon = SystemTime::now() + Duration::from_secs(30);
        let at = instant_of(soon);
        let left = at - Instant::now();
        assert!(
            left > Duration::from_secs(29) && left <= Duration::from_secs(30),
            "{left:?}"
        );
        let past = instant_of(SystemTime::now() - Duration::from_secs(5));
        assert!(past <= Instant::now());
    }

    #[cfg(feature = "lambda")]
    #[tokio::test]
    async fn the_invocation_deadline_is_read_from_the_lambda_context() {
        let mut request = Request::new(axum::body::Body::empty());
        let mut context = lambda_http::Context::default();
        let epoch_ms = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or_default();
        context.deadline = u64::try_from(epoch_ms + 10_000).unwrap_or(u64::MAX);
        request.extensions_mut().insert(context);
        let at = deadline_of(DeadlineSource::LambdaInvocation, &request).expect("a deadline");
        let left = at - Instant::now();
        assert!(
            left > Duration::from_secs(9) && left <= Duration::from_secs(10),
            "{left:?}"
        );
        let bare = Request::new(axum::body::Body::empty());
        assert!(deadline_of(DeadlineSource::LambdaInvocation, &bare).is_none());
    }
}
