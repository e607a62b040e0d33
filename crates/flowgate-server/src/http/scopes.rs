//! Per-tool scopes on the HTTP transport: a `tools/call` of a tool whose manifest entry needs
//! scopes the caller's token lacks gets HTTP 403 with an `insufficient_scope` challenge that
//! names them (RFC 6750 §3.1, MCP authorization "scope challenge"), so the client can step up.
//!
//! It runs after the token check (the caller is in the request's extensions) and before rmcp,
//! so a refused call starts nothing. `tools/list` hides such tools (in the handler); the
//! handler also refuses them, should a request reach it some other way.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use flowgate_auth::Authenticated;
use flowgate_auth::challenge::Refusal;
use serde_json::Value;

use super::HttpAuth;

/// What the scope check needs: the resource server, each tool's scopes, rmcp's body limit.
#[derive(Clone)]
pub(crate) struct ScopeCheck {
    pub(crate) auth: Arc<HttpAuth>,
    pub(crate) tools: Arc<HashMap<String, Vec<String>>>,
    pub(crate) limit: usize,
}

/// Refuses a `tools/call` whose tool needs scopes the caller was not granted.
pub(crate) async fn require_scopes(
    State(check): State<ScopeCheck>,
    request: Request,
    next: Next,
) -> Response {
    if request.method() != Method::POST || check.tools.values().all(Vec::is_empty) {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, check.limit).await else {
        return (
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "Payload Too Large: request body exceeds {} bytes",
                check.limit
            ),
        )
            .into_response();
    };
    let called = serde_json::from_slice::<Value>(&bytes).ok().and_then(|v| {
        (v.get("method")? == "tools/call")
            .then(|| v.get("params")?.get("name")?.as_str().map(str::to_owned))
            .flatten()
    });
    if let Some(required) = called.as_deref().and_then(|name| check.tools.get(name)) {
        let granted = parts.extensions.get::<Authenticated>();
        if !granted.is_some_and(|c| c.has_all(required)) {
            tracing::info!(
                tool = called.as_deref().unwrap_or(""),
                "refused a call: insufficient scope"
            );
            crate::audit::refused_request(&parts, "insufficient_scope", called.as_deref());
            return check.auth.refuse(
                StatusCode::FORBIDDEN,
                Refusal::InsufficientScope,
                required,
                "the access token lacks a scope this tool requires",
            );
        }
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

/// Whether `caller` may see and call a tool needing `required` (always, without auth).
pub(crate) fn allowed(caller: Option<&Authenticated>, required: &[String]) -> bool {
    caller.is_none_or(|c| c.has_all(required))
}
