//! The GitHub Actions engine: a call dispatches a workflow run, the run is the task.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::Utc;
use flowgate_core::{
    Action, Capabilities, Engine, EngineError, ExecutionRecord, ExecutionRef, ExecutionSummary,
    InputResponse, ListFilter, StartRequest, Started, TaskState,
};
use serde_json::{Value, json};

use crate::KIND;
use crate::api::{Api, Dispatched, Job, Run};
use crate::config::GhTarget;
use crate::diagnose::{self, Origin};
use crate::start::{self, Ledger};
use crate::{gates, mapping, outcome};

/// How far back `list` looks for runs flowgate started.
const LOOKBACK: chrono::Duration = chrono::Duration::hours(24);
/// How far back a start looks for the run its key already started (a retry comes within
/// the call's seconds; the margin covers clock skew between flowgate and GitHub).
const START_LOOKBACK: chrono::Duration = chrono::Duration::hours(1);
/// GitHub keeps runs (and their logs) for 90 days unless the repository says less.
const RETENTION_MS: u64 = 90 * 24 * 3600 * 1000;

/// One tool's workflow.
#[derive(Debug, Clone)]
pub struct GitHubActionsEngine {
    target: Arc<GhTarget>,
    api: Api,
    ledger: Arc<Ledger>,
}

fn not_found(what: impl Into<String>) -> EngineError {
    EngineError::NotFound {
        engine: KIND,
        what: what.into(),
    }
}

/// A read of a run's parts (jobs, reviews) that GitHub answered 404 although the run itself
/// was just read: passing, never "the task does not exist".
fn part_of_run(e: EngineError) -> EngineError {
    match e {
        EngineError::NotFound { what, .. } => EngineError::Unavailable {
            engine: KIND,
            message: format!("{what} (the run itself was found: retried)"),
            source: None,
        },
        other => other,
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

/// The branch (or tag) name a run of `git_ref` lists as its `head_branch`.
fn head_branch(git_ref: &str) -> &str {
    git_ref
        .strip_prefix("refs/heads/")
        .or_else(|| git_ref.strip_prefix("refs/tags/"))
        .unwrap_or(git_ref)
}

/// The steps running now, as (job, step number): a cancel that leaves one of them running
/// past the grace period meets a step that ignores GitHub's signals.
fn running_steps(jobs: &[Job]) -> Vec<(u64, usize)> {
    jobs.iter()
        .flat_map(|j| {
            j.steps
                .iter()
                .enumerate()
                .filter(|(_, s)| s.status.as_deref() == Some("in_progress"))
                .map(move |(i, _)| (j.id, i))
        })
        .collect()
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
            ledger: Arc::new(Ledger::default()),
        })
    }

    /// How many requests were answered 304 Not Modified is not tracked here; this is the
    /// shared client, for tests and pacing.
    pub fn rate_limits(&self) -> &flowgate_http::RateLimits {
        self.api.http.rate_limits()
    }

    async fn find_run(&self, marker: &str, git_ref: &str) -> Result<Option<Run>, EngineError> {
        let runs = self
            .api
            .recent_runs(Utc::now() - START_LOOKBACK, Some(head_branch(git_ref)))
            .await?;
        Ok(runs.into_iter().find(|r| {
            r.display_title
                .as_deref()
                .is_some_and(|t| t.contains(marker))
        }))
    }

    /// Looks for the run of a key already dispatched until the call's deadline; never
    /// dispatches it again.
    async fn look_for(&self, key: &str, git_ref: &str) -> Result<Started, EngineError> {
        loop {
            let Some(dispatch) = self.ledger.get(key) else {
                return Err(EngineError::Unavailable {
                    engine: KIND,
                    message: "the call's dispatch was forgotten; try again".into(),
                    source: None,
                });
            };
            if let Some((id, created_at)) = dispatch.run {
                return Ok(Started {
                    execution: ExecutionRef(id.to_string()),
                    created_at,
                });
            }
            if let Some(id) = dispatch.run_id {
                // GitHub named the run; only its first read failed.
                let run = self.api.run(id).await.map_err(part_of_run)?;
                self.ledger.found(key, (id, run.created_at));
                continue;
            }
            if let Some(run) = self.find_run(key, git_ref).await? {
                self.ledger.found(key, (run.id, run.created_at));
                continue;
            }
            if Instant::now() + start::LOOK_EVERY > dispatch.look_until() {
                return Err(start::not_found_in_time(
                    &dispatch,
                    &self.target.workflow,
                    &self.target.key_input,
                ));
            }
            tokio::time::sleep(start::LOOK_EVERY).await;
        }
    }

    fn record(&self, run: &Run, state: TaskState) -> ExecutionRecord {
        let mut record = ExecutionRecord::new(state, mapping::engine_status(run), run.created_at);
        record.updated_at = run.updated_at.max(run.created_at);
        record.console_url = run.html_url.clone();
        record
    }

    /// One poll of the run `id`: the run, its gates and jobs, and at its end the outcome.
    async fn read(&self, id: u64) -> Result<ExecutionRecord, EngineError> {
        let run = self.api.run(id).await?;
        let held = if run.status.as_deref() == Some("waiting") {
            gates::gates(&self.api, &run).await.map_err(part_of_run)?
        } else {
            Vec::new()
        };
        let questions = if held.iter().any(|g| g.needs_decision) {
            let approvals = self.api.approvals(id).await.map_err(part_of_run)?;
            gates::questions(&run, &held, &approvals)
        } else {
            Vec::new()
        };
        let state = mapping::state(&run, !questions.is_empty(), self.target.on_failure);
        let mut record = self.record(&run, state);
        if state == TaskState::Submitted {
            record.status_message = Some("queued: waiting for a runner".into());
            return Ok(record);
        }
        let jobs = self.api.jobs(id).await.map_err(part_of_run)?;
        match state {
            TaskState::Working | TaskState::InputRequired => {
                let parts: Vec<String> = [mapping::progress(&jobs), gates::timers(&held)]
                    .into_iter()
                    .flatten()
                    .collect();
                record.status_message = (!parts.is_empty()).then(|| parts.join("; "));
                record.input_requests = questions;
            }
            TaskState::Completed if mapping::concluded_in_failure(&run) => {
                // on_failure: completed, with the conclusion and the failure in the output.
                let f = outcome::failure(&self.api, &self.target, &run, &jobs)
                    .await
                    .map_err(part_of_run)?;
                record.output = Some(json!({
                    "conclusion": run.conclusion, "error": f.error, "log_tail": f.cause,
                    "jobs": outcome::job_conclusions(&jobs),
                }));
            }
            TaskState::Completed => {
                match outcome::output(&self.api, &self.target, &run, &jobs)
                    .await
                    .map_err(part_of_run)?
                {
                    Ok(output) => record.output = Some(output),
                    Err(failure) => {
                        record.state = TaskState::Failed;
                        record.status_message = Some(failure.error.clone());
                        record.failure = Some(failure);
                    }
                }
            }
            TaskState::Failed => {
                let f = outcome::failure(&self.api, &self.target, &run, &jobs)
                    .await
                    .map_err(part_of_run)?;
                record.status_message = Some(f.error.clone());
                record.failure = Some(f);
            }
            TaskState::Cancelled | TaskState::Unknown | TaskState::Submitted => {}
        }
        Ok(record)
    }
}

