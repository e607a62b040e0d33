//! `tools/call`: validate, start the execution, answer with a task or wait for the result.

use std::time::Duration;

use flowgate_core::handle::TaskHandle;
use flowgate_core::wire::{self, Outcome};
use flowgate_core::{ExecutionRecord, StartRequest, Started};
use flowgate_manifest::TaskSupport;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities, ContentBlock,
    CreateTaskResult, ErrorCode, ResultType, Task, TaskStatus,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use serde_json::Value;

use crate::errors::tool_error;
use crate::hang_up;
use crate::mrtr::Gathered;
use crate::retry::{START_DEADLINE, reading, within};
use crate::{FlowgateServer, ToolEntry, audit, principal};

/// The longest a synchronous wait sleeps between polls, whatever the tool's poll interval.
const SYNC_POLL_CAP: Duration = Duration::from_millis(250);

impl FlowgateServer {
    pub(crate) async fn call(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        // A tool the caller's scopes do not allow is, to it, a tool that does not exist (the
        // HTTP layer already answered 403 with the scope challenge; this is the backstop).
        let Some(entry) = self
            .inner
            .tools
            .get(&request.name)
            .filter(|e| crate::http::allowed(crate::principal::caller(&ctx), &e.spec.scopes))
        else {
            let reason = match self.inner.tools.get(&request.name) {
                Some(_) => "insufficient_scope",
                None => "unknown_tool",
            };
            audit::refused(&ctx, reason, Some(&request.name), None);
            return Err(ErrorData::invalid_params(
                format!("unknown tool: {}", request.name),
                None,
            ));
        };
        let as_task = crate::client::takes_tasks(&ctx);
        if entry.spec.task == TaskSupport::Required && !as_task {
            audit::refused(&ctx, "tasks_required", Some(&entry.spec.name), None);
            return Err(ErrorData::missing_required_client_capability(
                ClientCapabilities::builder().enable_tasks().build(),
            ));
        }
        let arguments = match self.gather(
            entry,
            request.arguments.unwrap_or_default(),
            request.input_responses,
            request.request_state.as_deref(),
            &ctx,
        )? {
            Gathered::Ready(arguments) => Value::Object(arguments),
            Gathered::Ask(ask) => return Ok(CallToolResponse::InputRequired(ask)),
            Gathered::Refused(result) => return Ok(CallToolResponse::Complete(result)),
        };
        if let Err(problems) = entry.spec.validate_arguments(&arguments) {
            audit::refused(
                &ctx,
                "invalid_arguments",
                Some(&entry.spec.name),
                Some(&arguments),
            );
            let text = format!(
                "{}: invalid arguments:\n- {}",
                entry.spec.name,
                problems.join("\n- ")
            );
            return Ok(CallToolResponse::Complete(CallToolResult::error(vec![
                ContentBlock::text(text),
            ])));
        }
        let principal = principal::of(&ctx);
        let arguments_digest = arguments.clone();
        // One key for the call, made before the first attempt: every retry below carries it,
        // so the engine starts at most one execution however the attempts end.
        let start = StartRequest::new(
            entry.spec.name.clone(),
            arguments,
            principal::digest(&principal),
        )
        .with_ttl_ms(entry.presentation.ttl_ms);
        if entry.engine.capabilities().synchronous_only {
            // Not retried: a synchronous run may have happened even when its answer was lost.
            return match entry.engine.run_sync(start).await {
                Ok(record) => {
                    // A synchronous run has no execution reference to report.
                    audit::started(&ctx, &entry.spec.name, None, &arguments_digest);
                    audit::finished(&ctx, &entry.spec.name, None, record.state.as_str());
                    finished(entry, &record).map(CallToolResponse::Complete)
                }
                Err(e) => Ok(CallToolResponse::Complete(tool_error(&entry.spec.name, &e))),
            };
        }
        let kind = entry.engine.kind();
        let started = match within(START_DEADLINE, kind, || entry.engine.start(start.clone())).await
        {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(tool = %entry.spec.name, error = %e, "start failed");
                let mut result = tool_error(&entry.spec.name, &e);
                // The start may have happened: if the engine knows where it would be, give the
                // client the task to check (tasks/get says "not found" if it never started).
                if matches!(e, flowgate_core::EngineError::Timeout { .. })
                    && let Some(execution) = entry.engine.execution_for(&start)
                {
                    let maybe = Started {
                        execution,
                        created_at: chrono::Utc::now(),
                    };
                    let task = self.created(entry, &maybe, &principal).task;
                    result.content.push(ContentBlock::text(format!(
                        "If it did start, it is task {}: check it with tasks/get before calling again.",
                        task.task_id
                    )));
                }
                return Ok(CallToolResponse::Complete(result));
            }
        };
        tracing::info!(tool = %entry.spec.name, execution = %started.execution, as_task, "started");
        audit::started(
            &ctx,
            &entry.spec.name,
            Some(started.execution.0.as_str()),
            &arguments_digest,
        );
        if as_task && entry.spec.task != TaskSupport::Forbidden {
            return Ok(CallToolResponse::Task(
                self.created(entry, &started, &principal),
            ));
        }
        let wait = self.wait_for_result(entry, &started, &ctx);
        let origin = audit::Origin::of(&ctx);
        hang_up::unless_hung_up(entry, &started.execution, &ctx.ct, origin, wait)
            .await
            .map(CallToolResponse::Complete)
    }

    fn created(&self, entry: &ToolEntry, started: &Started, principal: &str) -> CreateTaskResult {
        let handle = TaskHandle {
            engine: entry.engine.kind().to_owned(),
            tool: entry.spec.name.clone(),
            execution: started.execution.clone(),
            created_at: started.created_at,
        };
        let id = self.inner.keys.seal(&handle, principal);
        let at = started
            .created_at
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        // The first interval already respects the engine's quota (many tasks started at once
        // must not all come back in a second).
        let paced = entry
            .engine
            .pacing()
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let mut task = Task::new(id, TaskStatus::Working, at.clone(), at)
            .with_poll_interval_ms(entry.presentation.poll_interval_ms.max(paced))
            .with_status_message("Started");
        if let Some(ttl) = entry.presentation.ttl_ms {
            task = task.with_ttl_ms(ttl);
        }
        CreateTaskResult::new(task)
    }

    /// The synchronous answer for clients that cannot take a task: poll until the execution
    /// ends or the configured wait runs out (then stop it, so nothing runs unobserved).
    async fn wait_for_result(
        &self,
        entry: &ToolEntry,
        started: &Started,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let how = entry.presentation.clone();
        let kind = entry.engine.kind();
        let deadline = tokio::time::Instant::now() + self.inner.options.sync_wait;
        let interval = Duration::from_millis(how.poll_interval_ms).min(SYNC_POLL_CAP);
        let name = &entry.spec.name;
        loop {
            let record = match reading(kind, || entry.engine.get(&started.execution)).await {
                Ok(r) => r,
                Err(e) if e.is_retryable() => {
                    if tokio::time::Instant::now() >= deadline {
                        return Ok(tool_error(name, &e));
                    }
                    let pause = match &e {
                        flowgate_core::EngineError::Throttled {
                            retry_after: Some(after),
                            ..
                        } => (*after).max(interval),
                        _ => interval,
                    };
                    tokio::time::sleep(pause).await;
                    continue;
                }
                Err(e) => return Ok(tool_error(name, &e)),
            };
            if record.state.is_terminal() {
                let execution = Some(started.execution.0.as_str());
                audit::finished(ctx, name, execution, record.state.as_str());
                return finished(entry, &record);
            }
            let give_up = match wire::outcome(&record, &how) {
                Outcome::InputRequired(_) => Some(
                    "the workflow asked a question, and answering needs a client that supports MCP tasks",
                ),
                _ if tokio::time::Instant::now() >= deadline => {
                    Some("the workflow did not finish within the synchronous wait")
                }
                _ => None,
            };
            if let Some(reason) = give_up {
                if entry.engine.cancel(&started.execution).await.is_ok() {
                    let origin = audit::Origin::of(ctx);
                    audit::stopped(&origin, name, &started.execution.0, "sync_wait");
                }
                let waited = self.inner.options.sync_wait.as_secs();
                return Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                    "{name}: {reason} ({waited} s), so it was stopped. Call it from a client that \
                     supports the MCP tasks extension to run it in the background."
                ))]));
            }
            tokio::time::sleep(interval).await;
        }
    }
}

