//! The [`Engine`] implementation over Airflow's DAG runs, task instances and
//! human-in-the-loop details.

use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use flowgate_core::{
    Action, Capabilities, Engine, EngineError, EngineFailure, ExecutionRecord, ExecutionRef,
    ExecutionSummary, InputRequest, InputResponse, ListFilter, StartRequest, Started, TaskState,
};
use flowgate_http::{HttpClient, HttpConfig, Secret};
use serde_json::{Map, Value, json};

use crate::api::{Api, Credentials, DagRun, HitlDetail, TaskInstance, status_of};
use crate::{AirflowTarget, KIND, mapping};
use flowgate_core::finished::Finished;

/// How many recent runs `list` looks at.
const LIST_SCAN: usize = 100;

/// Task instance states in which a human-in-the-loop step waits for its answer (Airflow 3.3
/// parks it in `awaiting_input`; 3.1 and 3.2 defer it to the triggerer).
const WAITING: [&str; 2] = ["awaiting_input", "deferred"];

fn secret(name: &str) -> Option<Secret> {
    std::env::var(name)
        .ok()
        .filter(|v| !v.is_empty())
        .map(Secret::new)
}

/// The Airflow engine bound to one tool's DAG.
#[derive(Debug)]
pub struct AirflowEngine {
    target: AirflowTarget,
    api: Api,
    /// Records of runs that ended: their answer is final.
    finished: Finished<String>,
}

impl AirflowEngine {
    /// An engine for `target`, with the credentials from the environment variables it names
    /// (read now; missing ones are reported on the first call, so `flowgate check` works
    /// without).
    ///
    /// # Errors
    /// `Unavailable` when the HTTP client cannot be built.
    pub fn new(target: AirflowTarget) -> Result<Self, EngineError> {
        Self::with_config(target, &HttpConfig::default())
    }

    /// As [`AirflowEngine::new`] with other deadlines.
    ///
    /// # Errors
    /// As [`AirflowEngine::new`].
    pub fn with_config(target: AirflowTarget, config: &HttpConfig) -> Result<Self, EngineError> {
        let credentials = match (
            secret(&target.token_env),
            secret(&target.username_env),
            secret(&target.password_env),
        ) {
            (Some(token), _, _) => Credentials::Token(token),
            (None, Some(username), Some(password)) => Credentials::Password { username, password },
            _ => Credentials::Missing(format!(
                "no Airflow credentials: set {} (a token), or {} and {}",
                target.token_env, target.username_env, target.password_env
            )),
        };
        Self::with_credentials(target, config, credentials)
    }

    /// An engine that exchanges `username` and `password` for tokens at `/auth/token`.
    ///
    /// # Errors
    /// As [`AirflowEngine::new`].
    pub fn with_password(
        target: AirflowTarget,
        config: &HttpConfig,
        username: Secret,
        password: Secret,
    ) -> Result<Self, EngineError> {
        Self::with_credentials(target, config, Credentials::Password { username, password })
    }

    /// An engine that sends `token` as it is.
    ///
    /// # Errors
    /// As [`AirflowEngine::new`].
    pub fn with_token(
        target: AirflowTarget,
        config: &HttpConfig,
        token: Secret,
    ) -> Result<Self, EngineError> {
        Self::with_credentials(target, config, Credentials::Token(token))
    }

    fn with_credentials(
        target: AirflowTarget,
        config: &HttpConfig,
        credentials: Credentials,
    ) -> Result<Self, EngineError> {
        let api = Api::new(
            HttpClient::new(KIND, config)?,
            target.base_url.clone(),
            target.dag_url(),
            credentials,
        );
        Ok(AirflowEngine {
            target,
            api,
            finished: Finished::default(),
        })
    }

    /// The run id of a reference this engine issued; anything else is not found.
    fn run_id(execution: &ExecutionRef) -> Result<&str, EngineError> {
        if mapping::is_run_id(&execution.0) {
            Ok(&execution.0)
        } else {
            Err(EngineError::NotFound {
                engine: KIND,
                what: "a DAG run flowgate did not start".into(),
            })
        }
    }

    fn setup(message: String) -> EngineError {
        EngineError::Misconfigured {
            engine: KIND,
            message,
        }
    }

