//! Stateless Streamable HTTP at `/mcp`.
//!
//! 2026-07-28 requests carry their version and capabilities in every request and are served
//! without sessions; older clients that `initialize` are served too, also without a session id
//! (and get synchronous results). No request depends on an earlier one reaching this instance.
//!
//! One request passes these layers, outermost first (each a module):
//!
//! 1. `request_id`: a span with the request's id (the platform's, or a fresh one).
//! 2. `authenticate`: the one authentication middleware. The configured [`Identity`] (OAuth,
//!    a Google credential, the AWS Lambda request context) vouches for the caller or the
//!    request is refused; the request's [`Caller`] goes in its extensions. Nothing reads the
//!    body of a request before this.
//! 3. `parse`: the body is parsed once into the JSON-RPC message, which goes in the
//!    extensions; a body that is no message gets its JSON-RPC error; a `tasks/*` request
//!    without `Mcp-Name` gets the header from its `taskId`.
//! 4. `scopes`: a `tools/call` of a tool the caller's scopes do not allow gets 403 with the
//!    identity's challenge (only when an identity is configured).
//! 5. `dialect`: 2025-11-25 task requests are answered by `crate::dialect_2025`.
//! 6. rmcp's `StreamableHttpService` (its `Host` and `Origin` checks, module `origins`, then
//!    the JSON-RPC decoding and the protocol's header checks), which calls `crate::mcp`, the
//!    `ServerHandler`, with the caller from the extensions.
//!
//! `GET /healthz` answers load balancers; with OAuth, the RFC 9728 metadata is served beside.

mod authenticate;
mod dialect;
mod identity;
mod oauth;
mod origins;
mod parse;
mod request_id;
mod scopes;

pub use identity::{GoogleCredential, GoogleIdentity};
pub use oauth::OAuthIdentity;
pub use origins::allowed_origin;

use std::sync::Arc;

use axum::Router;
use axum::http::request::Parts;
use axum::routing::get;
use flowgate_auth::Identity;
use rmcp::RoleServer;
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use crate::mcp::McpService;
use crate::{Caller, FlowgateServer};

/// Settings of the HTTP transport.
#[derive(Debug, Clone, Default)]
pub struct HttpOptions {
    /// Host names (with or without port) the `Host` header may carry. Empty: loopback only.
    /// `*` alone turns the check off (for use behind a gateway that checks it).
    pub allowed_hosts: Vec<String>,
    /// Browser origins allowed besides loopback ones, in any form [`allowed_origin`] accepts.
    /// `*` turns the check off. Requests without `Origin` always pass.
    pub allowed_origins: Vec<String>,
    /// Cancelled to stop in-flight request handling on shutdown.
    pub shutdown: CancellationToken,
    /// Who vouches for callers: when set, `/mcp` requires it to identify each caller (and an
    /// identity that publishes resource metadata, OAuth's, has it served). `None`: callers are
    /// anonymous.
    pub identity: Option<Arc<dyn Identity>>,
}

/// When the platform ends a request (the AWS Lambda invocation's deadline, say). An outer
/// layer that knows it puts it in the request's extensions; the request's [`Caller`] carries
/// it, and every wait of the request ends before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadline(pub tokio::time::Instant);

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
    if let Some(origins) = origins::allowlist(&options.allowed_origins) {
        config = config
            .with_allowed_origins(origins)
            .enforce_origin_validation();
    }
    let body_limit = config.max_request_body_bytes;
    let service = McpService::new(server.clone(), caller_of);
    let service = StreamableHttpService::new(
        move || Ok(service.clone()),
        Arc::new(NeverSessionManager::default()),
        config,
    );
    // Layers run outermost last-added: see the module's list for the order a request meets.
    let mut mcp =
        Router::new()
            .nest_service("/mcp", service)
            .layer(axum::middleware::from_fn_with_state(
                server.clone(),
                dialect::serve_2025,
            ));
    if let Some(identity) = &options.identity {
        let check = scopes::ScopeCheck {
            identity: Arc::clone(identity),
            server,
        };
        mcp = mcp.layer(axum::middleware::from_fn_with_state(
            check,
            scopes::require_scopes,
        ));
    }
    let mut app = mcp
        .layer(axum::middleware::from_fn_with_state(
            body_limit,
            parse::parse,
        ))
        .layer(axum::middleware::from_fn_with_state(
            options.identity.clone(),
            authenticate::authenticate,
        ));
    if let Some(metadata) = options
        .identity
        .as_ref()
        .and_then(authenticate::metadata_routes)
    {
        app = app.merge(metadata);
    }
    app.route("/healthz", get(|| async { "ok\n" }))
        .layer(axum::middleware::from_fn(request_id::request_span))
}

/// The caller of a request rmcp routes: the one `authenticate` put in the HTTP request's
/// extensions, gone when rmcp cancels the request (its client disconnected).
fn caller_of(ctx: &RequestContext<RoleServer>) -> Caller {
    ctx.extensions
        .get::<Parts>()
        .and_then(|parts| parts.extensions.get::<Caller>())
        .cloned()
        .unwrap_or_else(|| Caller::anonymous(""))
        .with_gone(ctx.ct.clone())
}
