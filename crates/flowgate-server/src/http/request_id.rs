//! The request span: every request runs inside a span carrying its id, so every log line of
//! the request has `requestId`, and the id is in the request's extensions for its
//! [`Caller`](crate::Caller) (the audit trail).

use std::sync::Arc;

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument;

/// The id of an HTTP request.
#[derive(Debug, Clone)]
pub(crate) struct RequestId(pub(crate) Arc<str>);

/// Runs the request inside a span carrying its id: the platform's id when there is one (Cloud
/// Run's trace header, a load balancer's `x-request-id`, Lambda's `x-amzn-trace-id`), else a
/// fresh one.
pub(crate) async fn request_span(mut request: Request, next: Next) -> Response {
    let (id, mcp_method) = {
        let header = |name: &str| request.headers().get(name).and_then(|v| v.to_str().ok());
        let id = header("x-request-id")
            .or_else(|| header("x-cloud-trace-context").and_then(|v| v.split('/').next()))
            .or_else(|| header("x-amzn-trace-id"))
            .map(|v| v.chars().take(128).collect::<String>())
            .unwrap_or_else(|| format!("{:016x}", fresh_id()));
        (id, header("mcp-method").unwrap_or("").to_owned())
    };
    let span = tracing::info_span!("request", requestId = %id, mcpMethod = %mcp_method);
    request.extensions_mut().insert(RequestId(Arc::from(id)));
    next.run(request).instrument(span).await
}

/// The clock mixed with a per-process counter: unique enough to correlate log lines.
fn fresh_id() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or_default();
    nanos ^ NEXT.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
}
