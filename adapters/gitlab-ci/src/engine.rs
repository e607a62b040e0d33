//! The [`Engine`] implementation over GitLab's pipelines and jobs API.

use std::time::Duration;

use async_trait::async_trait;
use chrono::Utc;
use flowgate_core::{
    Action, Capabilities, Engine, EngineError, EngineFailure, ExecutionRecord, ExecutionRef,
    ExecutionSummary, InputRequest, InputResponse, ListFilter, StartRequest, Started, TaskState,
};
use flowgate_http::{HttpClient, HttpConfig, Secret};
use serde_json::{Map, Value, json};

use crate::api::{Api, Job, Pipeline};
use crate::{GitLabTarget, KIND, OnDecline, ResultFile, mapping};

/// The variables flowgate adds to every pipeline it creates.
const KEY_VAR: &str = "FLOWGATE_IDEMPOTENCY_KEY";
const PRINCIPAL_VAR: &str = "FLOWGATE_PRINCIPAL";
const TOOL_VAR: &str = "FLOWGATE_TOOL";
/// How many recent pipelines `list` looks at.
const LIST_SCAN: usize = 100;
/// How many recent pipelines a start looks at for its key.
const DEDUPE_SCAN: usize = 200;

fn secret(name: &str) -> Option<Secret> {
    std::env::var(name)
        .ok()
        .filter(|v| !v.is_empty())
        .map(Secret::new)
}

/// The GitLab CI engine bound to one tool's project and ref.
#[derive(Debug)]
pub struct GitLabEngine {
    target: GitLabTarget,
    api: Api,
    trigger_token: Option<Secret>,
}

impl GitLabEngine {
    /// An engine for `target`, with the token from the environment variable it names (read
    /// now; a missing token is reported on the first call, so `flowgate check` works without).
    ///
    /// # Errors
    /// `Unavailable` when the HTTP client cannot be built.
    pub fn new(target: GitLabTarget) -> Result<Self, EngineError> {
        Self::with_config(target, &HttpConfig::default())
    }

    /// As [`GitLabEngine::new`] with other deadlines.
    ///
    /// # Errors
    /// As [`GitLabEngine::new`].
    pub fn with_config(target: GitLabTarget, config: &HttpConfig) -> Result<Self, EngineError> {
        let token = secret(&target.token_env);
        Self::with_token(target, config, token)
    }

    /// An engine with `token` from a secret source other than the environment (the trigger
    /// token, if the target names one, still comes from its environment variable).
    ///
    /// # Errors
    /// As [`GitLabEngine::new`].
    pub fn with_token(
        target: GitLabTarget,
        config: &HttpConfig,
        token: Option<Secret>,
    ) -> Result<Self, EngineError> {
        let api = Api {
            http: HttpClient::new(KIND, config)?,
            project_url: target.project_url(),
            token,
            bearer: target.token_kind == crate::TokenKind::Bearer,
            token_env: target.token_env.clone(),
        };
        let trigger_token = target.trigger_token_env.as_deref().and_then(secret);
        Ok(GitLabEngine {
            target,
            api,
            trigger_token,
        })
    }

    /// Starts through the trigger endpoint with `token` (a pipeline trigger token from a
    /// secret source), instead of the one `trigger_token_env` names.
    pub fn with_trigger_token(mut self, token: Option<Secret>) -> Self {
        self.trigger_token = token;
        self
    }

    /// Whether the engine is being told to wait by the rate limit right now.
    pub fn throttled_for(&self) -> Option<Duration> {
        self.api.http.rate_limits().blocked_for()
    }

    fn invalid(message: String) -> EngineError {
        EngineError::InvalidInput {
            engine: KIND,
            message,
        }
    }

