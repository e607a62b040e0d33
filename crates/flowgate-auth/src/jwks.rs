//! The issuer's signing keys: fetched from its metadata, cached, refreshed when a token names a
//! key id the cache does not know (key rotation), but at most once per `min_refresh` so a
//! stream of tokens with made-up `kid`s cannot turn into a stream of fetches.

use std::time::{Duration, Instant};

use flowgate_http::{HttpClient, HttpConfig, Method};
use jsonwebtoken::jwk::{Jwk, JwkSet};
use serde::Deserialize;
use tokio::sync::Mutex;

/// Where the keys come from.
#[derive(Debug, Clone)]
pub enum JwksSource {
    /// Discover `jwks_uri` from the issuer's RFC 8414 metadata
    /// (`/.well-known/oauth-authorization-server`, falling back to OpenID discovery).
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
#[derive(Debug, thiserror::Error)]
#[error("signing keys unavailable: {0}")]
pub struct KeysUnavailable(String);

#[derive(Debug)]
struct Cache {
    keys: Option<JwkSet>,
    jwks_uri: Option<String>,
    fetched_at: Option<Instant>,
}

/// A cached, self-refreshing key set.
#[derive(Debug)]
pub struct KeySet {
    source: JwksSource,
    http: HttpClient,
    min_refresh: Duration,
    max_age: Duration,
    cache: Mutex<Cache>,
}

#[derive(Deserialize)]
struct IssuerMetadata {
    jwks_uri: String,
}

impl KeySet {
    /// Keys from `source`, refreshed at most every `min_refresh`, considered stale after `max_age`.
    pub fn new(
        source: JwksSource,
        min_refresh: Duration,
        max_age: Duration,
    ) -> Result<Self, KeysUnavailable> {
        let http = HttpClient::new("oauth", &HttpConfig::default())
            .map_err(|e| KeysUnavailable(e.to_string()))?;
        let keys = match &source {
            JwksSource::Static(set) => Some(set.clone()),
            _ => None,
        };
        Ok(KeySet {
            source,
            http,
            min_refresh,
            max_age,
            cache: Mutex::new(Cache {
                keys,
                jwks_uri: None,
                fetched_at: None,
            }),
        })
    }

    /// The key with id `kid` (or the only key, when the token names none and there is one).
    pub async fn find(&self, kid: Option<&str>) -> Result<Option<Jwk>, KeysUnavailable> {
        let mut cache = self.cache.lock().await;
        let stale = cache.fetched_at.is_none_or(|t| t.elapsed() >= self.max_age);
        if cache.keys.is_none() || (stale && self.fetches()) {
            self.refresh(&mut cache).await?;
        }
        if let Some(found) = pick(cache.keys.as_ref(), kid) {
            return Ok(Some(found));
        }
        let may_refresh = self.fetches()
            && cache
                .fetched_at
                .is_none_or(|t| t.elapsed() >= self.min_refresh);
        if !may_refresh {
            return Ok(None);
        }
        self.refresh(&mut cache).await?;
        Ok(pick(cache.keys.as_ref(), kid))
    }

    fn fetches(&self) -> bool {
        !matches!(self.source, JwksSource::Static(_))
    }

    async fn refresh(&self, cache: &mut Cache) -> Result<(), KeysUnavailable> {
        let uri = match (&self.source, &cache.jwks_uri) {
            (JwksSource::Static(_), _) => return Ok(()),
            (JwksSource::Url(url), _) => url.clone(),
            (JwksSource::Discover { .. }, Some(uri)) => uri.clone(),
            (JwksSource::Discover { issuer }, None) => {
                let uri = self.discover(issuer).await?;
                cache.jwks_uri = Some(uri.clone());
                uri
            }
        };
        let set: JwkSet = self
            .http
            .json(self.http.request(Method::GET, &uri), "fetch JWKS")
            .await
            .map_err(|e| KeysUnavailable(e.to_string()))?;
        tracing::info!(keys = set.keys.len(), "fetched the issuer's signing keys");
        cache.keys = Some(set);
        cache.fetched_at = Some(Instant::now());
        Ok(())
    }

    async fn discover(&self, issuer: &str) -> Result<String, KeysUnavailable> {
        let base = issuer.trim_end_matches('/');
        let mut last = String::new();
        for suffix in ["oauth-authorization-server", "openid-configuration"] {
            let url = format!("{base}/.well-known/{suffix}");
            match self
                .http
                .json::<IssuerMetadata>(self.http.request(Method::GET, &url), "discover issuer")
                .await
            {
                Ok(meta) => return Ok(meta.jwks_uri),
                Err(e) => last = e.to_string(),
            }
        }
        Err(KeysUnavailable(last))
    }
}

fn pick(keys: Option<&JwkSet>, kid: Option<&str>) -> Option<Jwk> {
    let keys = keys?;
    match kid {
        Some(kid) => keys.find(kid).cloned(),
        None if keys.keys.len() == 1 => keys.keys.first().cloned(),
        None => None,
    }
}
