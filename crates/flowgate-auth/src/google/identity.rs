//! The [`Identity`] of deployments where Google authenticates the caller and flowgate only has
//! to read who it was, safely. The credential is a Google-signed JWT whose signature is
//! verified here, never a header taken at its word.
//!
//! Two credentials ([`GoogleCredential`]): an ID token in `Authorization: Bearer` (audience =
//! the service URL), or IAP's `X-Goog-IAP-JWT-Assertion` (audience = the backend service).

use http::HeaderName;
use http::request::Parts;

use super::{AllowList, IAP_HEADER, IAP_JWKS, ID_TOKEN_JWKS, iap_config, id_token_config};
use crate::{Identified, Identity, Mode, Refused, TokenValidator, ValidatorConfig, bearer};

/// Which Google credential a [`GoogleIdentity`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GoogleCredential {
    /// A Google ID token in `Authorization: Bearer`.
    IdToken,
    /// IAP's signed header.
    Iap,
}

impl GoogleCredential {
    /// The credential of a Google mode (`None` for the others).
    pub fn for_mode(mode: Mode) -> Option<Self> {
        match mode {
            Mode::GoogleIdToken => Some(GoogleCredential::IdToken),
            Mode::GoogleIap => Some(GoogleCredential::Iap),
            _ => None,
        }
    }

    /// The mode that reads this credential.
    pub fn mode(self) -> Mode {
        match self {
            GoogleCredential::IdToken => Mode::GoogleIdToken,
            GoogleCredential::Iap => Mode::GoogleIap,
        }
    }

    /// What the credential must be for `audience` ([`id_token_config`], [`iap_config`]).
    pub fn config(self, audience: &str) -> ValidatorConfig {
        match self {
            GoogleCredential::IdToken => id_token_config(audience),
            GoogleCredential::Iap => iap_config(audience),
        }
    }

    /// Where Google publishes the keys that sign the credential ([`ID_TOKEN_JWKS`],
    /// [`IAP_JWKS`]).
    pub fn published_keys(self) -> &'static str {
        match self {
            GoogleCredential::IdToken => ID_TOKEN_JWKS,
            GoogleCredential::Iap => IAP_JWKS,
        }
    }
}

/// A Google-signed JWT, verified against Google's keys by the [`TokenValidator`].
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
    /// Reads `credential`, checked by `validator` (built from [`GoogleCredential::config`]),
    /// letting through the callers `allowed` names (verified emails, `hd` domains: see
    /// [`AllowList`]). Empty: everyone the token is valid for.
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

    fn token<'a>(&self, parts: &'a Parts) -> Result<&'a str, Refused> {
        let missing = match self.credential {
            GoogleCredential::IdToken => {
                "this server needs a Google ID token (Authorization: Bearer) for its URL"
            }
            GoogleCredential::Iap => {
                "this server is behind Identity-Aware Proxy; the request carries no IAP assertion"
            }
        };
        let token = match self.credential {
            GoogleCredential::IdToken => bearer(&parts.headers)?,
            GoogleCredential::Iap => parts
                .headers
                .get(HeaderName::from_static(IAP_HEADER))
                .map(|v| {
                    v.to_str()
                        .map(str::trim)
                        .map_err(|_| Refused::invalid("the credential header is not text"))
                })
                .transpose()?,
        };
        token
            .filter(|t| !t.is_empty())
            .ok_or_else(|| Refused::missing(missing))
    }
}

impl Identity for GoogleIdentity {
    fn mode(&self) -> Mode {
        self.credential.mode()
    }

    fn identify<'a>(&'a self, parts: &'a Parts) -> Identified<'a> {
        Box::pin(async move {
            let token = self.token(parts)?;
            let identity = match self.validator.validate_identity(token).await {
                Ok(identity) => identity,
                Err(e) => return Err(Refused::from_validator(&self.validator, &e).await),
            };
            if !self.allowed.admits(&identity) {
                return Err(Refused::not_allowed(
                    "this caller is not among the principals allowed to call this server",
                ));
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
