//! Stateless Streamable HTTP at `/mcp`.
//!
//! 2026-07-28 requests carry their version and capabilities in every request and are served
//! without sessions; older clients that `initialize` are served too, also without a session id
//! (and get synchronous results). No request depends on an earlier one reaching this instance.

use std::sync::Arc;

use axum::Router;
use axum::routing::get;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use crate::FlowgateServer;

/// Settings of the HTTP transport.
#[derive(Debug, Clone, Default)]
pub struct HttpOptions {
    /// Host names (with or without port) the `Host` header may carry. Empty: loopback only.
    /// `*` alone turns the check off (for use behind a gateway that checks it).
    pub allowed_hosts: Vec<String>,
    /// Cancelled to stop in-flight request handling on shutdown.
    pub shutdown: CancellationToken,
}

/// The axum router: `POST /mcp` for MCP, `GET /healthz` for load balancers.
pub fn router(server: FlowgateServer, options: HttpOptions) -> Router {
    let mut config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None)
        .with_cancellation_token(options.shutdown.child_token());
    if options.allowed_hosts.iter().any(|h| h == "*") {
        config = config.disable_allowed_hosts();
    } else if !options.allowed_hosts.is_empty() {
        let mut hosts = options.allowed_hosts.clone();
        hosts.extend(["localhost", "127.0.0.1", "::1"].map(String::from));
        config = config.with_allowed_hosts(hosts);
    }
    let service = StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(NeverSessionManager::default()),
        config,
    );
    Router::new()
        .nest_service("/mcp", service)
        .route("/healthz", get(|| async { "ok\n" }))
}
