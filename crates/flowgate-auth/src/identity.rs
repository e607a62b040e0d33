//! One way to authenticate a caller, whoever vouches for it.
//!
//! An [`Identity`] turns a request into an [`Authenticated`] caller or a [`Refused`]: OAuth (a
//! JWT access token this server validates), the AWS request context of a Lambda invocation, a
//! Google ID token or IAP assertion. The HTTP transport has one middleware for all of them;
//! the differences are here, behind the trait: where the credential is, how a refusal is
//! challenged ([`Identity::challenge`]), and what is published about the resource
//! ([`Identity::resource_metadata`]). The mode names `--auth-mode` takes are defined once, by
//! [`Mode`].

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use http::request::Parts;
use http::{HeaderMap, StatusCode, header};

use crate::challenge::{Refusal, www_authenticate_header};
use crate::{AuthError, Authenticated, ProtectedResourceMetadata, TokenValidator};

/// Who vouches for callers: the values of `--auth-mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// OAuth 2.1 resource server: JWT access tokens of one issuer for this resource.
    Oauth,
    /// A Lambda Function URL with `AuthType: AWS_IAM`: the caller's IAM ARN.
    AwsIam,
    /// An API Gateway HTTP API JWT authorizer: the token's `iss` and `sub`.
    ApigwJwt,
    /// An API Gateway HTTP API Lambda authorizer: its context's `principalId`.
    ApigwAuthorizer,
    /// A Google-signed ID token (Cloud Run callers).
    GoogleIdToken,
    /// An Identity-Aware Proxy assertion.
    GoogleIap,
}

impl Mode {
    /// Every mode, in the order help texts list them.
    pub const ALL: [Mode; 6] = [
        Mode::Oauth,
        Mode::AwsIam,
        Mode::ApigwJwt,
        Mode::ApigwAuthorizer,
        Mode::GoogleIdToken,
        Mode::GoogleIap,
    ];

    /// The mode's name, as `--auth-mode` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Oauth => "oauth",
            Mode::AwsIam => "aws-iam",
            Mode::ApigwJwt => "apigw-jwt",
            Mode::ApigwAuthorizer => "apigw-authorizer",
            Mode::GoogleIdToken => "google-id-token",
            Mode::GoogleIap => "google-iap",
        }
    }

    /// The mode `name` spells (exactly as [`Mode::name`] gives it).
    pub fn from_name(name: &str) -> Option<Mode> {
        Mode::ALL.into_iter().find(|m| m.name() == name)
    }

    /// Whether the caller comes from an AWS Lambda invocation's request context.
    pub fn on_lambda(self) -> bool {
        matches!(self, Mode::AwsIam | Mode::ApigwJwt | Mode::ApigwAuthorizer)
    }

    /// Whether Google signs the caller's credential.
    pub fn on_google(self) -> bool {
        matches!(self, Mode::GoogleIdToken | Mode::GoogleIap)
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What kind of refusal a [`Refused`] is: it decides the status, the audit reason and the
/// challenge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalKind {
    /// No credential at all (401).
    Missing,
    /// A credential that does not check out (401).
    InvalidToken,
    /// An authenticated caller this deployment does not admit (403).
    NotAllowed,
    /// A caller without a scope the request needs (403).
    InsufficientScope,
    /// The keys to check the credential with cannot be fetched now (503, try again).
    Unavailable,
}

/// Why a request was refused. `reason` is a fixed text for the client: never a credential,
/// never a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// The kind of refusal.
    pub kind: RefusalKind,
    /// What the client is told.
    pub reason: String,
    /// The scopes the request needs ([`RefusalKind::InsufficientScope`]), so a client can step up.
    pub scopes: Vec<String>,
    /// For a refusal that passes ([`RefusalKind::Unavailable`]): when to try again, if known.
    pub retry_after: Option<Duration>,
}

impl Refused {
    fn new(kind: RefusalKind, reason: impl Into<String>) -> Self {
        Refused {
            kind,
            reason: reason.into(),
            scopes: Vec::new(),
            retry_after: None,
        }
    }

    /// No credential.
    pub fn missing(reason: impl Into<String>) -> Self {
        Refused::new(RefusalKind::Missing, reason)
    }