#[async_trait]
impl Engine for GitHubActionsEngine {
    fn kind(&self) -> &'static str {
        KIND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::all()
    }

    /// The repository, on its GitHub: a run's id (its locator, whole) is a number within it.
    fn reference_scope(&self) -> String {
        format!(
            "{}/repos/{}/{}",
            self.target.api_url, self.target.owner, self.target.repo
        )
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
        let git_ref = match self
            .target
            .git_ref_for(&request.arguments)
            .map_err(invalid)?
        {
            Some(r) => r,
            // The ref's argument left out: the repository's default branch.
            None => match self.api.default_branch().await {
                Ok(branch) => branch,
                Err(e) => {
                    let origin = Origin {
                        git_ref: "",
                        ref_from_arguments: true,
                        explicit_inputs: self.target.inputs.is_some(),
                    };
                    return Err(diagnose::explain(&self.api, &self.target, e, origin).await);
                }
            },
        };
        let origin = Origin {
            git_ref: &git_ref,
            ref_from_arguments: self.target.ref_from_arguments(),
            explicit_inputs: self.target.inputs.is_some(),
        };
        let explain = |e| diagnose::explain(&self.api, &self.target, e, origin);
        let key = format!("fg-{}", request.idempotency_key);
        // A key this process dispatched (or may have) is never dispatched again.
        if self.ledger.get(&key).is_some() {
            return self.look_for(&key, &git_ref).await;
        }
        // A retry from elsewhere (another attempt of the call) finds the run the key started.
        match self.find_run(&key, &git_ref).await {
            Ok(Some(run)) => {
                return Ok(Started {
                    execution: ExecutionRef(run.id.to_string()),
                    created_at: run.created_at,
                });
            }
            Ok(None) => {}
            Err(e) => return Err(explain(e).await),
        }
        self.ledger.sending(&key);
        match self.api.dispatch(&git_ref, inputs).await {
            Ok(Dispatched::Run(id)) => {
                // The answer names the run: no list to wait for. Its creation time comes with
                // the first read; a passing failure of that read loses nothing (the ledger has
                // the id for the retry).
                self.ledger.accepted(&key, Some(id));
                let run = self.api.run(id).await.map_err(part_of_run)?;
                self.ledger.found(&key, (id, run.created_at));
                Ok(Started {
                    execution: ExecutionRef(id.to_string()),
                    created_at: run.created_at,
                })
            }
            Ok(Dispatched::Accepted) => {
                self.ledger.accepted(&key, None);
                self.look_for(&key, &git_ref).await
            }
            Err(e) if start::may_have_started(&e) => Err(e),
            Err(e) => {
                self.ledger.not_sent(&key);
                Err(explain(e).await)
            }
        }
    }

    async fn get(&self, execution: &ExecutionRef) -> Result<ExecutionRecord, EngineError> {
        let id = run_id(execution)?;
        let limits = self.api.http.rate_limits();
        limits.polling(&execution.0, self.read(id)).await
    }

    async fn respond(
        &self,
        execution: &ExecutionRef,
        key: &str,
        response: InputResponse,
    ) -> Result<(), EngineError> {
        let id = run_id(execution)?;
        let Some((environment, earlier)) = gates::parse_question_key(key) else {
            return Err(not_found(format!("question {key:.80}")));
        };
        let run = self.api.run(id).await?;
        if run.status.as_deref() == Some("completed") {
            return Err(not_found(format!("question {key} (the run has ended)")));
        }
        let held = gates::gates(&self.api, &run).await.map_err(part_of_run)?;
        let approvals = self.api.approvals(id).await.map_err(part_of_run)?;
        let Some(gate) = held
            .iter()
            .find(|g| g.environment_id == environment && g.needs_decision)
            .filter(|_| gates::reviews_of(&approvals, environment) == earlier)
        else {
            return Err(not_found(format!("question {key} (no longer pending)")));
        };
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
        gates::decide(&self.api, id, key, gate, approve, &comment).await
    }

    async fn cancel(&self, execution: &ExecutionRef) -> Result<(), EngineError> {
        let id = run_id(execution)?;
        let completed = |r: &Run| r.status.as_deref() == Some("completed");
        if completed(&self.api.run(id).await?) {
            return Ok(());
        }
        let interrupted = running_steps(&self.api.jobs(id).await.map_err(part_of_run)?);
        if let Err(e) = self.api.cancel(id, false).await {
            // 409: it completed meanwhile.
            if matches!(e, EngineError::InvalidInput { .. }) && completed(&self.api.run(id).await?)
            {
                return Ok(());
            }
            return Err(e);
        }
        // GitHub interrupts the running steps (SIGINT, then SIGTERM, then kills them), then
        // runs the `always()` and `cancelled()` steps. A step still running after the grace
        // period ignores the signals: the run is force-cancelled. Cleanup steps started after
        // the cancel are left to finish; the run then ends cancelled on its own.
        let deadline = Instant::now() + Duration::from_millis(self.target.cancel_grace_ms);
        while Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(500)).await;
            if completed(&self.api.run(id).await?) {
                return Ok(());
            }
        }
        let jobs = self.api.jobs(id).await.map_err(part_of_run)?;
        let stuck = running_steps(&jobs)
            .into_iter()
            .any(|s| interrupted.contains(&s));
        if !stuck {
            return Ok(());
        }
        tracing::info!(run = id, "a step still runs after cancel: force-cancelling");
        match self.api.cancel(id, true).await {
            Err(EngineError::InvalidInput { .. }) if completed(&self.api.run(id).await?) => Ok(()),
            other => other,
        }
    }

    async fn list(&self, filter: ListFilter) -> Result<Vec<ExecutionSummary>, EngineError> {
        let runs = self.api.recent_runs(Utc::now() - LOOKBACK, None).await?;
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

    /// A run is a number within its repository (owner and name, up to 39 and 100 characters,
    /// are the tool's scope); the largest a reference can hold.
    #[test]
    fn the_longest_run_gets_a_task_id_a_client_takes() {
        let config = serde_json::json!({
            "owner": "o".repeat(39), "repo": "r".repeat(100), "workflow": "release.yml",
            "ref": "main",
        });
        let target = GhTarget::from_config(
            config.as_object().expect("object"),
            serde_json::json!({"type": "object"})
                .as_object()
                .expect("object"),
        )
        .expect("target");
        let engine = GitHubActionsEngine::new(target).expect("engine");
        let execution = ExecutionRef(u64::MAX.to_string());
        let locator = engine.locator(&execution).expect("a run");
        assert_eq!(engine.reference_at(locator), execution);
        let length = flowgate_core::handle::task_id_fits(locator).expect("fits");
        assert!(length <= flowgate_core::handle::ID_MAX, "{length}");
        assert!(engine.reference_scope().contains(&"r".repeat(100)));
    }

    #[test]
    fn references_parse_strictly() {
        for bad in ["", "../../etc/passwd", "12a", &"9".repeat(30)] {
            assert!(run_id(&ExecutionRef(bad.into())).is_err(), "{bad}");
        }
        // The principal's tag goes in verbatim, as every engine marks executions with it.
        let request = StartRequest::new("t", serde_json::json!({}), "00ff00ff00ff00ff");
        assert_eq!(
            call_marker(&request),
            format!("fg-{}.00ff00ff00ff00ff", request.idempotency_key)
        );
        assert_eq!(head_branch("refs/heads/release/1.x"), "release/1.x");
        assert_eq!(head_branch("v1.2"), "v1.2");
    }

    #[test]
    fn a_missing_part_of_a_found_run_is_passing() {
        let e = part_of_run(not_found("jobs"));
        assert!(e.is_retryable() && !e.is_not_found(), "{e:?}");
    }
}
