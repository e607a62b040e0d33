//! The [`Engine`] implementation over the Workflows Executions API.

use async_trait::async_trait;
use flowgate_core::{
    Capabilities, Engine, EngineError, EngineFailure, ExecutionRecord, ExecutionRef,
    ExecutionSummary, InputRequest, InputResponse, ListFilter, StartRequest, Started, TaskState,
};
use google_cloud_workflows_executions_v1::client::Executions;
use google_cloud_workflows_executions_v1::model::{Execution, ExecutionView, execution};
use tokio::sync::OnceCell;

use crate::callbacks::{Auth, Rest};
use crate::config::CredentialsKind;
use crate::error::classify;
use crate::{CallLogLevel, GcwTarget, KIND, mapping};

/// Label keys flowgate puts on the executions it starts.
const TOOL_LABEL: &str = "flowgate-tool";
const PRINCIPAL_LABEL: &str = "flowgate-principal";
/// The call's idempotency key: a start first looks for an execution carrying it, because
/// `executions.create` is not idempotent and a retried call must never create a second.
const CALL_LABEL: &str = "flowgate-call";

/// Connection set-up, per REST call.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);
/// One attempt of one call.
const CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// The most pages one `list` reads.
const MAX_LIST_PAGES: usize = 50;

/// The Workflows engine bound to one tool's workflow.
#[derive(Debug)]
pub struct WorkflowsEngine {
    target: GcwTarget,
    /// Built on first use (credentials may need the metadata server); a cache of clients,
    /// never of task state.
    clients: OnceCell<(Executions, Rest)>,
}

impl WorkflowsEngine {
    /// An engine for `target`; nothing is called until the first operation.
    pub fn new(target: GcwTarget) -> Self {
        WorkflowsEngine {
            target,
            clients: OnceCell::new(),
        }
    }

    async fn clients(&self) -> Result<&(Executions, Rest), EngineError> {
        self.clients.get_or_try_init(|| build(&self.target)).await
    }

    fn what(&self, call: &str) -> String {
        format!("{call} on {}", self.target.parent())
    }

    fn check_owned(&self, execution: &ExecutionRef) -> Result<(), EngineError> {
        if self.target.owns(&execution.0) {
            Ok(())
        } else {
            Err(EngineError::NotFound {
                engine: KIND,
                what: "an execution of another workflow".into(),
            })
        }
    }

    /// The execution an earlier attempt of the call with idempotency key `key` created, if any.
    async fn find_call(&self, key: &str) -> Result<Option<Started>, EngineError> {
        let (client, _) = self.clients().await?;
        let page = client
            .list_executions()
            .set_parent(self.target.parent())
            .set_filter(format!(
                "labels.{CALL_LABEL}=\"{}\"",
                mapping::label_value(key)
            ))
            .set_page_size(1)
            .send()
            .await
            .map_err(|e| classify(e, &self.what("executions.list")))?;
        Ok(page.executions.into_iter().next().map(|e| Started {
            created_at: mapping::time(e.start_time.as_ref()).unwrap_or_else(chrono::Utc::now),
            execution: ExecutionRef(e.name),
        }))
    }

    /// The waiting callbacks of a running execution, with what to ask for each.
    async fn waiting(
        &self,
        execution: &ExecutionRef,
        step: Option<&str>,
    ) -> Result<Vec<InputRequest>, EngineError> {
        let (_, rest) = self.clients().await?;
        let spec = self.target.input_for(step);
        Ok(rest
            .list(&execution.0)
            .await?
            .into_iter()
            .filter(|c| c.has_waiters())
            .map(|c| InputRequest {
                key: c.id().to_owned(),
                message: spec.message.clone(),
                requested_schema: spec.requested_schema.clone(),
            })
            .collect())
    }
}

