//! `--auth-*`: who vouches for the callers of `flowgate serve`, and the refusal to serve a
//! public address with no one doing so.
//!
//! Only the wiring: the flags checked against each other and turned into one of
//! `flowgate_auth`'s identities (how each checks a caller is there).

use std::sync::Arc;
use std::time::Duration;

use flowgate_auth::{
    GoogleCredential, GoogleIdentity, Identity, JwksSource, KeySet, Mode, OAuthIdentity, TokenKind,
    TokenValidator, ValidatorConfig, google,
};

use crate::cli::ServeArgs;

/// Keys are fetched again after this long even when every `kid` is known (revoked keys go).
const MAX_AGE: Duration = Duration::from_secs(3600);

/// Who vouches for the callers of `/mcp`, as `args` configure it (`None`: nobody, callers are
/// anonymous). `scopes` are every scope a tool requires, advertised in the OAuth metadata
/// document; `lambda` says whether this process serves Lambda events.
pub(crate) fn from_args(
    args: &ServeArgs,
    scopes: Vec<String>,
    lambda: bool,
) -> Result<Option<Arc<dyn Identity>>, String> {
    let mode = match (args.auth_mode, &args.auth_issuer) {
        (Some(mode), _) => mode,
        (None, Some(_)) => Mode::Oauth,
        (None, None) => {
            if args.auth_audience.is_some() || args.auth_jwks_url.is_some() {
                return Err("--auth-audience and --auth-jwks-url need an --auth-mode".into());
            }
            return Ok(None);
        }
    };
    let name = mode.name();
    if args.stdio {
        return Err(format!(
            "--auth-mode {name} protects the HTTP transport; it cannot apply to --stdio"
        ));
    }
    if !args.auth_allowed.is_empty() && !mode.on_google() {
        return Err(format!(
            "--auth-allowed applies to the Google modes, not {name}"
        ));
    }
    if mode != Mode::Oauth && (args.auth_issuer.is_some() || args.auth_resource.is_some()) {
        return Err(format!(
            "--auth-issuer and --auth-resource belong to --auth-mode oauth, not {name}"
        ));
    }
    if mode != Mode::Oauth && args.auth_untyped_access_tokens {
        return Err(format!(
            "--auth-untyped-access-tokens belongs to --auth-mode oauth, not {name}"
        ));
    }
    let identity = if mode == Mode::Oauth {
        oauth(args, scopes)?
    } else if mode.on_lambda() {
        if args.auth_audience.is_some() || args.auth_jwks_url.is_some() {
            return Err(format!(
                "--auth-mode {name} takes the caller from AWS; --auth-audience and \
                 --auth-jwks-url do not apply"
            ));
        }
        if !lambda {
            return Err(format!(
                "--auth-mode {name} reads the caller from the AWS Lambda request context; \
                 it applies only when running on AWS Lambda"
            ));
        }
        lambda_identity(mode)?
    } else {
        google_identity(args, mode)?
    };
    debug_assert_eq!(identity.mode(), mode);
    Ok(Some(identity))
}

fn oauth(args: &ServeArgs, scopes: Vec<String>) -> Result<Arc<dyn Identity>, String> {
    let (Some(issuer), Some(resource)) = (&args.auth_issuer, &args.auth_resource) else {
        return Err("--auth-mode oauth needs --auth-issuer and --auth-resource".into());
    };
    if args.auth_audience.is_some() {
        return Err(
            "--auth-mode oauth takes its audience from --auth-resource, not --auth-audience".into(),
        );
    }
    flowgate_auth::endpoint::issuer(issuer).map_err(|e| format!("--auth-issuer: {e}"))?;
    check_url("--auth-resource", resource)?;
    if resource.contains('#') {
        return Err("--auth-resource must not have a fragment (RFC 8707)".into());
    }
    let source = match &args.auth_jwks_url {
        Some(url) => {
            check_url("--auth-jwks-url", url)?;
            JwksSource::Url(url.clone())
        }
        None => JwksSource::Discover {
            issuer: issuer.clone(),
        },
    };
    let keys = KeySet::new(source, min_refresh(args), MAX_AGE).map_err(|e| e.to_string())?;
    let mut config = ValidatorConfig::new(issuer, resource);
    if args.auth_untyped_access_tokens {
        config.token_kind = TokenKind::UntypedAccessToken;
    }
    let validator = TokenValidator::new(config, keys);
    Ok(Arc::new(OAuthIdentity::new(validator, scopes)))
}

fn google_identity(args: &ServeArgs, mode: Mode) -> Result<Arc<dyn Identity>, String> {
    let name = mode.name();
    let Some(audience) = args.auth_audience.as_deref().filter(|a| !a.is_empty()) else {
        return Err(format!(
            "--auth-mode {name} needs --auth-audience (FLOWGATE_AUTH_AUDIENCE): {}",
            match mode {
                Mode::GoogleIap =>
                    "IAP's audience, /projects/NUMBER/global/backendServices/ID or /projects/NUMBER/apps/PROJECT",
                _ => "the service's URL, as callers ask for their ID tokens",
            }
        ));
    };
    let Some(credential) = GoogleCredential::for_mode(mode) else {
        return Err(format!("--auth-mode {name} is not a Google mode"));
    };
    if credential == GoogleCredential::Iap {
        if !audience.starts_with("/projects/") {
            return Err(format!(
                "--auth-audience for google-iap starts with /projects/ (got {audience:?})"
            ));
        }
    } else {
        check_url("--auth-audience", audience)?;
    }
    let allowed =
        google::AllowList::parse(&args.auth_allowed).map_err(|e| format!("--auth-allowed: {e}"))?;
    if mode == Mode::GoogleIdToken && allowed.is_empty() {
        return Err(
            "--auth-mode google-id-token needs --auth-allowed (FLOWGATE_AUTH_ALLOWED): the emails \
             (or *@domain) that may call; any Google account can get an ID token for any audience"
                .into(),
        );
    }
    let jwks = match &args.auth_jwks_url {
        Some(url) => {
            check_url("--auth-jwks-url", url)?;
            url.clone()
        }
        None => credential.published_keys().to_owned(),
    };
    let keys = KeySet::new(JwksSource::Url(jwks), min_refresh(args), MAX_AGE)
        .map_err(|e| e.to_string())?;
    Ok(Arc::new(GoogleIdentity::new(
        credential,
        TokenValidator::new(credential.config(audience), keys),
        allowed,
    )))
}

