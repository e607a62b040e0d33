//! Who is calling: the token's issuer and subject together, since a subject is only unique
//! within its issuer.

use sha2::{Digest, Sha256};

/// An authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Principal {
    /// The `iss` of the token (or the platform that vouched for the caller).
    pub issuer: String,
    /// The `sub` of the token.
    pub subject: String,
}

impl Principal {
    /// One string naming the principal, what handles are sealed to. The issuer is
    /// length-prefixed so that no issuer/subject pair can collide with another.
    pub fn key(&self) -> String {
        format!("{}:{}{}", self.issuer.len(), self.issuer, self.subject)
    }

    /// A short, non-reversible digest of the principal, safe to put in engine labels.
    pub fn digest(&self) -> String {
        let hash = Sha256::digest(self.key().as_bytes());
        hash.iter().take(8).map(|b| format!("{b:02x}")).collect()
    }
}
