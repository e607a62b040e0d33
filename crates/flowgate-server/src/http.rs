//! Stateless Streamable HTTP at `/mcp`.
//!
//! 2026-07-28 requests carry their version and capabilities in every request and are served
//! without sessions; older clients that `initialize` are served too, also without a session id
//! (and get synchronous results). No request depends on an earlier one reaching this instance.
//!
//! Clients on protocol 2025-11-25 get that revision's tasks (module `dialect_2025`, which
//! translates them onto the same rmcp service). In front of rmcp: a foreign `Origin` gets 403
//! (module `origins`), a body that is not a
//! JSON-RPC message gets a JSON-RPC error (module `malformed`), and a `tasks/*` request without
//! `Mcp-Name` is served as if it had sent its task id (module `mcp_name`). With
//! [`HttpOptions::auth`] set, `/mcp` requires an OAuth access token (module `auth`); with
//! [`HttpOptions::identity`], the caller a platform vouches for (module `identity`: the Lambda
//! request context, a Google ID token, an IAP assertion). Every request carries its id in a
//! span and in its extensions, for the audit log (`crate::audit`).

mod auth;
mod dialect_2025;
mod identity;
mod malformed;
mod mcp_name;
mod origins;
mod scopes;

pub use auth::HttpAuth;
pub(crate) use auth::caller;
pub use identity::{GoogleCredential, GoogleIdentity, Identified, PlatformIdentity, Unidentified};
pub use origins::allowed_origin;
pub(crate) use scopes::allowed;

use std::sync::Arc;

use axum::Router;
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use axum::routing::get;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::FlowgateServer;

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
    /// When set, `/mcp` requires a valid bearer token and the RFC 9728 metadata is served.
    pub auth: Option<Arc<HttpAuth>>,
    /// When set, `/mcp` requires the platform in front (Lambda Function URL IAM, API Gateway,
    /// Google) to have vouched for the caller. Exclusive with `auth`.
    pub identity: Option<Arc<dyn PlatformIdentity>>,
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
    if let Some(origins) = origins::allowlist(&options.allowed_origins) {
        config = config
            .with_allowed_origins(origins)
            .enforce_origin_validation();
    }
    let body_limit = config.max_request_body_bytes;
    let tool_scopes: std::collections::HashMap<String, Vec<String>> = server
        .inner
        .tools
        .iter()
        .map(|t| (t.spec.name.clone(), t.spec.scopes.clone()))
        .collect();
    let task_support: std::collections::HashMap<String, flowgate_manifest::TaskSupport> = server
        .inner
        .tools
        .iter()
        .map(|t| (t.spec.name.clone(), t.spec.task))
        .collect();
    let for_service = server.clone();
    let service = StreamableHttpService::new(
        move || Ok(for_service.clone()),
        Arc::new(NeverSessionManager::default()),
        config,
    );
    let mcp = Router::new().nest_service("/mcp", service);
    let dialect = dialect_2025::Dialect {
        service: mcp.clone(),
        server,
        task_support: Arc::new(task_support),
        limit: body_limit,
    };
    let mut app = mcp
        .layer(axum::middleware::from_fn_with_state(
            dialect,
            dialect_2025::serve_2025,
        ))
        .layer(axum::middleware::from_fn_with_state(
            body_limit,
            mcp_name::fill_task_name,
        ))
        .layer(axum::middleware::from_fn_with_state(
            body_limit,
            malformed::jsonrpc_errors,
        ));
    if let Some(auth) = options.auth {
        // Outermost on `/mcp`: nothing reads the body of a request without a valid token.
        let check = scopes::ScopeCheck {
            auth: auth.clone(),
            tools: Arc::new(tool_scopes),
            limit: body_limit,
        };
        app = app
            .layer(axum::middleware::from_fn_with_state(
                check,
                scopes::require_scopes,
            ))
            .layer(axum::middleware::from_fn_with_state(
                auth.clone(),
                auth::require_token,
            ))
            .merge(auth::metadata_routes(auth));
    } else if let Some(identity) = options.identity {
        app = app.layer(axum::middleware::from_fn_with_state(
            identity,
            identity::require_identity,
        ));
    }
    app.route("/healthz", get(|| async { "ok\n" }))
        .layer(axum::middleware::from_fn(request_span))
}

/// Runs each request inside a span carrying its id, so every log line of the request has
/// `requestId`: the platform's id when there is one (Cloud Run's trace header, a load
/// balancer's `x-request-id`, Lambda's `x-amzn-trace-id`), else a fresh one.
async fn request_span(mut request: Request, next: Next) -> Response {
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
    request.extensions_mut().insert(crate::audit::RequestId(id));
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
