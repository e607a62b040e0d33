//! The GitHub REST calls the engine makes, each with its deadline (flowgate-http), the token,
//! GitHub's media type and API version, conditional GETs for what is polled, and `Link` paging.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use flowgate_core::EngineError;
use flowgate_http::{
    HttpClient, HttpConfig, Method, RequestBuilder, Secret, StatusCode, header, paging,
};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::KIND;
use crate::auth::{App, Credentials};
use crate::config::GhTarget;

/// The REST API version flowgate is written against.
const API_VERSION: &str = "2022-11-28";
/// Longest list followed (100 per page): a partial list is never taken for a whole one.
const MAX_PAGES: usize = 10;

/// A workflow run (the fields flowgate reads).
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Run {
    pub id: u64,
    #[serde(default)]
    pub status: Option<String>,
    #[serde(default)]
    pub conclusion: Option<String>,
    #[serde(default)]
    pub display_title: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    #[serde(default)]
    pub html_url: Option<String>,
}

#[derive(Debug, Deserialize)]
struct RunList {
    #[serde(default)]
    workflow_runs: Vec<Run>,
}

/// A job of a run, with its steps.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Job {
    pub id: u64,
    pub name: String,
    #[serde(default)]
    pub status: Option<String>,
    #[serde(default)]
    pub conclusion: Option<String>,
    #[serde(default)]
    pub steps: Vec<Step>,
}

/// A step of a job.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Step {
    pub name: String,
    #[serde(default)]
    pub status: Option<String>,
    #[serde(default)]
    pub conclusion: Option<String>,
}

#[derive(Debug, Deserialize)]
struct JobList {
    #[serde(default)]
    total_count: usize,
    #[serde(default)]
    jobs: Vec<Job>,
}

/// An environment as the deployment endpoints name it.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Environment {
    pub id: u64,
    #[serde(default)]
    pub name: Option<String>,
}

/// A deployment of the run waiting for review.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct PendingDeployment {
    pub environment: Environment,
    #[serde(default)]
    pub current_user_can_approve: bool,
}

/// A review given to the run (in flowgate or in GitHub's UI).
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Approval {
    #[serde(default)]
    pub environments: Vec<Environment>,
    pub state: String,
    #[serde(default)]
    pub comment: Option<String>,
    #[serde(default)]
    pub user: Option<User>,
}

/// A GitHub user.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct User {
    pub login: String,
}

#[derive(Debug, Deserialize)]
struct ArtifactList {
    #[serde(default)]
    total_count: usize,
    #[serde(default)]
    artifacts: Vec<Artifact>,
}

/// An artifact a run uploaded.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Artifact {
    pub id: u64,
    pub name: String,
    #[serde(default)]
    pub expired: bool,
}

#[derive(Debug, Deserialize)]
struct Dispatched {
    workflow_run_id: u64,
}

/// The REST client of one target.
#[derive(Debug, Clone)]
pub(crate) struct Api {
    pub http: HttpClient,
    target: Arc<GhTarget>,
    credentials: Arc<Credentials>,
}

impl Api {
    pub(crate) fn new(target: Arc<GhTarget>) -> Result<Self, EngineError> {
        let credentials = match (&target.app, &target.app_key) {
            (Some(app), Some(key)) => Credentials::App(
                App::new(app.app_id.to_string(), app.installation_id, key).map_err(|message| {
                    EngineError::Denied {
                        engine: KIND,
                        message,
                    }
                })?,
            ),
            _ => Credentials::Token(target.token.clone().unwrap_or_else(|| Secret::new(""))),
        };
        Ok(Api {
            http: HttpClient::new(KIND, &HttpConfig::default())?,
            target,
            credentials: Arc::new(credentials),
        })
    }

    async fn request(&self, method: Method, url: &str) -> Result<RequestBuilder, EngineError> {
        let token = self
            .credentials
            .bearer(&self.http, &self.target.api_url)
            .await?;
        Ok(self
            .http
            .request(method, url)
            .header(header::AUTHORIZATION, format!("Bearer {}", token.expose()))
            .header(header::ACCEPT, "application/vnd.github+json")
            .header("X-GitHub-Api-Version", API_VERSION))
    }

