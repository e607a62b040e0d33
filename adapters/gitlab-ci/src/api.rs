//! The GitLab REST calls the engine makes, through flowgate-http (deadlines, error kinds,
//! rate limits, `X-Next-Page` paging).

use chrono::{DateTime, Utc};
use flowgate_core::EngineError;
use flowgate_http::paging::{all_pages, encode, next_page_number};
use flowgate_http::{HttpClient, Method, RequestBuilder, Secret};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::KIND;

/// Pages of 100 (GitLab's maximum `per_page`), at most this many.
const MAX_PAGES: usize = 10;

/// A pipeline, as `GET /projects/:id/pipelines/:pipeline_id` answers.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Pipeline {
    pub(crate) id: u64,
    pub(crate) status: String,
    pub(crate) created_at: DateTime<Utc>,
    #[serde(default)]
    pub(crate) updated_at: Option<DateTime<Utc>>,
    #[serde(default)]
    pub(crate) web_url: Option<String>,
}

/// A job, as `GET /projects/:id/pipelines/:pipeline_id/jobs` answers.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Job {
    pub(crate) id: u64,
    pub(crate) name: String,
    pub(crate) stage: String,
    pub(crate) status: String,
    #[serde(default)]
    pub(crate) allow_failure: bool,
    #[serde(default)]
    pub(crate) failure_reason: Option<String>,
}

/// A pipeline variable.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Variable {
    pub(crate) key: String,
    #[serde(default)]
    pub(crate) value: Option<String>,
}

/// The API of one project, with its credentials.
#[derive(Debug, Clone)]
pub(crate) struct Api {
    pub(crate) http: HttpClient,
    pub(crate) project_url: String,
    pub(crate) token: Option<Secret>,
    pub(crate) bearer: bool,
    pub(crate) token_env: String,
}

impl Api {
    fn request(&self, method: Method, url: &str) -> Result<RequestBuilder, EngineError> {
        let token = self.token.as_ref().ok_or_else(|| EngineError::Denied {
            engine: KIND,
            message: format!("no GitLab token: set {}", self.token_env),
        })?;
        let req = self.http.request(method, url);
        Ok(if self.bearer {
            req.bearer_auth(token.expose())
        } else {
            req.header("PRIVATE-TOKEN", token.expose())
        })
    }

    pub(crate) async fn pipeline(&self, id: u64) -> Result<Pipeline, EngineError> {
        let url = format!("{}/pipelines/{id}", self.project_url);
        let req = self.request(Method::GET, &url)?;
        self.http.json(req, "get pipeline").await
    }

    pub(crate) async fn jobs(&self, pipeline: u64) -> Result<Vec<Job>, EngineError> {
        all_pages(KIND, MAX_PAGES, |page| async move {
            let url = format!(
                "{}/pipelines/{pipeline}/jobs?per_page=100&page={}",
                self.project_url,
                page.as_deref().unwrap_or("1")
            );
            let req = self.request(Method::GET, &url)?;
            let response = self.http.send(req, "list pipeline jobs").await?;
            let next = next_page_number(response.headers());
            let bytes = response.bytes().await.map_err(|e| {
                EngineError::unavailable(KIND, "list pipeline jobs: the answer broke off", e)
            })?;
            Ok((self.http.decode("list pipeline jobs", &bytes)?, next))
        })
        .await
    }

