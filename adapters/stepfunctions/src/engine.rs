//! The [`Engine`] implementation over the Step Functions API.

use async_trait::async_trait;
use aws_config::{BehaviorVersion, Region};
use aws_sdk_sfn::Client;
use aws_sdk_sfn::types::SyncExecutionStatus;
use chrono::Utc;
use flowgate_core::{
    Action, Capabilities, Engine, EngineError, EngineFailure, ExecutionRecord, ExecutionRef,
    ExecutionSummary, InputRequest, InputResponse, ListFilter, StartRequest, Started, TaskState,
};
use tokio::sync::OnceCell;

use crate::error::{already_exists, classify};
use crate::history::{self, HistoryView};
use crate::{KIND, SfnTarget, WorkflowType, mapping};

/// How many history events one read looks at (newest first).
const HISTORY_PAGE: i32 = 200;

/// The Step Functions engine bound to one tool's state machine.
#[derive(Debug)]
pub struct StepFunctionsEngine {
    target: SfnTarget,
    /// Built on first use (loading AWS configuration is async and may reach the network for
    /// credentials); a process-local cache of a client, never of task state.
    client: OnceCell<Client>,
}

impl StepFunctionsEngine {
    /// An engine for `target`; no AWS call is made until the first operation.
    pub fn new(target: SfnTarget) -> Self {
        StepFunctionsEngine {
            target,
            client: OnceCell::new(),
        }
    }

    async fn client(&self) -> &Client {
        self.client.get_or_init(|| build_client(&self.target)).await
    }

    fn what(&self, call: &str) -> String {
        format!("{call} on {}", self.target.state_machine_arn)
    }

    fn check_owned(&self, execution: &ExecutionRef) -> Result<(), EngineError> {
        if self.target.owns(&execution.0) {
            Ok(())
        } else {
            Err(EngineError::NotFound {
                engine: KIND,
                what: "an execution of another state machine".into(),
            })
        }
    }

    async fn describe(
        &self,
        execution: &ExecutionRef,
    ) -> Result<aws_sdk_sfn::operation::describe_execution::DescribeExecutionOutput, EngineError>
    {
        self.client()
            .await
            .describe_execution()
            .execution_arn(&execution.0)
            .send()
            .await
            .map_err(|e| classify(e, &self.what("DescribeExecution")))
    }

    async fn history(&self, execution: &ExecutionRef) -> Result<HistoryView, EngineError> {
        let page = self
            .client()
            .await
            .get_execution_history()
            .execution_arn(&execution.0)
            .reverse_order(true)
            .max_results(HISTORY_PAGE)
            .include_execution_data(true)
            .send()
            .await
            .map_err(|e| classify(e, &self.what("GetExecutionHistory")))?;
        Ok(history::read(page.events()))
    }

    fn console_url(&self, execution: &ExecutionRef) -> String {
        let region = self.target.region();
        format!(
            "https://{region}.console.aws.amazon.com/states/home?region={region}#/v2/executions/details/{}",
            execution.0
        )
    }

    fn name_for(&self, request: &StartRequest) -> Result<String, EngineError> {
        match &self.target.execution_name {
            Some(template) => {
                mapping::render_name(template, &request.arguments).map_err(|message| {
                    EngineError::InvalidInput {
                        engine: KIND,
                        message,
                    }
                })
            }
            // The call's key as the name: a retried start is the same named start, which
            // Step Functions answers with the execution the first attempt made. The principal's
            // tag in front is what `list` filters by (executions cannot be tagged).
            None => Ok(format!(
                "{}{}",
                principal_prefix(&request.principal_digest),
                request.idempotency_key
            )),
        }
    }
}

/// The name prefix of the unnamed executions started for a principal: `fg-<tag>-`.
fn principal_prefix(principal_digest: &str) -> String {
    format!("fg-{}-", flowgate_core::principal_tag(principal_digest))
}

/// How many executions `list` reads at most while looking for a principal's (ListExecutions
/// has no name filter, so a principal's executions are found by scanning newest first).
const LIST_SCAN_LIMIT: usize = 10_000;

