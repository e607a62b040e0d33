//! Inbound authorization for flowgate's HTTP transport, as the MCP authorization spec asks of
//! an OAuth 2.1 resource server.
//!
//! Access tokens are JWTs validated locally (no introspection round trip per call): the
//! signature against the issuer's JWKS ([`jwks`]), an algorithm allow-list that can never
//! contain `none` or an HMAC algorithm (a public key must never be usable as a shared secret),
//! `typ: at+jwt` (RFC 9068; an ID token of the same issuer is not an access token), `iss`,
//! `aud` equal to this server's resource URI (RFC 8707), and `exp`/`nbf` with a small skew
//! ([`validate`]). The URLs of the settings are parsed and checked in [`endpoint`]. The caller
//! becomes a [`Principal`] (issuer + subject), whose one digest ([`principal::digest`]) is what
//! engines mark executions with. The challenge headers and the Protected Resource Metadata
//! document (RFC 9728) are in [`challenge`].
//!
//! [`Identity`] is the one interface every way of authenticating implements, with the [`Mode`]
//! names, the refusals and the one bearer-token parser; [`scope::permits`] is the one scope
//! check. (What a validated identity token says of its caller is [`validate::Identity`].) The
//! implementations live here too, so the server only runs the one middleware over whichever
//! identity the binary configured, and neither knows how any of them checks a caller:
//!
//! - [`OAuthIdentity`] ([`oauth`]): JWT access tokens of one issuer, with the RFC 9728
//!   metadata its challenges point at;
//! - [`GoogleIdentity`] ([`google`]): Google ID tokens and IAP assertions, with an
//!   [`AllowList`](google::AllowList);
//! - `LambdaIdentity` (`lambda`, behind the `lambda` feature, which brings in `lambda_http`):
//!   the AWS Lambda request context of a Function URL or an HTTP API authorizer.
//!
//! They read a request through `http::request::Parts` only: no web framework is a dependency
//! (axum is only the `testing` feature's stand-in issuer).
//!
//! A token is never logged, never put in an error message and never returned: errors carry
//! only a fixed reason.

pub mod challenge;
pub mod endpoint;
pub mod google;
pub mod identity;
pub mod jwks;
#[cfg(feature = "lambda")]
pub mod lambda;
pub mod oauth;
pub mod principal;
pub mod scope;
#[cfg(feature = "testing")]
pub mod testing;
pub mod validate;

pub use challenge::{ProtectedResourceMetadata, www_authenticate};
pub use google::{GoogleCredential, GoogleIdentity};
pub use identity::{Identified, Identity, Mode, RefusalKind, Refused, bearer};
pub use jwks::{JwksSource, KeySet};
#[cfg(feature = "lambda")]
pub use lambda::{LambdaAuthorizer, LambdaIdentity};
pub use oauth::OAuthIdentity;
pub use principal::Principal;
pub use validate::{
    AuthError, Authenticated, SubjectClaim, TokenKind, TokenValidator, ValidatorConfig,
};