async fn build(target: &GcwTarget) -> Result<(Executions, Rest), EngineError> {
    // flowgate's server retries passing faults with its own backoff; the client must not retry
    // underneath it (that would multiply the waits). Every attempt has a deadline, so a stalled
    // endpoint cannot hold a request.
    let mut builder = Executions::builder()
        .with_retry_policy(google_cloud_gax::retry_policy::NeverRetry)
        .with_attempt_timeout(CALL_TIMEOUT);
    if let Some(endpoint) = &target.endpoint {
        builder = builder.with_endpoint(endpoint.clone());
    }
    let auth = match target.credentials_kind() {
        CredentialsKind::Anonymous => {
            builder = builder.with_credentials(
                google_cloud_auth::credentials::anonymous::Builder::new().build(),
            );
            Auth::Anonymous
        }
        CredentialsKind::Adc => {
            let creds = google_cloud_auth::credentials::Builder::default()
                .build()
                .map_err(|e| EngineError::Denied {
                    engine: KIND,
                    message: format!(
                        "no Google credentials (Application Default Credentials): {e}"
                    ),
                })?;
            builder = builder.with_credentials(creds.clone());
            Auth::Adc(creds)
        }
    };
    let client = builder
        .build()
        .await
        .map_err(|e| EngineError::Unavailable {
            engine: KIND,
            message: format!("cannot build the Workflows client: {e}"),
            source: None,
        })?;
    let config = flowgate_http::HttpConfig {
        connect_timeout: CONNECT_TIMEOUT,
        request_timeout: CALL_TIMEOUT,
        ..flowgate_http::HttpConfig::default()
    };
    let rest = Rest::new(target.base_url(), auth, &config)?;
    Ok((client, rest))
}