    fn url(&self, rest: &str) -> String {
        format!("{}/{rest}", self.target.actions_url())
    }

    async fn get<T: DeserializeOwned>(&self, url: &str, what: &str) -> Result<T, EngineError> {
        let got = self
            .http
            .get_conditional(self.request(Method::GET, url).await?, url, what)
            .await?;
        self.http.decode(what, &got.body)
    }

    /// Every item of a list whose first page is asked conditionally (an unchanged list costs
    /// a 304), following `Link: rel="next"` to the end.
    async fn list<L: DeserializeOwned, T>(
        &self,
        first: &str,
        what: &str,
        split: impl Fn(L) -> (usize, Vec<T>),
    ) -> Result<Vec<T>, EngineError> {
        let got = self
            .http
            .get_conditional(self.request(Method::GET, first).await?, first, what)
            .await?;
        let (total, items) = split(self.http.decode(what, &got.body)?);
        let next = match (&got.next_page, got.not_modified) {
            (Some(next), _) => Some(next.clone()),
            // A 304 carries no Link: when the remembered page says there is more, ask in full.
            (None, true) if total > items.len() => {
                let response = self
                    .http
                    .send(self.request(Method::GET, first).await?, what)
                    .await?;
                paging::next_link(response.headers())
            }
            _ => None,
        };
        let Some(next) = next else { return Ok(items) };
        let split = &split;
        let mut rest = paging::all_pages(KIND, MAX_PAGES, |token| {
            let url = token.unwrap_or_else(|| next.clone());
            async move {
                let response = self
                    .http
                    .send(self.request(Method::GET, &url).await?, what)
                    .await?;
                let link = paging::next_link(response.headers());
                let bytes = response.bytes().await.map_err(|e| EngineError::Timeout {
                    engine: KIND,
                    message: format!("{what}: the answer broke off ({e})"),
                })?;
                let (_, page) = split(self.http.decode(what, &bytes)?);
                Ok((page, link))
            }
        })
        .await?;
        let mut all = items;
        all.append(&mut rest);
        Ok(all)
    }

    /// `POST .../workflows/{workflow}/dispatches` with `return_run_details`: the run's id, or
    /// `None` from a server that answers 204 (older GitHub Enterprise Server).
    pub(crate) async fn dispatch(
        &self,
        git_ref: &str,
        inputs: serde_json::Map<String, Value>,
    ) -> Result<Option<u64>, EngineError> {
        let url = self.url(&format!(
            "workflows/{}/dispatches",
            paging::encode(&self.target.workflow)
        ));
        let body = json!({"ref": git_ref, "inputs": inputs, "return_run_details": true});
        let what = "actions.createWorkflowDispatch";
        let response = self
            .http
            .send(self.request(Method::POST, &url).await?.json(&body), what)
            .await?;
        if response.status() == StatusCode::NO_CONTENT {
            return Ok(None);
        }
        let bytes = response.bytes().await.map_err(|e| EngineError::Timeout {
            engine: KIND,
            message: format!("{what}: the answer broke off ({e})"),
        })?;
        let d: Dispatched = self.http.decode(what, &bytes)?;
        Ok(Some(d.workflow_run_id))
    }

    /// The workflow's `workflow_dispatch` runs created since `since`, newest first.
    pub(crate) async fn recent_runs(&self, since: DateTime<Utc>) -> Result<Vec<Run>, EngineError> {
        let created = paging::encode(&format!(">={}", since.format("%Y-%m-%dT%H:%M:%SZ")));
        let url = self.url(&format!(
            "workflows/{}/runs?event=workflow_dispatch&created={created}&per_page=100",
            paging::encode(&self.target.workflow)
        ));
        self.list(&url, "actions.listWorkflowRuns", |l: RunList| {
            (usize::MAX, l.workflow_runs)
        })
        .await
        .map(|mut runs| {
            runs.dedup_by_key(|r| r.id);
            runs
        })
    }

