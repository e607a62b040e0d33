//! `executions.callbacks.list` and calls to a callback URL: plain REST, because the client
//! crate does not cover callbacks.

use flowgate_core::{EngineError, kind_for_status};
use google_cloud_auth::credentials::{CacheableResource, Credentials};
use serde::Deserialize;
use serde_json::Value;

use crate::KIND;

/// One callback, as the discovery document describes it.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Callback {
    /// `projects/.../executions/{e}/callbacks/{id}`.
    pub(crate) name: String,
    /// The HTTP method the callback accepts.
    #[serde(default = "post")]
    pub(crate) method: String,
    /// How many `await_callback` calls wait on it (int64, sent as a string).
    #[serde(default)]
    pub(crate) waiters: Option<Value>,
}

fn post() -> String {
    "POST".to_owned()
}

impl Callback {
    /// The callback id, the last segment of its name.
    pub(crate) fn id(&self) -> &str {
        self.name.rsplit('/').next().unwrap_or_default()
    }

    /// Whether a step is waiting on it now.
    pub(crate) fn has_waiters(&self) -> bool {
        match &self.waiters {
            Some(Value::String(s)) => s.parse::<i64>().is_ok_and(|n| n > 0),
            Some(Value::Number(n)) => n.as_i64().is_some_and(|n| n > 0),
            _ => false,
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ListCallbacks {
    #[serde(default)]
    callbacks: Vec<Callback>,
    #[serde(default)]
    next_page_token: Option<String>,
}

/// How REST calls authenticate: nothing against a test endpoint, else the Application Default
/// Credentials' own headers (the bearer token, and `x-goog-user-project` when user credentials
/// name a quota project: without it, user ADC calls are billed to no project and refused).
#[derive(Debug, Clone)]
pub(crate) enum Auth {
    Anonymous,
    Adc(Credentials),
}

#[derive(Debug, Clone)]
pub(crate) struct Rest {
    pub(crate) http: reqwest::Client,
    pub(crate) base: String,
    pub(crate) auth: Auth,
}

impl Rest {
    async fn request(
        &self,
        method: reqwest::Method,
        url: &str,
    ) -> Result<reqwest::RequestBuilder, EngineError> {
        let mut req = self.http.request(method, url);
        if let Auth::Adc(creds) = &self.auth {
            let headers =
                creds
                    .headers(http::Extensions::new())
                    .await
                    .map_err(|e| EngineError::Denied {
                        engine: KIND,
                        message: format!("cannot get Google credentials: {e}"),
                    })?;
            // Without an entity tag in the request, the headers always come back new.
            if let CacheableResource::New { data, .. } = headers {
                req = req.headers(data);
            }
        }
        Ok(req)
    }

    async fn send(
        &self,
        req: reqwest::RequestBuilder,
        what: &str,
    ) -> Result<reqwest::Response, EngineError> {
        let response = req.send().await.map_err(|e| {
            EngineError::unavailable(
                KIND,
                format!("{what}: the Workflows endpoint could not be reached"),
                e,
            )
        })?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let body = response.text().await.unwrap_or_default();
        let message = serde_json::from_str::<Value>(&body)
            .ok()
            .and_then(|v| v["error"]["message"].as_str().map(str::to_owned))
            .unwrap_or(body);
        Err(kind_for_status(
            KIND,
            status.as_u16(),
            format!("{what}: HTTP {status}: {message}"),
        ))
    }

    /// Every callback of an execution.
    pub(crate) async fn list(&self, execution: &str) -> Result<Vec<Callback>, EngineError> {
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        for _ in 0..20 {
            let mut url = format!("{}/v1/{execution}/callbacks?pageSize=100", self.base);
            if let Some(t) = &token {
                // Tokens are opaque base64: `+`, `/` and `=` must reach the server as sent.
                url.push_str(&format!("&pageToken={}", query_escape(t)));
            }
            let req = self.request(reqwest::Method::GET, &url).await?;
            let page: ListCallbacks = self
                .send(req, "executions.callbacks.list")
                .await?
                .json()
                .await
                .map_err(|e| {
                    EngineError::unavailable(
                        KIND,
                        "executions.callbacks.list: unreadable answer",
                        e,
                    )
                })?;
            out.extend(page.callbacks);
            match page.next_page_token.filter(|t| !t.is_empty()) {
                Some(t) => token = Some(t),
                None => break,
            }
        }
        Ok(out)
    }

    /// Calls a callback of `execution` with `body`, on the documented send path
    /// `{execution}/callbacks/{callback}` built from its parts (never from `Callback.name`,
    /// whose shape the API does not promise).
    pub(crate) async fn call(
        &self,
        execution: &str,
        callback: &Callback,
        body: &Value,
    ) -> Result<(), EngineError> {
        let method = reqwest::Method::from_bytes(callback.method.as_bytes())
            .unwrap_or(reqwest::Method::POST);
        let url = format!(
            "{}/v1/{execution}/callbacks/{}",
            self.base,
            query_escape(callback.id())
        );
        let req = self.request(method, &url).await?.json(body);
        self.send(req, "callback").await.map(|_| ())
    }
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
fn query_escape(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    for b in raw.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_tokens_and_ids_are_escaped() {
        assert_eq!(query_escape("ab+/c=="), "ab%2B%2Fc%3D%3D");
        assert_eq!(query_escape("plain-id_1.x~"), "plain-id_1.x~");
    }

    #[test]
    fn the_callback_id_is_the_last_part_of_its_name() {
        let c: Callback =
            serde_json::from_str(r#"{"name": "a/b/callbacks/xyz", "waiters": "1"}"#).expect("json");
        assert_eq!(c.id(), "xyz");
        assert!(c.has_waiters());
        assert_eq!(c.method, "POST");
    }
}