    /// A credential that does not check out.
    pub fn invalid(reason: impl Into<String>) -> Self {
        Refused::new(RefusalKind::InvalidToken, reason)
    }

    /// A caller that is known but not admitted.
    pub fn not_allowed(reason: impl Into<String>) -> Self {
        Refused::new(RefusalKind::NotAllowed, reason)
    }

    /// A caller lacking some of `required`.
    pub fn insufficient_scope(required: &[String], reason: impl Into<String>) -> Self {
        Refused {
            scopes: required.to_vec(),
            ..Refused::new(RefusalKind::InsufficientScope, reason)
        }
    }

    /// This refusal, telling the client to try again after `wait`.
    pub fn retry_after(self, wait: Duration) -> Self {
        Refused {
            retry_after: Some(wait),
            ..self
        }
    }

    /// Keys that cannot be fetched now.
    pub fn unavailable(reason: impl Into<String>) -> Self {
        Refused::new(RefusalKind::Unavailable, reason)
    }

    /// A validator's refusal: keys that cannot be fetched are [`RefusalKind::Unavailable`],
    /// everything else an invalid token.
    pub fn from_validation(error: &AuthError) -> Self {
        match error {
            AuthError::KeysUnavailable => Refused::unavailable(error.to_string()),
            other => Refused::invalid(other.to_string()),
        }
    }

    /// What a request `validator` refused with `error` is told: [`Refused::from_validation`],
    /// and for unavailable keys how long until the next attempt to fetch them.
    pub async fn from_validator(validator: &TokenValidator, error: &AuthError) -> Self {
        let refused = Refused::from_validation(error);
        match refused.kind {
            RefusalKind::Unavailable => refused.retry_after(validator.next_key_attempt_in().await),
            _ => refused,
        }
    }

    /// The HTTP status of the refusal.
    pub fn status(&self) -> StatusCode {
        match self.kind {
            RefusalKind::Missing | RefusalKind::InvalidToken => StatusCode::UNAUTHORIZED,
            RefusalKind::NotAllowed | RefusalKind::InsufficientScope => StatusCode::FORBIDDEN,
            RefusalKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The audit log's `reason`.
    pub fn audit_reason(&self) -> &'static str {
        match self.kind {
            RefusalKind::Missing => "unauthenticated",
            RefusalKind::InvalidToken => "invalid_token",
            RefusalKind::NotAllowed => "not_allowed",
            RefusalKind::InsufficientScope => "insufficient_scope",
            RefusalKind::Unavailable => "keys_unavailable",
        }
    }

    /// The `error` of the JSON body (RFC 6750 §3.1 codes where one applies).
    pub fn error_code(&self) -> &'static str {
        match self.kind {
            RefusalKind::Missing => "unauthorized",
            RefusalKind::InvalidToken => "invalid_token",
            RefusalKind::NotAllowed => "access_denied",
            RefusalKind::InsufficientScope => "insufficient_scope",
            RefusalKind::Unavailable => "temporarily_unavailable",
        }
    }

    /// The challenge refusal this is, if it is one a `WWW-Authenticate` header describes.
    pub fn challenge(&self) -> Option<Refusal> {
        match self.kind {
            RefusalKind::Missing => Some(Refusal::Missing),
            RefusalKind::InvalidToken => Some(Refusal::InvalidToken),
            RefusalKind::InsufficientScope => Some(Refusal::InsufficientScope),
            RefusalKind::NotAllowed | RefusalKind::Unavailable => None,
        }
    }
}

/// The future [`Identity::identify`] returns.
pub type Identified<'a> = Pin<Box<dyn Future<Output = Result<Authenticated, Refused>> + Send + 'a>>;

/// Someone that vouches for callers.
pub trait Identity: Send + Sync + fmt::Debug {
    /// The mode, for logs and for what the deployment says about itself.
    fn mode(&self) -> Mode;

    /// The caller of a request (its headers, and the extensions the transport attached, such
    /// as the Lambda request context), or why there is none.
    fn identify<'a>(&'a self, request: &'a Parts) -> Identified<'a>;

