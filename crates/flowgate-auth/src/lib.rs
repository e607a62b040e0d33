//! Inbound authorization for flowgate's HTTP transport, as the MCP authorization spec asks of
//! an OAuth 2.1 resource server.
//!
//! Access tokens are JWTs validated locally (no introspection round trip per call): the
//! signature against the issuer's JWKS ([`jwks`]), an algorithm allow-list that can never
//! contain `none` or an HMAC algorithm (a public key must never be usable as a shared secret),
//! `typ: at+jwt` (RFC 9068; an ID token of the same issuer is not an access token), `iss`,
//! `aud` equal to this server's resource URI (RFC 8707), and `exp`/`nbf` with a small skew
//! ([`validate`]). The URLs of the settings are parsed and checked in [`endpoint`]. The caller becomes a [`Principal`] (issuer + subject). The challenge
//! headers and the Protected Resource Metadata document (RFC 9728) are in [`challenge`].
//!
//! A token is never logged, never put in an error message and never returned: errors carry
//! only a fixed reason.

pub mod challenge;
pub mod endpoint;
pub mod google;
pub mod jwks;
pub mod principal;
#[cfg(feature = "testing")]
pub mod testing;
pub mod validate;

pub use challenge::{ProtectedResourceMetadata, www_authenticate};
pub use jwks::{JwksSource, KeySet};
pub use principal::Principal;
pub use validate::{
    AuthError, Authenticated, Identity, SubjectClaim, TokenKind, TokenValidator, ValidatorConfig,
};
