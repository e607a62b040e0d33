//! `tasks/get`, `tasks/update`, `tasks/cancel` and the listing of a caller's tasks: open the
//! handle for the caller, ask the engine. Every transport and both task dialects call these.

use flowgate_core::handle::{OpenedTask, TaskHandle};
use flowgate_core::wire::{self, Envelope, Outcome, WireTask};
use flowgate_core::{EngineError, ExecutionRecord, ExecutionRef, ListFilter};
use rmcp::ErrorData;
use rmcp::model::InputResponses;

use crate::answers;
use std::sync::Arc;

use crate::errors::{rpc_error, task_not_found, tool_gone};
use crate::{Caller, FlowgateServer, ToolEntry, audit};

/// A task as the operations answer it: its id and its projection, which each dialect shapes.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TaskView {
    /// The sealed handle.
    pub(crate) task_id: String,
    /// The task on the wire.
    pub(crate) wire: WireTask,
}

/// One of a caller's tasks as `tasks/list` shows it (status and times, no payload).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ListedTask {
    pub(crate) task_id: String,
    pub(crate) status: wire::WireStatus,
    pub(crate) created_at: String,
    pub(crate) ttl_ms: Option<u64>,
    pub(crate) poll_interval_ms: u64,
}

impl ListedTask {
    /// The task without a payload (a listed task's last change is not known: its creation).
    pub(crate) fn envelope(&self) -> Envelope<'_> {
        Envelope {
            status: self.status,
            status_message: None,
            created_at: &self.created_at,
            last_updated_at: &self.created_at,
            ttl_ms: self.ttl_ms,
            poll_interval_ms: self.poll_interval_ms,
        }
    }
}

/// The most tasks a listing reaches into (its pages included).
pub(crate) const LIST_LIMIT: usize = 1000;

impl FlowgateServer {
    /// Opens a task id for the caller's principal and finds its tool. Every failure is the
    /// same "task not found".
    pub(crate) fn open(
        &self,
        caller: &Caller,
        task_id: &str,
    ) -> Result<(TaskHandle, Arc<ToolEntry>), ErrorData> {
        let opened = self
            .inner
            .keys
            .open(task_id, caller.principal_key())
            .map_err(|e| {
                tracing::info!(reason = %e, "task handle refused");
                audit::refused(caller, "task_not_found", None, None);
                task_not_found()
            })?;
        // The id is the caller's own: saying that its tool is gone tells it nothing new.
        let (handle, entry) = match opened {
            OpenedTask::Compact {
                tool,
                created_at,
                locator,
            } => {
                let entry = self.entry_by_tag(&tool).ok_or_else(|| tool_gone(None))?;
                let handle = TaskHandle {
                    engine: entry.engine.kind().to_owned(),
                    tool: entry.spec.name.clone(),
                    execution: entry.engine.reference_at(&locator),
                    created_at,
                };
                (handle, entry)
            }
            OpenedTask::Legacy(handle) => {
                let entry = self
                    .entry_for(&handle.tool, &handle.engine)
                    .ok_or_else(|| tool_gone(Some(&handle.tool)))?;
                (handle, entry)
            }
        };
        flowgate_telemetry::request::tool(caller.span(), &entry.spec.name);
        Ok((handle, entry))
    }

    /// The task id of `execution`, started by `entry`'s tool at `created_at`, for the caller.
    ///
    /// # Errors
    /// An internal error when the engine's reference does not fit a task id (every engine's
    /// longest fits by design: module `flowgate_core::handle`), or is not the tool's.
    pub(crate) fn task_id(
        &self,
        caller: &Caller,
        entry: &ToolEntry,
        execution: &ExecutionRef,
        created_at: chrono::DateTime<chrono::Utc>,
    ) -> Result<String, ErrorData> {
        let refused = |why: String| {
            tracing::error!(tool = %entry.spec.name, %execution, why, "no task id for the execution");
            ErrorData::internal_error(
                format!(
                    "the execution started, but flowgate cannot make a task id for it ({why}); \
                     the server's log names the execution"
                ),
                None,
            )
        };
        let locator = entry
            .engine
            .locator(execution)
            .ok_or_else(|| refused("the reference is not this tool's".to_owned()))?;
        self.inner
            .keys
            .seal(entry.tag, created_at, locator, caller.principal_key())
            .map_err(|e| refused(e.to_string()))
    }

