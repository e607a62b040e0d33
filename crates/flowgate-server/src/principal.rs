//! Who is calling. Task handles are bound to it.

use rmcp::RoleServer;
use rmcp::service::RequestContext;
use sha2::{Digest, Sha256};

/// The principal of every request until inbound authentication exists.
pub const ANONYMOUS: &str = "anonymous";

/// The caller's principal for this request.
pub(crate) fn of(_ctx: &RequestContext<RoleServer>) -> String {
    ANONYMOUS.to_owned()
}

/// A short, non-reversible digest of a principal, safe to put in engine labels.
pub(crate) fn digest(principal: &str) -> String {
    let hash = Sha256::digest(principal.as_bytes());
    hash.iter().take(8).map(|b| format!("{b:02x}")).collect()
}