    /// Why Airflow refused to trigger the run, as the error the caller can act on.
    async fn refused(&self, e: EngineError) -> EngineError {
        match status_of(&e) {
            // The DAG is not there: say which file failed to import, if one did.
            Some(404) => {
                let errors = self.api.import_errors().await.unwrap_or_default();
                let broken: Vec<String> = errors
                    .iter()
                    .map(|i| {
                        let last = i.stack_trace.trim().lines().last().unwrap_or("").trim();
                        format!("{}: {last}", i.filename)
                    })
                    .collect();
                Self::setup(if broken.is_empty() {
                    format!(
                        "Airflow has no DAG {} (or the token's user cannot see it)",
                        self.target.dag_id
                    )
                } else {
                    format!(
                        "Airflow has no DAG {}; DAG files it cannot import: {}",
                        self.target.dag_id,
                        broken.join("; ")
                    )
                })
            }
            // Airflow checks conf against the DAG's params: that is the arguments' fault.
            Some(400 | 422) => e,
            _ => e,
        }
    }

    fn status_message(tasks: &[TaskInstance]) -> Option<String> {
        let named = |states: &[&str]| -> Vec<&str> {
            tasks
                .iter()
                .filter(|t| states.contains(&t.state()))
                .map(|t| t.task_id.as_str())
                .collect()
        };
        for (states, says) in [
            (&["running"][..], "running"),
            (&WAITING[..], "waiting for an answer at"),
            (&["up_for_retry"][..], "retrying"),
            (&["up_for_reschedule"][..], "waiting to reschedule"),
            (&["queued", "scheduled"][..], "queued"),
        ] {
            let names = named(states);
            if !names.is_empty() {
                return Some(format!("{says} {}", names.join(", ")));
            }
        }
        None
    }

    /// The steps of `details` that wait for an answer now.
    fn waiting(details: &[HitlDetail]) -> impl Iterator<Item = &HitlDetail> {
        details
            .iter()
            .filter(|d| !d.response_received && WAITING.contains(&d.task_instance.state()))
    }

    /// The result of a successful run, or the failure that there is none (the result task was
    /// skipped because a step was rejected, or left nothing).
    async fn output(
        &self,
        run: &str,
        tasks: &[TaskInstance],
    ) -> Result<Result<Value, EngineFailure>, EngineError> {
        let Some(task) = &self.target.result_task else {
            let per_task: Map<String, Value> = tasks
                .iter()
                .map(|t| (t.task_id.clone(), Value::String(t.state().to_owned())))
                .collect();
            return Ok(Ok(json!({"state": "success", "tasks": per_task})));
        };
        match self.api.xcom(run, task, &self.target.result_key).await {
            Ok(v) => Ok(Ok(v)),
            Err(EngineError::NotFound { .. }) => {
                let state = tasks
                    .iter()
                    .find(|t| &t.task_id == task)
                    .map_or("absent", TaskInstance::state);
                if state == "skipped" {
                    let (details, _) = self.api.hitl(run).await?;
                    if let Some(rejected) = details.iter().find(|d| {
                        d.chosen_options
                            .as_ref()
                            .is_some_and(|c| c.contains(&self.target.decline_option))
                    }) {
                        return Ok(Err(Self::rejection(rejected, &self.target.decline_option)));
                    }
                }
                Ok(Err(EngineFailure {
                    error: "result missing".into(),
                    cause: Some(format!(
                        "task {task} ({state}) left no XCom {}",
                        self.target.result_key
                    )),
                }))
            }
            Err(other) => Err(other),
        }
    }

    /// A step answered with the decline option (through flowgate, Airflow's UI, or its
    /// timeout default).
    fn rejection(d: &HitlDetail, option: &str) -> EngineFailure {
        let who = match d.responded_by_user.as_ref() {
            Some(u) => u
                .get("name")
                .or_else(|| u.get("id"))
                .and_then(Value::as_str)
                .map_or_else(|| u.to_string(), |s| format!("by {s}")),
            None => "by its timeout default".to_owned(),
        };
        EngineFailure {
            error: format!("{} was answered {option}", d.task_instance.task_id),
            cause: Some(format!("{}: {option} {who}", d.subject)),
        }
    }