    /// Pipelines of `git_ref` updated after `since`, newest first, at most `limit`.
    pub(crate) async fn recent(
        &self,
        git_ref: Option<&str>,
        since: DateTime<Utc>,
        limit: usize,
    ) -> Result<Vec<Pipeline>, EngineError> {
        let mut out = Vec::new();
        let mut page = 1;
        while out.len() < limit && page <= MAX_PAGES {
            let mut url = format!(
                "{}/pipelines?order_by=id&sort=desc&per_page=100&page={page}&updated_after={}",
                self.project_url,
                encode(&since.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
            );
            if let Some(r) = git_ref {
                url.push_str(&format!("&ref={}", encode(r)));
            }
            let req = self.request(Method::GET, &url)?;
            let response = self.http.send(req, "list pipelines").await?;
            let next = next_page_number(response.headers());
            let bytes = response.bytes().await.map_err(|e| {
                EngineError::unavailable(KIND, "list pipelines: the answer broke off", e)
            })?;
            let items: Vec<Pipeline> = self.http.decode("list pipelines", &bytes)?;
            out.extend(items);
            match next.and_then(|n| n.parse().ok()) {
                Some(n) => page = n,
                None => break,
            }
        }
        out.truncate(limit);
        Ok(out)
    }

    pub(crate) async fn variables(&self, pipeline: u64) -> Result<Vec<Variable>, EngineError> {
        let url = format!("{}/pipelines/{pipeline}/variables", self.project_url);
        let req = self.request(Method::GET, &url)?;
        self.http.json(req, "get pipeline variables").await
    }

    /// `POST /pipeline` (or the trigger endpoint with `trigger_token`).
    pub(crate) async fn create(
        &self,
        git_ref: &str,
        variables: &[(String, String)],
        inputs: Option<&serde_json::Map<String, Value>>,
        trigger_token: Option<&Secret>,
    ) -> Result<Pipeline, EngineError> {
        let (url, body) = match trigger_token {
            None => {
                let vars: Vec<Value> = variables
                    .iter()
                    .map(|(k, v)| json!({"key": k, "value": v, "variable_type": "env_var"}))
                    .collect();
                let mut body = json!({"ref": git_ref, "variables": vars});
                if let Some(i) = inputs {
                    body["inputs"] = Value::Object(i.clone());
                }
                (format!("{}/pipeline", self.project_url), body)
            }
            Some(t) => {
                let vars: serde_json::Map<String, Value> = variables
                    .iter()
                    .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                    .collect();
                let mut body = json!({"token": t.expose(), "ref": git_ref, "variables": vars});
                if let Some(i) = inputs {
                    body["inputs"] = Value::Object(i.clone());
                }
                (format!("{}/trigger/pipeline", self.project_url), body)
            }
        };
        let req = match trigger_token {
            // The trigger token authenticates this call on its own.
            Some(_) => self.http.request(Method::POST, &url),
            None => self.request(Method::POST, &url)?,
        };
        self.http.json(req.json(&body), "create pipeline").await
    }

    pub(crate) async fn play(
        &self,
        job: u64,
        variables: &[(String, String)],
    ) -> Result<(), EngineError> {
        let url = format!("{}/jobs/{job}/play", self.project_url);
        let attrs: Vec<Value> = variables
            .iter()
            .map(|(k, v)| json!({"key": k, "value": v}))
            .collect();
        let req = self
            .request(Method::POST, &url)?
            .json(&json!({"job_variables_attributes": attrs}));
        self.http.send(req, "play job").await.map(|_| ())
    }

    pub(crate) async fn cancel(&self, pipeline: u64) -> Result<(), EngineError> {
        let url = format!("{}/pipelines/{pipeline}/cancel", self.project_url);
        let req = self.request(Method::POST, &url)?;
        self.http.send(req, "cancel pipeline").await.map(|_| ())
    }

    pub(crate) async fn trace(&self, job: u64) -> Result<String, EngineError> {
        let url = format!("{}/jobs/{job}/trace", self.project_url);
        let req = self.request(Method::GET, &url)?;
        let response = self.http.send(req, "get job trace").await?;
        response
            .text()
            .await
            .map_err(|e| EngineError::unavailable(KIND, "get job trace: the answer broke off", e))
    }

    pub(crate) async fn artifact(&self, job: u64, path: &str) -> Result<Vec<u8>, EngineError> {
        let encoded: Vec<String> = path.split('/').map(encode).collect();
        let url = format!(
            "{}/jobs/{job}/artifacts/{}",
            self.project_url,
            encoded.join("/")
        );
        let req = self.request(Method::GET, &url)?;
        let response = self.http.send(req, "get job artifact").await?;
        response.bytes().await.map(|b| b.to_vec()).map_err(|e| {
            EngineError::unavailable(KIND, "get job artifact: the answer broke off", e)
        })
    }
}
