//! Who is calling: the token's issuer and subject together, since a subject is only unique
//! within its issuer; and the one digest of a caller that may leave the process.

use sha2::{Digest, Sha256};

/// The principal key of a caller no one authenticated (stdio, or HTTP without an identity). It
/// cannot collide with an authenticated one: those start with the issuer's length and a colon.
pub const ANONYMOUS: &str = "anonymous";

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
}

/// The principal key of a caller: its [`Principal::key`], or [`ANONYMOUS`].
pub fn key_of(principal: Option<&Principal>) -> String {
    principal.map_or_else(|| ANONYMOUS.to_owned(), Principal::key)
}

/// The digest of a principal key (16 lowercase hex digits: the first 64 bits of its SHA-256).
///
/// The only form of a caller that leaves the process: engines mark the executions they start
/// with it (an execution name, a label, a CI variable), so it is short, non-reversible, and
/// valid as it is in every engine's names and labels.
pub fn digest(principal_key: &str) -> String {
    let hash = Sha256::digest(principal_key.as_bytes());
    hash.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_is_sixteen_hex_digits_of_the_key() {
        let alice = Principal {
            issuer: "https://issuer.example".into(),
            subject: "alice".into(),
        };
        let d = digest(&alice.key());
        assert_eq!(d.len(), 16);
        assert!(
            d.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')),
            "{d}"
        );
        assert_ne!(d, digest(ANONYMOUS));
        assert_eq!(key_of(None), ANONYMOUS);
        assert_eq!(key_of(Some(&alice)), "22:https://issuer.examplealice");
        // The digest of the anonymous key is stable: executions started before keep their tag.
        assert_eq!(digest(ANONYMOUS), digest("anonymous"));
        assert_eq!(
            digest("anonymous"),
            Sha256::digest(b"anonymous")[..8]
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        );
    }
}
