//! Who is calling. Task handles are bound to it.

use rmcp::RoleServer;
use rmcp::service::RequestContext;
use sha2::{Digest, Sha256};

/// The principal of a request no one authenticated (stdio, or HTTP without `auth`). It cannot
/// collide with an authenticated one: those start with the issuer's length and a colon.
pub const ANONYMOUS: &str = "anonymous";

/// The caller's principal for this request: the authenticated issuer + subject the HTTP
/// transport put in the request's parts, else [`ANONYMOUS`].
pub(crate) fn of(ctx: &RequestContext<RoleServer>) -> String {
    caller(ctx).map_or_else(|| ANONYMOUS.to_owned(), |c| c.principal.key())
}

/// The authenticated caller of this request, if any.
pub(crate) fn caller(ctx: &RequestContext<RoleServer>) -> Option<&flowgate_auth::Authenticated> {
    ctx.extensions
        .get::<axum::http::request::Parts>()
        .and_then(crate::http::caller)
}

/// A short, non-reversible digest of a principal, safe to put in engine labels.
pub(crate) fn digest(principal: &str) -> String {
    let hash = Sha256::digest(principal.as_bytes());
    hash.iter().take(8).map(|b| format!("{b:02x}")).collect()
}
