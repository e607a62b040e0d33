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
    /// Who started this attempt of the run: flowgate's token user for a run it dispatched.
    #[serde(default)]
    pub triggering_actor: Option<User>,
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

/// A deployment of the run held by its environment's protection rules.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct PendingDeployment {
    pub environment: Environment,
    /// Whether these credentials are among the required reviewers (never true for an App).
    #[serde(default)]
    pub current_user_can_approve: bool,
    /// The wait timer in minutes (0: none).
    #[serde(default)]
    pub wait_timer: u64,
    #[serde(default)]
    pub wait_timer_started_at: Option<DateTime<Utc>>,
    /// The required reviewers: users and teams.
    #[serde(default)]
    pub reviewers: Vec<Reviewer>,
}

/// A required reviewer of an environment.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Reviewer {
    /// `User` or `Team`.
    #[serde(rename = "type", default)]
    pub kind: String,
    #[serde(default)]
    pub reviewer: ReviewerName,
}

/// A user's login or a team's slug.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct ReviewerName {
    #[serde(default)]
    pub login: Option<String>,
    #[serde(default)]
    pub slug: Option<String>,
}

impl Reviewer {
    /// `@alice`, `team ops`.
    pub(crate) fn display(&self) -> String {
        match (&self.reviewer.login, &self.reviewer.slug) {
            (Some(login), _) => format!("@{login}"),
            (None, Some(slug)) => format!("team {slug}"),
            (None, None) => self.kind.to_lowercase(),
        }
    }
}

#[derive(Debug, Deserialize)]
struct ProtectionRuleList {
    #[serde(default)]
    custom_deployment_protection_rules: Vec<ProtectionRule>,
}

/// A custom deployment protection rule: a GitHub App that approves or rejects deployments.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct ProtectionRule {
    #[serde(default)]
    pub enabled: bool,
    pub app: RuleApp,
}

/// The App behind a custom deployment protection rule.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct RuleApp {
    pub id: u64,
    #[serde(default)]
    pub slug: Option<String>,
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

/// The repository (the fields flowgate reads).
#[derive(Debug, Deserialize)]
struct Repository {
    default_branch: String,
}

#[derive(Debug, Deserialize)]
struct DispatchAnswer {
    workflow_run_id: u64,
}

/// What GitHub said to a dispatch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dispatched {
    /// The run it started (`return_run_details`).
    Run(u64),
    /// 204: accepted, the run not named (GitHub Enterprise Server before `return_run_details`).
    Accepted,
}

