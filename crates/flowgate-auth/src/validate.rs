//! Validating one bearer token into an [`Authenticated`] caller.

use std::collections::BTreeSet;
use std::time::Duration;

use jsonwebtoken::{Algorithm, DecodingKey, Validation, decode, decode_header};
use serde::Deserialize;
use serde_json::Value;

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
    /// Which JWTs are the credential: typed access tokens unless configured otherwise.
    pub token_kind: TokenKind,
}

/// The claim that becomes [`Principal::subject`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SubjectClaim {
    /// `sub` (OAuth access tokens, RFC 9068).
    #[default]
    Sub,
    /// `email` when the token says it is verified (`email_verified: true`, OpenID Connect Core
    /// 1.0 §5.1), else `sub`: Google ID tokens. An unverified email is a name anyone could
    /// have typed into an account, so it never names a caller.
    VerifiedEmailOrSub,
    /// `email` unless the token says it is unverified (`email_verified: false`, at the top or
    /// in the `gcip` claims of external identities), else `sub`: IAP assertions, whose
    /// documented payload has no `email_verified` because the email is the identity IAP itself
    /// signed in.
    AssertedEmailOrSub,
}

/// Which JWTs a validator takes as the credential.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TokenKind {
    /// RFC 9068 §4: an access token's header `typ` is `at+jwt` (or `application/at+jwt`, in
    /// any case), and any other JWT is refused, so an ID token or a logout token the same
    /// issuer signed is never taken for an access token.
    #[default]
    AccessToken,
    /// For issuers that do not type their access tokens (Microsoft Entra ID, Amazon Cognito,
    /// Keycloak): any header `typ` but another explicit token type, and still refusing what is
    /// recognisably not an access token: an ID token's `nonce`, `at_hash`, `c_hash` or
    /// `s_hash`, a logout or security event token's `events`, Cognito's `token_use` other than
    /// `access`, and Keycloak's payload `typ` other than `Bearer`.
    UntypedAccessToken,
    /// The credential is an identity assertion, not an access token: Google ID tokens and IAP
    /// assertions (`typ: JWT`).
    IdentityAssertion,
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
            token_kind: TokenKind::AccessToken,
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
    /// The issuer's keys could not be fetched and none are cached (a 503 rather than a 401).
    #[error("the issuer's signing keys are unavailable")]
    KeysUnavailable,
    /// A JWT of the issuer that is not an access token (an ID token, a logout token): its
    /// `typ` is not `at+jwt`, or it carries what only other tokens carry.
    #[error("the token is not an access token")]
    NotAnAccessToken,
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

/// A validated caller with what identity tokens say about its email: for allow-lists that
/// admit by email or domain (Google's modes).
#[derive(Debug, Clone)]
pub struct Identity {
    /// The caller.
    pub caller: Authenticated,
    /// The email that names the caller, when the token's email counts as verified under the
    /// validator's [`SubjectClaim`] (then it is also the principal's subject).
    pub verified_email: Option<String>,
    /// Google's `hd`: the Google Workspace or Cloud Identity domain the account belongs to,
    /// when Google sets it.
    pub hosted_domain: Option<String>,
}

#[derive(Deserialize)]
struct Claims {
    sub: String,
    #[serde(default)]
    scope: Option<String>,
    /// A list (RFC 9068 uses `scope`; some issuers send `scp` as a list), or a space-separated
    /// string as Microsoft Entra ID sends it.
    #[serde(default)]
    scp: Option<Value>,
    #[serde(default)]
    email: Option<String>,
    #[serde(default)]
    email_verified: Option<Value>,
    #[serde(default)]
    hd: Option<String>,
    /// IAP with external identities: the Identity Platform claims, `email_verified` among them.
    #[serde(default)]
    gcip: Option<Value>,
    /// ID tokens only (OpenID Connect Core 1.0 §2, §3.1.3.6, §3.3.2.11; FAPI's `s_hash`).
    #[serde(default)]
    nonce: Option<Value>,
    #[serde(default)]
    at_hash: Option<Value>,
    #[serde(default)]
    c_hash: Option<Value>,
    #[serde(default)]
    s_hash: Option<Value>,
    /// Logout tokens (OpenID Connect Back-Channel Logout 1.0 §2.4) and security event tokens
    /// (RFC 8417).
    #[serde(default)]
    events: Option<Value>,
    /// Amazon Cognito: `access` or `id`.
    #[serde(default)]
    token_use: Option<Value>,
    /// Keycloak: `Bearer` for access tokens, `ID`, `Refresh`, `Logout` for the others.
    #[serde(default)]
    typ: Option<Value>,
}

