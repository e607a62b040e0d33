//! The issuer's signing keys: fetched from its metadata, cached, refreshed when a token names a
//! key id the cache does not know (key rotation), but at most once per `min_refresh` so a
//! stream of tokens with made-up `kid`s cannot turn into a stream of fetches.
//!
//! Outages are bounded the same way. An attempt (discovery when the JWKS URL is not known yet,
//! then the JWKS) is made at most once per `min_refresh`, and while attempts keep failing the
//! wait doubles up to [`MAX_BACKOFF`]: an issuer that is down sees one attempt per interval,
//! never one per request. Meanwhile the keys already cached keep serving (a token with a known
//! `kid` still validates, one with an unknown `kid` is refused as such, a 401); only when no
//! key was ever fetched are the keys "unavailable" (a 503).

use std::time::{Duration, Instant};

use flowgate_http::{HttpClient, HttpConfig, Method};
use jsonwebtoken::jwk::{Jwk, JwkSet};
use serde::Deserialize;
use tokio::sync::Mutex;
use url::Url;

use crate::endpoint;

/// The longest wait between two attempts while the issuer keeps failing.
pub const MAX_BACKOFF: Duration = Duration::from_secs(600);

/// Where the keys come from.
#[derive(Debug, Clone)]
pub enum JwksSource {
    /// Discover `jwks_uri` from the issuer's RFC 8414 metadata
    /// (`/.well-known/oauth-authorization-server` inserted before the issuer's path, falling
    /// back to OpenID discovery), checking that the document names this very issuer.
    Discover {
        /// The issuer identifier, an `https` URL (or loopback `http` for tests).
        issuer: String,
    },
    /// A known JWKS URL (e.g. Google's published keys, or a local stand-in for tests).
    Url(String),
    /// A fixed set (no fetching).
    Static(JwkSet),
}

/// Why keys could not be had; never carries a token.
#[derive(Debug, Clone, thiserror::Error)]
#[error("signing keys unavailable: {0}")]
pub struct KeysUnavailable(String);

#[derive(Debug)]
struct Cache {
    keys: Option<JwkSet>,
    jwks_uri: Option<String>,
    /// The last successful fetch (keys older than `max_age` are refreshed).
    fetched_at: Option<Instant>,
    /// The last attempt, successful or not (attempts are spaced from it).
    attempted_at: Option<Instant>,
    /// Attempts that failed in a row (the backoff's exponent).
    failures: u32,
    /// Why the last attempt failed, for the error of a request that finds no key at all.
    last_error: Option<KeysUnavailable>,
}

/// A cached, self-refreshing key set.
#[derive(Debug)]
pub struct KeySet {
    source: JwksSource,
    issuer_url: Option<Url>,
    http: HttpClient,
    min_refresh: Duration,
    max_age: Duration,
    cache: Mutex<Cache>,
}

#[derive(Deserialize)]
struct IssuerMetadata {
    issuer: String,
    jwks_uri: String,
}

impl KeySet {
    /// Keys from `source`, refreshed at most every `min_refresh`, considered stale after `max_age`.
    ///
    /// # Errors
    /// When the HTTP client cannot be built, or the issuer or JWKS URL is not an acceptable
    /// URL ([`endpoint`]).
    pub fn new(
        source: JwksSource,
        min_refresh: Duration,
        max_age: Duration,
    ) -> Result<Self, KeysUnavailable> {
        let http = HttpClient::new("oauth", &HttpConfig::default())
            .map_err(|e| KeysUnavailable(e.to_string()))?;
        let issuer_url = match &source {
            JwksSource::Discover { issuer } => {
                Some(endpoint::issuer(issuer).map_err(|e| KeysUnavailable(e.to_string()))?)
            }
            JwksSource::Url(url) => {
                endpoint::endpoint(url).map_err(|e| KeysUnavailable(e.to_string()))?;
                None
            }
            JwksSource::Static(_) => None,
        };
        let keys = match &source {
            JwksSource::Static(set) => Some(set.clone()),
            _ => None,
        };
        Ok(KeySet {
            source,
            issuer_url,
            http,
            min_refresh,
            max_age,
            cache: Mutex::new(Cache {
                keys,
                jwks_uri: None,
                fetched_at: None,
                attempted_at: None,
                failures: 0,
                last_error: None,
            }),
        })
    }

    /// The key with id `kid` (or the only key, when the token names none and there is one).
    ///
    /// # Errors
    /// [`KeysUnavailable`] only when no key set was ever fetched (the issuer has been
    /// unreachable since start); with cached keys, an unknown `kid` is `Ok(None)`.
    pub async fn find(&self, kid: Option<&str>) -> Result<Option<Jwk>, KeysUnavailable> {
        let mut cache = self.cache.lock().await;
        let stale = cache.fetched_at.is_none_or(|t| t.elapsed() >= self.max_age);
        if (cache.keys.is_none() || stale) && self.may_attempt(&cache) {
            self.attempt(&mut cache).await;
        }
        if cache.keys.is_none() {
            return Err(cache.last_error.clone().unwrap_or_else(|| {
                KeysUnavailable("waiting before the next attempt to fetch them".into())
            }));
        }
        if let Some(found) = pick(cache.keys.as_ref(), kid) {
            return Ok(Some(found));
        }
        // An unknown kid may be a key the issuer rotated in since the last fetch.
        if self.may_attempt(&cache) {
            self.attempt(&mut cache).await;
        }
        Ok(pick(cache.keys.as_ref(), kid))
    }

