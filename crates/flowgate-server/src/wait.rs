//! Waiting until an execution finishes, for the requests that hold until it does: a
//! synchronous `tools/call` (a client that cannot take a task) and the 2025-11-25 dialect's
//! `tasks/result`.
//!
//! One loop for both. It reads the engine as a polling client would be told to (the tool's
//! interval, at most [`POLL_CAP`] apart, but never faster than the engine's pacing, the
//! record's own minimum or a throttle's `Retry-After`), and stops at the first of: the end of
//! the execution, a question the caller cannot answer (or, where the platform delivers a body
//! only when the request ends, the first question sent), the hold running out, the caller's
//! deadline (less [`crate::caller::DEADLINE_MARGIN`], so the answer still reaches it), or the caller going
//! away ([`Caller::gone`]): the moment it is gone, no engine read is made.

use std::collections::HashSet;
use std::time::Duration;

use flowgate_core::wire::{self, Outcome};
use flowgate_core::{EngineError, ExecutionRecord, ExecutionRef};
use serde_json::Value;
use tokio::time::Instant;

use crate::{Caller, FlowgateServer, ToolEntry, audit};

/// The longest a wait sleeps between two reads when the tool's interval is longer (a waiting
/// caller learns of the end quickly).
pub(crate) const POLL_CAP: Duration = Duration::from_millis(250);

/// What a wait does with the questions the execution asks.
pub(crate) enum Questions<'a> {
    /// The caller cannot answer one: the wait ends at the first ([`Waited::Asked`]).
    Stop,
    /// The caller answers them elsewhere (`tasks/update`): keep waiting.
    Wait,
    /// Each question not sent before goes to `ask` (its key and its `{method, params}`
    /// elicitation request), and the wait goes on; with `then_end`, the wait ends once it has
    /// sent some ([`Waited::Asked`]): the transport delivers them only when the request ends.
    Forward {
        ask: &'a mut (dyn FnMut(&str, &Value) + Send),
        then_end: bool,
    },
}

/// How a wait ended.
#[derive(Debug)]
pub(crate) enum Waited {
    /// The execution ended; its last record.
    Finished(ExecutionRecord),
    /// It asked a question, and the caller cannot answer one ([`Questions::Stop`]), or
    /// the questions were sent and the request must end for them to arrive.
    Asked,
    /// The hold or the caller's deadline came first; the last passing engine fault, if the
    /// last read failed with one.
    OutOfTime(Option<EngineError>),
    /// The caller went away.
    Gone,
    /// The engine refused for good (no such execution, denied, ...).
    Failed(EngineError),
}