/// The core's `CallToolResult` JSON as rmcp's type.
pub(crate) fn to_call_tool_result(result: Value) -> CallToolResult {
    let mut result: CallToolResult = serde_json::from_value(result).unwrap_or_else(|e| {
        CallToolResult::error(vec![ContentBlock::text(format!(
            "flowgate built an invalid result: {e}"
        ))])
    });
    // 2026-07-28 results carry `resultType`; rmcp strips it again for older peers.
    result.result_type = Some(ResultType::COMPLETE);
    result
}

/// The synchronous answer for a finished record. An unfinished one (an engine that returned
/// early) reads as a tool error.
fn finished(entry: &ToolEntry, record: &ExecutionRecord) -> Result<CallToolResult, ErrorData> {
    let name = &entry.spec.name;
    match entry.outcome(record) {
        Outcome::Completed(result) => Ok(to_call_tool_result(result)),
        Outcome::Failed(e) => Err(ErrorData::new(ErrorCode(e.code as i32), e.message, e.data)),
        Outcome::Cancelled => Ok(CallToolResult::error(vec![ContentBlock::text(format!(
            "{name}: the execution was cancelled before it finished"
        ))])),
        Outcome::Working | Outcome::InputRequired(_) => {
            Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                "{name}: the engine returned before the execution finished ({})",
                record.engine_status
            ))]))
        }
    }
}