    /// Headers that carry credentials: removed once the caller is known, so no credential
    /// travels further into the server.
    fn credential_headers(&self) -> &'static [&'static str] {
        &[]
    }

    /// The challenge hook: the `WWW-Authenticate` value of a refusal, if any. By default a
    /// bare RFC 6750 challenge (`Bearer`, with `scope` and `error` where they apply); OAuth
    /// points at its resource metadata.
    fn challenge(&self, refused: &Refused) -> Option<String> {
        let refusal = refused.challenge()?;
        Some(www_authenticate_header(None, refusal, &refused.scopes))
    }

    /// The RFC 9728 Protected Resource Metadata to publish, for identities whose clients
    /// discover where to get a credential (OAuth).
    fn resource_metadata(&self) -> Option<&ProtectedResourceMetadata> {
        None
    }
}

/// The bearer token of `Authorization` (scheme matched case-insensitively, RFC 9110 §11.1):
/// `Ok(None)` without the header; a header that is not text, not `Bearer`, or has no token is
/// an invalid credential. Only the header is read, never a query parameter or a form field.
///
/// # Errors
/// [`Refused::invalid`] for an `Authorization` header that is not a usable bearer token.
pub fn bearer(headers: &HeaderMap) -> Result<Option<&str>, Refused> {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Ok(None);
    };
    let not_bearer = || Refused::invalid("the Authorization header is not a Bearer token");
    let value = value.to_str().map_err(|_| not_bearer())?;
    match value.trim().split_once(' ') {
        Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") => {
            let token = token.trim();
            if token.is_empty() {
                Err(not_bearer())
            } else {
                Ok(Some(token))
            }
        }
        _ => Err(not_bearer()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn mode_names_are_defined_once_and_read_back() {
        for mode in Mode::ALL {
            assert_eq!(Mode::from_name(mode.name()), Some(mode));
            assert_eq!(mode.to_string(), mode.name());
        }
        assert_eq!(Mode::from_name("OAuth"), None);
        assert!(Mode::AwsIam.on_lambda() && !Mode::Oauth.on_lambda());
        assert!(Mode::GoogleIap.on_google() && !Mode::ApigwJwt.on_google());
    }

    #[test]
    fn bearer_tokens_come_from_the_authorization_header_only() {
        let mut h = HeaderMap::new();
        assert_eq!(bearer(&h), Ok(None));
        for (value, token) in [
            ("Bearer abc", Some("abc")),
            ("bearer  abc ", Some("abc")),
            ("BEARER x.y.z", Some("x.y.z")),
        ] {
            h.insert(header::AUTHORIZATION, HeaderValue::from_static(value));
            assert_eq!(bearer(&h), Ok(token), "{value}");
        }
        for value in ["Basic abc", "Bearer", "Bearer   ", "abc"] {
            h.insert(header::AUTHORIZATION, HeaderValue::from_static(value));
            let refused = bearer(&h).expect_err(value);
            assert_eq!(refused.kind, RefusalKind::InvalidToken, "{value}");
        }
    }

    #[test]
    fn each_refusal_has_its_status_reason_and_default_challenge() {
        #[derive(Debug)]
        struct Platform;
        impl Identity for Platform {
            fn mode(&self) -> Mode {
                Mode::AwsIam
            }
            fn identify<'a>(&'a self, _: &'a Parts) -> Identified<'a> {
                Box::pin(async { Err(Refused::missing("none")) })
            }
        }
        let scopes = ["deploy".to_owned()];
        let cases = [
            (
                Refused::missing("m"),
                401,
                "unauthenticated",
                Some("Bearer"),
            ),
            (
                Refused::invalid("i"),
                401,
                "invalid_token",
                Some("Bearer error=\"invalid_token\""),
            ),
            (Refused::not_allowed("n"), 403, "not_allowed", None),
            (
                Refused::insufficient_scope(&scopes, "s"),
                403,
                "insufficient_scope",
                Some("Bearer scope=\"deploy\", error=\"insufficient_scope\""),
            ),
            (
                Refused::from_validation(&AuthError::KeysUnavailable),
                503,
                "keys_unavailable",
                None,
            ),
        ];
        for (refused, status, reason, challenge) in cases {
            assert_eq!(refused.status().as_u16(), status, "{refused:?}");
            assert_eq!(refused.audit_reason(), reason);
            assert_eq!(Platform.challenge(&refused).as_deref(), challenge);
        }
        assert_eq!(
            Refused::from_validation(&AuthError::Expired).kind,
            RefusalKind::InvalidToken
        );
    }
}