#[async_trait]
impl Engine for WorkflowsEngine {
    fn kind(&self) -> &'static str {
        KIND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::all()
    }

    /// The workflow: its executions are `{parent}/executions/{id}`.
    fn reference_scope(&self) -> String {
        self.target.parent()
    }

    /// The execution's id (a UUID the service chose, which task ids pack into 16 bytes). The
    /// API names the project by number where the manifest may name it by id; either finds the
    /// execution, so the id alone is kept.
    fn locator<'a>(&self, execution: &'a ExecutionRef) -> Option<&'a str> {
        let name = execution.0.as_str();
        if !self.target.owns(name) {
            return None;
        }
        name.rsplit('/').next()
    }

    fn reference_at(&self, locator: &str) -> ExecutionRef {
        ExecutionRef(format!("{}/executions/{locator}", self.target.parent()))
    }

    async fn start(&self, request: StartRequest) -> Result<Started, EngineError> {
        let (client, _) = self.clients().await?;
        let key = request.idempotency_key.to_string();
        if let Some(existing) = self.find_call(&key).await? {
            tracing::info!(execution = %existing.execution, "start reached the execution an earlier attempt of this call created");
            return Ok(existing);
        }
        // An execution's labels replace its workflow's (the API does not merge them), so the
        // tool's own `labels` (cost labels, say) go first and flowgate's are added to them.
        let mut labels = self.target.labels.clone();
        labels.extend([
            (TOOL_LABEL.to_owned(), mapping::label_value(&request.tool)),
            // The principal's tag verbatim (lowercase hex: already a valid label value).
            (PRINCIPAL_LABEL.to_owned(), request.principal_tag.clone()),
            (CALL_LABEL.to_owned(), mapping::label_value(&key)),
        ]);
        let mut execution = Execution::new()
            .set_argument(request.arguments.to_string())
            .set_labels(labels);
        if let Some(level) = self.target.call_log_level {
            execution = execution.set_call_log_level(match level {
                CallLogLevel::LogAllCalls => execution::CallLogLevel::LogAllCalls,
                CallLogLevel::LogErrorsOnly => execution::CallLogLevel::LogErrorsOnly,
                CallLogLevel::LogNone => execution::CallLogLevel::LogNone,
            });
        }
        let created = client
            .create_execution()
            .set_parent(self.target.parent())
            .set_execution(execution)
            .send()
            .await
            .map_err(|e| classify(e, &self.what("executions.create")))?;
        let created_at =
            mapping::time(created.start_time.as_ref()).unwrap_or_else(chrono::Utc::now);
        Ok(Started {
            execution: ExecutionRef(created.name),
            created_at,
        })
    }

    async fn get(&self, execution: &ExecutionRef) -> Result<ExecutionRecord, EngineError> {
        self.check_owned(execution)?;
        let (client, _) = self.clients().await?;
        let e = client
            .get_execution()
            .set_name(&execution.0)
            .set_view(ExecutionView::Full)
            .send()
            .await
            .map_err(|e| classify(e, &self.what("executions.get")))?;
        let created = mapping::time(e.start_time.as_ref()).unwrap_or_default();
        let mut record = ExecutionRecord::new(
            mapping::state(&e.state),
            mapping::state_name(&e.state),
            created,
        );
        record.updated_at = mapping::time(e.end_time.as_ref())
            .unwrap_or(created)
            .max(created);
        record.console_url = Some(format!(
            "https://console.cloud.google.com/workflows/workflow/{}/{}/execution/{}?project={}",
            self.target.location,
            self.target.workflow,
            execution.0.rsplit('/').next().unwrap_or_default(),
            self.target.project
        ));
        match record.state {
            TaskState::Completed => record.output = Some(mapping::json_field(&e.result)),
            TaskState::Failed => {
                let (payload, mut context) = e
                    .error
                    .as_ref()
                    .map(|err| (mapping::json_field(&err.payload), err.context.clone()))
                    .unwrap_or_default();
                // Where it raised: the innermost step of the stack trace.
                if let Some(at) = e
                    .error
                    .as_ref()
                    .and_then(|err| err.stack_trace.as_ref())
                    .and_then(|t| t.elements.last())
                    .filter(|at| !at.step.is_empty())
                {
                    let place = if at.routine.is_empty() || at.routine == "main" {
                        format!("in step {}", at.step)
                    } else {
                        format!("in step {} of {}", at.step, at.routine)
                    };
                    context = if context.is_empty() {
                        place
                    } else {
                        format!("{context} ({place})")
                    };
                }
                record.failure = Some(EngineFailure {
                    error: mapping::error_summary(&payload),
                    cause: Some(if context.is_empty() {
                        payload.to_string()
                    } else {
                        format!("{context}; payload: {payload}")
                    }),
                });
            }
            TaskState::Unknown => {
                record.status_message = e.state_error.as_ref().map(|s| s.details.clone());
            }
            // QUEUED: held in the workflow's backlog (its concurrent-execution limit); it has no
            // start time yet (the server then uses the time the task was created).
            TaskState::Submitted => {
                record.status_message = Some(
                    "Queued: waiting in the workflow's backlog for a free execution slot".into(),
                );
            }
            // UNAVAILABLE: the execution's data cannot be read now (e.g. a revoked KMS key); it
            // has not ended, so the task keeps working and says why.
            TaskState::Working if e.state == execution::State::Unavailable => {
                record.status_message = Some(match e.state_error.as_ref() {
                    Some(s) if !s.details.is_empty() => {
                        format!("Execution data unavailable: {}", s.details)
                    }
                    _ => "Execution data unavailable".to_owned(),
                });
                // It will not come back within seconds; poll it less often.
                record.min_poll_interval = Some(std::time::Duration::from_secs(30));
            }
            TaskState::Working => {
                let step = e
                    .status
                    .as_ref()
                    .and_then(|s| s.current_steps.last())
                    .map(|s| (s.routine.clone(), s.step.clone()));
                record.status_message = step.as_ref().map(|(routine, step)| {
                    if routine.is_empty() || routine == "main" {
                        format!("In step {step}")
                    } else {
                        format!("In step {step} of {routine}")
                    }
                });
                let waiting = self
                    .waiting(execution, step.as_ref().map(|(_, s)| s.as_str()))
                    .await?;
                if !waiting.is_empty() {
                    record.state = TaskState::InputRequired;
                    record.input_requests = waiting;
                }
            }
            _ => {}
        }
        Ok(record)
    }

    async fn respond(
        &self,
        execution: &ExecutionRef,
        key: &str,
        response: InputResponse,
    ) -> Result<(), EngineError> {
        self.check_owned(execution)?;
        let (_, rest) = self.clients().await?;
        let callback = rest
            .list(&execution.0)
            .await?
            .into_iter()
            .find(|c| c.id() == key && c.has_waiters())
            .ok_or_else(|| EngineError::NotFound {
                engine: KIND,
                what: format!("no waiting callback {key}"),
            })?;
        let body = serde_json::to_value(&response).unwrap_or_default();
        rest.call(&execution.0, &callback, &body).await
    }

    async fn cancel(&self, execution: &ExecutionRef) -> Result<(), EngineError> {
        self.check_owned(execution)?;
        let (client, _) = self.clients().await?;
        match client
            .cancel_execution()
            .set_name(&execution.0)
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(e) => match classify(e, &self.what("executions.cancel")) {
                // Cancelling a finished execution is not an error.
                EngineError::InvalidInput { .. } => Ok(()),
                other => Err(other),
            },
        }
    }

    async fn list(&self, filter: ListFilter) -> Result<Vec<ExecutionSummary>, EngineError> {
        let (client, _) = self.clients().await?;
        let mut expr = format!("labels.{TOOL_LABEL}:*");
        if let Some(tag) = &filter.principal_tag {
            expr = format!("labels.{PRINCIPAL_LABEL}=\"{tag}\"");
        }
        // Every page up to the limit (BASIC view: at most 1000 a page), with a bound on pages
        // so a misbehaving endpoint cannot keep a request busy forever.
        let limit = filter.limit.unwrap_or(1000).max(1);
        let mut out = Vec::new();
        let mut token = String::new();
        for _ in 0..MAX_LIST_PAGES {
            let page = client
                .list_executions()
                .set_parent(self.target.parent())
                .set_filter(expr.clone())
                .set_page_size((limit - out.len()).clamp(1, 1000) as i32)
                .set_page_token(token.clone())
                .send()
                .await
                .map_err(|e| classify(e, &self.what("executions.list")))?;
            out.extend(page.executions.into_iter().map(|e| ExecutionSummary {
                state: mapping::state(&e.state),
                created_at: mapping::time(e.start_time.as_ref()).unwrap_or_default(),
                execution: ExecutionRef(e.name),
            }));
            if out.len() >= limit || page.next_page_token.is_empty() {
                break;
            }
            token = page.next_page_token;
        }
        out.truncate(limit);
        Ok(out)
    }
}

