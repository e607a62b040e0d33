//! `tools/call`: validate, start the execution, answer with a task or wait for the result.

use flowgate_core::wire::{Outcome, WireTask};
use flowgate_core::{EngineError, ExecutionRecord, StartRequest, Started};
use flowgate_manifest::TaskSupport;
use rmcp::ErrorData;
use rmcp::model::{
    CallToolResult, ClientCapabilities, ContentBlock, ErrorCode, InputRequiredResult,
    InputResponses, ResultType,
};
use serde_json::{Map, Value};

use crate::errors::{start_failed, tool_error};
use crate::hang_up::StopOnDrop;
use crate::holds::too_many_calls;
use crate::mrtr::Gathered;
use crate::tasks::TaskView;
use crate::wait::{Questions, Waited};
use crate::{Caller, FlowgateServer, ToolEntry, audit};

/// A `tools/call`, however it arrived.
#[derive(Debug, Clone, Default)]
pub(crate) struct Call {
    /// The tool.
    pub(crate) name: String,
    /// Its arguments.
    pub(crate) arguments: Map<String, Value>,
    /// Answers to an earlier round's questions (SEP-2322).
    pub(crate) input_responses: Option<InputResponses>,
    /// The sealed state of earlier rounds.
    pub(crate) request_state: Option<String>,
    /// The client can take a task (the call runs as one, when the tool allows it).
    pub(crate) takes_tasks: bool,
    /// The client can answer form elicitations in a round of the call.
    pub(crate) can_elicit: bool,
}

/// What a call answers.
#[derive(Debug)]
pub(crate) enum Called {
    /// The execution runs as this task.
    Task(TaskView),
    /// The call's result (a synchronous run, or a tool error).
    Complete(CallToolResult),
    /// Arguments to ask for first.
    Ask(InputRequiredResult),
    /// Nothing was started (the arguments are invalid, the caller declined to give one, too
    /// many calls wait, the start failed): what to tell the model, a paragraph each. A client
    /// that takes tasks reads it as a tool error, a 2025-11-25 task-augmented call as an error.
    Refused(Vec<String>),
    /// The tool needs scopes the caller was not granted: the scopes.
    Forbidden(Vec<String>),
}

impl Called {
    /// A refusal as the tool result that tells the model.
    pub(crate) fn refusal(texts: Vec<String>) -> CallToolResult {
        CallToolResult::error(texts.into_iter().map(ContentBlock::text).collect())
    }
}