    /// The failing task, its exception and the end of its log.
    async fn failure(
        &self,
        run: &DagRun,
        tasks: &[TaskInstance],
    ) -> Result<EngineFailure, EngineError> {
        let failed: Vec<&TaskInstance> = tasks.iter().filter(|t| t.state() == "failed").collect();
        let Some(first) = failed
            .iter()
            .min_by_key(|t| t.end_date.unwrap_or(DateTime::<Utc>::MAX_UTC))
        else {
            // No task failed: the scheduler failed the run for outliving its dagrun_timeout
            // (and skipped what had not finished), or someone marked it failed.
            if run.note.is_none()
                && let (Some(start), Some(end)) = (run.start_date, run.end_date)
                && let Some(timeout) = self
                    .api
                    .run_timeout()
                    .await?
                    .as_deref()
                    .and_then(mapping::duration)
                && (end - start).to_std().unwrap_or_default() >= timeout
            {
                let stopped: Vec<&str> = tasks
                    .iter()
                    .filter(|t| t.state() == "skipped")
                    .map(|t| t.task_id.as_str())
                    .collect();
                return Ok(EngineFailure {
                    error: format!(
                        "the run exceeded its dagrun_timeout of {} s",
                        timeout.as_secs_f64()
                    ),
                    cause: Some(format!(
                        "Airflow failed the run and stopped its unfinished tasks ({})",
                        if stopped.is_empty() {
                            "none".to_owned()
                        } else {
                            stopped.join(", ")
                        }
                    )),
                });
            }
            return Ok(EngineFailure {
                error: "DAG run failed".into(),
                cause: Some(match run.note.as_deref() {
                    Some(note) => format!("no task failed; the run's note: {note}"),
                    None => {
                        "no task failed (marked failed in Airflow, or the run timed out)".into()
                    }
                }),
            });
        };
        let names: Vec<&str> = failed.iter().map(|t| t.task_id.as_str()).collect();
        let log = self.api.log(&run.dag_run_id, first).await?;
        let exception = mapping::exception(&log);
        let error = match &exception {
            Some(e) => format!("task {} failed: {e}", first.task_id),
            None => format!("task {} failed", names.join(", ")),
        };
        Ok(EngineFailure {
            error,
            cause: Some(format!(
                "log of task {} (try {}):\n{}",
                first.task_id,
                first.try_number,
                mapping::log_tail(&log, self.target.log_tail_lines)
            )),
        })
    }

    /// Holds an answer back until the step has waited `answer_guard_ms` by Airflow's clock
    /// (its `Date` header against the step's `created_at`; without a `Date`, by this clock),
    /// never longer than the guard itself.
    async fn guard(&self, d: &HitlDetail, airflow_now: Option<SystemTime>) {
        let guard = Duration::from_millis(self.target.answer_guard_ms);
        let now: DateTime<Utc> = airflow_now.map_or_else(Utc::now, DateTime::<Utc>::from);
        let waited = (now - d.created_at).to_std().unwrap_or(Duration::ZERO);
        if let Some(rest) = guard.checked_sub(waited).filter(|r| !r.is_zero()) {
            tracing::debug!(
                task = %d.task_instance.task_id,
                wait_ms = rest.as_millis() as u64,
                "holding an answer back: the step started waiting moments ago"
            );
            tokio::time::sleep(rest.min(guard)).await;
        }
    }

    fn not_asked(key: &str) -> EngineError {
        EngineError::NotFound {
            engine: KIND,
            what: format!("question {key} (not, or no longer, asked)"),
        }
    }

    /// The state a listed run is in (failed refined by flowgate's note).
    fn listed_state(run: &DagRun) -> TaskState {
        match (mapping::state(&run.state), run.note.as_deref()) {
            (TaskState::Failed, Some(mapping::CANCELLED_NOTE)) => TaskState::Cancelled,
            (state, _) => state,
        }
    }

    /// One poll of the DAG run `id`: its state, its tasks' progress, and at its end the outcome.
    async fn read(&self, id: &str) -> Result<ExecutionRecord, EngineError> {
        let run = self.api.run(id).await?;
        let mut state = mapping::state(&run.state);
        let created_at = run.created_at();
        let mut record = ExecutionRecord::new(state, run.state.clone(), created_at);
        record.updated_at = run
            .end_date
            .or(run.start_date)
            .unwrap_or(created_at)
            .max(created_at);
        record.console_url = Some(format!(
            "{}/dags/{}/runs/{id}",
            self.target.base_url, self.target.dag_id
        ));
        match state {
            TaskState::Submitted => {
                let paused = self.api.dag().await?.is_paused;
                record.status_message = paused.then(|| {
                    format!(
                        "the DAG {} is paused in Airflow: the run waits until someone unpauses it",
                        self.target.dag_id
                    )
                });
            }
            TaskState::Working => {
                let tasks = self.api.tasks(id).await?;
                record.status_message = Self::status_message(&tasks);
                if tasks.iter().any(|t| WAITING.contains(&t.state())) {
                    let (details, _) = self.api.hitl(id).await?;
                    record.input_requests = Self::waiting(&details)
                        .map(|d| InputRequest {
                            key: mapping::question_key(d),
                            message: mapping::message(d),
                            requested_schema: mapping::form(d, &self.target.decline_option),
                        })
                        .collect();
                    if !record.input_requests.is_empty() {
                        state = TaskState::InputRequired;
                    }
                }
            }
            TaskState::Completed => {
                let tasks = self.api.tasks(id).await?;
                match self.output(id, &tasks).await? {
                    Ok(output) => record.output = Some(output),
                    Err(failure) => {
                        state = TaskState::Failed;
                        record.failure = Some(failure);
                    }
                }
            }
            TaskState::Failed => match run.note.as_deref() {
                Some(mapping::CANCELLED_NOTE) => state = TaskState::Cancelled,
                Some(note) if note.starts_with(mapping::DECLINED_NOTE) => {
                    let step = &note[mapping::DECLINED_NOTE.len()..];
                    record.failure = Some(EngineFailure {
                        error: format!("the question of {step} was declined"),
                        cause: Some(
                            "declined through flowgate; the run was marked failed for it".into(),
                        ),
                    });
                }
                _ => {
                    let tasks = self.api.tasks(id).await?;
                    record.failure = Some(self.failure(&run, &tasks).await?);
                }
            },
            _ => {}
        }
        record.state = state;
        self.finished.keep(id.to_owned(), &record);
        Ok(record)
    }
}