    /// The pipeline id of a reference this engine issued; anything else is not found.
    fn pipeline_id(execution: &ExecutionRef) -> Result<u64, EngineError> {
        let s = execution.0.as_str();
        if s.is_empty() || s.len() > 19 || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(EngineError::NotFound {
                engine: KIND,
                what: "a pipeline flowgate did not start".into(),
            });
        }
        s.parse().map_err(|_| EngineError::NotFound {
            engine: KIND,
            what: "a pipeline flowgate did not start".into(),
        })
    }

    /// The pipeline an earlier attempt of this call created, if any.
    async fn find_by_key(&self, git_ref: &str, key: &str) -> Result<Option<Pipeline>, EngineError> {
        let since = Utc::now()
            - chrono::Duration::seconds(self.target.dedupe_window_s.min(86_400 * 30) as i64);
        for p in self.api.recent(Some(git_ref), since, DEDUPE_SCAN).await? {
            let vars = self.api.variables(p.id).await?;
            if vars
                .iter()
                .any(|v| v.key == KEY_VAR && v.value.as_deref() == Some(key))
            {
                return Ok(Some(p));
            }
        }
        Ok(None)
    }

    /// The blocking manual jobs that are the manifest's questions.
    fn questions<'a>(&self, jobs: &'a [Job]) -> Vec<(&'a Job, &crate::Question)> {
        jobs.iter()
            .filter(|j| j.status == "manual" && !j.allow_failure)
            .filter_map(|j| self.target.questions.get(&j.name).map(|q| (j, q)))
            .collect()
    }

    /// The newest job named `name` (a retried job appears more than once).
    fn job<'a>(jobs: &'a [Job], name: &str) -> Option<&'a Job> {
        jobs.iter().filter(|j| j.name == name).max_by_key(|j| j.id)
    }

    async fn result_file(&self, jobs: &[Job], file: &ResultFile) -> Result<Vec<u8>, String> {
        let job = Self::job(jobs, &file.job)
            .ok_or_else(|| format!("the pipeline has no job {}", file.job))?;
        self.api
            .artifact(job.id, &file.path)
            .await
            .map_err(|e| format!("job {} has no artifact {}: {e}", file.job, file.path))
    }

    /// The result of a successful pipeline.
    async fn output(&self, pipeline: &Pipeline, jobs: &[Job]) -> Result<Value, EngineFailure> {
        let missing = |message: String| EngineFailure {
            error: "result artifact missing".into(),
            cause: Some(message),
        };
        if let Some(file) = &self.target.result_artifact {
            let bytes = self.result_file(jobs, file).await.map_err(missing)?;
            return serde_json::from_slice(&bytes).map_err(|e| EngineFailure {
                error: "result artifact is not JSON".into(),
                cause: Some(format!("{} of job {}: {e}", file.path, file.job)),
            });
        }
        if let Some(file) = &self.target.result_dotenv {
            let bytes = self.result_file(jobs, file).await.map_err(missing)?;
            return Ok(mapping::dotenv(&String::from_utf8_lossy(&bytes)));
        }
        let per_job: Map<String, Value> = jobs
            .iter()
            .map(|j| (j.name.clone(), Value::String(j.status.clone())))
            .collect();
        Ok(json!({"status": pipeline.status, "jobs": per_job}))
    }

    /// The failing jobs and the tail of the first one's trace.
    async fn failure(&self, jobs: &[Job]) -> EngineFailure {
        let failed: Vec<&Job> = jobs
            .iter()
            .filter(|j| j.status == "failed" && !j.allow_failure)
            .collect();
        let Some(first) = failed.iter().min_by_key(|j| j.id) else {
            return EngineFailure {
                error: "pipeline failed".into(),
                cause: None,
            };
        };
        let names: Vec<&str> = failed.iter().map(|j| j.name.as_str()).collect();
        let reason = first.failure_reason.as_deref().unwrap_or("failed");
        let error = format!("job {} failed ({reason})", names.join(", "));
        let cause = match self.api.trace(first.id).await {
            Ok(trace) => Some(format!(
                "trace of job {}:\n{}",
                first.name,
                mapping::trace_tail(&trace, self.target.trace_tail_lines)
            )),
            Err(e) => Some(format!(
                "the trace of job {} could not be read: {e}",
                first.name
            )),
        };
        EngineFailure { error, cause }
    }

    fn status_message(pipeline: &Pipeline, jobs: &[Job]) -> Option<String> {
        let running: Vec<&Job> = jobs.iter().filter(|j| j.status == "running").collect();
        if let Some(first) = running.first() {
            let names: Vec<&str> = running.iter().map(|j| j.name.as_str()).collect();
            return Some(format!(
                "stage {}: running {}",
                first.stage,
                names.join(", ")
            ));
        }
        let manual: Vec<&str> = jobs
            .iter()
            .filter(|j| j.status == "manual" && !j.allow_failure)
            .map(|j| j.name.as_str())
            .collect();
        if pipeline.status == "manual" && !manual.is_empty() {
            return Some(format!("waiting for manual job {}", manual.join(", ")));
        }
        let pending: Vec<&str> = jobs
            .iter()
            .filter(|j| j.status == "pending")
            .map(|j| j.name.as_str())
            .collect();
        (!pending.is_empty()).then(|| format!("pending {}", pending.join(", ")))
    }
}