impl FlowgateServer {
    pub(crate) async fn call(&self, caller: &Caller, call: Call) -> Result<Called, ErrorData> {
        let Some(entry) = self.tool_entry(&call.name) else {
            audit::refused(caller, "unknown_tool", Some(&call.name), None);
            return Err(ErrorData::invalid_params(
                format!("unknown tool: {}", call.name),
                None,
            ));
        };
        // A tool the caller's scopes do not allow: refused before anything is read, with the
        // scopes it needs (HTTP answers 403 with the identity's challenge naming them).
        if !caller.may_use(&entry.spec.scopes) {
            tracing::info!(tool = %entry.spec.name, "refused a call: insufficient scope");
            audit::refused(caller, "insufficient_scope", Some(&entry.spec.name), None);
            return Ok(Called::Forbidden(entry.spec.scopes.clone()));
        }
        let entry = &entry;
        let as_task = call.takes_tasks;
        if entry.spec.task == TaskSupport::Required && !as_task {
            audit::refused(caller, "tasks_required", Some(&entry.spec.name), None);
            return Err(ErrorData::missing_required_client_capability(
                ClientCapabilities::builder().enable_tasks().build(),
            ));
        }
        let arguments = match self.gather(
            caller,
            entry,
            call.arguments,
            call.input_responses,
            call.request_state.as_deref(),
            call.can_elicit,
        )? {
            Gathered::Ready(arguments) => Value::Object(arguments),
            Gathered::Ask(ask) => return Ok(Called::Ask(ask)),
            Gathered::Refused(why) => return Ok(Called::Refused(vec![why])),
        };
        if let Err(problems) = entry.spec.validate_arguments(&arguments) {
            audit::refused(
                caller,
                "invalid_arguments",
                Some(&entry.spec.name),
                Some(&arguments),
            );
            let text = format!(
                "{}: invalid arguments:\n- {}",
                entry.spec.name,
                problems.join("\n- ")
            );
            return Ok(Called::Refused(vec![text]));
        }
        // A call that waits for its result holds one of the caller's slots (module `holds`),
        // taken before anything starts.
        let waits = !(as_task && entry.spec.task != TaskSupport::Forbidden)
            || entry.engine.capabilities().synchronous_only;
        let _slot = match waits.then(|| self.hold(caller)) {
            Some(Err(limit)) => {
                return Ok(Called::Refused(vec![too_many_calls(
                    &entry.spec.name,
                    limit,
                )]));
            }
            Some(Ok(slot)) => Some(slot),
            None => None,
        };
        let arguments_digest = arguments.clone();
        // One key for the call, made before the first attempt: every retry below carries it,
        // so the engine starts at most one execution however the attempts end.
        let start = StartRequest::new(entry.spec.name.clone(), arguments, caller.principal_tag())
            .with_ttl_ms(entry.presentation.ttl_ms);
        if entry.engine.capabilities().synchronous_only {
            // Not retried: a synchronous run may have happened even when its answer was lost.
            return match entry.engine.run_sync(start).await {
                Ok(record) => {
                    // A synchronous run has no execution reference to report.
                    audit::started(caller, &entry.spec.name, None, &arguments_digest);
                    audit::finished(caller, &entry.spec.name, None, record.state.as_str());
                    finished(entry, &record).map(Called::Complete)
                }
                Err(e) => Ok(Called::Refused(vec![start_failed(&entry.spec.name, &e)])),
            };
        }
        let started = match entry.engine.start(start.clone()).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(tool = %entry.spec.name, error = %e, "start failed");
                let mut why = vec![start_failed(&entry.spec.name, &e)];
                // The start may have happened: if the engine knows where it would be, give the
                // client the task to check (tasks/get says "not found" if it never started).
                if matches!(e, EngineError::Timeout { .. })
                    && let Some(execution) = entry.engine.execution_for(&start)
                {
                    let maybe = Started {
                        execution,
                        created_at: chrono::Utc::now(),
                    };
                    if let Ok(task) = self.created(caller, entry, &maybe) {
                        why.push(format!(
                            "If it did start, it is task {}: check it with tasks/get before calling again.",
                            task.task_id
                        ));
                    }
                }
                return Ok(Called::Refused(why));
            }
        };
        tracing::info!(tool = %entry.spec.name, execution = %started.execution, as_task, "started");
        audit::started(
            caller,
            &entry.spec.name,
            Some(started.execution.0.as_str()),
            &arguments_digest,
        );
        if as_task && entry.spec.task != TaskSupport::Forbidden {
            return self.created(caller, entry, &started).map(Called::Task);
        }
        self.wait_for_result(caller, entry, &started)
            .await
            .map(Called::Complete)
    }

    /// The task a started execution is, sealed for the caller.
    fn created(
        &self,
        caller: &Caller,
        entry: &ToolEntry,
        started: &Started,
    ) -> Result<TaskView, ErrorData> {
        let task_id = self.task_id(caller, entry, &started.execution, started.created_at)?;
        let at = started
            .created_at
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        // The first interval already respects the engine's quota (many tasks started at once
        // must not all come back in a second).
        let paced = entry
            .engine
            .pacing()
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let poll_interval_ms = entry.presentation.poll_interval_ms.max(paced);
        if let Some(series) = &entry.series {
            series.poll_interval(std::time::Duration::from_millis(poll_interval_ms));
        }
        Ok(TaskView {
            task_id,
            wire: WireTask {
                status_message: Some("Started".to_owned()),
                created_at: at.clone(),
                last_updated_at: at,
                ttl_ms: entry.presentation.ttl_ms,
                poll_interval_ms,
                outcome: Outcome::Working,
            },
        })
    }

    /// The synchronous answer for clients that cannot take a task: wait until the execution
    /// ends or the configured wait (or the caller's deadline) runs out, then stop it, so
    /// nothing runs unobserved; a caller who goes away stops it too.
    async fn wait_for_result(
        &self,
        caller: &Caller,
        entry: &ToolEntry,
        started: &Started,
    ) -> Result<CallToolResult, ErrorData> {
        let name = &entry.spec.name;
        let execution = &started.execution;
        // Armed for the whole wait: a dropped request stops the execution too.
        let guard = StopOnDrop::new(entry, execution, caller);
        let sync_wait = self.inner.options.sync_wait;
        let began = tokio::time::Instant::now();
        let waited = self
            .wait_until_finished(caller, entry, execution, sync_wait, Questions::Stop)
            .await;
        let reason = match waited {
            Waited::Gone => {
                drop(guard);
                return Err(ErrorData::internal_error(
                    "the caller hung up, so the execution was stopped",
                    None,
                ));
            }
            Waited::Finished(record) => {
                guard.disarm();
                return finished(entry, &record);
            }
            Waited::Failed(e) | Waited::OutOfTime(Some(e)) => {
                guard.disarm();
                return Ok(tool_error(name, &e));
            }
            Waited::Asked => {
                "the workflow asked a question, and answering needs a client that supports MCP tasks"
            }
            // The request's own deadline came before the synchronous wait ran out.
            Waited::OutOfTime(None) if began.elapsed() + crate::wait::POLL_CAP < sync_wait => {
                "the workflow did not finish before this request's deadline"
            }
            Waited::OutOfTime(None) => "the workflow did not finish within the synchronous wait",
        };
        // The stop must fit in what is left of the request (which is more than its engine
        // calls had: the stop gets all but the time to answer): past that, the guard stops
        // the execution in the background instead.
        let stop_by = caller
            .deadline()
            .map(|d| d.checked_sub(STOP_MARGIN).unwrap_or(d));
        match flowgate_core::retrying::answer_by(stop_by, entry.engine.cancel(execution)).await {
            Ok(()) => {
                guard.disarm();
                audit::stopped(caller, name, &execution.0, "sync_wait");
            }
            Err(EngineError::Timeout { .. }) => drop(guard),
            Err(e) => {
                guard.disarm();
                tracing::warn!(tool = %name, %execution, error = %e, "stopping the execution failed");
            }
        }
        let waited = began.elapsed().as_secs_f32().round();
        Ok(CallToolResult::error(vec![ContentBlock::text(format!(
            "{name}: {reason} ({waited} s), so it was stopped. Call it from a client that \
             supports the MCP tasks extension to run it in the background."
        ))]))
    }
}

/// What a synchronous call keeps of its deadline to answer after stopping its execution.
const STOP_MARGIN: std::time::Duration = std::time::Duration::from_millis(500);

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
