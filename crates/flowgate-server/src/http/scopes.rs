//! Per-tool scopes on the HTTP transport: a `tools/call` of a tool whose manifest entry needs
//! scopes the caller lacks gets HTTP 403 with an `insufficient_scope` challenge that names them
//! (RFC 6750 §3.1, MCP authorization "scope challenge"), so the client can step up.
//!
//! It runs after authentication (the [`Caller`] is in the request's extensions) and the one
//! parse (the [`Incoming`] message), before the dialect and rmcp, so a refused call starts
//! nothing. The check itself is flowgate-auth's (`Caller::may_use`); `tools/list` hides such
//! tools and the call refuses them too, should a request reach it some other way.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use flowgate_auth::{Identity, Refused};

use super::authenticate::refusal;
use crate::jsonrpc::Incoming;
use crate::{Caller, FlowgateServer, audit};

/// What the scope check needs: the identity (for its challenge) and the tools.
#[derive(Clone)]
pub(crate) struct ScopeCheck {
    pub(crate) identity: Arc<dyn Identity>,
    pub(crate) server: FlowgateServer,
}

/// Refuses a `tools/call` whose tool needs scopes the caller was not granted.
pub(crate) async fn require_scopes(
    State(check): State<ScopeCheck>,
    request: Request,
    next: Next,
) -> Response {
    let extensions = request.extensions();
    let (Some(message), Some(caller)) = (
        extensions.get::<Arc<Incoming>>(),
        extensions.get::<Caller>(),
    ) else {
        return next.run(request).await;
    };
    if message.method() != "tools/call" {
        return next.run(request).await;
    }
    let Some(entry) = message.name().and_then(|n| check.server.tool_entry(n)) else {
        return next.run(request).await;
    };
    let (name, required) = (entry.spec.name.as_str(), &entry.spec.scopes);
    if caller.may_use(required) {
        return next.run(request).await;
    }
    tracing::info!(tool = name, "refused a call: insufficient scope");
    audit::refused(caller, "insufficient_scope", Some(name), None);
    if let Some(metrics) = flowgate_telemetry::metrics::get() {
        metrics.auth_refused("insufficient_scope");
    }
    refusal(
        check.identity.as_ref(),
        &Refused::insufficient_scope(
            required,
            "the access token lacks a scope this tool requires",
        ),
    )
}
