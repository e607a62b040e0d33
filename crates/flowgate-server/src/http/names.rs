//! The header names the request pipeline reads, made once: a lookup by `&str` parses and
//! hashes the name on every call (five of them before a poll is answered; docs/benchmarks.md
//! has what that cost), a `HeaderName` constant only hashes it.

use axum::http::HeaderName;

/// The revision a 2026-07-28 request is in.
pub(crate) const MCP_PROTOCOL_VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");
/// The request's method, mirrored from its body.
pub(crate) const MCP_METHOD: HeaderName = HeaderName::from_static("mcp-method");
/// The request's name (a tool's, a task's id), mirrored from its body.
pub(crate) const MCP_NAME: HeaderName = HeaderName::from_static("mcp-name");
/// A load balancer's request id.
pub(crate) const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
/// Cloud Run's trace header.
pub(crate) const X_CLOUD_TRACE_CONTEXT: HeaderName =
    HeaderName::from_static("x-cloud-trace-context");
/// Lambda's trace header.
pub(crate) const X_AMZN_TRACE_ID: HeaderName = HeaderName::from_static("x-amzn-trace-id");
/// Where an SSE client resumes a stream.
pub(crate) const LAST_EVENT_ID: HeaderName = HeaderName::from_static("last-event-id");