#[cfg(test)]
mod task_ids {
    use super::*;
    use serde_json::json;

    /// Workflows names an execution by a UUID it chooses, under the project (by number, in
    /// the API's answers), location and workflow; only the UUID reaches the task id.
    #[test]
    fn the_longest_execution_gets_a_task_id_a_client_takes() {
        let workflow = format!("w{}", "-x".repeat(31))
            .chars()
            .take(64)
            .collect::<String>();
        let config = json!({
            "project": "a-project-id-of-thirty-chars-x",
            "location": "northamerica-northeast2",
            "workflow": workflow,
        });
        let target = GcwTarget::from_manifest(config.as_object().expect("object")).expect("target");
        let engine = WorkflowsEngine::new(target);
        let id = "1f0e3c9a-55b2-4c1e-9a7d-0123456789ab";
        let by_number = ExecutionRef(format!(
            "projects/999999999999/locations/northamerica-northeast2/workflows/{workflow}/executions/{id}"
        ));
        let locator = engine.locator(&by_number).expect("the tool's execution");
        assert_eq!(locator, id);
        assert_eq!(
            engine.reference_at(locator).0,
            format!(
                "projects/a-project-id-of-thirty-chars-x/locations/northamerica-northeast2/workflows/{workflow}/executions/{id}"
            )
        );
        let length = flowgate_core::handle::task_id_fits(locator).expect("fits");
        assert!(length <= flowgate_core::handle::ID_MAX, "{length}");
        let other = ExecutionRef(by_number.0.replace("northeast2", "northeast1"));
        assert_eq!(engine.locator(&other), None);
    }
}
