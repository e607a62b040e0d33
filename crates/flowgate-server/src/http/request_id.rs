//! The request span: every request runs inside a span carrying its id, so every log line of
//! the request has `requestId`, and the id is in the request's extensions for its
//! [`Caller`](crate::Caller) (the audit trail).

use std::sync::Arc;

use axum::extract::Request;
use axum::http::HeaderName;
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument;

use super::names;
use crate::caller::request_id;

/// The id of an HTTP request.
#[derive(Debug, Clone)]
pub(crate) struct RequestId(pub(crate) Arc<str>);

/// Runs the request inside a span carrying its id: the platform's id when there is one (a load
/// balancer's `x-request-id`, Cloud Run's trace header, the root of Lambda's `x-amzn-trace-id`)
/// and it is a short token, else a fresh one ([`request_id`]).
pub(crate) async fn request_span(mut request: Request, next: Next) -> Response {
    let (id, mcp_method) = {
        let header = |name: &HeaderName| request.headers().get(name).and_then(|v| v.to_str().ok());
        let offered = header(&names::X_REQUEST_ID)
            .or_else(|| header(&names::X_CLOUD_TRACE_CONTEXT).and_then(|v| v.split('/').next()))
            .or_else(|| header(&names::X_AMZN_TRACE_ID).map(amzn_root));
        let id = request_id(offered);
        // The header is the client's text: kept short (log formats escape what it holds).
        let method: String = header(&names::MCP_METHOD)
            .unwrap_or("")
            .chars()
            .take(64)
            .collect();
        (id, method)
    };
    let span = tracing::info_span!("request", requestId = %id, mcpMethod = %mcp_method);
    request.extensions_mut().insert(RequestId(Arc::from(id)));
    next.run(request).instrument(span).await
}

/// The trace's root in Lambda's `x-amzn-trace-id` (`Root=1-...;Parent=...;Sampled=1`), or the
/// whole value when it has none (which [`request_id`] then judges).
fn amzn_root(header: &str) -> &str {
    header
        .split(';')
        .find_map(|part| part.trim().strip_prefix("Root="))
        .unwrap_or(header)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lambdas_trace_header_gives_its_root() {
        assert_eq!(
            amzn_root("Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"),
            "1-5759e988-bd862e3fe1be46a994272793"
        );
        assert_eq!(amzn_root("Self=1-abc; Root=1-def"), "1-def");
        assert_eq!(amzn_root("opaque"), "opaque");
    }
}
