//! The GitHub Actions engine: a call dispatches a workflow run, the run is the task.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::Utc;
use flowgate_core::{
    Action, Capabilities, Engine, EngineError, EngineFailure, ExecutionRecord, ExecutionRef,
    ExecutionSummary, InputRequest, InputResponse, ListFilter, StartRequest, Started, TaskState,
};
use serde_json::{Map, Value, json};

use crate::KIND;
use crate::api::{Api, Approval, Job, Run};
use crate::config::GhTarget;
use crate::mapping;

/// How far back a retried start looks for the run its key already started.
const LOOKBACK: chrono::Duration = chrono::Duration::hours(24);
/// How long a GitHub Enterprise Server that answers a dispatch with 204 gets to list the run.
const FIND_AFTER_204: Duration = Duration::from_secs(10);
/// GitHub keeps runs (and their logs) for 90 days unless the repository says less.
const RETENTION_MS: u64 = 90 * 24 * 3600 * 1000;

/// One tool's workflow.
#[derive(Debug, Clone)]
pub struct GitHubActionsEngine {
    target: Arc<GhTarget>,
    api: Api,
}

fn not_found(what: impl Into<String>) -> EngineError {
    EngineError::NotFound {
        engine: KIND,
        what: what.into(),
    }
}

fn run_id(execution: &ExecutionRef) -> Result<u64, EngineError> {
    let s = execution.0.as_str();
    if s.is_empty() || s.len() > 20 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(not_found(format!("workflow run {s:.40}")));
    }
    s.parse()
        .map_err(|_| not_found(format!("workflow run {s}")))
}

/// The key input's value for one call: the key, and the principal's tag (verbatim) for `list`.
fn call_marker(request: &StartRequest) -> String {
    format!("fg-{}.{}", request.idempotency_key, request.principal_tag)
}

/// A question's key: the environment and how many reviews it had before (unique for the
/// run's life: a second wait on the same environment gets the next number).
fn question_key(environment: u64, earlier_reviews: usize) -> String {
    format!("env-{environment}-{}", earlier_reviews + 1)
}

fn parse_question_key(key: &str) -> Option<(u64, usize)> {
    let rest = key.strip_prefix("env-")?;
    let (env, n) = rest.split_once('-')?;
    let n: usize = n.parse().ok()?;
    Some((env.parse().ok()?, n.checked_sub(1)?))
}

fn reviews_of(approvals: &[Approval], environment: u64) -> usize {
    approvals
        .iter()
        .filter(|a| a.environments.iter().any(|e| e.id == environment))
        .count()
}

impl GitHubActionsEngine {
    /// An engine for `target`.
    ///
    /// # Errors
    /// `Unavailable` when the HTTP client cannot be built.
    pub fn new(target: GhTarget) -> Result<Self, EngineError> {
        let target = Arc::new(target);
        Ok(GitHubActionsEngine {
            api: Api::new(target.clone())?,
            target,
        })
    }

    /// How many requests were answered 304 Not Modified is not tracked here; this is the
    /// shared client, for tests and pacing.
    pub fn rate_limits(&self) -> &flowgate_http::RateLimits {
        self.api.http.rate_limits()
    }

    async fn find_run(&self, marker: &str) -> Result<Option<Run>, EngineError> {
        let runs = self.api.recent_runs(Utc::now() - LOOKBACK).await?;
        Ok(runs.into_iter().find(|r| {
            r.display_title
                .as_deref()
                .is_some_and(|t| t.contains(marker))
        }))
    }

    fn record(&self, run: &Run, state: TaskState) -> ExecutionRecord {
        let mut record = ExecutionRecord::new(state, mapping::engine_status(run), run.created_at);
        record.updated_at = run.updated_at.max(run.created_at);
        record.console_url = run.html_url.clone();
        record
    }