    /// `tasks/get`: the task as the engine has it now.
    pub(crate) async fn task_get(
        &self,
        caller: &Caller,
        task_id: &str,
    ) -> Result<TaskView, ErrorData> {
        let (handle, entry) = self.open(caller, task_id)?;
        let how = &entry.presentation;
        let wire = match entry.engine.get(&handle.execution).await {
            Ok(mut record) => {
                known_times(&mut record, &handle);
                if record.state.is_terminal() {
                    let execution = Some(handle.execution.0.as_str());
                    audit::finished(caller, &entry.spec.name, execution, record.state.as_str());
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
        if let Some(series) = &entry.series {
            let interval = std::time::Duration::from_millis(wire.poll_interval_ms);
            series.task_get(interval);
        }
        Ok(TaskView {
            task_id: task_id.to_owned(),
            wire,
        })
    }

    /// `tasks/update`: answers to the task's outstanding questions, all checked before any is
    /// delivered.
    pub(crate) async fn task_update(
        &self,
        caller: &Caller,
        task_id: &str,
        responses: InputResponses,
    ) -> Result<(), ErrorData> {
        let (handle, entry) = self.open(caller, task_id)?;
        if responses.is_empty() {
            return Ok(());
        }
        // The questions' schemas live in the engine's record: read it once, check every answer
        // against it, and deliver only when all of them are sound.
        let record = entry
            .engine
            .get(&handle.execution)
            .await
            .map_err(|e| rpc_error(&entry.spec.name, &e))?;
        let mut delivered = serde_json::Map::new();
        for (key, response) in answers::checked(&record, responses)? {
            match entry
                .engine
                .respond(&handle.execution, &key, response.clone())
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
            audit::answered(caller, &entry.spec.name, execution, &answers, count);
        }
        Ok(())
    }

    /// `tasks/cancel`: asks the engine to stop the execution.
    pub(crate) async fn task_cancel(
        &self,
        caller: &Caller,
        task_id: &str,
    ) -> Result<(), ErrorData> {
        let (handle, entry) = self.open(caller, task_id)?;
        entry
            .engine
            .cancel(&handle.execution)
            .await
            .map_err(|e| rpc_error(&entry.spec.name, &e))?;
        tracing::info!(tool = %entry.spec.name, execution = %handle.execution, "cancel requested");
        audit::cancelled(caller, &entry.spec.name, handle.execution.0.as_str());
        Ok(())
    }

    /// The caller's tasks, newest first: the executions each tool's engine lists for the
    /// caller's principal tag (tools whose engine cannot list are left out), at most `limit`
    /// (and never more than [`LIST_LIMIT`]) in all. Their ids are sealed afresh.
    pub(crate) async fn task_list(&self, caller: &Caller, limit: usize) -> Vec<ListedTask> {
        let limit = limit.min(LIST_LIMIT);
        let tag = caller.principal_tag();
        let mut found = Vec::new();
        for entry in self.tools().iter() {
            if !entry.engine.capabilities().list {
                continue;
            }
            let filter = ListFilter::for_principal(tag.clone(), Some(limit));
            let listed = match entry.engine.list(filter).await {
                Ok(listed) => listed,
                Err(e) => {
                    tracing::warn!(tool = %entry.spec.name, error = %e, "tasks/list: the engine could not list");
                    continue;
                }
            };
            for summary in listed {
                let Ok(task_id) =
                    self.task_id(caller, entry, &summary.execution, summary.created_at)
                else {
                    continue;
                };
                found.push((
                    summary.created_at,
                    ListedTask {
                        task_id,
                        status: wire::status(summary.state, entry.presentation.failure),
                        created_at: summary
                            .created_at
                            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
                        ttl_ms: entry.presentation.ttl_ms,
                        poll_interval_ms: entry.presentation.poll_interval_ms,
                    },
                ));
            }
        }
        found.sort_by_key(|t| std::cmp::Reverse(t.0));
        found.truncate(limit);
        found.into_iter().map(|(_, t)| t).collect()
    }
}

/// An engine may not have a creation time yet (a Workflows execution QUEUED in a backlog has
/// no `startTime`): the handle's, from when the start returned, is the task's creation then,
/// never 1970 (clients computing `createdAt + ttlMs` would take the task for expired).
pub(crate) fn known_times(record: &mut ExecutionRecord, handle: &TaskHandle) {
    if record.created_at.timestamp() <= 0 {
        record.created_at = handle.created_at;
    }
    if record.updated_at < record.created_at {
        record.updated_at = record.created_at;
    }
}