    /// How long until the next attempt to fetch the keys may be made (zero when one may be
    /// made now): what a client refused for unavailable keys is told to wait.
    pub async fn next_attempt_in(&self) -> Duration {
        let cache = self.cache.lock().await;
        cache.attempted_at.map_or(Duration::ZERO, |last| {
            backoff(self.min_refresh, cache.failures).saturating_sub(last.elapsed())
        })
    }

    /// Whether an attempt is due: none yet, or `min_refresh` since the last one, doubled for
    /// every failure in a row beyond the first, up to [`MAX_BACKOFF`].
    fn may_attempt(&self, cache: &Cache) -> bool {
        if matches!(self.source, JwksSource::Static(_)) {
            return false;
        }
        let Some(last) = cache.attempted_at else {
            return true;
        };
        last.elapsed() >= backoff(self.min_refresh, cache.failures)
    }

    /// One attempt: keeps the keys it gets, or records why it got none (the cached keys, if
    /// any, stay in service).
    async fn attempt(&self, cache: &mut Cache) {
        cache.attempted_at = Some(Instant::now());
        match self.fetch(cache).await {
            Ok(set) => {
                tracing::info!(keys = set.keys.len(), "fetched the issuer's signing keys");
                cache.keys = Some(set);
                cache.fetched_at = Some(Instant::now());
                cache.failures = 0;
                cache.last_error = None;
            }
            Err(e) => {
                cache.failures = cache.failures.saturating_add(1);
                let wait = backoff(self.min_refresh, cache.failures);
                tracing::warn!(
                    error = %e,
                    failures = cache.failures,
                    next_attempt_in_secs = wait.as_secs(),
                    cached_keys = cache.keys.is_some(),
                    "could not fetch the issuer's signing keys"
                );
                // The JWKS URL may be what changed: discover it again next time.
                cache.jwks_uri = None;
                cache.last_error = Some(e);
            }
        }
    }

    async fn fetch(&self, cache: &mut Cache) -> Result<JwkSet, KeysUnavailable> {
        let uri = match (&self.source, &cache.jwks_uri) {
            (JwksSource::Static(set), _) => return Ok(set.clone()),
            (JwksSource::Url(url), _) => url.clone(),
            (JwksSource::Discover { .. }, Some(uri)) => uri.clone(),
            (JwksSource::Discover { issuer }, None) => {
                let uri = self.discover(issuer).await?;
                cache.jwks_uri = Some(uri.clone());
                uri
            }
        };
        self.http
            .json(self.http.request(Method::GET, &uri), "fetch JWKS")
            .await
            .map_err(|e| KeysUnavailable(e.to_string()))
    }

    /// The `jwks_uri` of the first metadata document that names `issuer` itself (RFC 8414
    /// §3.3, OpenID Connect Discovery 1.0 §4.3: a document for another issuer is refused, or
    /// anyone able to serve one could substitute their keys).
    async fn discover(&self, issuer: &str) -> Result<String, KeysUnavailable> {
        let Some(issuer_url) = &self.issuer_url else {
            return Err(KeysUnavailable("no issuer to discover".into()));
        };
        let mut last = String::new();
        for url in endpoint::metadata_urls(issuer_url) {
            match self
                .http
                .json::<IssuerMetadata>(self.http.request(Method::GET, &url), "discover issuer")
                .await
            {
                Ok(meta) if meta.issuer != issuer => {
                    last = format!(
                        "the metadata at {url} is for issuer {:?}, not {issuer:?}",
                        meta.issuer.chars().take(200).collect::<String>()
                    );
                }
                Ok(meta) => {
                    return endpoint::endpoint(&meta.jwks_uri)
                        .map(|_| meta.jwks_uri)
                        .map_err(|e| KeysUnavailable(format!("the issuer's jwks_uri: {e}")));
                }
                Err(e) => last = e.to_string(),
            }
        }
        Err(KeysUnavailable(last))
    }
}

/// The wait before the next attempt after `failures` failures in a row: `min_refresh`, then
/// doubling, never more than [`MAX_BACKOFF`] (nor less than `min_refresh`).
pub fn backoff(min_refresh: Duration, failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    min_refresh
        .saturating_mul(1 << doublings)
        .min(MAX_BACKOFF)
        .max(min_refresh)
}

fn pick(keys: Option<&JwkSet>, kid: Option<&str>) -> Option<Jwk> {
    let keys = keys?;
    match kid {
        Some(kid) => keys.find(kid).cloned(),
        None if keys.keys.len() == 1 => keys.keys.first().cloned(),
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_doubles_while_attempts_fail_and_is_capped() {
        let s = Duration::from_secs;
        assert_eq!(backoff(s(30), 0), s(30));
        assert_eq!(backoff(s(30), 1), s(30));
        assert_eq!(backoff(s(30), 2), s(60));
        assert_eq!(backoff(s(30), 3), s(120));
        assert_eq!(backoff(s(30), 6), MAX_BACKOFF);
        assert_eq!(backoff(s(30), u32::MAX), MAX_BACKOFF);
        assert_eq!(backoff(s(3600), 5), s(3600), "never below the interval");
    }
}
