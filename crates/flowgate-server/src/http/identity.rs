//! Google identities: deployments where Google authenticates the caller and flowgate only has
//! to read who it was, safely, through the same [`Identity`] interface as OAuth and the AWS
//! Lambda request context (which the binary implements). The credential is a Google-signed JWT
//! whose signature is verified here, never a header taken at its word.
//!
//! Two credentials ([`GoogleIdentity`]): an ID token in `Authorization: Bearer` (audience = the
//! service URL), or IAP's `X-Goog-IAP-JWT-Assertion` (audience = the backend service).

use axum::http::HeaderName;
use axum::http::request::Parts;
use flowgate_auth::google::{AllowList, IAP_HEADER};
use flowgate_auth::{Identified, Identity, Mode, Refused, TokenValidator, bearer};

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
        match self.credential {
            GoogleCredential::IdToken => Mode::GoogleIdToken,
            GoogleCredential::Iap => Mode::GoogleIap,
        }
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