/// A GitHub 404 or 410 of something that may legitimately not exist (a log, an expired
/// artifact), as `None`; other errors as they are.
fn absent_as_none<T>(got: Result<T, EngineError>) -> Result<Option<T>, EngineError> {
    match got {
        Ok(v) => Ok(Some(v)),
        Err(EngineError::NotFound { .. }) => Ok(None),
        Err(e) => Err(e),
    }
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
            http: HttpClient::new(KIND, &HttpConfig::default())?.with_free_revalidation(),
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

    /// The App's numeric id, for App credentials (the manifest's, or `GET /app` once for a
    /// client id).
    pub(crate) async fn app_id(&self) -> Result<Option<u64>, EngineError> {
        match &*self.credentials {
            Credentials::App(app) => app
                .numeric_id(&self.http, &self.target.api_url)
                .await
                .map(Some),
            Credentials::Token(_) => Ok(None),
        }
    }

    /// `GET /repos/{owner}/{repo}`: the repository, `None` when the credentials cannot see it.
    async fn repository(&self) -> Result<Option<Repository>, EngineError> {
        let url = format!(
            "{}/repos/{}/{}",
            self.target.api_url, self.target.owner, self.target.repo
        );
        absent_as_none(self.get(&url, "repos.get").await)
    }

    /// Whether the credentials can see the repository at all.
    pub(crate) async fn repository_visible(&self) -> Result<bool, EngineError> {
        self.repository().await.map(|r| r.is_some())
    }

    /// The repository's default branch (a call whose ref is left out runs there).
    pub(crate) async fn default_branch(&self) -> Result<String, EngineError> {
        match self.repository().await? {
            Some(r) => Ok(r.default_branch),
            None => Err(EngineError::NotFound {
                engine: KIND,
                what: format!("repository {}/{}", self.target.owner, self.target.repo),
            }),
        }
    }

    /// `POST .../workflows/{workflow}/dispatches` with `return_run_details`.
    pub(crate) async fn dispatch(
        &self,
        git_ref: &str,
        inputs: serde_json::Map<String, Value>,
    ) -> Result<Dispatched, EngineError> {
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
            return Ok(Dispatched::Accepted);
        }
        let bytes = response.bytes().await.map_err(|e| EngineError::Timeout {
            engine: KIND,
            message: format!("{what}: the answer broke off ({e})"),
        })?;
        let d: DispatchAnswer = self.http.decode(what, &bytes)?;
        Ok(Dispatched::Run(d.workflow_run_id))
    }

    /// The workflow's `workflow_dispatch` runs created since `since` (on `branch`, when
    /// given), newest first.
    pub(crate) async fn recent_runs(
        &self,
        since: DateTime<Utc>,
        branch: Option<&str>,
    ) -> Result<Vec<Run>, EngineError> {
        let created = paging::encode(&format!(">={}", since.format("%Y-%m-%dT%H:%M:%SZ")));
        let branch = branch
            .map(|b| format!("&branch={}", paging::encode(b)))
            .unwrap_or_default();
        let url = self.url(&format!(
            "workflows/{}/runs?event=workflow_dispatch&created={created}{branch}&per_page=100",
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

    /// The enabled custom deployment protection rules of `environment`.
    pub(crate) async fn protection_rules(
        &self,
        environment: &str,
    ) -> Result<Vec<ProtectionRule>, EngineError> {
        let url = format!(
            "{}/repos/{}/{}/environments/{}/deployment_protection_rules",
            self.target.api_url,
            self.target.owner,
            self.target.repo,
            paging::encode(environment)
        );
        // A 404 (an environment deleted meanwhile, a server without custom rules): none.
        let list: Option<ProtectionRuleList> = absent_as_none(
            self.get(&url, "repos.getAllDeploymentProtectionRules")
                .await,
        )?;
        Ok(list
            .map(|l| l.custom_deployment_protection_rules)
            .unwrap_or_default()
            .into_iter()
            .filter(|r| r.enabled)
            .collect())
    }

    /// An App's answer for its own custom deployment protection rule on `environment`.
    pub(crate) async fn review_custom_gate(
        &self,
        id: u64,
        environment: &str,
        approve: bool,
        comment: &str,
    ) -> Result<(), EngineError> {
        let url = self.url(&format!("runs/{id}/deployment_protection_rule"));
        let body = json!({
            "environment_name": environment,
            "state": if approve { "approved" } else { "rejected" },
            "comment": comment,
        });
        self.http
            .send(
                self.request(Method::POST, &url).await?.json(&body),
                "actions.reviewCustomGatesForRun",
            )
            .await?;
        self.forget_run(id);
        Ok(())
    }

    /// Approves or rejects the run's deployment to `environment` as a required reviewer.
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

    /// Follows the redirect to the artifact's zip (the redirect's host gets no token); `None`
    /// when GitHub says it is gone (expired meanwhile).
    pub(crate) async fn artifact_zip(&self, artifact: u64) -> Result<Option<Vec<u8>>, EngineError> {
        absent_as_none(
            self.bytes(
                &self.url(&format!("artifacts/{artifact}/zip")),
                "actions.downloadArtifact",
            )
            .await,
        )
    }

    /// Follows the redirect to a job's log text; `None` for a job that has none (it never ran:
    /// skipped, rejected at its environment) or whose log has expired.
    pub(crate) async fn job_log(&self, job: u64) -> Result<Option<String>, EngineError> {
        let bytes = absent_as_none(
            self.bytes(
                &self.url(&format!("jobs/{job}/logs")),
                "actions.downloadJobLogsForWorkflowRun",
            )
            .await,
        )?;
        Ok(bytes.map(|b| String::from_utf8_lossy(&b).into_owned()))
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