#[async_trait]
impl Engine for AirflowEngine {
    fn kind(&self) -> &'static str {
        KIND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::all()
    }

    /// The DAG, on its Airflow: a run id is unique there.
    fn reference_scope(&self) -> String {
        format!("{}/dags/{}", self.target.base_url, self.target.dag_id)
    }

    /// The call key in the run id (`flowgate-` is the same in every run flowgate starts): 32
    /// hex digits pack into 16 bytes, where the whole id would take 31.
    fn locator<'a>(&self, execution: &'a ExecutionRef) -> Option<&'a str> {
        if mapping::is_run_id(&execution.0) {
            execution.0.strip_prefix(mapping::RUN_PREFIX)
        } else {
            None
        }
    }

    fn reference_at(&self, locator: &str) -> ExecutionRef {
        ExecutionRef(format!("{}{locator}", mapping::RUN_PREFIX))
    }

    /// What the rate limits seen allow (`RateLimits::pacing` already waits out a pause the
    /// engine asked for).
    fn pacing(&self) -> Option<Duration> {
        self.api.http.rate_limits().pacing()
    }

    /// The run id follows from the call's key alone.
    fn execution_for(&self, request: &StartRequest) -> Option<ExecutionRef> {
        Some(ExecutionRef(mapping::run_id(
            request.idempotency_key.as_str(),
        )))
    }

    async fn start(&self, request: StartRequest) -> Result<Started, EngineError> {
        let key = request.idempotency_key.as_str();
        let run = mapping::run_id(key);
        let conf = mapping::conf(
            self.target.conf.as_ref(),
            &request.arguments,
            key,
            &request.principal_tag,
        );
        match self.api.trigger(&run, &conf).await {
            Ok(r) => Ok(Started {
                created_at: r.created_at(),
                execution: ExecutionRef(r.dag_run_id),
            }),
            // The id is taken: by an earlier attempt of this call (its answer was lost), or,
            // since Airflow does not compare conf, by someone else's run of that name.
            Err(e) if status_of(&e) == Some(409) => {
                let found = self.api.run(&run).await?;
                match mapping::marker(found.conf.as_ref()) {
                    Some((k, _)) if k == key => Ok(Started {
                        execution: ExecutionRef(found.dag_run_id.clone()),
                        created_at: found.created_at(),
                    }),
                    _ => Err(Self::setup(format!(
                        "DAG {} already has a run {run} that flowgate did not start for this call",
                        self.target.dag_id
                    ))),
                }
            }
            Err(e) => Err(self.refused(e).await),
        }
    }

    async fn get(&self, execution: &ExecutionRef) -> Result<ExecutionRecord, EngineError> {
        let id = Self::run_id(execution)?;
        if let Some(record) = self.finished.get(id) {
            return Ok(record);
        }
        let limits = self.api.http.rate_limits();
        limits.polling(id, self.read(id)).await
    }

    async fn respond(
        &self,
        execution: &ExecutionRef,
        key: &str,
        response: InputResponse,
    ) -> Result<(), EngineError> {
        let id = Self::run_id(execution)?;
        let (task, map_index, try_number) =
            mapping::parse_question_key(key).ok_or_else(|| Self::not_asked(key))?;
        let (details, airflow_now) = self.api.hitl(id).await?;
        let step = Self::waiting(&details)
            .find(|d| {
                let ti = &d.task_instance;
                ti.task_id == task && ti.map_index == map_index && ti.try_number == try_number
            })
            .ok_or_else(|| Self::not_asked(key))?;
        let decline = &self.target.decline_option;
        let (chosen, params) = match response.action {
            Action::Accept => {
                let content = response.content.unwrap_or(Value::Null);
                let fields = content.as_object().cloned().unwrap_or_default();
                mapping::answer(step, decline, &fields).map_err(|message| {
                    EngineError::InvalidInput {
                        engine: KIND,
                        message,
                    }
                })?
            }
            Action::Decline | Action::Cancel if step.options.contains(decline) => {
                (vec![decline.clone()], mapping::default_params(step))
            }
            // A step that offers no way to say no: the run is failed for it, and the note
            // says why to whoever reads it (in Airflow, or another flowgate).
            Action::Decline | Action::Cancel => {
                let note = format!("{}{task}", mapping::DECLINED_NOTE);
                return self.api.fail_run(id, &note).await;
            }
        };
        self.guard(step, airflow_now).await;
        match self.api.answer(id, task, map_index, &chosen, &params).await {
            // Answered in between (Airflow's UI, another flowgate): the question is gone.
            Err(e) if status_of(&e) == Some(409) => Err(Self::not_asked(key)),
            other => other,
        }
    }

    async fn cancel(&self, execution: &ExecutionRef) -> Result<(), EngineError> {
        let id = Self::run_id(execution)?;
        let run = self.api.run(id).await?;
        if mapping::state(&run.state).is_terminal() {
            return Ok(());
        }
        self.api.fail_run(id, mapping::CANCELLED_NOTE).await
    }

    async fn list(&self, filter: ListFilter) -> Result<Vec<ExecutionSummary>, EngineError> {
        let limit = filter.limit.unwrap_or(LIST_SCAN).min(LIST_SCAN);
        let tag = filter.principal_tag.as_deref();
        let runs = self.api.runs(mapping::RUN_PREFIX, LIST_SCAN).await?;
        Ok(runs
            .iter()
            .filter(|r| mapping::is_run_id(&r.dag_run_id))
            .filter_map(|r| Some((r, mapping::marker(r.conf.as_ref())?)))
            .filter(|(_, (_, principal))| tag.is_none_or(|t| t == *principal))
            .take(limit)
            .map(|(r, _)| ExecutionSummary {
                execution: ExecutionRef(r.dag_run_id.clone()),
                state: Self::listed_state(r),
                created_at: r.created_at(),
            })
            .collect())
    }
}

