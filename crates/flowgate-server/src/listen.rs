//! `subscriptions/listen` (2026-07-28): push instead of polling, for a caller's own tasks and
//! for the tool list.
//!
//! flowgate keeps no state, so a listener is nothing but a request held open by the instance
//! that received it. The dispatcher ([`open`]) decides what the listener will push: each
//! requested task id is opened for the caller's principal as `tasks/get` opens it, and one that
//! does not open (forged, another principal's, unknown) is left out of the acknowledgement,
//! which says exactly what will be pushed; `toolsListChanged` is honoured, nothing else is
//! (flowgate has no prompts or resources). The listener takes one of the caller's hold slots,
//! like any other held request, so a caller cannot open listeners without bound.
//!
//! [`Listener::run`] then writes, through the transport's sink:
//!
//! 1. `notifications/subscriptions/acknowledged` with the filter it honours;
//! 2. `notifications/tasks` (the task as `tasks/get` answers it, with the subscription id in
//!    `_meta`) the first time it reads each task and each time its status or status message
//!    changes after, the last one when the task ends; `notifications/tools/list_changed` when
//!    a manifest reload replaces the tools;
//! 3. the `subscriptions/listen` result (`resultType: "complete"`, the subscription id in
//!    `_meta`) when it ends gracefully: every task it follows has ended (and it follows no
//!    tool list), the request's deadline is near (Lambda, Cloud Run: the client opens it
//!    again), or (where the platform delivers a body only when the request ends) after the
//!    first change it pushes.
//!
//! It reads each task with `tasks/get`'s own operation ([`FlowgateServer::task_get`]), so a
//! listener costs the engine what a client polling at the task's advertised `pollIntervalMs`
//! would, through the same pacing and record reuse, never more; the moment the caller is gone
//! it reads nothing more and writes nothing more.

use std::time::Duration;

use flowgate_core::wire::WireStatus;
use rmcp::ErrorData;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::holds::{HoldSlot, too_many_holds};
use crate::{Caller, FlowgateServer, audit, params};

/// The most task ids one listener follows; the ones after are left out of the
/// acknowledgement (a client wanting more opens another listener, against its hold cap).
pub(crate) const MAX_TASKS: usize = 100;

/// The `_meta` key naming the subscription (the listen request's id) on everything a listener
/// writes.
const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// The listen request's params: rmcp's `SubscriptionFilter` has no `taskIds`, so flowgate reads
/// its own (unknown categories are ignored, as the filter's are).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ListenParams {
    notifications: Filter,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Filter {
    #[serde(default)]
    task_ids: Option<Vec<String>>,
    #[serde(default)]
    tools_list_changed: Option<bool>,
}

/// One open `subscriptions/listen`, ready to run on the transport's stream.
pub(crate) struct Listener {
    /// The request's id: the subscription's id.
    id: Value,
    /// The task ids it follows (each opened for the caller), in the order asked.
    tasks: Vec<String>,
    /// Tool-list generations, when the client asked for `toolsListChanged`.
    tools: Option<watch::Receiver<u64>>,
    /// End after the first change pushed (the platform delivers a body only when the request
    /// ends).
    end_at_push: bool,
    _slot: HoldSlot,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener")
            .field("id", &self.id)
            .field("tasks", &self.tasks.len())
            .field("tools", &self.tools.is_some())
            .finish_non_exhaustive()
    }
}

