//! A synchronous caller who hangs up stops its run.
//!
//! A client without tasks waits on its `tools/call` for the result, and has no task id to cancel
//! the run with. When it goes away (the HTTP connection drops, or a stdio client sends
//! `notifications/cancelled`), the wait ends ([`crate::wait::Waited::Gone`]) and the execution is
//! stopped, so nothing runs on that nobody can see or stop. The same happens if the waiting
//! future is dropped without an answer: [`StopOnDrop`] is armed for the whole wait.

use std::sync::Arc;

use flowgate_core::{Engine, ExecutionRef};

use crate::{Caller, ToolEntry, audit};

/// Stops an execution when dropped, unless disarmed first.
pub(crate) struct StopOnDrop {
    engine: Arc<dyn Engine>,
    tool: String,
    execution: Option<ExecutionRef>,
    caller: Caller,
}

impl StopOnDrop {
    /// Armed for `execution` of `entry`, started by `caller`.
    pub(crate) fn new(entry: &ToolEntry, execution: &ExecutionRef, caller: &Caller) -> Self {
        StopOnDrop {
            engine: Arc::clone(&entry.engine),
            tool: entry.spec.name.clone(),
            execution: Some(execution.clone()),
            caller: caller.clone(),
        }
    }

    /// The execution is the caller's to see through: leave it running.
    pub(crate) fn disarm(mut self) {
        self.execution = None;
    }
}

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        let Some(execution) = self.execution.take() else {
            return;
        };
        if !self.engine.capabilities().cancel {
            tracing::info!(tool = %self.tool, %execution, "the caller hung up; this engine cannot stop the execution");
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(tool = %self.tool, %execution, "the caller hung up; no runtime left to stop the execution");
            return;
        };
        let engine = Arc::clone(&self.engine);
        let tool = std::mem::take(&mut self.tool);
        let caller = self.caller.clone();
        runtime.spawn(async move {
            match engine.cancel(&execution).await {
                Ok(()) => {
                    tracing::info!(%tool, %execution, "the caller hung up; execution stopped");
                    audit::stopped(&caller, &tool, &execution.0, "hung_up");
                }
                Err(e) => {
                    tracing::warn!(%tool, %execution, error = %e, "the caller hung up; stopping the execution failed");
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Duration;

    use flowgate_core::testing::{FakeEngine, register};
    use flowgate_core::{Registry, StartRequest, Started, TaskState};
    use serde_json::json;

    use super::*;
    use crate::ToolSet;

    async fn slow_run() -> (FakeEngine, ToolSet, Started) {
        let engine = FakeEngine::new();
        let mut registry = Registry::new();
        register(&mut registry, engine.clone());
        let manifest = flowgate_manifest::parse_str(
            "tools:\n  - name: slow\n    target: { engine: fake }\n",
            Path::new("m.yaml"),
        )
        .expect("manifest");
        let tools = ToolSet::build(&manifest, &registry).expect("tools");
        let script = json!({"script": [{"work": 60_000}]});
        let started = engine
            .start(StartRequest::new("slow", script, "p"))
            .await
            .expect("start");
        (engine, tools, started)
    }

    /// The execution's state once it settles (the stop is asynchronous), within 5 s.
    async fn settled(engine: &FakeEngine, started: &Started) -> TaskState {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            let state = engine.get(&started.execution).await.expect("get").state;
            if state.is_terminal() || tokio::time::Instant::now() >= deadline {
                return state;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    #[tokio::test]
    async fn a_dropped_guard_stops_the_execution_and_a_disarmed_one_does_not() {
        let (engine, tools, started) = slow_run().await;
        let entry = tools.get("slow").expect("slow");
        let caller = Caller::anonymous("r");
        StopOnDrop::new(entry, &started.execution, &caller).disarm();
        // A stop would be spawned at once, and the fake engine's cancel never sleeps: on this
        // single-threaded runtime it would have run after a few yields.
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        let state = engine.get(&started.execution).await.expect("get").state;
        assert!(!state.is_terminal(), "{state:?}");

        drop(StopOnDrop::new(entry, &started.execution, &caller));
        assert_eq!(settled(&engine, &started).await, TaskState::Cancelled);
    }
}
