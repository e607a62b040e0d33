//! Who is calling: the one authentication middleware on `/mcp`, whatever vouches for callers.
//!
//! With an [`Identity`] configured (OAuth, a Google credential, the AWS Lambda request
//! context), the request's caller is the one it identifies, and its credential headers are
//! removed; a refusal is answered here, with the status, JSON body and challenge the identity's
//! hook gives, and an audit line. Without one, the caller is anonymous. Either way the
//! request goes on with its [`Caller`] in its extensions: the request id (from the request
//! span), the deadline an outer layer put there ([`Deadline`]), and who it is.

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use flowgate_auth::{Identity, RefusalKind, Refused};
use serde_json::json;

use super::Deadline;
use super::request_id::RequestId;
use crate::{Caller, audit};

/// Middleware on `/mcp`: puts the request's [`Caller`] in its extensions, or refuses it.
pub(crate) async fn authenticate(
    State(identity): State<Option<Arc<dyn Identity>>>,
    request: Request,
    next: Next,
) -> Response {
    let (mut parts, body) = request.into_parts();
    let request_id: Arc<str> = parts
        .extensions
        .get::<RequestId>()
        .map_or_else(|| Arc::from(""), |r| Arc::clone(&r.0));
    let deadline = parts.extensions.get::<Deadline>().map(|d| d.0);
    let caller = match &identity {
        None => Caller::anonymous(request_id),
        Some(identity) => match identity.identify(&parts).await {
            Ok(who) => {
                for name in identity.credential_headers() {
                    parts.headers.remove(*name);
                }
                Caller::authenticated(who, request_id)
            }
            Err(refused) => {
                if refused.kind == RefusalKind::Unavailable {
                    tracing::warn!(mode = %identity.mode(), reason = %refused.reason, "refused a request: the keys to check its credential are unavailable");
                } else {
                    tracing::info!(mode = %identity.mode(), reason = %refused.reason, "refused a request");
                }
                let anonymous = Caller::anonymous(request_id);
                audit::refused(&anonymous, refused.audit_reason(), None, None);
                if let Some(metrics) = flowgate_telemetry::metrics::get() {
                    metrics.auth_refused(refused.audit_reason());
                }
                return refusal(identity.as_ref(), &refused);
            }
        },
    };
    parts.extensions.insert(caller.with_deadline(deadline));
    next.run(Request::from_parts(parts, body)).await
}

/// `Retry-After` of a refusal that passes when the identity cannot say when.
const DEFAULT_RETRY_AFTER_SECS: u64 = 5;

/// The answer to a refused request: the refusal's status, a small JSON body with a fixed
/// text, the identity's challenge, and `Retry-After` when the refusal passes.
pub(crate) fn refusal(identity: &dyn Identity, refused: &Refused) -> Response {
    let mut response = (
        refused.status(),
        Json(json!({ "error": refused.error_code(), "error_description": refused.reason })),
    )
        .into_response();
    if let Some(challenge) = identity
        .challenge(refused)
        .and_then(|c| HeaderValue::from_str(&c).ok())
    {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, challenge);
    }
    if refused.kind == RefusalKind::Unavailable {
        // Whole seconds, rounded up and at least one: the time until the next attempt to
        // fetch the keys when the identity knows it, else a short wait.
        let secs = refused
            .retry_after
            .map_or(DEFAULT_RETRY_AFTER_SECS, |wait| {
                wait.as_secs() + u64::from(wait.subsec_nanos() > 0)
            })
            .max(1);
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    response
}

/// The RFC 9728 metadata routes of an identity that publishes some (the path-suffixed one is
/// what a client derives from the resource URI `.../mcp`; the bare one serves clients that
/// only try the root).
pub(crate) fn metadata_routes(identity: &Arc<dyn Identity>) -> Option<Router> {
    identity.resource_metadata()?;
    let serve = |State(identity): State<Arc<dyn Identity>>| async move {
        Json(identity.resource_metadata().cloned())
    };
    Some(
        Router::new()
            .route("/.well-known/oauth-protected-resource", get(serve))
            .route("/.well-known/oauth-protected-resource/mcp", get(serve))
            .with_state(Arc::clone(identity)),
    )
}
