//! One HTTP client per engine target: deadlines on every request, and every failure sorted
//! into the kind the server acts on.

use std::sync::Arc;
use std::time::Duration;

use flowgate_core::{EngineError, kind_for_status};
use reqwest::header::{ETAG, HeaderMap, IF_NONE_MATCH};
use reqwest::{Method, RequestBuilder, Response, StatusCode};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::rate_limit::{reset_in, retry_after};
use crate::{EtagCache, RateLimits};

/// Longest API error message kept (bodies can be whole HTML pages).
const MAX_MESSAGE: usize = 300;
/// Redirects followed at most for one request.
const MAX_REDIRECTS: usize = 5;
/// The headers a request keeps when a redirect leads to another origin: an artifact download
/// that redirects to object storage must not carry `PRIVATE-TOKEN`, `Authorization` or any
/// other credential there (reqwest strips only the standard ones).
const CROSS_ORIGIN_HEADERS: [reqwest::header::HeaderName; 3] = [
    reqwest::header::ACCEPT,
    reqwest::header::CONTENT_TYPE,
    reqwest::header::USER_AGENT,
];

/// Deadlines and identity of an engine's HTTP client.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    /// How long to wait for a connection (nothing has been sent until then: safe to retry).
    pub connect_timeout: Duration,
    /// How long one request may take from sending to the last byte of its answer.
    pub request_timeout: Duration,
    /// The `User-Agent` header.
    pub user_agent: String,
    /// How many URLs the conditional-request cache remembers.
    pub etag_capacity: usize,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            connect_timeout: Duration::from_secs(3),
            request_timeout: Duration::from_secs(8),
            user_agent: concat!("flowgate/", env!("CARGO_PKG_VERSION")).to_owned(),
            etag_capacity: 4096,
        }
    }
}

/// A REST client for one engine. Cheap to clone; clones share rate limits and the cache.
#[derive(Debug, Clone)]
pub struct HttpClient {
    engine: &'static str,
    http: reqwest::Client,
    limits: Arc<RateLimits>,
    etags: Arc<EtagCache>,
    request_timeout: Duration,
}

/// The body of a conditional GET.
#[derive(Debug, Clone)]
pub struct Conditional {
    /// The resource's current body (remembered when the engine answered 304).
    pub body: Vec<u8>,
    /// Whether the engine answered 304 Not Modified.
    pub not_modified: bool,
    /// The `Link: rel="next"` URL of a fresh answer (a 304 carries none: ask the first page
    /// in full when the remembered body says there are more).
    pub next_page: Option<String>,
}

