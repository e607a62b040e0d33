//! Inbound OAuth (opt-in): flowgate as an OAuth 2.1 resource server, one implementation of the
//! [`Identity`] interface.
//!
//! Every request to `/mcp` must carry `Authorization: Bearer <JWT>` valid for this resource;
//! otherwise it gets 401 with a `WWW-Authenticate` challenge pointing at the Protected Resource
//! Metadata (RFC 9728), which the HTTP transport serves at
//! `/.well-known/oauth-protected-resource` and at the path-suffixed form for `/mcp`. The
//! validated caller becomes the request's caller, so task handles are sealed to issuer +
//! subject.
//!
//! The token itself goes no further than the validator: it is not logged, not put in any
//! message, and the `Authorization` header ([`Identity::credential_headers`]) is removed
//! before the request goes on.

use http::request::Parts;

use crate::challenge::www_authenticate;
use crate::{
    Identified, Identity, Mode, ProtectedResourceMetadata, Refused, TokenValidator, bearer,
};

/// The resource server: its validator and what it tells clients about itself.
#[derive(Debug)]
pub struct OAuthIdentity {
    validator: TokenValidator,
    metadata: ProtectedResourceMetadata,
    metadata_url: String,
}

impl OAuthIdentity {
    /// Protects the resource the validator's audience names, advertising `scopes` (every scope
    /// a tool may require) in the metadata document.
    pub fn new(validator: TokenValidator, scopes: Vec<String>) -> Self {
        let resource = validator.config().audience.clone();
        let issuer = validator.config().issuer.clone();
        OAuthIdentity {
            metadata: ProtectedResourceMetadata::new(&resource, vec![issuer], scopes),
            metadata_url: ProtectedResourceMetadata::url_for(&resource),
            validator,
        }
    }

    /// The URL of the metadata document, as put in every challenge.
    pub fn metadata_url(&self) -> &str {
        &self.metadata_url
    }
}

impl Identity for OAuthIdentity {
    fn mode(&self) -> Mode {
        Mode::Oauth
    }

    fn identify<'a>(&'a self, request: &'a Parts) -> Identified<'a> {
        Box::pin(async move {
            let token = bearer(&request.headers)?.ok_or_else(|| {
                Refused::missing("this server needs an OAuth access token (Authorization: Bearer)")
            })?;
            match self.validator.validate(token).await {
                Ok(who) => Ok(who),
                Err(e) => {
                    tracing::info!(reason = %e, "refused an access token");
                    Err(Refused::from_validator(&self.validator, &e).await)
                }
            }
        })
    }

    fn credential_headers(&self) -> &'static [&'static str] {
        &["authorization"]
    }

    /// Every challenge points at the resource metadata, so a client can find the issuer.
    fn challenge(&self, refused: &Refused) -> Option<String> {
        let refusal = refused.challenge()?;
        Some(www_authenticate(
            &self.metadata_url,
            refusal,
            &refused.scopes,
        ))
    }

    fn resource_metadata(&self) -> Option<&ProtectedResourceMetadata> {
        Some(&self.metadata)
    }
}