async fn build_client(target: &SfnTarget) -> Client {
    let mut loader =
        aws_config::defaults(BehaviorVersion::latest()).region(Region::new(target.region()));
    if let Some(url) = &target.endpoint_url {
        loader = loader.endpoint_url(url);
    }
    let mut conf = loader.load().await;
    if let Some(role) = &target.role_arn {
        let provider = aws_config::sts::AssumeRoleProvider::builder(role)
            .session_name("flowgate")
            .configure(&conf)
            .build()
            .await;
        conf = conf
            .to_builder()
            .credentials_provider(aws_sdk_sfn::config::SharedCredentialsProvider::new(
                provider,
            ))
            .build();
    }
    let mut builder = aws_sdk_sfn::config::Builder::from(&conf);
    if target.endpoint_url.is_some() {
        builder = builder.interceptor(crate::sync_host::SameHostForSync);
    }
    Client::from_conf(builder.build())
}

#[async_trait]
impl Engine for StepFunctionsEngine {
    fn kind(&self) -> &'static str {
        KIND
    }

    fn capabilities(&self) -> Capabilities {
        let mut c = Capabilities::all();
        if self.target.workflow_type == WorkflowType::Express {
            c = Capabilities::default();
            c.synchronous_only = true;
        }
        c
    }

    fn retention_ms(&self) -> Option<u64> {
        // Step Functions keeps a standard execution's history for 90 days after it closes.
        Some(90 * 24 * 3600 * 1000)
    }

    async fn start(&self, request: StartRequest) -> Result<Started, EngineError> {
        if self.target.workflow_type == WorkflowType::Express {
            return Err(EngineError::Unsupported {
                engine: KIND,
                operation: "start (express workflows run synchronously)",
            });
        }
        let name = self.name_for(&request)?;
        let input = mapping::input(&request.arguments, self.target.input_key.as_deref());
        let sent = self
            .client()
            .await
            .start_execution()
            .state_machine_arn(&self.target.state_machine_arn)
            .name(&name)
            .input(input)
            .send()
            .await;
        match sent {
            Ok(out) => Ok(Started {
                execution: ExecutionRef(out.execution_arn),
                created_at: mapping::time(&out.start_date),
            }),
            // A retried call with a named execution reaches the execution it started before.
            Err(e) if already_exists(&e) => {
                let execution = ExecutionRef(self.target.execution_arn(&name));
                let d = self.describe(&execution).await?;
                tracing::info!(execution = %execution, "start reached an existing execution of the same name");
                Ok(Started {
                    execution,
                    created_at: mapping::time(&d.start_date),
                })
            }
            Err(e) => Err(classify(e, &self.what("StartExecution"))),
        }
    }

    async fn run_sync(&self, request: StartRequest) -> Result<ExecutionRecord, EngineError> {
        let name = self.name_for(&request)?;
        let input = mapping::input(&request.arguments, self.target.input_key.as_deref());
        let out = self
            .client()
            .await
            .start_sync_execution()
            .state_machine_arn(&self.target.state_machine_arn)
            .name(name)
            .input(input)
            .send()
            .await
            .map_err(|e| classify(e, &self.what("StartSyncExecution")))?;
        let (state, error) = match out.status() {
            SyncExecutionStatus::Succeeded => (TaskState::Completed, None),
            SyncExecutionStatus::Failed => {
                (TaskState::Failed, out.error().or(Some("States.Failed")))
            }
            SyncExecutionStatus::TimedOut => {
                (TaskState::Failed, out.error().or(Some("States.Timeout")))
            }
            other => {
                tracing::warn!(status = other.as_str(), "unknown StartSyncExecution status");
                (TaskState::Unknown, None)
            }
        };
        let mut record =
            ExecutionRecord::new(state, out.status().as_str(), mapping::time(&out.start_date));
        record.updated_at = mapping::time(&out.stop_date);
        match state {
            TaskState::Completed => {
                record.output = Some(mapping::output(
                    out.output(),
                    self.target.output_pointer.as_deref(),
                ))
            }
            TaskState::Failed => {
                record.failure = Some(EngineFailure {
                    error: error.unwrap_or("States.Failed").to_owned(),
                    cause: out.cause().map(str::to_owned),
                });
            }
            _ => {}
        }
        Ok(record)
    }

    async fn get(&self, execution: &ExecutionRef) -> Result<ExecutionRecord, EngineError> {
        self.check_owned(execution)?;
        let d = self.describe(execution).await?;
        let created = mapping::time(&d.start_date);
        let mut record =
            ExecutionRecord::new(mapping::state(&d.status), d.status.as_str(), created);
        record.updated_at = d.stop_date.as_ref().map(mapping::time).unwrap_or(created);
        record.console_url = Some(self.console_url(execution));
        match record.state {
            TaskState::Completed => {
                record.output = Some(mapping::output(
                    d.output(),
                    self.target.output_pointer.as_deref(),
                ));
            }
            TaskState::Failed => {
                let default = if d.status.as_str() == "TIMED_OUT" {
                    "States.Timeout"
                } else {
                    "States.Failed"
                };
                record.failure = Some(EngineFailure {
                    error: d.error().unwrap_or(default).to_owned(),
                    cause: d.cause().map(str::to_owned),
                });
            }
            TaskState::Working if d.status.as_str() == "PENDING_REDRIVE" => {
                record.status_message = Some("Redrive pending".into());
            }
            TaskState::Working if self.target.history => {
                let view = self.history(execution).await?;
                if let Some(at) = &view.last_event {
                    record.updated_at = mapping::time(at).max(created);
                }
                record.status_message = view.current_state.map(|s| format!("In state {s}"));
                if !view.pending.is_empty() {
                    record.state = TaskState::InputRequired;
                    record.input_requests = view
                        .pending
                        .into_iter()
                        .map(|p| InputRequest {
                            key: p.key,
                            message: p.message,
                            requested_schema: p.requested_schema,
                        })
                        .collect();
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
        let view = self.history(execution).await?;
        let Some(pending) = view.pending.into_iter().find(|p| p.key == key) else {
            return Err(EngineError::NotFound {
                engine: KIND,
                what: format!("no open input state {key}"),
            });
        };
        let client = self.client().await;
        match response.action {
            Action::Accept => {
                let output = response
                    .content
                    .unwrap_or_else(|| serde_json::json!({}))
                    .to_string();
                client
                    .send_task_success()
                    .task_token(&pending.token)
                    .output(output)
                    .send()
                    .await
                    .map(|_| ())
                    .map_err(|e| classify(e, &self.what("SendTaskSuccess")))
            }
            Action::Decline | Action::Cancel => {
                let (error, verb) = match response.action {
                    Action::Decline => ("flowgate.Declined", "declined"),
                    _ => ("flowgate.Cancelled", "dismissed"),
                };
                client
                    .send_task_failure()
                    .task_token(&pending.token)
                    .error(error)
                    .cause(format!(
                        "The MCP client {verb} the question: {}",
                        pending.message
                    ))
                    .send()
                    .await
                    .map(|_| ())
                    .map_err(|e| classify(e, &self.what("SendTaskFailure")))
            }
        }
    }

    async fn cancel(&self, execution: &ExecutionRef) -> Result<(), EngineError> {
        self.check_owned(execution)?;
        self.client()
            .await
            .stop_execution()
            .execution_arn(&execution.0)
            .error("flowgate.Cancelled")
            .cause(format!(
                "Cancelled through MCP tasks/cancel at {}",
                Utc::now().to_rfc3339()
            ))
            .send()
            .await
            .map(|_| ())
            .map_err(|e| classify(e, &self.what("StopExecution")))
    }

    async fn list(&self, filter: ListFilter) -> Result<Vec<ExecutionSummary>, EngineError> {
        let limit = filter.limit.unwrap_or(100).clamp(1, 1000);
        // Only unnamed executions carry their principal (in the name); a templated name does
        // not, so a principal's listing leaves those out rather than guess.
        let prefix = filter.principal_digest.as_deref().map(principal_prefix);
        let mut found = Vec::new();
        let mut scanned = 0;
        let mut token: Option<String> = None;
        loop {
            let out = self
                .client()
                .await
                .list_executions()
                .state_machine_arn(&self.target.state_machine_arn)
                .max_results(1000)
                .set_next_token(token.take())
                .send()
                .await
                .map_err(|e| classify(e, &self.what("ListExecutions")))?;
            scanned += out.executions().len();
            found.extend(
                out.executions()
                    .iter()
                    .filter(|e| prefix.as_ref().is_none_or(|p| e.name.starts_with(p)))
                    .map(|e| ExecutionSummary {
                        execution: ExecutionRef(e.execution_arn.clone()),
                        state: mapping::state(&e.status),
                        created_at: mapping::time(&e.start_date),
                    }),
            );
            token = out.next_token().map(str::to_owned);
            if found.len() >= limit || token.is_none() || scanned >= LIST_SCAN_LIMIT {
                break;
            }
        }
        found.truncate(limit);
        Ok(found)
    }
}