#[async_trait]
impl Engine for GitLabEngine {
    fn kind(&self) -> &'static str {
        KIND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::all()
    }

    fn pacing(&self) -> Option<Duration> {
        let limits = self.api.http.rate_limits();
        match (limits.blocked_for(), limits.pacing()) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        }
    }

    async fn start(&self, request: StartRequest) -> Result<Started, EngineError> {
        let empty = Map::new();
        let args = request.arguments.as_object().unwrap_or(&empty);
        let git_ref = mapping::render(&self.target.git_ref, args)
            .map_err(|n| Self::invalid(format!("ref needs the argument {n}")))?;
        let inputs = match &self.target.inputs {
            Some(t) => Some(
                t.iter()
                    .map(|(k, v)| {
                        mapping::render_value(v, args)
                            .map(|v| (k.clone(), v))
                            .map_err(|n| Self::invalid(format!("input {k} needs the argument {n}")))
                    })
                    .collect::<Result<Map<String, Value>, _>>()?,
            ),
            None => None,
        };
        let mut variables = mapping::variables(
            self.target.variables.as_ref(),
            self.target.inputs.is_none(),
            args,
        )
        .map_err(Self::invalid)?;
        variables.retain(|(k, _)| !k.starts_with("FLOWGATE_"));
        variables.push((KEY_VAR.into(), request.idempotency_key.to_string()));
        variables.push((PRINCIPAL_VAR.into(), request.principal_tag.clone()));
        variables.push((TOOL_VAR.into(), request.tool.clone()));

        // Exactly once: an earlier attempt of this call may have created the pipeline and
        // lost the answer; find it before creating another.
        if let Some(p) = self
            .find_by_key(&git_ref, request.idempotency_key.as_str())
            .await?
        {
            return Ok(Started {
                execution: ExecutionRef(p.id.to_string()),
                created_at: p.created_at,
            });
        }
        let p = self
            .api
            .create(
                &git_ref,
                &variables,
                inputs.as_ref(),
                self.trigger_token.as_ref(),
            )
            .await
            .map_err(|e| match e {
                // GitLab answers 404 alike for a missing project, one the token cannot see,
                // and a wrong trigger token: for a start that is a permission problem, not a
                // missing task.
                EngineError::NotFound { what, .. } => EngineError::Denied {
                    engine: KIND,
                    message: format!(
                        "{what} (the project {} does not exist or the token cannot run its pipelines)",
                        self.target.project
                    ),
                },
                other => other,
            })?;
        Ok(Started {
            execution: ExecutionRef(p.id.to_string()),
            created_at: p.created_at,
        })
    }

    async fn get(&self, execution: &ExecutionRef) -> Result<ExecutionRecord, EngineError> {
        let id = Self::pipeline_id(execution)?;
        self.api.http.rate_limits().note_poll(&execution.0);
        let pipeline = self.api.pipeline(id).await?;
        let jobs = self.api.jobs(id).await?;
        let mut state = mapping::state(&pipeline.status);
        let mut record = ExecutionRecord::new(state, pipeline.status.clone(), pipeline.created_at);
        record.updated_at = pipeline
            .updated_at
            .unwrap_or(pipeline.created_at)
            .max(pipeline.created_at);
        record.console_url = pipeline.web_url.clone();
        record.status_message = Self::status_message(&pipeline, &jobs);
        match state {
            TaskState::Working => {
                record.input_requests = self
                    .questions(&jobs)
                    .into_iter()
                    .map(|(job, q)| InputRequest {
                        key: format!("job-{}", job.id),
                        message: q.message.clone(),
                        requested_schema: q.requested_schema.clone(),
                    })
                    .collect();
                if !record.input_requests.is_empty() {
                    state = TaskState::InputRequired;
                }
            }
            TaskState::Completed => match self.output(&pipeline, &jobs).await {
                Ok(output) => record.output = Some(output),
                Err(failure) => {
                    state = TaskState::Failed;
                    record.failure = Some(failure);
                }
            },
            TaskState::Failed => record.failure = Some(self.failure(&jobs).await),
            _ => {}
        }
        record.state = state;
        Ok(record)
    }

    async fn respond(
        &self,
        execution: &ExecutionRef,
        key: &str,
        response: InputResponse,
    ) -> Result<(), EngineError> {
        let id = Self::pipeline_id(execution)?;
        let not_asked = || EngineError::NotFound {
            engine: KIND,
            what: format!("question {key} (not, or no longer, asked)"),
        };
        let job_id: u64 = key
            .strip_prefix("job-")
            .and_then(|n| n.parse().ok())
            .ok_or_else(not_asked)?;
        let jobs = self.api.jobs(id).await?;
        let (job, question) = self
            .questions(&jobs)
            .into_iter()
            .find(|(j, _)| j.id == job_id)
            .ok_or_else(not_asked)?;
        match response.action {
            Action::Accept => {
                let content = response.content.unwrap_or(Value::Null);
                let fields = content.as_object().cloned().unwrap_or_default();
                let mut vars = Vec::new();
                for (field, value) in &fields {
                    let name = match question.variables.get(field) {
                        Some(v) => v.clone(),
                        None if question.variables.is_empty() => field.clone(),
                        None => continue,
                    };
                    if !crate::config::valid_variable(&name) {
                        return Err(Self::invalid(format!(
                            "answer field {field:?} cannot be a GitLab variable name; map it under questions.{}.variables",
                            job.name
                        )));
                    }
                    let text = match value {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    vars.push((name, text));
                }
                match self.api.play(job.id, &vars).await {
                    // Played by someone else in between: the question is gone.
                    Err(EngineError::InvalidInput { .. }) => Err(not_asked()),
                    other => other,
                }
            }
            Action::Decline | Action::Cancel => match question.on_decline {
                OnDecline::Cancel => self.api.cancel(id).await,
            },
        }
    }

    async fn cancel(&self, execution: &ExecutionRef) -> Result<(), EngineError> {
        let id = Self::pipeline_id(execution)?;
        self.api.cancel(id).await
    }

    async fn list(&self, filter: ListFilter) -> Result<Vec<ExecutionSummary>, EngineError> {
        let since = Utc::now() - chrono::Duration::days(30);
        let limit = filter.limit.unwrap_or(LIST_SCAN).min(LIST_SCAN);
        let mut out = Vec::new();
        for p in self.api.recent(None, since, LIST_SCAN).await? {
            if out.len() >= limit {
                break;
            }
            let vars = self.api.variables(p.id).await?;
            let ours = vars.iter().any(|v| v.key == KEY_VAR);
            let principal = vars
                .iter()
                .find(|v| v.key == PRINCIPAL_VAR)
                .and_then(|v| v.value.as_deref());
            let wanted = filter
                .principal_tag
                .as_deref()
                .is_none_or(|d| principal == Some(d));
            if ours && wanted {
                out.push(ExecutionSummary {
                    execution: ExecutionRef(p.id.to_string()),
                    state: mapping::state(&p.status),
                    created_at: p.created_at,
                });
            }
        }
        Ok(out)
    }
}