impl Claims {
    /// Whether the claims are recognisably those of a token other than an access token.
    fn not_an_access_token(&self) -> bool {
        let id_token_only = [&self.nonce, &self.at_hash, &self.c_hash, &self.s_hash];
        id_token_only.iter().any(|c| c.is_some())
            || self.events.is_some()
            || self
                .token_use
                .as_ref()
                .is_some_and(|u| u.as_str() != Some("access"))
            || self
                .typ
                .as_ref()
                .is_some_and(|t| !t.as_str().is_some_and(|t| t.eq_ignore_ascii_case("bearer")))
    }

    /// The email that names the caller under `rule`, if any.
    fn naming_email(&self, rule: SubjectClaim) -> Option<&str> {
        let email = self.email.as_deref().filter(|e| !e.is_empty())?;
        let said = |v: &Option<Value>| match v {
            None => None,
            // Some issuers (Cognito among them) send the boolean as a string.
            Some(Value::Bool(b)) => Some(*b),
            Some(Value::String(s)) => Some(s == "true"),
            Some(_) => Some(false),
        };
        match rule {
            SubjectClaim::Sub => None,
            SubjectClaim::VerifiedEmailOrSub => {
                (said(&self.email_verified) == Some(true)).then_some(email)
            }
            SubjectClaim::AssertedEmailOrSub => {
                let in_gcip = self
                    .gcip
                    .as_ref()
                    .and_then(|g| g.get("email_verified").cloned());
                let unverified =
                    said(&self.email_verified) == Some(false) || said(&in_gcip) == Some(false);
                (!unverified).then_some(email)
            }
        }
    }
}

/// Whether a header `typ` is RFC 9068's: `at+jwt`, with or without `application/`, compared
/// without regard to case (RFC 7515 §4.1.9 media types).
fn is_access_token_type(typ: &str) -> bool {
    let typ = typ.to_ascii_lowercase();
    typ == "at+jwt" || typ == "application/at+jwt"
}

/// Whether a header `typ` is acceptable from an issuer that does not type access tokens:
/// none, the generic `JWT`, or `at+jwt`; another explicit type (`logout+jwt`,
/// `secevent+jwt`, ...) names some other token.
fn is_untyped_or_access(typ: Option<&str>) -> bool {
    typ.is_none_or(|t| {
        let t = t.to_ascii_lowercase();
        let t = t.strip_prefix("application/").unwrap_or(&t);
        t == "jwt" || t == "at+jwt"
    })
}

/// Validates tokens of one issuer for one resource.
#[derive(Debug)]
pub struct TokenValidator {
    config: ValidatorConfig,
    keys: KeySet,
}

impl TokenValidator {
    /// How long until the next attempt to fetch the issuer's keys (zero: one may be made now).
    pub async fn next_key_attempt_in(&self) -> Duration {
        self.keys.next_attempt_in().await
    }

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
        self.validate_identity(token).await.map(|id| id.caller)
    }

    /// Validates `token` like [`TokenValidator::validate`], also returning what it says of the
    /// caller's email and domain.
    ///
    /// # Errors
    /// An [`AuthError`] naming the first check that failed.
    pub async fn validate_identity(&self, token: &str) -> Result<Identity, AuthError> {
        // `alg: none` does not even parse as an `Algorithm`: it is refused here.
        let header = decode_header(token).map_err(|_| AuthError::Algorithm)?;
        if !self.config.algorithms.contains(&header.alg) {
            return Err(AuthError::Algorithm);
        }
        let typ = header.typ.as_deref();
        let typed_as_required = match self.config.token_kind {
            TokenKind::AccessToken => typ.is_some_and(is_access_token_type),
            TokenKind::UntypedAccessToken => is_untyped_or_access(typ),
            TokenKind::IdentityAssertion => true,
        };
        if !typed_as_required {
            return Err(AuthError::NotAnAccessToken);
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
        if self.config.token_kind == TokenKind::UntypedAccessToken && claims.not_an_access_token() {
            return Err(AuthError::NotAnAccessToken);
        }
        let verified_email = claims.naming_email(self.config.subject).map(str::to_owned);
        let mut scopes: BTreeSet<String> = claims
            .scope
            .as_deref()
            .unwrap_or("")
            .split_whitespace()
            .map(str::to_owned)
            .collect();
        match &claims.scp {
            Some(Value::String(list)) => scopes.extend(list.split_whitespace().map(str::to_owned)),
            Some(Value::Array(list)) => {
                scopes.extend(list.iter().filter_map(Value::as_str).map(str::to_owned));
            }
            _ => {}
        }
        let subject = verified_email.clone().unwrap_or(claims.sub);
        Ok(Identity {
            caller: Authenticated {
                principal: Principal {
                    // `iss` matched the issuer or one of its aliases: name it by the issuer.
                    issuer: self.config.issuer.clone(),
                    subject,
                },
                scopes,
            },
            verified_email,
            hosted_domain: claims.hd.filter(|d| !d.is_empty()),
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