    async fn questions(&self, run: &Run) -> Result<Vec<InputRequest>, EngineError> {
        let pending = self.api.pending_deployments(run.id).await?;
        if pending.is_empty() {
            return Ok(Vec::new());
        }
        let approvals = self.api.approvals(run.id).await?;
        Ok(pending
            .iter()
            .map(|p| {
                let env = p.environment.name.clone().unwrap_or_else(|| p.environment.id.to_string());
                let who = if p.current_user_can_approve {
                    ""
                } else {
                    " (flowgate's credentials are not among its reviewers: a reviewer must answer in GitHub)"
                };
                InputRequest {
                    key: question_key(p.environment.id, reviews_of(&approvals, p.environment.id)),
                    message: format!(
                        "Workflow run {} waits for a review to deploy to {env}. Approve or reject?{who}",
                        run.id
                    ),
                    requested_schema: json!({
                        "type": "object",
                        "properties": {
                            "decision": {"type": "string", "enum": ["approve", "reject"], "default": "approve",
                                         "description": "approve lets the deployment go on; reject ends it"},
                            "comment": {"type": "string", "description": "The review comment GitHub records"}
                        },
                        "required": ["decision"]
                    }),
                }
            })
            .collect())
    }

    /// The output of a finished run: the result artifact's JSON, or the conclusions.
    async fn output(&self, run: &Run, jobs: &[Job]) -> Result<Value, EngineFailure> {
        if let Some(spec) = &self.target.result_artifact {
            let missing = |cause: String| EngineFailure {
                error: format!("ResultArtifact: {}/{}", spec.name, spec.path),
                cause: Some(cause),
            };
            let artifacts = self
                .api
                .artifacts(run.id, &spec.name)
                .await
                .map_err(|e| missing(e.to_string()))?;
            let artifact = artifacts
                .iter()
                .find(|a| a.name == spec.name && !a.expired)
                .ok_or_else(|| missing(format!("the run uploaded no artifact {}", spec.name)))?;
            let zip = self
                .api
                .artifact_zip(artifact.id)
                .await
                .map_err(|e| missing(e.to_string()))?;
            let bytes = crate::zip::read_entry(&zip, &spec.path).map_err(missing)?;
            return serde_json::from_slice(&bytes)
                .map_err(|e| missing(format!("{} is not JSON: {e}", spec.path)));
        }
        let approvals = self.api.approvals(run.id).await.unwrap_or_default();
        Ok(summary(run, jobs, &approvals))
    }

    async fn failure(&self, run: &Run, jobs: &[Job]) -> EngineFailure {
        let conclusion = run.conclusion.as_deref().unwrap_or("failure");
        let Some((job, step)) = mapping::failing(jobs) else {
            return EngineFailure {
                error: format!("run {conclusion}"),
                cause: None,
            };
        };
        let error = match step {
            Some(step) => format!(
                "run {conclusion}: job {:?} failed at step {step:?}",
                job.name
            ),
            None => format!("run {conclusion}: job {:?} failed", job.name),
        };
        let cause = match self.api.job_log(job.id).await {
            Ok(log) => mapping::log_tail(&log, self.target.log_tail_lines),
            Err(e) => format!("(the job's log could not be read: {e})"),
        };
        EngineFailure {
            error,
            cause: Some(cause),
        }
    }
}

/// Conclusions and reviews of a run with no result artifact.
fn summary(run: &Run, jobs: &[Job], approvals: &[Approval]) -> Value {
    let job_conclusions: Map<String, Value> = jobs
        .iter()
        .map(|j| (j.name.clone(), json!(j.conclusion)))
        .collect();
    let reviews: Vec<Value> = approvals
        .iter()
        .map(|a| {
            json!({
                "environments": a.environments.iter().filter_map(|e| e.name.clone()).collect::<Vec<_>>(),
                "state": a.state,
                "comment": a.comment,
                "user": a.user.as_ref().map(|u| u.login.clone()),
            })
        })
        .collect();
    json!({
        "run_id": run.id,
        "conclusion": run.conclusion,
        "jobs": job_conclusions,
        "reviews": reviews,
    })
}