#[cfg(test)]
mod task_ids {
    use super::*;
    use flowgate_core::IdempotencyKey;

    /// A run id is `flowgate-` and the call's 32 hex digits within the DAG (the Airflow URL
    /// and the DAG id, up to Airflow's 250 characters, are the tool's scope).
    #[test]
    fn the_longest_run_id_gets_a_task_id_a_client_takes() {
        let dag = "d".repeat(250);
        let config = json!({"base_url": "https://airflow.example.internal:8080", "dag_id": dag});
        let target = AirflowTarget::from_config(
            config.as_object().expect("object"),
            json!({"type": "object"}).as_object().expect("object"),
        )
        .expect("target");
        let engine = AirflowEngine::with_token(target, &HttpConfig::default(), Secret::new("t"))
            .expect("engine");
        let request = StartRequest {
            tool: "t".into(),
            arguments: json!({}),
            principal_tag: "p".into(),
            idempotency_key: IdempotencyKey::parse("ffffffffffffffffffffffffffffffff")
                .expect("key"),
            ttl_ms: None,
        };
        let execution = engine.execution_for(&request).expect("a run id");
        let locator = engine.locator(&execution).expect("a run flowgate starts");
        assert_eq!(engine.reference_at(locator), execution);
        assert_eq!(
            flowgate_core::handle::packed_len(locator),
            17,
            "hex, packed"
        );
        let length = flowgate_core::handle::task_id_fits(locator).expect("fits");
        assert!(length <= flowgate_core::handle::ID_MAX, "{length}");
        assert!(engine.reference_scope().ends_with(&dag));
        assert!(
            engine
                .locator(&ExecutionRef("manual__2026-12-07".into()))
                .is_none()
        );
    }

    #[test]
    fn credentials_never_print() {
        let config = json!({"base_url": "http://af", "dag_id": "d"});
        let target = AirflowTarget::from_config(
            config.as_object().expect("object"),
            &serde_json::Map::new(),
        )
        .expect("target");
        let engine = AirflowEngine::with_password(
            target,
            &HttpConfig::default(),
            Secret::new("the-user"),
            Secret::new("hunter2-password"),
        )
        .expect("engine");
        let shown = format!("{engine:?}");
        assert!(
            !shown.contains("hunter2") && !shown.contains("the-user"),
            "{shown}"
        );
    }
}