impl FlowgateServer {
    /// Reads `execution` of `entry` until it finishes, for at most `hold` (and never past
    /// the caller's deadline). The first read is at once.
    pub(crate) async fn wait_until_finished(
        &self,
        caller: &Caller,
        entry: &ToolEntry,
        execution: &ExecutionRef,
        hold: Duration,
        mut questions: Questions<'_>,
    ) -> Waited {
        let mut end = Instant::now() + hold;
        if let Some(by) = caller.answer_by() {
            end = end.min(by);
        }
        let floor = Duration::from_millis(entry.presentation.poll_interval_ms).min(POLL_CAP);
        let mut asked = HashSet::new();
        loop {
            let read = tokio::select! {
                biased;
                () = caller.gone() => return Waited::Gone,
                read = entry.engine.get(execution) => read,
            };
            let mut last_error = None;
            let mut pause = floor.max(entry.engine.pacing().unwrap_or_default());
            match read {
                Ok(record) if record.state.is_terminal() => {
                    let name = &entry.spec.name;
                    audit::finished(caller, name, Some(&execution.0), record.state.as_str());
                    return Waited::Finished(record);
                }
                Ok(record) => {
                    if let Outcome::InputRequired(open) =
                        wire::outcome(&record, &entry.presentation)
                    {
                        match &mut questions {
                            Questions::Stop => return Waited::Asked,
                            Questions::Wait => {}
                            Questions::Forward { ask, then_end } => {
                                let mut sent = false;
                                for (key, request) in &open {
                                    if asked.insert(key.clone()) {
                                        ask(key, request);
                                        sent = true;
                                    }
                                }
                                if sent && *then_end {
                                    return Waited::Asked;
                                }
                            }
                        }
                    }
                    pause = pause.max(record.min_poll_interval.unwrap_or_default());
                }
                Err(e) if e.is_retryable() => {
                    if let EngineError::Throttled {
                        retry_after: Some(after),
                        ..
                    } = &e
                    {
                        pause = pause.max(*after);
                    }
                    last_error = Some(e);
                }
                Err(e) => return Waited::Failed(e),
            }
            if Instant::now() + pause > end {
                // Sleep out what is left of the hold only if a read could still fit in it.
                return Waited::OutOfTime(last_error);
            }
            tokio::select! {
                biased;
                () = caller.gone() => return Waited::Gone,
                () = tokio::time::sleep(pause) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use flowgate_core::handle::{HandleKey, Keyring};
    use flowgate_core::testing::{FakeEngine, register};
    use flowgate_core::{Engine, Registry, StartRequest, Started};
    use serde_json::json;
    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::caller::DEADLINE_MARGIN;
    use crate::{ServerOptions, ToolSet};

    async fn running(script: Value) -> (FlowgateServer, FakeEngine, Started) {
        let engine = FakeEngine::new();
        let mut registry = Registry::new();
        register(&mut registry, engine.clone());
        let manifest = flowgate_manifest::parse_str(
            "tools:\n  - name: t\n    poll_interval_ms: 100\n    target: { engine: fake }\n",
            Path::new("m.yaml"),
        )
        .expect("manifest");
        let tools = ToolSet::build(&manifest, &registry).expect("tools");
        let keys = Keyring::new(HandleKey::random("k").expect("key"), vec![]);
        let started = engine
            .start(StartRequest::new("t", json!({ "script": script }), "p"))
            .await
            .expect("start");
        let server = FlowgateServer::new(tools, keys, ServerOptions::default());
        (server, engine, started)
    }

    async fn wait(
        server: &FlowgateServer,
        caller: &Caller,
        started: &Started,
        hold: u64,
    ) -> Waited {
        let entry = server.tool_entry("t").expect("t");
        server
            .wait_until_finished(
                caller,
                &entry,
                &started.execution,
                Duration::from_millis(hold),
                Questions::Stop,
            )
            .await
    }

    #[tokio::test]
    async fn a_wait_ends_with_the_execution() {
        let (server, _, started) = running(json!([{"work": 300}, {"succeed": 7}])).await;
        let waited = wait(&server, &Caller::anonymous("r"), &started, 10_000).await;
        match waited {
            Waited::Finished(record) => assert_eq!(record.output, Some(json!(7))),
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn a_wait_ends_at_the_first_question_it_cannot_forward() {
        let (server, _, started) = running(json!([{"ask": "Go?"}])).await;
        let waited = wait(&server, &Caller::anonymous("r"), &started, 10_000).await;
        assert!(matches!(waited, Waited::Asked), "{waited:?}");

        let (server, engine, started) = running(json!([{"ask": "Go?"}, {"succeed": 1}])).await;
        let entry = server.tool_entry("t").expect("t");
        let (asked, mut questions) = tokio::sync::mpsc::unbounded_channel();
        let mut forward = move |key: &str, request: &Value| {
            let _ = asked.send((key.to_owned(), request["params"]["message"].clone()));
        };
        let caller = Caller::anonymous("r");
        let waiting = server.wait_until_finished(
            &caller,
            &entry,
            &started.execution,
            Duration::from_secs(10),
            Questions::Forward {
                ask: &mut forward,
                then_end: false,
            },
        );
        let answering = async {
            // Answer the question once the wait has forwarded it; the wait goes on to the end.
            let (key, message) = questions.recv().await.expect("a question");
            assert_eq!(message, "Go?");
            let answer =
                serde_json::from_value(json!({"action": "accept", "content": {}})).expect("answer");
            engine
                .respond(&started.execution, &key, answer)
                .await
                .expect("respond");
        };
        let (waited, ()) = tokio::join!(waiting, answering);
        assert!(matches!(waited, Waited::Finished(_)), "{waited:?}");
        drop(forward);
        assert!(
            questions.recv().await.is_none(),
            "each question is forwarded once"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_ends_before_the_callers_deadline_and_when_it_goes_away() {
        let (server, _, started) = running(json!([{"work": 600_000}])).await;
        let deadline = Instant::now() + Duration::from_secs(10);
        let caller = Caller::anonymous("r").with_deadline(Some(deadline));
        let waited = wait(&server, &caller, &started, 60_000).await;
        assert!(matches!(waited, Waited::OutOfTime(None)), "{waited:?}");
        let now = Instant::now();
        assert!(now <= deadline - DEADLINE_MARGIN, "answered too late");
        assert!(
            now + DEADLINE_MARGIN + POLL_CAP >= deadline,
            "gave up too early"
        );

        let gone = CancellationToken::new();
        let caller = Caller::anonymous("r").with_gone(gone.clone());
        let cancel = async {
            tokio::time::sleep(Duration::from_secs(3)).await;
            gone.cancel();
        };
        let started_at = Instant::now();
        let (waited, ()) = tokio::join!(wait(&server, &caller, &started, 60_000), cancel);
        assert!(matches!(waited, Waited::Gone), "{waited:?}");
        assert!(started_at.elapsed() < Duration::from_secs(4));
    }

    #[tokio::test]
    async fn an_unknown_execution_fails_the_wait() {
        let (server, engine, _) = running(json!([])).await;
        let other = Started {
            execution: ExecutionRef("no-such-run".into()),
            created_at: chrono::Utc::now(),
        };
        let waited = wait(&server, &Caller::anonymous("r"), &other, 10_000).await;
        assert!(matches!(waited, Waited::Failed(e) if e.is_not_found()));
        assert_eq!(engine.execution_count(), 1);
    }
}