/// An unknown `kid` refreshes the key set at most this often (a flood of made-up key ids must
/// not become a flood of fetches), and a failed fetch is retried no sooner (then backing off).
fn min_refresh(args: &ServeArgs) -> Duration {
    Duration::from_secs(args.auth_keys_refresh_secs)
}

#[cfg(feature = "lambda")]
fn lambda_identity(mode: Mode) -> Result<Arc<dyn Identity>, String> {
    use flowgate_auth::{LambdaAuthorizer, LambdaIdentity};
    let authorizer = LambdaAuthorizer::for_mode(mode)
        .ok_or_else(|| format!("--auth-mode {mode} is not a Lambda mode"))?;
    Ok(Arc::new(LambdaIdentity::new(authorizer)))
}

#[cfg(not(feature = "lambda"))]
fn lambda_identity(mode: Mode) -> Result<Arc<dyn Identity>, String> {
    Err(format!(
        "--auth-mode {mode} needs Lambda support, which this build lacks (cargo feature lambda)"
    ))
}

/// Why serving without authentication would expose flowgate, if it would: Lambda mode, or a
/// listen address other than loopback. `from_port` says the address came from `$PORT`.
pub(crate) fn exposure(lambda: bool, listen: &str, from_port: bool) -> Option<String> {
    if lambda {
        return Some("as an AWS Lambda function".into());
    }
    if is_loopback(listen) {
        return None;
    }
    Some(if from_port {
        format!("on {listen} (every interface, from $PORT as on Cloud Run)")
    } else {
        format!("on {listen}, which is not a loopback address")
    })
}

/// The message of a refusal to start unauthenticated.
pub(crate) fn refusal(why: &str) -> String {
    format!(
        "refusing to serve MCP without authentication {why}: anyone who can reach it could \
         start workflows. Choose who vouches for callers with --auth-mode (FLOWGATE_AUTH_MODE): \
         oauth with --auth-issuer and --auth-resource; on AWS Lambda aws-iam, apigw-jwt or \
         apigw-authorizer; on Google Cloud google-id-token or google-iap with --auth-audience. \
         Or add --allow-unauthenticated (FLOWGATE_ALLOW_UNAUTHENTICATED=true) if something in \
         front already checks every caller."
    )
}

/// Whether `listen` (`host:port`) binds only the loopback interface.
fn is_loopback(listen: &str) -> bool {
    if let Ok(addr) = listen.parse::<std::net::SocketAddr>() {
        return addr.ip().is_loopback();
    }
    let host = listen.rsplit_once(':').map_or(listen, |(h, _)| h);
    host.eq_ignore_ascii_case("localhost")
}

/// An `https` URL, or `http` to a loopback host (a local issuer in development and tests),
/// parsed as the HTTP client parses it (`flowgate_auth::endpoint`): no userinfo, and the host
/// checked is the one a request would go to.
fn check_url(flag: &str, url: &str) -> Result<(), String> {
    flowgate_auth::endpoint::endpoint(url)
        .map(drop)
        .map_err(|e| format!("{flag}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::{check_url, exposure, is_loopback};

    #[test]
    fn urls_must_be_https_or_loopback() {
        assert!(check_url("f", "https://issuer.example").is_ok());
        assert!(check_url("f", "http://127.0.0.1:9000/realms/x").is_ok());
        assert!(check_url("f", "http://localhost:9000").is_ok());
        assert!(check_url("f", "http://issuer.example").is_err());
        assert!(check_url("f", "issuer.example").is_err());
        assert!(check_url("f", "https://").is_err());
        // The host a client would connect to is evil.example, not 127.0.0.1.
        assert!(check_url("f", "http://127.0.0.1:80@evil.example/jwks").is_err());
    }

    #[test]
    fn only_loopback_addresses_may_go_unauthenticated() {
        for ok in [
            "127.0.0.1:8080",
            "127.1.2.3:1",
            "[::1]:80",
            "localhost:8080",
        ] {
            assert!(is_loopback(ok), "{ok}");
            assert!(exposure(false, ok, false).is_none(), "{ok}");
        }
        for public in [
            "0.0.0.0:8080",
            "[::]:80",
            "10.0.0.5:80",
            "flowgate.internal:80",
        ] {
            assert!(!is_loopback(public), "{public}");
            assert!(exposure(false, public, false).is_some(), "{public}");
        }
        assert!(exposure(true, "127.0.0.1:8080", false).is_some(), "Lambda");
        let port = exposure(false, "0.0.0.0:9", true).unwrap_or_default();
        assert!(port.contains("$PORT"), "{port}");
    }
}
