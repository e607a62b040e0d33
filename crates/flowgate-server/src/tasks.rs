//! `tasks/get`, `tasks/update`, `tasks/cancel`: open the handle, ask the engine.

use flowgate_core::EngineError;
use flowgate_core::handle::TaskHandle;
use flowgate_core::wire::{Outcome, WireTask};
use rmcp::model::{
    DetailedTask, GetTaskResult, InputRequests, InputResponses, Task, TaskPayload, TaskStatus,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use serde_json::json;

use crate::answers;
use crate::errors::{rpc_error, task_not_found};
use crate::retry::{START_DEADLINE, reading, within};
use crate::{FlowgateServer, ToolEntry, audit, principal};

impl FlowgateServer {
    /// Opens a task id for this request's principal and finds its tool. Every failure is the
    /// same "task not found".
    fn open(
        &self,
        task_id: &str,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<(TaskHandle, &ToolEntry), ErrorData> {
        let handle = self
            .inner
            .keys
            .open(task_id, &principal::of(ctx))
            .map_err(|e| {
                tracing::info!(reason = %e, "task handle refused");
                audit::refused(ctx, "task_not_found", None, None);
                task_not_found()
            })?;
        let entry = self
            .inner
            .tools
            .get(&handle.tool)
            .filter(|e| e.engine.kind() == handle.engine)
            .ok_or_else(task_not_found)?;
        Ok((handle, entry))
    }

    pub(crate) async fn task_get(
        &self,
        task_id: &str,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        let (handle, entry) = self.open(task_id, ctx)?;
        let how = entry.presentation.clone();
        let kind = entry.engine.kind();
        let wire = match reading(kind, || entry.engine.get(&handle.execution)).await {
            Ok(mut record) => {
                known_times(&mut record, &handle);
                if record.state.is_terminal() {
                    let execution = Some(handle.execution.0.as_str());
                    audit::finished(ctx, &entry.spec.name, execution, record.state.as_str());
                }
                entry.project(&record)
            }
            Err(e) if e.is_retryable() => {
                // The engine holds the task; it is unreachable or rate-limiting right now, not
                // lost. Report that on the task and ask the client to come back later.
                tracing::warn!(tool = %entry.spec.name, error = %e, "engine unreachable on tasks/get");
                let at = handle
                    .created_at
                    .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
                let (status_message, poll_interval_ms) = match &e {
                    EngineError::Throttled { retry_after, .. } => (
                        "The engine is rate-limiting flowgate's calls right now; the task is kept \
                         and will be checked again"
                            .to_owned(),
                        retry_after
                            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
                            .unwrap_or(0)
                            .max(how.poll_interval_ms.saturating_mul(4)),
                    ),
                    _ => (
                        format!(
                            "The engine is unreachable ({e}); the task is kept and will be checked again"
                        ),
                        how.poll_interval_ms.saturating_mul(4),
                    ),
                };
                WireTask {
                    status_message: Some(status_message),
                    created_at: at.clone(),
                    last_updated_at: at,
                    ttl_ms: how.ttl_ms,
                    poll_interval_ms,
                    outcome: Outcome::Working,
                }
            }
            Err(e) => return Err(rpc_error(&entry.spec.name, &e)),
        };
        Ok(GetTaskResult::new(detailed(task_id, wire)))
    }

    pub(crate) async fn task_update(
        &self,
        task_id: &str,
        responses: InputResponses,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let (handle, entry) = self.open(task_id, ctx)?;
        if responses.is_empty() {
            return Ok(());
        }
        // The questions' schemas live in the engine's record: read it once, check every answer
        // against it, and deliver only when all of them are sound.
        let kind = entry.engine.kind();
        let record = reading(kind, || entry.engine.get(&handle.execution))
            .await
            .map_err(|e| rpc_error(&entry.spec.name, &e))?;
        let mut delivered = serde_json::Map::new();
        for (key, response) in answers::checked(&record, responses)? {
            match within(START_DEADLINE, kind, || {
                entry
                    .engine
                    .respond(&handle.execution, &key, response.clone())
            })
            .await
            {
                Ok(()) => {
                    delivered.insert(key, serde_json::to_value(&response).unwrap_or_default());
                }
                // Answered meanwhile (first answer wins): ignored, as for any stray key.
                Err(e) if e.is_not_found() => {
                    tracing::debug!(key, "ignored a response to a key that is not outstanding");
                }
                Err(e) => return Err(rpc_error(&entry.spec.name, &e)),
            }
        }
        if !delivered.is_empty() {
            let count = delivered.len();
            let execution = handle.execution.0.as_str();
            let answers = serde_json::Value::Object(delivered);
            audit::answered(ctx, &entry.spec.name, execution, &answers, count);
        }
        Ok(())
    }

    pub(crate) async fn task_cancel(
        &self,
        task_id: &str,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let (handle, entry) = self.open(task_id, ctx)?;
        within(START_DEADLINE, entry.engine.kind(), || {
            entry.engine.cancel(&handle.execution)
        })
        .await
        .map_err(|e| rpc_error(&entry.spec.name, &e))?;
        tracing::info!(tool = %entry.spec.name, execution = %handle.execution, "cancel requested");
        audit::cancelled(ctx, &entry.spec.name, handle.execution.0.as_str());
        Ok(())
    }
}

/// An engine may not have a creation time yet (a Workflows execution QUEUED in a backlog has
/// no `startTime`): the handle's, from when the start returned, is the task's creation then,
/// never 1970 (clients computing `createdAt + ttlMs` would take the task for expired).
fn known_times(record: &mut flowgate_core::ExecutionRecord, handle: &TaskHandle) {
    if record.created_at.timestamp() <= 0 {
        record.created_at = handle.created_at;
    }
    if record.updated_at < record.created_at {
        record.updated_at = record.created_at;
    }
}

impl FlowgateServer {
    /// The caller's tasks as 2025-11-25 `Task`s (`tasks/list`), newest first: the executions
    /// each tool's engine lists for this principal (tools whose engine cannot list are left
    /// out), at most `limit` (and never more than [`LIST_LIMIT`]) in all.
    pub(crate) async fn list_tasks_2025(
        &self,
        principal: &str,
        limit: usize,
    ) -> Vec<serde_json::Value> {
        let limit = limit.min(LIST_LIMIT);
        let digest = principal::digest(principal);
        let mut found = Vec::new();
        for entry in self.inner.tools.iter() {
            if !entry.engine.capabilities().list {
                continue;
            }
            let filter = flowgate_core::ListFilter::for_principal(digest.clone(), Some(limit));
            let listed = match reading(entry.engine.kind(), || entry.engine.list(filter.clone()))
                .await
            {
                Ok(listed) => listed,
                Err(e) => {
                    tracing::warn!(tool = %entry.spec.name, error = %e, "tasks/list: the engine could not list");
                    continue;
                }
            };
            for summary in listed {
                let handle = TaskHandle {
                    engine: entry.engine.kind().to_owned(),
                    tool: entry.spec.name.clone(),
                    execution: summary.execution,
                    created_at: summary.created_at,
                };
                let at = summary
                    .created_at
                    .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
                let status = match summary.state {
                    flowgate_core::TaskState::InputRequired => "input_required",
                    flowgate_core::TaskState::Completed => "completed",
                    flowgate_core::TaskState::Failed | flowgate_core::TaskState::Unknown => {
                        "failed"
                    }
                    flowgate_core::TaskState::Cancelled => "cancelled",
                    _ => "working",
                };
                found.push((
                    summary.created_at,
                    json!({
                        "taskId": self.inner.keys.seal(&handle, principal),
                        "status": status,
                        "createdAt": at,
                        "lastUpdatedAt": at,
                        "ttl": entry.presentation.ttl_ms,
                        "pollInterval": entry.presentation.poll_interval_ms,
                    }),
                ));
            }
        }
        found.sort_by_key(|t| std::cmp::Reverse(t.0));
        found.truncate(limit);
        found.into_iter().map(|(_, t)| t).collect()
    }
}

/// The most tasks `tasks/list` reaches into (its pages included).
const LIST_LIMIT: usize = 1000;

/// Builds rmcp's `DetailedTask` from the core's projection.
fn detailed(task_id: &str, wire: WireTask) -> DetailedTask {
    let (status, payload) = match wire.outcome {
        Outcome::Working => (TaskStatus::Working, TaskPayload::Working),
        Outcome::InputRequired(map) => {
            let input_requests: InputRequests =
                serde_json::from_value(serde_json::Value::Object(map)).unwrap_or_default();
            (
                TaskStatus::InputRequired,
                TaskPayload::InputRequired { input_requests },
            )
        }
        Outcome::Completed(result) => {
            let result = match result {
                serde_json::Value::Object(map) => map,
                _ => Default::default(),
            };
            (TaskStatus::Completed, TaskPayload::Completed { result })
        }
        Outcome::Failed(e) => {
            let mut error = json!({"code": e.code, "message": e.message});
            if let Some(data) = e.data {
                error["data"] = data;
            }
            let error = match error {
                serde_json::Value::Object(map) => map,
                _ => Default::default(),
            };
            (TaskStatus::Failed, TaskPayload::Failed { error })
        }
        Outcome::Cancelled => (TaskStatus::Cancelled, TaskPayload::Cancelled),
    };
    let mut task = Task::new(task_id, status, wire.created_at, wire.last_updated_at)
        .with_poll_interval_ms(wire.poll_interval_ms);
    if let Some(ttl) = wire.ttl_ms {
        task = task.with_ttl_ms(ttl);
    }
    if let Some(message) = wire.status_message {
        task = task.with_status_message(message);
    }
    DetailedTask::new(task, payload)
}
