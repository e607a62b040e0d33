//! Platform identities: deployments where the platform in front of flowgate authenticates the
//! caller and flowgate only has to read who it was, safely.
//!
//! A [`PlatformIdentity`] turns a request into an [`Authenticated`] caller (or refuses it); the
//! middleware puts the caller in the request's extensions, where the handler finds it, exactly
//! like the OAuth check does. Each implementation reads only the place its platform vouches
//! for: the Lambda request context (not a header), or a Google-signed JWT whose signature is
//! verified here (never a header taken at its word). None of them is active unless configured.
//!
//! Google's two ([`GoogleIdentity`]): an ID token in `Authorization: Bearer` (audience = the
//! service URL), or IAP's `X-Goog-IAP-JWT-Assertion` (audience = the backend service).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use axum::Json;
use axum::extract::{Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use flowgate_auth::google::{AllowList, IAP_HEADER};
use flowgate_auth::{AuthError, Authenticated, TokenValidator};
use serde_json::json;

/// Why a platform identity refused a request. `reason` is a fixed text (never a credential).
#[derive(Debug, Clone)]
pub struct Unidentified {
    /// 401 for a missing or bad credential, 403 for a caller not allowed, 503 when keys
    /// cannot be fetched.
    pub status: StatusCode,
    /// What the client is told.
    pub reason: String,
    /// The audit log's `reason`: `unauthenticated` (no credential), `invalid_token` (one that
    /// does not check out), `not_allowed`, `keys_unavailable`.
    pub code: &'static str,
}

impl Unidentified {
    /// A 401 for a request without the platform's credential.
    pub fn unauthorized(reason: impl Into<String>) -> Self {
        Unidentified {
            status: StatusCode::UNAUTHORIZED,
            reason: reason.into(),
            code: "unauthenticated",
        }
    }

    /// A 401 for a credential that does not check out.
    pub fn invalid(reason: impl Into<String>) -> Self {
        Unidentified {
            status: StatusCode::UNAUTHORIZED,
            reason: reason.into(),
            code: "invalid_token",
        }
    }
}

/// The future [`PlatformIdentity::identify`] returns.
pub type Identified<'a> =
    Pin<Box<dyn Future<Output = Result<Authenticated, Unidentified>> + Send + 'a>>;

/// A platform that vouches for callers.
pub trait PlatformIdentity: Send + Sync + fmt::Debug {
    /// The mode's name, as `--auth-mode` spells it (for logs).
    fn mode(&self) -> &'static str;
    /// The caller of a request (its headers and the extensions the transport attached, such
    /// as the Lambda request context), or why there is none.
    fn identify<'a>(&'a self, parts: &'a Parts) -> Identified<'a>;
    /// Headers that carry credentials: removed once the caller is known, so no credential
    /// travels further into the server.
    fn credential_headers(&self) -> &'static [&'static str] {
        &[]
    }
}

/// Middleware on `/mcp`: identifies the caller through the platform, or refuses the request.
pub(crate) async fn require_identity(
    State(identity): State<Arc<dyn PlatformIdentity>>,
    request: Request,
    next: Next,
) -> Response {
    let (mut parts, body) = request.into_parts();
    match identity.identify(&parts).await {
        Ok(caller) => {
            for name in identity.credential_headers() {
                parts.headers.remove(*name);
            }
            parts.extensions.insert(caller);
            next.run(Request::from_parts(parts, body)).await
        }
        Err(refused) => {
            tracing::info!(mode = identity.mode(), reason = %refused.reason, "refused a request");
            crate::audit::refused_request(&parts, refused.code, None);
            let mut response = (
                refused.status,
                Json(json!({"error": "unauthorized", "error_description": refused.reason})),
            )
                .into_response();
            if refused.status == StatusCode::FORBIDDEN {
                // Authenticated, but not admitted: nothing to retry with.
            } else if refused.status == StatusCode::UNAUTHORIZED {
                // A Google ID token is a bearer token; the other platforms never let an
                // unauthenticated request through, so the hint costs nothing there.
                response
                    .headers_mut()
                    .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            } else {
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
            }
            response
        }
    }
}

