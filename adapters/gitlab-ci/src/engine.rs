//! The [`Engine`] implementation over GitLab's pipelines and jobs API.

use std::sync::OnceLock;
use std::time::Duration;

use async_trait::async_trait;
use chrono::Utc;
use flowgate_core::{
    Action, Capabilities, Engine, EngineError, EngineFailure, ExecutionRecord, ExecutionRef,
    ExecutionSummary, InputRequest, InputResponse, ListFilter, StartRequest, Started, TaskState,
};
use flowgate_http::{HttpClient, HttpConfig, Secret};
use serde_json::{Map, Value, json};

use crate::api::{Api, Job, NewPipeline, Pipeline, Play};
use crate::{GitLabTarget, KIND, OnDecline, Question, ResultFile, mapping, naming, trace};
use flowgate_core::finished::Finished;

/// How many recent pipelines `list` looks at.
const LIST_SCAN: usize = 100;

/// What GitLab says when it refuses a pipeline because of a call's arguments (an input's value,
/// the ref, rules that leave nothing to run for them), as opposed to its configuration.
const ARGUMENT_REFUSALS: [&str; 4] = [
    "` input: ",
    "Reference not found",
    "Pipeline filtered out by workflow rules",
    "Pipeline will not run for the selected trigger",
];

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
    /// Records of pipelines that ended: their answer is final.
    finished: Finished<u64>,
    /// The token's GitLab username, once asked (for recording who declined).
    username: OnceLock<String>,
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
            user_url: target.user_url(),
            token,
            bearer: target.token_kind == crate::TokenKind::Bearer,
            token_env: target.token_env.clone(),
        };
        let trigger_token = target.trigger_token_env.as_deref().and_then(secret);
        Ok(GitLabEngine {
            target,
            api,
            trigger_token,
            finished: Finished::default(),
            username: OnceLock::new(),
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

    /// A problem with the tool's setup that only an operator can fix.
    fn setup(message: String) -> EngineError {
        EngineError::Misconfigured {
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

    /// The pipeline inputs of a call: the manifest's templates (an input whose argument the
    /// call leaves out, without a schema default, is not sent: the input's own default
    /// applies), or (without `inputs` and `variables`) every argument under its own name; and
    /// the call's name in the key input.
    fn inputs(&self, args: &Value, name: &str) -> Result<Map<String, Value>, EngineError> {
        let mut out = Map::new();
        match (&self.target.inputs, &self.target.variables) {
            (Some(templates), _) => {
                for (k, t) in templates {
                    if let Some(value) = t.render_value(args) {
                        out.insert(k.clone(), value);
                    }
                }
            }
            (None, None) => {
                let empty = Map::new();
                let given = args.as_object().unwrap_or(&empty);
                for (k, v) in given.iter().filter(|(_, v)| !v.is_null()) {
                    if !crate::config::valid_input(k) {
                        return Err(Self::setup(format!(
                            "argument {k:?} cannot be a GitLab input name (letters, digits, _ and -); map it under target.inputs"
                        )));
                    }
                    out.insert(k.clone(), v.clone());
                }
            }
            (None, Some(_)) => {}
        }
        if self.target.key_variable.is_none() {
            out.insert(
                self.target.key_input.clone(),
                Value::String(name.to_owned()),
            );
        }
        Ok(out)
    }

    /// The pipeline an earlier attempt of this call created, if any: GitLab looks it up by
    /// name (one request, however many pipelines the project has).
    async fn find(&self, git_ref: &str, name: &str) -> Result<Option<Pipeline>, EngineError> {
        let since = Utc::now()
            - chrono::Duration::seconds(self.target.dedupe_window_s.min(86_400 * 30) as i64);
        let found = self.api.named(name, git_ref, since).await?;
        // A GitLab older than 16.9 ignores `name` and lists every pipeline: only an exact
        // match is this call's.
        Ok(found.into_iter().find(|p| p.name.as_deref() == Some(name)))
    }

    /// Why GitLab refused to create the pipeline, as the error the caller can act on.
    fn refused(&self, e: EngineError) -> EngineError {
        match e {
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
            EngineError::InvalidInput { message, .. }
                if message.contains("Insufficient permissions to set pipeline variables") =>
            {
                Self::setup(format!(
                    "{message}: the project {} restricts pipeline variables (Settings > CI/CD > Variables > \
                     Minimum role to use pipeline variables, ci_pipeline_variables_minimum_override_role) and this \
                     tool sends some (target.variables or key_variable); carry them as spec:inputs, or let the \
                     token's role set pipeline variables",
                    self.target.project
                ))
            }
            EngineError::InvalidInput { message, .. }
                if message.contains("unknown input arguments")
                    || message.contains("Given inputs not defined") =>
            {
                Self::setup(format!(
                    "{message}: the pipeline of {} does not declare these inputs under spec:inputs \
                     (the call's name travels as input {}; workflow:name must be $[[ inputs.{} ]])",
                    self.target.project, self.target.key_input, self.target.key_input
                ))
            }
            // What comes from the arguments: an input's value, a ref, rules that exclude
            // this call.
            EngineError::InvalidInput { message, .. }
                if ARGUMENT_REFUSALS.iter().any(|m| message.contains(m)) =>
            {
                Self::invalid(message)
            }
            // Anything else GitLab refuses to create is its configuration's fault.
            EngineError::InvalidInput { message, .. } => Self::setup(format!(
                "GitLab cannot create a pipeline from the configuration of {}: {message}",
                self.target.project
            )),
            other => other,
        }
    }

    /// The blocking manual jobs that are the manifest's questions.
    fn questions<'a>(&self, jobs: &'a [Job]) -> Vec<(&'a Job, &Question)> {
        jobs.iter()
            .filter(|j| j.status == "manual" && !j.allow_failure)
            .filter_map(|j| self.target.questions.get(&j.name).map(|q| (j, q)))
            .collect()
    }

    /// The newest job named `name` (a retried job appears more than once).
    fn job<'a>(jobs: &'a [Job], name: &str) -> Option<&'a Job> {
        jobs.iter().filter(|j| j.name == name).max_by_key(|j| j.id)
    }

    /// A result file: `Ok(Err(failure))` when GitLab says it is not there (the workflow's
    /// outcome); `Err` for a fault reading it (retried, never an answer).
    async fn result_file(
        &self,
        jobs: &[Job],
        file: &ResultFile,
    ) -> Result<Result<Vec<u8>, EngineFailure>, EngineError> {
        let missing = |cause: String| EngineFailure {
            error: "result artifact missing".into(),
            cause: Some(cause),
        };
        let Some(job) = Self::job(jobs, &file.job) else {
            return Ok(Err(missing(format!(
                "the pipeline has no job {}",
                file.job
            ))));
        };
        match self.api.artifact(job.id, &file.path).await {
            Ok(bytes) => Ok(Ok(bytes)),
            Err(EngineError::NotFound { .. }) => {
                let why = match job.artifacts_expire_at {
                    Some(at) if at <= Utc::now() => format!(", whose artifacts expired at {at}"),
                    _ => String::new(),
                };
                Ok(Err(missing(format!(
                    "job {} ({}) has no artifact {}{why}",
                    file.job, job.status, file.path
                ))))
            }
            Err(other) => Err(other),
        }
    }

    /// The result of a successful pipeline, or the workflow failure that there is none.
    async fn output(
        &self,
        pipeline: &Pipeline,
        jobs: &[Job],
    ) -> Result<Result<Value, EngineFailure>, EngineError> {
        if let Some(file) = &self.target.result_artifact {
            let bytes = match self.result_file(jobs, file).await? {
                Ok(bytes) => bytes,
                Err(failure) => return Ok(Err(failure)),
            };
            return Ok(serde_json::from_slice(&bytes).map_err(|e| EngineFailure {
                error: "result artifact is not JSON".into(),
                cause: Some(format!("{} of job {}: {e}", file.path, file.job)),
            }));
        }
        if let Some(file) = &self.target.result_dotenv {
            return Ok(self
                .result_file(jobs, file)
                .await?
                .map(|bytes| mapping::dotenv(&String::from_utf8_lossy(&bytes))));
        }
        let per_job: Map<String, Value> = jobs
            .iter()
            .map(|j| (j.name.clone(), Value::String(j.status.clone())))
            .collect();
        Ok(Ok(json!({"status": pipeline.status, "jobs": per_job})))
    }

    /// The failing jobs and the end of the first one's log.
    async fn failure(
        &self,
        pipeline: &Pipeline,
        jobs: &[Job],
    ) -> Result<EngineFailure, EngineError> {
        let failed: Vec<&Job> = jobs
            .iter()
            .filter(|j| j.status == "failed" && !j.allow_failure)
            .collect();
        let Some(first) = failed.iter().min_by_key(|j| j.id) else {
            return Ok(match &pipeline.yaml_errors {
                Some(errors) => EngineFailure {
                    error: "the pipeline's configuration is invalid".into(),
                    cause: Some(errors.clone()),
                },
                None => EngineFailure {
                    error: "pipeline failed".into(),
                    cause: None,
                },
            });
        };
        let names: Vec<&str> = failed.iter().map(|j| j.name.as_str()).collect();
        let reason = first.failure_reason.as_deref().unwrap_or("failed");
        let error = format!("job {} failed ({reason})", names.join(", "));
        let end = self.api.trace_end(first.id, trace::READ_BYTES).await?;
        let cut = end.len() >= trace::READ_BYTES;
        Ok(EngineFailure {
            error,
            cause: Some(format!(
                "log of job {}:\n{}",
                first.name,
                trace::tail(&end, self.target.trace_tail_lines, cut)
            )),
        })
    }

    /// The failure of a pipeline cancelled because a question was declined.
    fn declined(job: &str, who: &str) -> EngineFailure {
        EngineFailure {
            error: format!("manual job {job} was declined"),
            cause: Some(format!(
                "declined by {who} through flowgate; the pipeline was cancelled for it"
            )),
        }
    }

    fn status_message(pipeline: &Pipeline, jobs: &[Job]) -> Option<String> {
        let named = |status: &str| -> Vec<&str> {
            jobs.iter()
                .filter(|j| j.status == status)
                .map(|j| j.name.as_str())
                .collect()
        };
        if pipeline.status == "canceling" {
            let cleaning = named("canceling");
            return Some(if cleaning.is_empty() {
                "canceling".to_owned()
            } else {
                format!("canceling: after_script of {} runs", cleaning.join(", "))
            });
        }
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
        for (status, says) in [
            ("waiting_for_resource", "waiting for a resource group:"),
            ("preparing", "preparing"),
            ("pending", "pending"),
            ("scheduled", "scheduled"),
        ] {
            let names = named(status);
            if !names.is_empty() {
                return Some(format!("{says} {}", names.join(", ")));
            }
        }
        None
    }

    /// The token's username (asked once).
    async fn username(&self) -> Result<String, EngineError> {
        if let Some(name) = self.username.get() {
            return Ok(name.clone());
        }
        let name = self.api.user().await?.username;
        Ok(self.username.get_or_init(|| name).clone())
    }

    /// What an answer plays the job with: each field as the job input or job variable the
    /// question maps it to (by default a job input of its own name).
    fn play_for(
        question: &Question,
        job: &Job,
        fields: &Map<String, Value>,
    ) -> Result<Play, EngineError> {
        let mut play = Play::default();
        let defaults = question.inputs.is_empty() && question.variables.is_empty();
        for (field, value) in fields {
            if let Some(input) = question.inputs.get(field) {
                play.inputs.insert(input.clone(), value.clone());
            } else if let Some(variable) = question.variables.get(field) {
                play.variables
                    .push((variable.clone(), mapping::unexpanded(&mapping::text(value))));
            } else if defaults {
                if !crate::config::valid_input(field) {
                    return Err(Self::setup(format!(
                        "answer field {field:?} cannot be a GitLab job input name; map it under questions.{}.inputs",
                        job.name
                    )));
                }
                play.inputs.insert(field.clone(), value.clone());
            }
        }
        Ok(play)
    }

    /// One poll of the pipeline `id`: its status and jobs, and at its end the outcome.
    async fn read(&self, id: u64) -> Result<ExecutionRecord, EngineError> {
        let pipeline = self.api.pipeline(id).await?;
        let jobs = self.api.jobs(id).await?;
        let mut state = mapping::state(&pipeline.status);
        // GitLab's composite status goes back to `pending`, `preparing`,
        // `waiting_for_resource` or `scheduled` between jobs; once a job has run the
        // pipeline is working, never submitted again (the job list, read after the pipeline,
        // may be the first to show it).
        let started = pipeline.started_at.is_some()
            || jobs.iter().any(|j| {
                matches!(
                    j.status.as_str(),
                    "running" | "success" | "failed" | "canceling" | "canceled"
                )
            });
        if state == TaskState::Submitted && started {
            state = TaskState::Working;
        }
        let mut record = ExecutionRecord::new(state, pipeline.status.clone(), pipeline.created_at);
        record.updated_at = pipeline
            .updated_at
            .unwrap_or(pipeline.created_at)
            .max(pipeline.created_at);
        record.console_url = pipeline.web_url.clone();
        record.status_message = Self::status_message(&pipeline, &jobs);
        let declined = pipeline
            .name
            .as_deref()
            .and_then(naming::parse)
            .and_then(|m| m.declined);
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
                if !record.input_requests.is_empty() && pipeline.status != "canceling" {
                    state = TaskState::InputRequired;
                } else {
                    record.input_requests.clear();
                }
            }
            TaskState::Completed => match self.output(&pipeline, &jobs).await? {
                Ok(output) => record.output = Some(output),
                Err(failure) => {
                    state = TaskState::Failed;
                    record.failure = Some(failure);
                }
            },
            TaskState::Failed => record.failure = Some(self.failure(&pipeline, &jobs).await?),
            TaskState::Cancelled => {
                if let Some((job, who)) = declined {
                    state = TaskState::Failed;
                    record.failure = Some(Self::declined(job, who));
                }
            }
            _ => {}
        }
        record.state = state;
        self.finished.keep(id, &record);
        Ok(record)
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

    /// The project, on its GitLab: a pipeline's id (its locator, whole) is a number there.
    fn reference_scope(&self) -> String {
        format!("{}/projects/{}", self.target.base_url, self.target.project)
    }

    /// What the rate limits seen allow (`RateLimits::pacing` already waits out a pause the
    /// engine asked for).
    fn pacing(&self) -> Option<Duration> {
        self.api.http.rate_limits().pacing()
    }

    async fn start(&self, request: StartRequest) -> Result<Started, EngineError> {
        let args = &request.arguments;
        let git_ref = self.target.git_ref.render(args).ok_or_else(|| {
            Self::invalid(format!(
                "ref {} needs arguments this call leaves out: {}",
                self.target.git_ref,
                self.target
                    .git_ref
                    .arguments()
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })?;
        let name = naming::call_name(&request);
        let inputs = self.inputs(args, &name)?;
        let mut variables = mapping::variables(self.target.variables.as_ref(), args);
        if let Some(key) = &self.target.key_variable {
            variables.push((key.clone(), name.clone()));
        }

        // Exactly once: an earlier attempt of this call may have created the pipeline and
        // lost the answer; find it by its name before creating another.
        if let Some(p) = self.find(&git_ref, &name).await? {
            return Ok(Started {
                execution: ExecutionRef(p.id.to_string()),
                created_at: p.created_at,
            });
        }
        let new = NewPipeline {
            git_ref,
            inputs,
            variables,
        };
        let p = self
            .api
            .create(&new, self.trigger_token.as_ref())
            .await
            .map_err(|e| self.refused(e))?;
        if p.name.as_deref() != Some(name.as_str()) {
            let carrier = match &self.target.key_variable {
                Some(v) => format!("${v}"),
                None => format!("$[[ inputs.{} ]]", self.target.key_input),
            };
            tracing::warn!(
                project = %self.target.project,
                pipeline = p.id,
                "the pipeline's name is not the call's: its workflow:name must be exactly {carrier}, \
                 or a start retried after a lost answer cannot find it (and starts another)"
            );
        }
        Ok(Started {
            execution: ExecutionRef(p.id.to_string()),
            created_at: p.created_at,
        })
    }

    async fn get(&self, execution: &ExecutionRef) -> Result<ExecutionRecord, EngineError> {
        let id = Self::pipeline_id(execution)?;
        if let Some(record) = self.finished.get(&id) {
            return Ok(record);
        }
        let limits = self.api.http.rate_limits();
        limits.polling(&execution.0, self.read(id)).await
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
                let play = Self::play_for(question, job, &fields)?;
                match self.api.play(job.id, &play).await {
                    // Played by someone else in between: the question is gone.
                    Err(EngineError::InvalidInput { message, .. })
                        if message.contains("Unplayable Job") =>
                    {
                        Err(not_asked())
                    }
                    Err(EngineError::Denied { message, .. }) if !play.variables.is_empty() => {
                        Err(Self::setup(format!(
                            "{message}: playing {} with job variables needs pipeline variables allowed for the \
                             token's role (the project's ci_pipeline_variables_minimum_override_role); map the \
                             answer under questions.{}.inputs as job inputs instead (GitLab 18.10+)",
                            job.name, job.name
                        )))
                    }
                    other => other,
                }
            }
            Action::Decline | Action::Cancel => match question.on_decline {
                OnDecline::Cancel => {
                    // Recorded in GitLab first (any server process reads it there), then the
                    // pipeline is cancelled for it.
                    if response.action == Action::Decline {
                        let pipeline = self.api.pipeline(id).await?;
                        let current = pipeline.name.unwrap_or_default();
                        let who = self.username().await?;
                        let name = naming::declined_name(&current, &job.name, &who);
                        if name != current {
                            self.api.rename(id, &name).await?;
                        }
                    }
                    self.api.cancel(id).await
                }
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
        let tag = filter.principal_tag.as_deref();
        let fixed_ref = self
            .target
            .git_ref
            .is_fixed()
            .then(|| self.target.git_ref.source());
        let mut out = Vec::new();
        for p in self.api.recent(fixed_ref, since, LIST_SCAN).await? {
            if out.len() >= limit {
                break;
            }
            let Some(marked) = p.name.as_deref().and_then(naming::parse) else {
                continue;
            };
            if tag.is_none_or(|t| t == marked.principal_tag) {
                let mut state = mapping::state(&p.status);
                if state == TaskState::Cancelled && marked.declined.is_some() {
                    state = TaskState::Failed;
                }
                out.push(ExecutionSummary {
                    execution: ExecutionRef(p.id.to_string()),
                    state,
                    created_at: p.created_at,
                });
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod task_ids {
    use super::*;
    use serde_json::json;

    /// A pipeline is a number within its project (the project's path, up to GitLab's 255
    /// characters of nested groups, is the tool's scope); the largest a reference can hold.
    #[test]
    fn the_longest_pipeline_gets_a_task_id_a_client_takes() {
        let project = format!("{}/p", "group/".repeat(40));
        let config = json!({"project": project, "ref": "main"});
        let target = GitLabTarget::from_config(
            config.as_object().expect("object"),
            json!({"type": "object"}).as_object().expect("object"),
        )
        .expect("target");
        let engine =
            GitLabEngine::with_token(target, &HttpConfig::default(), None).expect("engine");
        let execution = ExecutionRef(u64::MAX.to_string());
        let locator = engine.locator(&execution).expect("a pipeline");
        assert_eq!(engine.reference_at(locator), execution);
        let length = flowgate_core::handle::task_id_fits(locator).expect("fits");
        assert!(length <= flowgate_core::handle::ID_MAX, "{length}");
        assert!(engine.reference_scope().ends_with(&project));
    }
}
