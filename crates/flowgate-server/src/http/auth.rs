//! Inbound OAuth on the HTTP transport (opt-in): flowgate as an OAuth 2.1 resource server.
//!
//! Every request to `/mcp` must carry `Authorization: Bearer <JWT>` valid for this resource;
//! otherwise it gets 401 with a `WWW-Authenticate` challenge pointing at the Protected Resource
//! Metadata (RFC 9728), which is served at `/.well-known/oauth-protected-resource` and at the
//! path-suffixed form for `/mcp`. The validated caller ([`Authenticated`]) is put in the
//! request's extensions, where `principal::of` finds it (rmcp copies the HTTP request parts
//! into each MCP request's context), so task handles are sealed to issuer + subject.
//!
//! The token itself goes no further than the validator: it is not logged, not put in any
//! message, and the `Authorization` header is removed before the request reaches rmcp.

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use flowgate_auth::challenge::Refusal;
use flowgate_auth::{
    AuthError, Authenticated, ProtectedResourceMetadata, TokenValidator, www_authenticate,
};
use serde_json::json;

/// The resource server: its validator and what it tells clients about itself.
#[derive(Debug)]
pub struct HttpAuth {
    validator: TokenValidator,
    metadata: ProtectedResourceMetadata,
    metadata_url: String,
}

impl HttpAuth {
    /// Protects the resource the validator's audience names, advertising `scopes` (every scope
    /// a tool may require) in the metadata document.
    pub fn new(validator: TokenValidator, scopes: Vec<String>) -> Self {
        let resource = validator.config().audience.clone();
        let issuer = validator.config().issuer.clone();
        HttpAuth {
            metadata: ProtectedResourceMetadata::new(&resource, vec![issuer], scopes),
            metadata_url: ProtectedResourceMetadata::url_for(&resource),
            validator,
        }
    }

    /// The URL of the metadata document, as put in every challenge.
    pub fn metadata_url(&self) -> &str {
        &self.metadata_url
    }

    /// A refusal response: `status`, the challenge, and a small JSON body with a fixed text.
    pub(crate) fn refuse(
        &self,
        status: StatusCode,
        refusal: Refusal,
        scopes: &[String],
        description: &str,
    ) -> Response {
        let challenge = www_authenticate(&self.metadata_url, refusal, scopes);
        let error = match refusal {
            Refusal::Missing => "unauthorized",
            Refusal::InvalidToken => "invalid_token",
            Refusal::InsufficientScope => "insufficient_scope",
        };
        let mut response = (
            status,
            Json(json!({ "error": error, "error_description": description })),
        )
            .into_response();
        if let Ok(value) = HeaderValue::from_str(&challenge) {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, value);
        }
        response
    }
}

/// The two metadata routes (RFC 9728 §3.1: the path-suffixed one is what a client derives
/// from the resource URI `.../mcp`; the bare one serves clients that only try the root).
pub(crate) fn metadata_routes(auth: Arc<HttpAuth>) -> Router {
    let serve = |State(auth): State<Arc<HttpAuth>>| async move { Json(auth.metadata.clone()) };
    Router::new()
        .route("/.well-known/oauth-protected-resource", get(serve))
        .route("/.well-known/oauth-protected-resource/mcp", get(serve))
        .with_state(auth)
}

/// Middleware on `/mcp`: validates the bearer token, or refuses the request.
pub(crate) async fn require_token(
    State(auth): State<Arc<HttpAuth>>,
    mut request: Request,
    next: Next,
) -> Response {
    let token = match bearer(&request) {
        Bearer::Missing => {
            audit_refusal(request, "unauthenticated");
            return auth.refuse(
                StatusCode::UNAUTHORIZED,
                Refusal::Missing,
                &[],
                "this server needs an OAuth access token (Authorization: Bearer)",
            );
        }
        Bearer::Unusable => {
            audit_refusal(request, "invalid_token");
            return auth.refuse(
                StatusCode::UNAUTHORIZED,
                Refusal::InvalidToken,
                &[],
                "the Authorization header is not a Bearer token",
            );
        }
        Bearer::Token(token) => token,
    };
    match auth.validator.validate(&token).await {
        Ok(caller) => {
            drop(token);
            request.headers_mut().remove(header::AUTHORIZATION);
            request.extensions_mut().insert(caller);
            next.run(request).await
        }
        Err(AuthError::KeysUnavailable) => {
            tracing::warn!("refused a request: the issuer's signing keys are unavailable");
            let mut response = (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(json!({
                    "error": "temporarily_unavailable",
                    "error_description": AuthError::KeysUnavailable.to_string(),
                })),
            )
                .into_response();
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
            response
        }
        Err(e) => {
            tracing::info!(reason = %e, "refused an access token");
            audit_refusal(request, "invalid_token");
            auth.refuse(
                StatusCode::UNAUTHORIZED,
                Refusal::InvalidToken,
                &[],
                &e.to_string(),
            )
        }
    }
}

/// The audit line of a request refused for its credential (its body is never read).
fn audit_refusal(request: Request, reason: &str) {
    let (parts, _) = request.into_parts();
    crate::audit::refused_request(&parts, reason, None);
}

enum Bearer {
    Missing,
    Unusable,
    Token(String),
}

/// The bearer value of the `Authorization` header (scheme matched case-insensitively, as
/// RFC 9110 §11.1 asks). Only the header is accepted, never a query parameter.
fn bearer(request: &Request) -> Bearer {
    let Some(value) = request.headers().get(header::AUTHORIZATION) else {
        return Bearer::Missing;
    };
    let Ok(value) = value.to_str() else {
        return Bearer::Unusable;
    };
    match value.split_once(' ') {
        Some((scheme, token))
            if scheme.eq_ignore_ascii_case("bearer") && !token.trim().is_empty() =>
        {
            Bearer::Token(token.trim().to_owned())
        }
        _ => Bearer::Unusable,
    }
}

/// The caller of an MCP request, when the HTTP transport authenticated one.
pub(crate) fn caller(parts: &axum::http::request::Parts) -> Option<&Authenticated> {
    parts.extensions.get::<Authenticated>()
}