impl HttpClient {
    /// A client for `engine` (its kind, for error messages) with `config`'s deadlines.
    ///
    /// # Errors
    /// `Unavailable` when the TLS stack cannot be set up.
    pub fn new(engine: &'static str, config: &HttpConfig) -> Result<Self, EngineError> {
        let http = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout)
            .timeout(config.request_timeout)
            .user_agent(config.user_agent.clone())
            // Redirects are followed by `send`, which drops credentials across origins.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| EngineError::unavailable(engine, "cannot build the HTTP client", e))?;
        Ok(HttpClient {
            engine,
            http,
            limits: Arc::new(RateLimits::new()),
            etags: Arc::new(EtagCache::new(config.etag_capacity)),
            request_timeout: config.request_timeout,
        })
    }

    /// This client, for an engine where a conditional request answered 304 Not Modified
    /// spends no quota (GitHub), so that a poll of an unchanged execution counts as free.
    #[must_use]
    pub fn with_free_revalidation(mut self) -> Self {
        self.limits = Arc::new(RateLimits::with_free_revalidation());
        self
    }

    /// The rate limits this client has seen (for [`flowgate_core::Engine::pacing`]).
    pub fn rate_limits(&self) -> &RateLimits {
        &self.limits
    }

    /// The conditional-request cache.
    pub fn etags(&self) -> &EtagCache {
        &self.etags
    }

    /// A request to `url`; add headers (authentication) and a body, then [`HttpClient::send`].
    pub fn request(&self, method: Method, url: &str) -> RequestBuilder {
        self.http.request(method, url)
    }

    /// Sends `request`; `what` names the call for messages (`executions.callbacks.list`).
    ///
    /// # Errors
    /// `Unavailable` when the engine could not be reached (nothing was sent), `Timeout` when
    /// it did not answer (the request may have taken effect), `Throttled` on a rate limit
    /// (with the wait it asked for), otherwise the kind of the status.
    pub async fn send(&self, request: RequestBuilder, what: &str) -> Result<Response, EngineError> {
        let (_, request) = request.build_split();
        let mut request = request.map_err(|e| {
            EngineError::unavailable(
                self.engine,
                format!("{what}: a request that cannot be made"),
                e,
            )
        })?;
        let mut hops = 0;
        let response = loop {
            let again = request.try_clone();
            let response = self
                .http
                .execute(request)
                .await
                .map_err(|e| self.transport(what, e))?;
            match (redirect_target(&response), again) {
                (Some(location), Some(mut next)) if hops < MAX_REDIRECTS => {
                    hops += 1;
                    follow(&mut next, response.status(), location);
                    request = next;
                }
                _ => break response,
            }
        };
        let status = response.status();
        self.limits.observe(status, response.headers());
        if status.is_success() || status == StatusCode::NOT_MODIFIED {
            return Ok(response);
        }
        let headers = response.headers().clone();
        let body = response.text().await.unwrap_or_default();
        Err(self.status_error(what, status, &headers, &body))
    }

    /// Sends `request` and reads its JSON answer.
    ///
    /// # Errors
    /// As [`HttpClient::send`], and `Unavailable` when the answer is not the expected JSON.
    pub async fn json<T: DeserializeOwned>(
        &self,
        request: RequestBuilder,
        what: &str,
    ) -> Result<T, EngineError> {
        let response = self.send(request, what).await?;
        let bytes = response
            .bytes()
            .await
            .map_err(|e| self.transport(what, e))?;
        self.decode(what, &bytes)
    }

    /// A GET of `url` that sends the remembered `ETag` and answers a 304 with the remembered
    /// body. `request` is the GET with its authentication headers.
    ///
    /// # Errors
    /// As [`HttpClient::send`].
    pub async fn get_conditional(
        &self,
        request: RequestBuilder,
        url: &str,
        what: &str,
    ) -> Result<Conditional, EngineError> {
        let remembered = self.etags.etag(url);
        let request = match &remembered {
            Some(etag) => request.header(IF_NONE_MATCH, etag),
            None => request,
        };
        let response = self.send(request, what).await?;
        if response.status() == StatusCode::NOT_MODIFIED {
            if let Some(body) = self.etags.body(url) {
                return Ok(Conditional {
                    body,
                    not_modified: true,
                    next_page: None,
                });
            }
            // The entry went away between the two reads: ask in full.
            return Err(EngineError::Unavailable {
                engine: self.engine,
                message: format!("{what}: 304 for a body no longer remembered"),
                source: None,
            });
        }
        let next_page = crate::paging::next_link(response.headers());
        let etag = response
            .headers()
            .get(ETAG)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body = response
            .bytes()
            .await
            .map_err(|e| self.transport(what, e))?
            .to_vec();
        match etag {
            Some(etag) => self.etags.store(url, &etag, &body),
            None => self.etags.forget(url),
        }
        Ok(Conditional {
            body,
            not_modified: false,
            next_page,
        })
    }

    /// Reads `bytes` as the JSON the call answers.
    ///
    /// # Errors
    /// `Unavailable` naming the call when they do not parse as `T`.
    pub fn decode<T: DeserializeOwned>(&self, what: &str, bytes: &[u8]) -> Result<T, EngineError> {
        serde_json::from_slice(bytes).map_err(|e| {
            EngineError::unavailable(self.engine, format!("{what}: unreadable answer"), e)
        })
    }

    fn transport(&self, what: &str, e: reqwest::Error) -> EngineError {
        if e.is_connect() {
            EngineError::unavailable(
                self.engine,
                format!("{what}: the endpoint could not be reached"),
                e,
            )
        } else if e.is_timeout() {
            EngineError::Timeout {
                engine: self.engine,
                message: format!(
                    "{what}: no answer within {} s",
                    self.request_timeout.as_secs_f32()
                ),
            }
        } else {
            // Sent, then the connection failed before a whole answer: it may have taken effect.
            EngineError::Timeout {
                engine: self.engine,
                message: format!("{what}: the connection failed before the answer ({e})"),
            }
        }
    }

    fn status_error(
        &self,
        what: &str,
        status: StatusCode,
        headers: &HeaderMap,
        body: &str,
    ) -> EngineError {
        let message = api_message(body);
        let rate_limited = status == StatusCode::TOO_MANY_REQUESTS
            || (status == StatusCode::FORBIDDEN
                && (headers
                    .get("x-ratelimit-remaining")
                    .is_some_and(|v| v.as_bytes() == b"0")
                    || headers.contains_key(reqwest::header::RETRY_AFTER)
                    || message.to_ascii_lowercase().contains("rate limit")));
        if rate_limited {
            flowgate_core::observe::throttled(self.engine);
            return EngineError::Throttled {
                engine: self.engine,
                retry_after: retry_after(headers).or_else(|| reset_in(headers)),
            };
        }
        let text = if message.is_empty() {
            format!("{what}: HTTP {}", status.as_u16())
        } else {
            format!("{what}: HTTP {}: {message}", status.as_u16())
        };
        kind_for_status(self.engine, status.as_u16(), text)
    }
}

