//! The GitLab REST calls the engine makes, through flowgate-http (deadlines, error kinds,
//! rate limits, `X-Next-Page` paging).

use chrono::{DateTime, Utc};
use flowgate_core::EngineError;
use flowgate_http::paging::{all_pages, encode, next_page_number};
use flowgate_http::{HttpClient, Method, RequestBuilder, Secret};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::KIND;

/// Pages of 100 (GitLab's maximum `per_page`), at most this many.
const MAX_PAGES: usize = 10;

/// A pipeline, as `GET /projects/:id/pipelines/:pipeline_id` (and the list) answers.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Pipeline {
    pub(crate) id: u64,
    pub(crate) status: String,
    pub(crate) created_at: DateTime<Utc>,
    #[serde(default)]
    pub(crate) updated_at: Option<DateTime<Utc>>,
    /// When its first job started (the single pipeline's answer has it; lists do not).
    #[serde(default)]
    pub(crate) started_at: Option<DateTime<Utc>>,
    #[serde(default)]
    pub(crate) web_url: Option<String>,
    /// `workflow:name` as evaluated (GitLab 16.3+ answers it; null when there is none).
    #[serde(default)]
    pub(crate) name: Option<String>,
    /// Why GitLab could not read the configuration (a pipeline saved with errors).
    #[serde(default)]
    pub(crate) yaml_errors: Option<String>,
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
    #[serde(default)]
    pub(crate) artifacts_expire_at: Option<DateTime<Utc>>,
}

/// The user a token belongs to (`GET /user`).
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct User {
    pub(crate) username: String,
}

/// What a start sends: the ref, the pipeline inputs and the pipeline variables.
#[derive(Debug, Clone, Default)]
pub(crate) struct NewPipeline {
    pub(crate) git_ref: String,
    pub(crate) inputs: Map<String, Value>,
    pub(crate) variables: Vec<(String, String)>,
}

/// What playing a manual job sends: job inputs (GitLab 18.10+) and job variables.
#[derive(Debug, Clone, Default)]
pub(crate) struct Play {
    pub(crate) inputs: Map<String, Value>,
    pub(crate) variables: Vec<(String, String)>,
}

/// The API of one project, with its credentials.
#[derive(Debug, Clone)]
pub(crate) struct Api {
    pub(crate) http: HttpClient,
    pub(crate) project_url: String,
    pub(crate) user_url: String,
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

    /// The pipelines named exactly `name` (the pipelines list's `name` filter, GitLab 16.9+),
    /// newest first: one request.
    pub(crate) async fn named(
        &self,
        name: &str,
        git_ref: &str,
        since: DateTime<Utc>,
    ) -> Result<Vec<Pipeline>, EngineError> {
        let url = format!(
            "{}/pipelines?name={}&ref={}&created_after={}&order_by=id&sort=desc&per_page=20",
            self.project_url,
            encode(name),
            encode(git_ref),
            encode(&since.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        );
        let req = self.request(Method::GET, &url)?;
        self.http.json(req, "find pipeline by name").await
    }

    /// Pipelines (of `git_ref`, if given) updated after `since`, newest first, at most `limit`.
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

    /// `POST /pipeline` (or the trigger endpoint with `trigger_token`).
    pub(crate) async fn create(
        &self,
        new: &NewPipeline,
        trigger_token: Option<&Secret>,
    ) -> Result<Pipeline, EngineError> {
        let mut body = json!({"ref": new.git_ref});
        if !new.inputs.is_empty() {
            body["inputs"] = Value::Object(new.inputs.clone());
        }
        let url = match trigger_token {
            None => {
                if !new.variables.is_empty() {
                    body["variables"] = new
                        .variables
                        .iter()
                        .map(|(k, v)| json!({"key": k, "value": v, "variable_type": "env_var"}))
                        .collect();
                }
                format!("{}/pipeline", self.project_url)
            }
            Some(t) => {
                body["token"] = Value::String(t.expose().to_owned());
                if !new.variables.is_empty() {
                    body["variables"] = new
                        .variables
                        .iter()
                        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                        .collect::<Map<String, Value>>()
                        .into();
                }
                format!("{}/trigger/pipeline", self.project_url)
            }
        };
        let req = match trigger_token {
            // The trigger token authenticates this call on its own.
            Some(_) => self.http.request(Method::POST, &url),
            None => self.request(Method::POST, &url)?,
        };
        self.http.json(req.json(&body), "create pipeline").await
    }

    /// `PUT /pipelines/:id/metadata` (GitLab 16.6+): the pipeline's name.
    pub(crate) async fn rename(&self, pipeline: u64, name: &str) -> Result<Pipeline, EngineError> {
        let url = format!("{}/pipelines/{pipeline}/metadata", self.project_url);
        let req = self
            .request(Method::PUT, &url)?
            .json(&json!({ "name": name }));
        self.http.json(req, "name pipeline").await
    }

    /// The token's own user.
    pub(crate) async fn user(&self) -> Result<User, EngineError> {
        let req = self.request(Method::GET, &self.user_url)?;
        self.http.json(req, "get current user").await
    }

    pub(crate) async fn play(&self, job: u64, play: &Play) -> Result<(), EngineError> {
        let url = format!("{}/jobs/{job}/play", self.project_url);
        let mut body = json!({});
        if !play.variables.is_empty() {
            body["job_variables_attributes"] = play
                .variables
                .iter()
                .map(|(k, v)| json!({"key": k, "value": v}))
                .collect();
        }
        if !play.inputs.is_empty() {
            body["job_inputs"] = Value::Object(play.inputs.clone());
        }
        let req = self.request(Method::POST, &url)?.json(&body);
        self.http.send(req, "play job").await.map(|_| ())
    }

    pub(crate) async fn cancel(&self, pipeline: u64) -> Result<(), EngineError> {
        let url = format!("{}/pipelines/{pipeline}/cancel", self.project_url);
        let req = self.request(Method::POST, &url)?;
        self.http.send(req, "cancel pipeline").await.map(|_| ())
    }

    /// The last `keep` bytes of a job's log, read as it streams in (a log may be megabytes;
    /// only its end is kept in memory).
    pub(crate) async fn trace_end(&self, job: u64, keep: usize) -> Result<Vec<u8>, EngineError> {
        let url = format!("{}/jobs/{job}/trace", self.project_url);
        let req = self.request(Method::GET, &url)?;
        let mut response = self.http.send(req, "get job trace").await?;
        let mut tail: Vec<u8> = Vec::with_capacity(keep.min(1 << 16));
        loop {
            let chunk = response.chunk().await.map_err(|e| {
                EngineError::unavailable(KIND, "get job trace: the answer broke off", e)
            })?;
            let Some(chunk) = chunk else { break };
            tail.extend_from_slice(&chunk);
            if tail.len() > keep * 2 {
                tail.drain(..tail.len() - keep);
            }
        }
        if tail.len() > keep {
            tail.drain(..tail.len() - keep);
        }
        Ok(tail)
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
