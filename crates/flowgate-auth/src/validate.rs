//! Validating one bearer token into an [`Authenticated`] caller.

use std::collections::BTreeSet;
use std::time::Duration;

use jsonwebtoken::{Algorithm, DecodingKey, Validation, decode, decode_header};
use serde::Deserialize;

use crate::Principal;
use crate::jwks::KeySet;

/// What a resource server accepts.
#[derive(Debug, Clone)]
pub struct ValidatorConfig {
    /// The only accepted `iss`.
    pub issuer: String,
    /// This server's canonical resource URI; the token's `aud` must contain it (RFC 8707).
    pub audience: String,
    /// Accepted signature algorithms. HMAC algorithms are dropped on construction: with a
    /// public key set, accepting them would let anyone sign with the public key as the secret.
    pub algorithms: Vec<Algorithm>,
    /// Clock skew tolerated on `exp` and `nbf`.
    pub leeway: Duration,
    /// Other spellings of the same issuer (Google signs ID tokens as both
    /// `https://accounts.google.com` and `accounts.google.com`). A token from one of them is
    /// attributed to [`issuer`](Self::issuer), so one caller is always one principal.
    pub issuer_aliases: Vec<String>,
    /// Which claim names the caller within the issuer.
    pub subject: SubjectClaim,
}

/// The claim that becomes [`Principal::subject`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SubjectClaim {
    /// `sub` (OAuth access tokens, RFC 9068).
    #[default]
    Sub,
    /// `email` when the token carries one, else `sub`: Google ID tokens and IAP assertions,
    /// whose email is what IAM policies and people name the caller by.
    EmailOrSub,
}

impl ValidatorConfig {
    /// RS256, ES256 (the algorithms OAuth servers actually issue) and 60 s of skew.
    pub fn new(issuer: &str, audience: &str) -> Self {
        ValidatorConfig {
            issuer: issuer.to_owned(),
            audience: audience.to_owned(),
            algorithms: vec![
                Algorithm::RS256,
                Algorithm::ES256,
                Algorithm::PS256,
                Algorithm::EdDSA,
            ],
            leeway: Duration::from_secs(60),
            issuer_aliases: Vec::new(),
            subject: SubjectClaim::Sub,
        }
    }
}

/// Why a token was refused. Messages are fixed texts: never the token, never its claims.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AuthError {
    /// Not a JWT, or a header/claims that do not parse.
    #[error("the access token is malformed")]
    Malformed,
    /// `alg` outside the allow-list (including `none` and HMAC).
    #[error("the access token's algorithm is not accepted")]
    Algorithm,
    /// No key of the issuer has the token's `kid`.
    #[error("the access token's signing key is unknown")]
    UnknownKey,
    /// The signature does not verify.
    #[error("the access token's signature is invalid")]
    Signature,
    /// Past `exp`.
    #[error("the access token has expired")]
    Expired,
    /// Before `nbf`.
    #[error("the access token is not yet valid")]
    NotYetValid,
    /// `iss` is not the configured issuer.
    #[error("the access token is from another issuer")]
    Issuer,
    /// `aud` does not name this resource.
    #[error("the access token is for another resource")]
    Audience,
    /// `sub`, `exp` or another required claim is missing.
    #[error("the access token lacks a required claim")]
    MissingClaim,
    /// The issuer's keys could not be fetched (a 503 rather than a 401).
    #[error("the issuer's signing keys are unavailable")]
    KeysUnavailable,
}

/// A validated caller.
#[derive(Debug, Clone)]
pub struct Authenticated {
    /// Who.
    pub principal: Principal,
    /// Granted scopes (`scope` string or `scp` list).
    pub scopes: BTreeSet<String>,
}

impl Authenticated {
    /// Whether every one of `required` was granted.
    pub fn has_all(&self, required: &[String]) -> bool {
        required.iter().all(|s| self.scopes.contains(s))
    }