/// Opens `subscriptions/listen` for `caller`: what it will push, and its hold slot.
///
/// # Errors
/// `-32602` for params that are no filter, `-32021` when the client asks for task ids without
/// declaring the tasks extension (`tasks_declared`), and the hold cap's error when the caller
/// already holds the most it may.
pub(crate) fn open(
    server: &FlowgateServer,
    caller: &Caller,
    id: Option<&Value>,
    params: Option<&Value>,
    tasks_declared: impl FnOnce() -> Result<(), ErrorData>,
) -> Result<Listener, ErrorData> {
    let params = params.map(|p| {
        let mut p = p.clone();
        if let Value::Object(map) = &mut p {
            map.remove("_meta");
        }
        p
    });
    let request: ListenParams = params::decode("subscriptions/listen", params.as_ref())?;
    let filter = request.notifications;
    let asked = filter.task_ids.unwrap_or_default();
    let followed = if asked.is_empty() {
        Vec::new()
    } else {
        tasks_declared()?;
        let mut followed: Vec<String> = Vec::new();
        for task_id in asked {
            if followed.len() == MAX_TASKS {
                break;
            }
            // What does not open for this caller is left out, as `tasks/get` would refuse it.
            if !followed.contains(&task_id) && server.open(caller, &task_id).is_ok() {
                followed.push(task_id);
            }
        }
        followed
    };
    let slot = server.hold(caller).map_err(too_many_holds)?;
    let tools = (filter.tools_list_changed == Some(true)).then(|| server.tools_changed());
    audit::subscribed(caller, followed.len(), tools.is_some());
    Ok(Listener {
        id: id.cloned().unwrap_or(Value::Null),
        tasks: followed,
        tools,
        end_at_push: false,
        _slot: slot,
    })
}

/// How a listener ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Closed {
    /// Gracefully, with its result written.
    Complete,
    /// The caller went away: nothing more was written.
    Gone,
}

/// A task a listener follows: when to read it next, and what it last pushed of it.
struct Followed {
    task_id: String,
    next: Instant,
    last: Option<(WireStatus, Option<String>)>,
}

impl Listener {
    /// This listener, ending after the first change it pushes (a platform that delivers a body
    /// only when the request ends: the client gets the states it found and the change, then
    /// opens it again; ending at the first state found would make that a busy poll).
    pub(crate) fn ending_at_first_push(mut self) -> Self {
        self.end_at_push = true;
        self
    }

