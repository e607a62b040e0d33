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
//! [`Identity`] is the one interface every way of authenticating implements (OAuth, the AWS
//! Lambda request context, Google ID tokens and IAP), with the [`Mode`] names, the refusals and
//! the one bearer-token parser; [`scope::permits`] is the one scope check. (What a validated
//! identity token says of its caller is [`validate::Identity`].)
//!
//! A token is never logged, never put in an error message and never returned: errors carry
//! only a fixed reason.

pub mod challenge;
pub mod endpoint;
pub mod google;
pub mod identity;
pub mod jwks;
pub mod principal;
pub mod scope;
#[cfg(feature = "testing")]
pub mod testing;
pub mod validate;

pub use challenge::{ProtectedResourceMetadata, www_authenticate};
pub use identity::{Identified, Identity, Mode, RefusalKind, Refused, bearer};
pub use jwks::{JwksSource, KeySet};
pub use principal::Principal;
pub use validate::{
    AuthError, Authenticated, SubjectClaim, TokenKind, TokenValidator, ValidatorConfig,
};
