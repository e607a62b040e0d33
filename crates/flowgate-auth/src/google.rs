//! Google-signed identities, for deployments where Google authenticates the caller: a Google
//! ID token (OIDC, `Authorization: Bearer`, audience = the service's URL, as Cloud Run callers
//! send) or an Identity-Aware Proxy assertion (`X-Goog-IAP-JWT-Assertion`, audience = the
//! backend service or App Engine app). Both are JWTs checked by the same [`TokenValidator`]
//! as OAuth access tokens, against Google's published keys (configurable, so tests can put a
//! locally generated key set in their place).

use crate::validate::{SubjectClaim, ValidatorConfig};
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
/// `email` (service accounts and users), else its `sub`.
pub fn id_token_config(audience: &str) -> ValidatorConfig {
    let mut config = ValidatorConfig::new(ID_TOKEN_ISSUER, audience);
    config.issuer_aliases = vec![ID_TOKEN_ISSUER_ALIAS.to_owned()];
    config.algorithms = vec![Algorithm::RS256];
    config.subject = SubjectClaim::EmailOrSub;
    config
}

/// What an IAP assertion must be: IAP's issuer, ES256, `aud` equal to `audience`
/// (`/projects/NUMBER/global/backendServices/ID`, `/projects/NUMBER/apps/PROJECT_ID`, or for
/// IAP on Cloud Run `/projects/NUMBER/locations/REGION/services/NAME`). The principal is the
/// assertion's `email`, else its `sub`.
pub fn iap_config(audience: &str) -> ValidatorConfig {
    let mut config = ValidatorConfig::new(IAP_ISSUER, audience);
    config.algorithms = vec![Algorithm::ES256];
    config.subject = SubjectClaim::EmailOrSub;
    config
}