    pub(crate) async fn run(&self, id: u64) -> Result<Run, EngineError> {
        self.get(&self.url(&format!("runs/{id}")), "actions.getWorkflowRun")
            .await
    }

    pub(crate) async fn jobs(&self, id: u64) -> Result<Vec<Job>, EngineError> {
        let url = self.url(&format!("runs/{id}/jobs?filter=latest&per_page=100"));
        self.list(&url, "actions.listJobsForWorkflowRun", |l: JobList| {
            (l.total_count, l.jobs)
        })
        .await
    }

    pub(crate) async fn pending_deployments(
        &self,
        id: u64,
    ) -> Result<Vec<PendingDeployment>, EngineError> {
        self.get(
            &self.url(&format!("runs/{id}/pending_deployments")),
            "actions.getPendingDeploymentsForRun",
        )
        .await
    }

    pub(crate) async fn approvals(&self, id: u64) -> Result<Vec<Approval>, EngineError> {
        self.get(
            &self.url(&format!("runs/{id}/approvals")),
            "actions.getReviewsForRun",
        )
        .await
    }

    /// Approves or rejects the run's deployment to `environment`.
    pub(crate) async fn review(
        &self,
        id: u64,
        environment: u64,
        approve: bool,
        comment: &str,
    ) -> Result<(), EngineError> {
        let url = self.url(&format!("runs/{id}/pending_deployments"));
        let body = json!({
            "environment_ids": [environment],
            "state": if approve { "approved" } else { "rejected" },
            "comment": comment,
        });
        self.http
            .send(
                self.request(Method::POST, &url).await?.json(&body),
                "actions.reviewPendingDeploymentsForRun",
            )
            .await?;
        self.forget_run(id);
        Ok(())
    }

    /// `cancel` or `force-cancel` (a run already completed answers 409, `InvalidInput`).
    pub(crate) async fn cancel(&self, id: u64, force: bool) -> Result<(), EngineError> {
        let op = if force { "force-cancel" } else { "cancel" };
        let url = self.url(&format!("runs/{id}/{op}"));
        let what = if force {
            "actions.forceCancelWorkflowRun"
        } else {
            "actions.cancelWorkflowRun"
        };
        let got = self
            .http
            .send(self.request(Method::POST, &url).await?, what)
            .await;
        self.forget_run(id);
        got.map(drop)
    }

    pub(crate) async fn artifacts(
        &self,
        id: u64,
        name: &str,
    ) -> Result<Vec<Artifact>, EngineError> {
        let url = self.url(&format!(
            "runs/{id}/artifacts?name={}&per_page=100",
            paging::encode(name)
        ));
        self.list(
            &url,
            "actions.listWorkflowRunArtifacts",
            |l: ArtifactList| (l.total_count, l.artifacts),
        )
        .await
    }

    /// Follows the redirect to the artifact's zip (the redirect's host gets no token).
    pub(crate) async fn artifact_zip(&self, artifact: u64) -> Result<Vec<u8>, EngineError> {
        self.bytes(
            &self.url(&format!("artifacts/{artifact}/zip")),
            "actions.downloadArtifact",
        )
        .await
    }

    /// Follows the redirect to a job's log text.
    pub(crate) async fn job_log(&self, job: u64) -> Result<String, EngineError> {
        let bytes = self
            .bytes(
                &self.url(&format!("jobs/{job}/logs")),
                "actions.downloadJobLogsForWorkflowRun",
            )
            .await?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    async fn bytes(&self, url: &str, what: &str) -> Result<Vec<u8>, EngineError> {
        let response = self
            .http
            .send(self.request(Method::GET, url).await?, what)
            .await?;
        response
            .bytes()
            .await
            .map(|b| b.to_vec())
            .map_err(|e| EngineError::Timeout {
                engine: KIND,
                message: format!("{what}: the answer broke off ({e})"),
            })
    }

    /// Drops the cached views of a run this instance just changed.
    fn forget_run(&self, id: u64) {
        for rest in [
            format!("runs/{id}"),
            format!("runs/{id}/pending_deployments"),
            format!("runs/{id}/approvals"),
        ] {
            self.http.etags().forget(&self.url(&rest));
        }
    }
}