/// Where a redirect answer sends the request (its `Location`, resolved against its URL).
fn redirect_target(response: &Response) -> Option<reqwest::Url> {
    if !response.status().is_redirection() || response.status() == StatusCode::NOT_MODIFIED {
        return None;
    }
    let location = response
        .headers()
        .get(reqwest::header::LOCATION)?
        .to_str()
        .ok()?;
    response.url().join(location).ok()
}

/// Turns `request` into the request a redirect with `status` to `location` asks for: a 303
/// (and a 301/302 after a POST, as browsers and reqwest do) becomes a GET without a body; any
/// other origin gets none of the request's credentials.
fn follow(request: &mut reqwest::Request, status: StatusCode, location: reqwest::Url) {
    let same_origin = request.url().origin() == location.origin();
    if status == StatusCode::SEE_OTHER
        || (matches!(status, StatusCode::MOVED_PERMANENTLY | StatusCode::FOUND)
            && request.method() == Method::POST)
    {
        *request.method_mut() = Method::GET;
        *request.body_mut() = None;
        request.headers_mut().remove(reqwest::header::CONTENT_TYPE);
        request
            .headers_mut()
            .remove(reqwest::header::CONTENT_LENGTH);
    }
    if !same_origin {
        let kept: HeaderMap = request
            .headers()
            .iter()
            .filter(|(name, _)| CROSS_ORIGIN_HEADERS.contains(name))
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect();
        *request.headers_mut() = kept;
    }
    *request.url_mut() = location;
}

/// The API's own error message from a body: Google's `error.message`, GitHub's `message`,
/// GitLab's `message` or `error`, else the start of the text.
fn api_message(body: &str) -> String {
    let from_json = serde_json::from_str::<Value>(body).ok().and_then(|v| {
        [&v["error"]["message"], &v["message"], &v["error"]]
            .into_iter()
            .find_map(|m| match m {
                Value::String(s) if !s.is_empty() => Some(s.clone()),
                Value::Object(_) | Value::Array(_) if !m.to_string().is_empty() => {
                    Some(m.to_string())
                }
                _ => None,
            })
    });
    let text = from_json.unwrap_or_else(|| body.trim().to_owned());
    text.chars().take(MAX_MESSAGE).collect()
}

#[cfg(test)]
mod tests;
