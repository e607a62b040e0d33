//! `executions.callbacks.list` and calls to a callback URL: plain REST (the client crate does
//! not cover callbacks), through flowgate-http like every REST engine: its deadlines, its one
//! classification of failures (a timeout is `Timeout`, a 429 `Throttled` with the wait
//! `Retry-After` asks for), its paging and its encoding of query values and path segments.

use flowgate_core::EngineError;
use flowgate_http::paging::{Page, all_pages, encode};
use flowgate_http::{HttpClient, HttpConfig, Method, RequestBuilder};
use google_cloud_auth::credentials::{CacheableResource, Credentials};
use serde::Deserialize;
use serde_json::Value;

use crate::KIND;

/// The most pages of callbacks one read follows (100 a page).
const MAX_PAGES: usize = 20;

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

/// The REST side of one Workflows target.
#[derive(Debug, Clone)]
pub(crate) struct Rest {
    http: HttpClient,
    base: String,
    auth: Auth,
}

impl Rest {
    /// REST calls to `base` (`https://workflowexecutions.googleapis.com`, or a test endpoint)
    /// with `config`'s deadlines.
    ///
    /// # Errors
    /// `Unavailable` when the HTTP client cannot be built.
    pub(crate) fn new(base: String, auth: Auth, config: &HttpConfig) -> Result<Self, EngineError> {
        Ok(Rest {
            http: HttpClient::new(KIND, config)?,
            base,
            auth,
        })
    }

    async fn request(&self, method: Method, url: &str) -> Result<RequestBuilder, EngineError> {
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

    /// Every callback of an execution.
    pub(crate) async fn list(&self, execution: &str) -> Result<Vec<Callback>, EngineError> {
        all_pages(KIND, MAX_PAGES, |token| async move {
            let mut url = format!("{}/v1/{execution}/callbacks?pageSize=100", self.base);
            if let Some(t) = token {
                // Tokens are opaque base64: `+`, `/` and `=` must reach the server as sent.
                url.push_str("&pageToken=");
                url.push_str(&encode(&t));
            }
            let req = self.request(Method::GET, &url).await?;
            let page: ListCallbacks = self.http.json(req, "executions.callbacks.list").await?;
            Ok::<Page<Callback>, EngineError>((page.callbacks, page.next_page_token))
        })
        .await
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
        let method = Method::from_bytes(callback.method.as_bytes()).unwrap_or(Method::POST);
        let url = format!(
            "{}/v1/{execution}/callbacks/{}",
            self.base,
            encode(callback.id())
        );
        let req = self.request(method, &url).await?.json(body);
        self.http.send(req, "callback").await.map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// A loopback HTTP server answering each request with the next of `answers` (a status
    /// line, headers and body), or never, once they run out; it records each request line.
    async fn stub(answers: Vec<String>) -> (String, Arc<Mutex<Vec<String>>>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        tokio::spawn(async move {
            let mut answers = answers.into_iter();
            while let Ok((mut socket, _)) = listener.accept().await {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n")
                    && socket.read(&mut byte).await.is_ok_and(|n| n == 1)
                {
                    head.push(byte[0]);
                }
                let line = String::from_utf8_lossy(&head)
                    .lines()
                    .next()
                    .unwrap_or("")
                    .to_owned();
                log.lock().expect("log").push(line);
                match answers.next() {
                    Some(answer) => {
                        let _ = socket.write_all(answer.as_bytes()).await;
                    }
                    // Out of answers: hold the connection without a word.
                    None => {
                        tokio::spawn(async move {
                            tokio::time::sleep(Duration::from_secs(30)).await;
                            drop(socket);
                        });
                    }
                }
            }
        });
        (base, seen)
    }

    fn answer(status: &str, headers: &str, body: &str) -> String {
        format!(
            "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n{headers}\r\n{body}",
            body.len()
        )
    }

    fn rest(base: String) -> Rest {
        let config = HttpConfig {
            request_timeout: Duration::from_millis(500),
            ..HttpConfig::default()
        };
        Rest::new(base, Auth::Anonymous, &config).expect("client")
    }

    #[tokio::test]
    async fn callbacks_are_read_to_the_last_page_with_tokens_escaped() {
        let (base, seen) = stub(vec![
            answer(
                "200 OK",
                "",
                r#"{"callbacks": [{"name": "e/callbacks/x", "waiters": "1"}], "nextPageToken": "ab+/c=="}"#,
            ),
            answer("200 OK", "", r#"{"callbacks": [{"name": "e/callbacks/y"}]}"#),
        ])
        .await;
        let all = rest(base)
            .list("projects/p/executions/e")
            .await
            .expect("list");
        let ids: Vec<&str> = all.iter().map(Callback::id).collect();
        assert_eq!(ids, ["x", "y"]);
        let seen = seen.lock().expect("seen").clone();
        assert!(seen[1].contains("&pageToken=ab%2B%2Fc%3D%3D "), "{seen:?}");
    }

    #[tokio::test]
    async fn a_rate_limit_is_throttled_with_its_retry_after_and_silence_a_timeout() {
        let (base, _) = stub(vec![answer(
            "429 Too Many Requests",
            "retry-after: 7\r\n",
            r#"{"error": {"code": 429, "message": "Quota exceeded", "status": "RESOURCE_EXHAUSTED"}}"#,
        )])
        .await;
        let r = rest(base);
        let throttled = r.list("projects/p/executions/e").await;
        assert!(
            matches!(
                throttled,
                Err(EngineError::Throttled { retry_after: Some(d), .. }) if d == Duration::from_secs(7)
            ),
            "{throttled:?}"
        );
        // The stub has no answer left: it holds the request, which times out as a Timeout (it
        // may have taken effect), as in every REST engine.
        let callback: Callback =
            serde_json::from_str(r#"{"name": "e/callbacks/x"}"#).expect("json");
        let silent = r
            .call("projects/p/executions/e", &callback, &serde_json::json!({}))
            .await;
        assert!(
            matches!(silent, Err(EngineError::Timeout { .. })),
            "{silent:?}"
        );
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
