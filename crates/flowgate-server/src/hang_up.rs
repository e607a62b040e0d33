//! A synchronous caller who hangs up stops its run.
//!
//! A client without tasks waits on its `tools/call` for the result, and has no task id to cancel
//! the run with. When it goes away (the HTTP connection drops, or a stdio client sends
//! `notifications/cancelled`), rmcp cancels the request's token; the execution is then stopped,
//! so nothing runs on that nobody can see or stop. The same happens if the waiting future is
//! dropped without an answer.

use std::future::Future;
use std::sync::Arc;

use flowgate_core::{Engine, ExecutionRef};
use rmcp::ErrorData;
use rmcp::model::CallToolResult;
use tokio_util::sync::CancellationToken;

use crate::ToolEntry;
use crate::audit::Origin;
use crate::retry::retrying;

/// Runs `wait` until it answers, or stops the execution if the caller is `gone` first.
///
/// # Errors
/// `wait`'s error, or an internal error (which nobody reads) when the caller hung up.
pub(crate) async fn unless_hung_up<F>(
    entry: &ToolEntry,
    execution: &ExecutionRef,
    gone: &CancellationToken,
    origin: Origin,
    wait: F,
) -> Result<CallToolResult, ErrorData>
where
    F: Future<Output = Result<CallToolResult, ErrorData>>,
{
    let guard = StopOnDrop {
        engine: Arc::clone(&entry.engine),
        tool: entry.spec.name.clone(),
        execution: Some(execution.clone()),
        origin,
    };
    tokio::select! {
        biased;
        answer = wait => {
            guard.disarm();
            answer
        }
        () = gone.cancelled() => {
            drop(guard);
            Err(ErrorData::internal_error("the caller hung up, so the execution was stopped", None))
        }
    }
}

/// Stops an execution when dropped, unless disarmed first.
struct StopOnDrop {
    engine: Arc<dyn Engine>,
    tool: String,
    execution: Option<ExecutionRef>,
    origin: Origin,
}

impl StopOnDrop {
    fn disarm(mut self) {
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
        let origin = std::mem::take(&mut self.origin);
        runtime.spawn(async move {
            match retrying(|| engine.cancel(&execution)).await {
                Ok(()) => {
                    tracing::info!(%tool, %execution, "the caller hung up; execution stopped");
                    crate::audit::stopped(&origin, &tool, &execution.0, "hung_up");
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

    async fn state_after_a_moment(engine: &FakeEngine, started: &Started) -> TaskState {
        for _ in 0..50 {
            let state = engine.get(&started.execution).await.expect("get").state;
            if state.is_terminal() {
                return state;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        engine.get(&started.execution).await.expect("get").state
    }

    #[tokio::test]
    async fn a_caller_who_hangs_up_stops_the_execution() {
        let (engine, tools, started) = slow_run().await;
        let entry = tools.get("slow").expect("slow");
        let gone = CancellationToken::new();
        let waiting = unless_hung_up(
            entry,
            &started.execution,
            &gone,
            Origin::default(),
            std::future::pending(),
        );
        gone.cancel();
        assert!(waiting.await.is_err());
        assert_eq!(
            state_after_a_moment(&engine, &started).await,
            TaskState::Cancelled
        );
    }

    #[tokio::test]
    async fn a_dropped_wait_stops_the_execution_and_an_answer_does_not() {
        let (engine, tools, started) = slow_run().await;
        let entry = tools.get("slow").expect("slow");
        let gone = CancellationToken::new();
        let answered = unless_hung_up(entry, &started.execution, &gone, Origin::default(), async {
            Ok(CallToolResult::success(vec![]))
        })
        .await;
        assert!(answered.is_ok());
        tokio::time::sleep(Duration::from_millis(100)).await;
        let state = engine.get(&started.execution).await.expect("get").state;
        assert!(!state.is_terminal(), "{state:?}");

        let waiting = Box::pin(unless_hung_up(
            entry,
            &started.execution,
            &gone,
            Origin::default(),
            std::future::pending(),
        ));
        let polled = tokio::time::timeout(Duration::from_millis(20), waiting).await;
        assert!(polled.is_err(), "still waiting, then dropped");
        assert_eq!(
            state_after_a_moment(&engine, &started).await,
            TaskState::Cancelled
        );
    }
}