    /// Writes the acknowledgement, then what it pushes, to `send`, until it ends; the final
    /// result too when it ends gracefully.
    pub(crate) async fn run(
        mut self,
        server: &FlowgateServer,
        caller: &Caller,
        send: &mut (dyn FnMut(Value) + Send),
    ) -> Closed {
        let metrics = flowgate_telemetry::metrics::get();
        if let Some(metrics) = metrics {
            metrics.listener_opened();
        }
        let _open = Open(metrics);
        send(self.acknowledgement());
        let mut tools = self.tools.take();
        let end = caller.answer_by();
        let now = Instant::now();
        let mut followed: Vec<Followed> = self
            .tasks
            .iter()
            .map(|task_id| Followed {
                task_id: task_id.clone(),
                next: now,
                last: None,
            })
            .collect();
        loop {
            if followed.is_empty() && tools.is_none() {
                break;
            }
            let due = followed.iter().map(|f| f.next).min();
            let tools_changed = async {
                match &mut tools {
                    Some(tools) => tools.changed().await.is_ok(),
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                () = caller.gone() => return Closed::Gone,
                () = until(end) => break,
                changed = tools_changed => {
                    if !changed {
                        // The server is gone: no reload will come.
                        tools = None;
                        continue;
                    }
                    send(self.notification("notifications/tools/list_changed", Map::new()));
                    if let Some(metrics) = metrics {
                        metrics.notification_pushed("tools_list_changed");
                    }
                    if self.end_at_push {
                        break;
                    }
                }
                () = until(due) => {
                    let changed = tokio::select! {
                        biased;
                        () = caller.gone() => return Closed::Gone,
                        changed = self.read_due(server, caller, &mut followed, send) => changed,
                    };
                    if changed && self.end_at_push {
                        break;
                    }
                }
            }
        }
        send(self.result());
        Closed::Complete
    }

    /// Reads every task due now, pushes what changed (and the state of a task read for the
    /// first time), and forgets the tasks that ended (or can no longer be read). Whether it
    /// pushed a change.
    async fn read_due(
        &self,
        server: &FlowgateServer,
        caller: &Caller,
        followed: &mut Vec<Followed>,
        send: &mut (dyn FnMut(Value) + Send),
    ) -> bool {
        let now = Instant::now();
        let due: Vec<usize> = (0..followed.len())
            .filter(|&i| followed[i].next <= now)
            .collect();
        let reads = futures::future::join_all(due.iter().map(|&i| {
            let task_id = followed[i].task_id.clone();
            async move {
                let read = caller.bounded(server.task_get(caller, &task_id)).await;
                // The engine's own pacing is a floor, as it is for a held request.
                let pacing = server
                    .open(caller, &task_id)
                    .ok()
                    .and_then(|(_, entry)| entry.engine.pacing())
                    .unwrap_or_default();
                (read, pacing)
            }
        }))
        .await;
        let metrics = flowgate_telemetry::metrics::get();
        let mut changed = false;
        let mut ended = Vec::new();
        for (&i, (read, pacing)) in due.iter().zip(reads) {
            let task = &mut followed[i];
            let view = match read {
                Ok(view) => view,
                Err(e) => {
                    // Gone from the engine (expired, purged) or its tool removed: nothing more
                    // will change that this listener could push.
                    tracing::info!(error = %e.message, "a listened task can no longer be read");
                    ended.push(i);
                    continue;
                }
            };
            let envelope = view.wire.envelope();
            let now = (envelope.status, envelope.status_message.map(str::to_owned));
            let terminal = matches!(
                envelope.status,
                WireStatus::Completed | WireStatus::Failed | WireStatus::Cancelled
            );
            let interval = Duration::from_millis(envelope.poll_interval_ms).max(pacing);
            if task.last.as_ref() != Some(&now) {
                let params = match serde_json::to_value(crate::shapes::detailed(view)) {
                    Ok(Value::Object(params)) => params,
                    _ => Map::new(),
                };
                send(self.notification("notifications/tasks", params));
                if let Some(metrics) = metrics {
                    metrics.notification_pushed("tasks");
                }
                // A change, not the state the listener found the task in.
                changed |= task.last.is_some();
                task.last = Some(now);
            }
            if terminal {
                ended.push(i);
            } else {
                task.next = Instant::now() + interval;
            }
        }
        for i in ended.into_iter().rev() {
            followed.remove(i);
        }
        changed
    }

    /// `notifications/subscriptions/acknowledged`: the filter honoured.
    fn acknowledgement(&self) -> Value {
        let mut notifications = Map::new();
        if !self.tasks.is_empty() || self.tools.is_none() {
            notifications.insert("taskIds".into(), json!(self.tasks));
        }
        if self.tools.is_some() {
            notifications.insert("toolsListChanged".into(), json!(true));
        }
        let mut params = Map::new();
        params.insert("notifications".into(), Value::Object(notifications));
        self.notification("notifications/subscriptions/acknowledged", params)
    }

    /// A notification of this subscription: `params` with the subscription id in `_meta`.
    fn notification(&self, method: &str, mut params: Map<String, Value>) -> Value {
        params.insert("_meta".into(), json!({ SUBSCRIPTION_ID: self.id }));
        json!({"jsonrpc": "2.0", "method": method, "params": params})
    }

    /// The graceful end, for a transport that ends the listener itself (shutdown).
    pub(crate) fn closing(&self) -> Value {
        self.result()
    }

    /// The `subscriptions/listen` result: the graceful end.
    fn result(&self) -> Value {
        json!({
            "jsonrpc": "2.0",
            "id": self.id,
            "result": {"resultType": "complete", "_meta": { SUBSCRIPTION_ID: self.id }},
        })
    }
}

/// Counts the listener as open while it lives.
struct Open(Option<&'static flowgate_telemetry::metrics::Metrics>);

impl Drop for Open {
    fn drop(&mut self) {
        if let Some(metrics) = self.0 {
            metrics.listener_closed();
        }
    }
}

/// Completes at `at` (never, without one).
async fn until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