#[async_trait]
impl Engine for GitHubActionsEngine {
    fn kind(&self) -> &'static str {
        KIND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::all()
    }

    fn retention_ms(&self) -> Option<u64> {
        Some(RETENTION_MS)
    }

    fn pacing(&self) -> Option<Duration> {
        self.api.http.rate_limits().pacing()
    }

    async fn start(&self, request: StartRequest) -> Result<Started, EngineError> {
        let invalid = |message: String| EngineError::InvalidInput {
            engine: KIND,
            message,
        };
        let marker = call_marker(&request);
        let inputs = self
            .target
            .dispatch_inputs(&request.arguments, &marker)
            .map_err(invalid)?;
        let git_ref = self
            .target
            .git_ref_for(&request.arguments)
            .map_err(invalid)?;
        // Exactly once: a retry (after a lost answer, a timeout) finds the run the key started.
        let key = format!("fg-{}", request.idempotency_key);
        if let Some(run) = self.find_run(&key).await? {
            return Ok(Started {
                execution: ExecutionRef(run.id.to_string()),
                created_at: run.created_at,
            });
        }
        let id = match self.api.dispatch(&git_ref, inputs).await? {
            Some(id) => id,
            None => {
                let deadline = Instant::now() + FIND_AFTER_204;
                loop {
                    if let Some(run) = self.find_run(&key).await? {
                        break run.id;
                    }
                    if Instant::now() > deadline {
                        return Err(EngineError::Timeout {
                            engine: KIND,
                            message: "the dispatch was accepted but its run is not listed yet \
                                      (does the workflow's run-name include the key input?)"
                                .into(),
                        });
                    }
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        };
        let run = self.api.run(id).await?;
        Ok(Started {
            execution: ExecutionRef(id.to_string()),
            created_at: run.created_at,
        })
    }

    async fn get(&self, execution: &ExecutionRef) -> Result<ExecutionRecord, EngineError> {
        let id = run_id(execution)?;
        self.api.http.rate_limits().note_poll(&execution.0);
        let run = self.api.run(id).await?;
        let questions = if run.status.as_deref() == Some("waiting") {
            self.questions(&run).await?
        } else {
            Vec::new()
        };
        let state = mapping::state(&run, !questions.is_empty(), self.target.on_failure);
        let mut record = self.record(&run, state);
        if state == TaskState::Submitted {
            record.status_message = Some("queued".into());
            return Ok(record);
        }
        let jobs = self.api.jobs(id).await?;
        match state {
            TaskState::Working | TaskState::InputRequired => {
                record.status_message = mapping::progress(&jobs);
                record.input_requests = questions;
            }
            TaskState::Completed => {
                let failed_run = run.conclusion.as_deref().is_some_and(|c| {
                    matches!(
                        c,
                        "failure" | "timed_out" | "startup_failure" | "action_required"
                    )
                });
                if failed_run {
                    // on_failure: completed, with the conclusion and the failure in the output.
                    let f = self.failure(&run, &jobs).await;
                    record.output = Some(json!({
                        "conclusion": run.conclusion, "error": f.error, "log_tail": f.cause,
                        "jobs": summary(&run, &jobs, &[])["jobs"],
                    }));
                } else {
                    match self.output(&run, &jobs).await {
                        Ok(output) => record.output = Some(output),
                        Err(failure) => {
                            record.state = TaskState::Failed;
                            record.failure = Some(failure);
                        }
                    }
                }
            }
            TaskState::Failed => {
                record.failure = Some(self.failure(&run, &jobs).await);
                record.status_message = record.failure.as_ref().map(|f| f.error.clone());
            }
            TaskState::Cancelled | TaskState::Unknown | TaskState::Submitted => {}
        }
        Ok(record)
    }

    async fn respond(
        &self,
        execution: &ExecutionRef,
        key: &str,
        response: InputResponse,
    ) -> Result<(), EngineError> {
        let id = run_id(execution)?;
        let Some((environment, earlier)) = parse_question_key(key) else {
            return Err(not_found(format!("question {key:.80}")));
        };
        let run = self.api.run(id).await?;
        if run.status.as_deref() == Some("completed") {
            return Err(not_found(format!("question {key} (the run has ended)")));
        }
        let pending = self.api.pending_deployments(id).await?;
        let approvals = self.api.approvals(id).await?;
        if !pending.iter().any(|p| p.environment.id == environment)
            || reviews_of(&approvals, environment) != earlier
        {
            return Err(not_found(format!("question {key} (no longer pending)")));
        }
        let content = response.content.unwrap_or(Value::Null);
        let comment = content
            .get("comment")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let (approve, comment) = match response.action {
            Action::Accept => {
                let decision = content
                    .get("decision")
                    .and_then(Value::as_str)
                    .unwrap_or("approve");
                match decision {
                    "approve" => (
                        true,
                        comment.unwrap_or_else(|| "Approved through flowgate".into()),
                    ),
                    "reject" => (
                        false,
                        comment.unwrap_or_else(|| "Rejected through flowgate".into()),
                    ),
                    other => {
                        return Err(EngineError::InvalidInput {
                            engine: KIND,
                            message: format!("decision must be approve or reject, not {other:?}"),
                        });
                    }
                }
            }
            Action::Decline => (
                false,
                comment.unwrap_or_else(|| "Declined through flowgate".into()),
            ),
            // Dismissed without a choice: a deployment is never approved by default.
            Action::Cancel => (false, "The question was dismissed in flowgate".into()),
        };
        match self.api.review(id, environment, approve, &comment).await {
            // 422: reviewed meanwhile (in GitHub's UI) or no longer pending.
            Err(EngineError::InvalidInput { .. }) => {
                Err(not_found(format!("question {key} (no longer pending)")))
            }
            other => other,
        }
    }

    async fn cancel(&self, execution: &ExecutionRef) -> Result<(), EngineError> {
        let id = run_id(execution)?;
        let completed = |r: &Run| r.status.as_deref() == Some("completed");
        if completed(&self.api.run(id).await?) {
            return Ok(());
        }
        if let Err(e) = self.api.cancel(id, false).await {
            // 409: it completed meanwhile.
            if matches!(e, EngineError::InvalidInput { .. }) && completed(&self.api.run(id).await?)
            {
                return Ok(());
            }
            return Err(e);
        }
        // A run can stay in progress after a cancel (steps that ignore the signal, `always()`
        // steps): after the grace period it is force-cancelled.
        let deadline = Instant::now() + Duration::from_millis(self.target.cancel_grace_ms);
        while Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(500)).await;
            if completed(&self.api.run(id).await?) {
                return Ok(());
            }
        }
        tracing::info!(
            run = id,
            "the run is still going after cancel: force-cancelling"
        );
        match self.api.cancel(id, true).await {
            Err(EngineError::InvalidInput { .. }) if completed(&self.api.run(id).await?) => Ok(()),
            other => other,
        }
    }

    async fn list(&self, filter: ListFilter) -> Result<Vec<ExecutionSummary>, EngineError> {
        let runs = self.api.recent_runs(Utc::now() - LOOKBACK).await?;
        let tag = filter.principal_tag.as_deref();
        let mut out: Vec<ExecutionSummary> = runs
            .iter()
            .filter(|r| {
                let title = r.display_title.as_deref().unwrap_or("");
                title.contains("fg-")
                    && tag.as_ref().is_none_or(|t| {
                        title
                            .split_whitespace()
                            .any(|w| w.ends_with(&format!(".{t}")))
                    })
            })
            .map(|r| ExecutionSummary {
                execution: ExecutionRef(r.id.to_string()),
                state: mapping::state(
                    r,
                    r.status.as_deref() == Some("waiting"),
                    self.target.on_failure,
                ),
                created_at: r.created_at,
            })
            .collect();
        out.truncate(filter.limit.unwrap_or(usize::MAX));
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_references_parse_strictly() {
        assert_eq!(parse_question_key(&question_key(77, 0)), Some((77, 0)));
        assert_eq!(parse_question_key("env-77-0"), None);
        assert_eq!(parse_question_key("never-asked"), None);
        for bad in ["", "../../etc/passwd", "12a", &"9".repeat(30)] {
            assert!(run_id(&ExecutionRef(bad.into())).is_err(), "{bad}");
        }
        // The principal's tag goes in verbatim, as every engine marks executions with it.
        let request = StartRequest::new("t", serde_json::json!({}), "00ff00ff00ff00ff");
        assert_eq!(
            call_marker(&request),
            format!("fg-{}.00ff00ff00ff00ff", request.idempotency_key)
        );
    }
}