    /// Those of `required` not granted.
    pub fn missing(&self, required: &[String]) -> Vec<String> {
        required
            .iter()
            .filter(|s| !self.scopes.contains(*s))
            .cloned()
            .collect()
    }
}

#[derive(Deserialize)]
struct Claims {
    sub: String,
    #[serde(default)]
    scope: Option<String>,
    #[serde(default)]
    scp: Option<Vec<String>>,
    #[serde(default)]
    email: Option<String>,
}

/// Validates tokens of one issuer for one resource.
#[derive(Debug)]
pub struct TokenValidator {
    config: ValidatorConfig,
    keys: KeySet,
}

impl TokenValidator {
    /// A validator; HMAC and `none` are removed from the allow-list whatever the config says.
    pub fn new(mut config: ValidatorConfig, keys: KeySet) -> Self {
        config
            .algorithms
            .retain(|a| !matches!(a, Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512));
        TokenValidator { config, keys }
    }

    /// The configuration in force.
    pub fn config(&self) -> &ValidatorConfig {
        &self.config
    }

    /// Validates `token` (the bearer value, without `Bearer `).
    ///
    /// # Errors
    /// An [`AuthError`] naming the first check that failed.
    pub async fn validate(&self, token: &str) -> Result<Authenticated, AuthError> {
        // `alg: none` does not even parse as an `Algorithm`: it is refused here.
        let header = decode_header(token).map_err(|_| AuthError::Algorithm)?;
        if !self.config.algorithms.contains(&header.alg) {
            return Err(AuthError::Algorithm);
        }
        let jwk = self
            .keys
            .find(header.kid.as_deref())
            .await
            .map_err(|_| AuthError::KeysUnavailable)?
            .ok_or(AuthError::UnknownKey)?;
        // A JWK that names its algorithm may only verify that algorithm.
        if let Some(key_alg) = jwk.common.key_algorithm
            && key_alg.to_string() != format!("{:?}", header.alg)
        {
            return Err(AuthError::Algorithm);
        }
        let key = DecodingKey::from_jwk(&jwk).map_err(|_| AuthError::UnknownKey)?;
        let mut validation = Validation::new(header.alg);
        validation.algorithms = vec![header.alg];
        validation.leeway = self.config.leeway.as_secs();
        validation.validate_nbf = true;
        let mut issuers = vec![self.config.issuer.as_str()];
        issuers.extend(self.config.issuer_aliases.iter().map(String::as_str));
        validation.set_issuer(&issuers);
        validation.set_audience(&[&self.config.audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        let data = decode::<Claims>(token, &key, &validation).map_err(classify)?;
        let claims = data.claims;
        let mut scopes: BTreeSet<String> = claims
            .scope
            .as_deref()
            .unwrap_or("")
            .split_whitespace()
            .map(str::to_owned)
            .collect();
        scopes.extend(claims.scp.unwrap_or_default());
        let subject = match (self.config.subject, claims.email) {
            (SubjectClaim::EmailOrSub, Some(email)) if !email.is_empty() => email,
            _ => claims.sub,
        };
        Ok(Authenticated {
            principal: Principal {
                // `iss` matched the issuer or one of its aliases: name it by the issuer.
                issuer: self.config.issuer.clone(),
                subject,
            },
            scopes,
        })
    }
}

fn classify(error: jsonwebtoken::errors::Error) -> AuthError {
    use jsonwebtoken::errors::ErrorKind as K;
    match error.kind() {
        K::InvalidSignature => AuthError::Signature,
        K::ExpiredSignature => AuthError::Expired,
        K::ImmatureSignature => AuthError::NotYetValid,
        K::InvalidIssuer => AuthError::Issuer,
        K::InvalidAudience => AuthError::Audience,
        K::MissingRequiredClaim(_) => AuthError::MissingClaim,
        K::InvalidAlgorithm | K::InvalidAlgorithmName => AuthError::Algorithm,
        K::InvalidEcdsaKey | K::InvalidRsaKey(_) | K::InvalidKeyFormat => AuthError::Signature,
        _ => AuthError::Malformed,
    }
}
