//! Google-signed identities, for deployments where Google authenticates the caller: a Google
//! ID token (OIDC, `Authorization: Bearer`, audience = the service's URL, as Cloud Run callers
//! send) or an Identity-Aware Proxy assertion (`X-Goog-IAP-JWT-Assertion`, audience = the
//! backend service or App Engine app). Both are JWTs checked by the same
//! [`TokenValidator`](crate::TokenValidator) as OAuth access tokens, against Google's published
//! keys (configurable, so tests can put a locally generated key set in their place).
//!
//! Who may call is an [`AllowList`]: exact emails, and whole domains by Google's `hd` claim.
//! [`GoogleIdentity`] is the [`Identity`](crate::Identity) that reads either credential.

mod identity;

pub use identity::{GoogleCredential, GoogleIdentity};

use crate::validate::{Identity, SubjectClaim, TokenKind, ValidatorConfig};
use jsonwebtoken::Algorithm;

/// The issuer of Google ID tokens.
pub const ID_TOKEN_ISSUER: &str = "https://accounts.google.com";
/// The same issuer without its scheme, as some Google ID tokens spell it.
pub const ID_TOKEN_ISSUER_ALIAS: &str = "accounts.google.com";
/// Google's OAuth 2.0 / OIDC signing keys (RS256), for ID tokens.
pub const ID_TOKEN_JWKS: &str = "https://www.googleapis.com/oauth2/v3/certs";
/// The issuer of IAP assertions.
pub const IAP_ISSUER: &str = "https://cloud.google.com/iap";
/// IAP's signing keys (ES256), as a JWK set.
pub const IAP_JWKS: &str = "https://www.gstatic.com/iap/verify/public_key-jwk";
/// The header IAP puts its signed assertion in.
pub const IAP_HEADER: &str = "x-goog-iap-jwt-assertion";

/// What a Google ID token must be: Google's issuer (either spelling), RS256, `aud` equal to
/// `audience` (the service URL the caller asked a token for). The principal is the token's
/// `email` when `email_verified` is true (service accounts and users), else its `sub`.
pub fn id_token_config(audience: &str) -> ValidatorConfig {
    let mut config = ValidatorConfig::new(ID_TOKEN_ISSUER, audience);
    config.issuer_aliases = vec![ID_TOKEN_ISSUER_ALIAS.to_owned()];
    config.algorithms = vec![Algorithm::RS256];
    config.subject = SubjectClaim::VerifiedEmailOrSub;
    config.token_kind = TokenKind::IdentityAssertion;
    config
}

/// What an IAP assertion must be: IAP's issuer, ES256, `aud` equal to `audience`
/// (`/projects/NUMBER/global/backendServices/ID`, `/projects/NUMBER/apps/PROJECT_ID`, or for
/// IAP on Cloud Run `/projects/NUMBER/locations/REGION/services/NAME`). The principal is the
/// assertion's `email` (the identity IAP signed in; never one the assertion marks unverified),
/// else its `sub`.
pub fn iap_config(audience: &str) -> ValidatorConfig {
    let mut config = ValidatorConfig::new(IAP_ISSUER, audience);
    config.algorithms = vec![Algorithm::ES256];
    config.subject = SubjectClaim::AssertedEmailOrSub;
    config.token_kind = TokenKind::IdentityAssertion;
    config
}

/// Domains whose accounts Google itself owns, so that a verified address there is Google's
/// word even without `hd`: consumer Gmail, and service accounts (`*.gserviceaccount.com`).
fn google_owns(domain: &str) -> bool {
    domain == "gmail.com" || domain == "googlemail.com" || domain.ends_with(".gserviceaccount.com")
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    /// An email, or a `sub` (an entry without `@`).
    Caller(String),
    /// `*@domain`.
    Domain(String),
}

/// The Google callers let through: exact emails (or subjects), and `*@domain` for a domain.
///
/// An email counts only when the token says it is verified (see
/// [`SubjectClaim::VerifiedEmailOrSub`]). A domain is matched by the `hd` claim where Google
/// sets it (the Workspace or Cloud Identity organization the account belongs to, which Google
/// is authoritative for), not by the email's suffix: a consumer Google account can be created
/// with any address, `someone@example.com` included. Without `hd`, a domain entry matches only a
/// domain Google owns outright (`gmail.com`, `*.gserviceaccount.com`), by the verified email.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowList {
    entries: Vec<Entry>,
}