/// Which Google credential a [`GoogleIdentity`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GoogleCredential {
    /// A Google ID token in `Authorization: Bearer`.
    IdToken,
    /// IAP's signed header.
    Iap,
}

/// A Google-signed JWT, verified against Google's keys by flowgate-auth's validator.
///
/// An ID token proves who the caller is, not that it may call: any Google account or service
/// account can obtain one for any audience. So in ID-token mode only the callers in `allowed`
/// get through (IAP has already applied its own access policy, so `allowed` is optional there).
#[derive(Debug)]
pub struct GoogleIdentity {
    credential: GoogleCredential,
    validator: TokenValidator,
    allowed: AllowList,
}

impl GoogleIdentity {
    /// Reads `credential`, checked by `validator` (built from
    /// `flowgate_auth::google::{id_token_config, iap_config}`), letting through the callers
    /// `allowed` names (verified emails, `hd` domains: see [`AllowList`]). Empty: everyone the
    /// token is valid for.
    pub fn new(
        credential: GoogleCredential,
        validator: TokenValidator,
        allowed: AllowList,
    ) -> Self {
        GoogleIdentity {
            credential,
            validator,
            allowed,
        }
    }

    fn token<'a>(&self, parts: &'a Parts) -> Result<&'a str, Unidentified> {
        let (name, missing) = match self.credential {
            GoogleCredential::IdToken => (
                header::AUTHORIZATION,
                "this server needs a Google ID token (Authorization: Bearer) for its URL",
            ),
            GoogleCredential::Iap => (
                HeaderName::from_static(IAP_HEADER),
                "this server is behind Identity-Aware Proxy; the request carries no IAP assertion",
            ),
        };
        let value = parts
            .headers
            .get(&name)
            .ok_or_else(|| Unidentified::unauthorized(missing))?
            .to_str()
            .map_err(|_| Unidentified::invalid("the credential header is not text"))?
            .trim();
        let token = match self.credential {
            GoogleCredential::IdToken => value
                .split_once(' ')
                .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
                .map(|(_, t)| t.trim())
                .ok_or_else(|| {
                    Unidentified::invalid("the Authorization header is not a Bearer token")
                })?,
            GoogleCredential::Iap => value,
        };
        if token.is_empty() {
            return Err(Unidentified::unauthorized(missing));
        }
        Ok(token)
    }
}

impl PlatformIdentity for GoogleIdentity {
    fn mode(&self) -> &'static str {
        match self.credential {
            GoogleCredential::IdToken => "google-id-token",
            GoogleCredential::Iap => "google-iap",
        }
    }

    fn identify<'a>(&'a self, parts: &'a Parts) -> Identified<'a> {
        Box::pin(async move {
            let token = self.token(parts)?;
            let identity = self
                .validator
                .validate_identity(token)
                .await
                .map_err(|e| match e {
                    AuthError::KeysUnavailable => Unidentified {
                        status: StatusCode::SERVICE_UNAVAILABLE,
                        reason: e.to_string(),
                        code: "keys_unavailable",
                    },
                    e => Unidentified::invalid(e.to_string()),
                })?;
            if !self.allowed.admits(&identity) {
                return Err(Unidentified {
                    status: StatusCode::FORBIDDEN,
                    reason: "this caller is not among the principals allowed to call this server"
                        .into(),
                    code: "not_allowed",
                });
            }
            Ok(identity.caller)
        })
    }

    fn credential_headers(&self) -> &'static [&'static str] {
        match self.credential {
            GoogleCredential::IdToken => &["authorization"],
            GoogleCredential::Iap => &[IAP_HEADER],
        }
    }
}
