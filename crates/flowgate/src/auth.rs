//! `--auth-*`: the inbound OAuth configuration of `flowgate serve`.

use std::sync::Arc;
use std::time::Duration;

use flowgate_auth::{JwksSource, KeySet, TokenValidator, ValidatorConfig};
use flowgate_server::http::HttpAuth;

use crate::cli::ServeArgs;

/// An unknown `kid` refreshes the key set at most this often (a flood of made-up key ids must
/// not become a flood of fetches).
const MIN_REFRESH: Duration = Duration::from_secs(30);
/// Keys are fetched again after this long even when every `kid` is known (revoked keys go).
const MAX_AGE: Duration = Duration::from_secs(3600);

/// The resource server of `args`, or `None` when auth is off. `scopes` are every scope a tool
/// requires, advertised in the metadata document.
pub(crate) fn from_args(
    args: &ServeArgs,
    scopes: Vec<String>,
) -> Result<Option<Arc<HttpAuth>>, String> {
    let (Some(issuer), Some(resource)) = (&args.auth_issuer, &args.auth_resource) else {
        return Ok(None);
    };
    if args.stdio {
        return Err("--auth-issuer protects the HTTP transport; it cannot apply to --stdio".into());
    }
    check_url("--auth-issuer", issuer)?;
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
    let keys = KeySet::new(source, MIN_REFRESH, MAX_AGE).map_err(|e| e.to_string())?;
    let validator = TokenValidator::new(ValidatorConfig::new(issuer, resource), keys);
    Ok(Some(Arc::new(HttpAuth::new(validator, scopes))))
}

/// An `https` URL, or `http` to a loopback host (a local issuer in development and tests).
fn check_url(flag: &str, url: &str) -> Result<(), String> {
    if url.starts_with("https://") && url.len() > "https://".len() {
        return Ok(());
    }
    if let Some(rest) = url.strip_prefix("http://") {
        let host = rest.split(['/', '?']).next().unwrap_or("");
        let host = host.rsplit_once(':').map_or(host, |(h, _)| h);
        if matches!(host, "127.0.0.1" | "localhost" | "[::1]") {
            return Ok(());
        }
    }
    Err(format!(
        "{flag} must be an https URL (http only to a loopback host), not {url:?}"
    ))
}

#[cfg(test)]
mod tests {
    use super::check_url;

    #[test]
    fn urls_must_be_https_or_loopback() {
        assert!(check_url("f", "https://issuer.example").is_ok());
        assert!(check_url("f", "http://127.0.0.1:9000/realms/x").is_ok());
        assert!(check_url("f", "http://localhost:9000").is_ok());
        assert!(check_url("f", "http://issuer.example").is_err());
        assert!(check_url("f", "issuer.example").is_err());
        assert!(check_url("f", "https://").is_err());
    }
}