impl AllowList {
    /// Parses entries: `*@domain`, an email, or a subject. Blank entries are skipped.
    ///
    /// # Errors
    /// An entry with a `*` that is not of the form `*@domain`, naming it.
    pub fn parse(entries: &[String]) -> Result<Self, String> {
        let mut list = AllowList::default();
        for raw in entries.iter().map(|e| e.trim()).filter(|e| !e.is_empty()) {
            let entry = match raw.strip_prefix("*@") {
                Some(domain) if !domain.is_empty() && !domain.contains(['@', '*']) => {
                    Entry::Domain(domain.to_ascii_lowercase())
                }
                _ if raw.contains('*') => {
                    return Err(format!(
                        "allowed caller {raw:?}: a wildcard is only `*@domain` (a whole domain)"
                    ));
                }
                _ => Entry::Caller(raw.to_owned()),
            };
            list.entries.push(entry);
        }
        Ok(list)
    }

    /// Whether nobody is named (then every caller the token is valid for passes).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether `who` is let through.
    pub fn admits(&self, who: &Identity) -> bool {
        if self.entries.is_empty() {
            return true;
        }
        let subject = &who.caller.principal.subject;
        let email = who.verified_email.as_deref();
        let email_domain = email
            .and_then(|e| e.rsplit_once('@'))
            .map(|(_, d)| d.to_ascii_lowercase());
        self.entries.iter().any(|entry| match entry {
            Entry::Caller(name) if name.contains('@') => {
                email.is_some_and(|e| e.eq_ignore_ascii_case(name))
            }
            Entry::Caller(sub) => email.is_none() && subject == sub,
            Entry::Domain(domain) => match &who.hosted_domain {
                Some(hd) => hd.eq_ignore_ascii_case(domain),
                None => google_owns(domain) && email_domain.as_deref() == Some(domain.as_str()),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Authenticated, Principal};

    fn who(sub: &str, email: Option<&str>, hd: Option<&str>) -> Identity {
        Identity {
            caller: Authenticated {
                principal: Principal {
                    issuer: ID_TOKEN_ISSUER.to_owned(),
                    subject: email.unwrap_or(sub).to_owned(),
                },
                scopes: Default::default(),
            },
            verified_email: email.map(str::to_owned),
            hosted_domain: hd.map(str::to_owned),
        }
    }

    fn list(entries: &[&str]) -> AllowList {
        AllowList::parse(&entries.iter().map(|e| (*e).to_owned()).collect::<Vec<_>>())
            .expect("entries")
    }

    #[test]
    fn emails_must_be_verified_and_domains_are_googles_word() {
        let allowed = list(&[
            "alice@example.com",
            "*@corp.example",
            "*@p.iam.gserviceaccount.com",
            "1234",
        ]);
        // An exact email: only the verified one.
        assert!(allowed.admits(&who("1", Some("Alice@Example.com"), None)));
        assert!(!allowed.admits(&who("1", None, None)), "unverified");
        // A domain: by hd, not by the email's suffix.
        assert!(allowed.admits(&who("2", Some("bob@corp.example"), Some("corp.example"))));
        assert!(allowed.admits(&who("2", Some("bob@other.example"), Some("CORP.example"))));
        assert!(
            !allowed.admits(&who("2", Some("bob@corp.example"), None)),
            "a consumer account with a corp address"
        );
        assert!(!allowed.admits(&who("2", Some("bob@corp.example"), Some("evil.example"))));
        // Without hd, only a domain Google owns, by the verified email.
        assert!(allowed.admits(&who("3", Some("ci@p.iam.gserviceaccount.com"), None)));
        assert!(!allowed.admits(&who("3", None, None)));
        // A subject entry names an account without a verified email.
        assert!(allowed.admits(&who("1234", None, None)));
        assert!(!allowed.admits(&who("1234", Some("x@y.example"), None)));
        assert!(AllowList::default().admits(&who("9", None, None)));
        for bad in ["*example.com", "*@", "a*@b.c", "*@*.example"] {
            assert!(AllowList::parse(&[bad.to_owned()]).is_err(), "{bad}");
        }
    }
}
