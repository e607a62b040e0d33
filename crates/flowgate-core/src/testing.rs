//! An in-memory [`Engine`] for tests, driven by a script in the call's arguments.
//!
//! It is a real engine in miniature: executions run concurrently on the tokio runtime, move
//! through states as time passes, ask questions and wait for the answer, and stop on cancel.
//! The script is the `script` array of the start arguments:
//!
//! ```json
//! {"script": [{"work": 200, "status": "loading"}, {"ask": "Go on?"}, {"succeed": {"ok": true}}]}
//! ```
//!
//! Steps: `{"work": ms, "status"?: text}`, `{"ask": message}` (the answer's content becomes the
//! output of a following `{"succeed": "$answer"}`), `{"succeed": value}`, `{"fail": error,
//! "cause"?: text}`. A run with no terminal step completes with a null output.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chrono::Utc;
use serde_json::{Value, json};
use tokio::sync::oneshot;

use crate::{
    Action, Capabilities, Engine, EngineError, EngineFailure, ExecutionRecord, ExecutionRef,
    ExecutionSummary, InputRequest, InputResponse, ListFilter, StartRequest, Started, TaskState,
};

const KIND: &str = "fake";

/// `task_id` with its last character changed: a forged handle that is never the handle itself
/// (putting a fixed character there gives the handle back whenever it already ends in it, once
/// in 64 runs).
pub fn forged(task_id: &str) -> String {
    let mut chars: Vec<char> = task_id.chars().collect();
    match chars.last_mut() {
        Some(last) => *last = if *last == 'A' { 'B' } else { 'A' },
        None => chars.push('A'),
    }
    chars.into_iter().collect()
}

#[derive(Debug)]
struct Run {
    record: ExecutionRecord,
    principal_tag: String,
    waiting: Option<(String, oneshot::Sender<InputResponse>)>,
    task: Option<tokio::task::JoinHandle<()>>,
}

type Runs = Arc<Mutex<HashMap<String, Run>>>;

/// The in-memory scripted engine. Cloning shares the executions.
#[derive(Debug, Clone, Default)]
pub struct FakeEngine {
    runs: Runs,
    lose_next_start_answer: Arc<std::sync::atomic::AtomicBool>,
    read_fault: Arc<Mutex<Option<u32>>>,
    reads: Arc<std::sync::atomic::AtomicUsize>,
}

impl FakeEngine {
    /// An engine with no executions.
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes the next start create its execution and then answer [`EngineError::Timeout`],
    /// as a start whose answer was lost on the way back.
    pub fn lose_next_start_answer(&self) {
        self.lose_next_start_answer
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Arms a transient read fault: `Some(skip)` lets `skip` reads (`get`s) through and makes
    /// the next one answer [`EngineError::Unavailable`]; `None` disarms.
    pub fn arm_read_fault(&self, skip: Option<u32>) {
        *self
            .read_fault
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = skip;
    }

    /// Counts one read against an armed fault: whether this read fails.
    fn read_fails(&self) -> bool {
        let mut armed = self
            .read_fault
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        match *armed {
            Some(0) => {
                *armed = None;
                true
            }
            Some(n) => {
                *armed = Some(n - 1);
                false
            }
            None => false,
        }
    }

    /// How many reads (`get`s) have been made, of any execution.
    pub fn read_count(&self) -> usize {
        self.reads.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// How many executions exist (every principal).
    pub fn execution_count(&self) -> usize {
        lock(&self.runs).len()
    }
}

fn lock(runs: &Runs) -> std::sync::MutexGuard<'_, HashMap<String, Run>> {
    runs.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn update(runs: &Runs, id: &str, f: impl FnOnce(&mut Run)) {
    if let Some(run) = lock(runs).get_mut(id)
        && !run.record.state.is_terminal()
    {
        f(run);
        run.record.updated_at = Utc::now();
    }
}

async fn drive(runs: Runs, id: String, script: Vec<Value>) {
    let mut answer = Value::Null;
    let mut asked = 0;
    for step in script {
        if let Some(ms) = step.get("work").and_then(Value::as_u64) {
            update(&runs, &id, |r| {
                r.record.state = TaskState::Working;
                r.record.engine_status = "RUNNING".into();
                r.record.status_message = step
                    .get("status")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
            });
            tokio::time::sleep(Duration::from_millis(ms)).await;
        } else if let Some(message) = step.get("ask").and_then(Value::as_str) {
            asked += 1;
            let key = format!("{id}-q{asked}");
            let (tx, rx) = oneshot::channel();
            update(&runs, &id, |r| {
                r.record.state = TaskState::InputRequired;
                r.record.engine_status = "WAITING".into();
                r.record.input_requests = vec![InputRequest {
                    key: key.clone(),
                    message: message.to_owned(),
                    requested_schema: json!({"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}),
                }];
                r.waiting = Some((key.clone(), tx));
            });
            let Ok(response) = rx.await else { return };
            update(&runs, &id, |r| {
                r.record.state = TaskState::Working;
                r.record.engine_status = "RUNNING".into();
                r.record.input_requests.clear();
            });
            if response.action != Action::Accept {
                update(&runs, &id, |r| {
                    r.record.state = TaskState::Failed;
                    r.record.engine_status = "FAILED".into();
                    r.record.failure = Some(EngineFailure {
                        error: "Declined".into(),
                        cause: None,
                    });
                });
                return;
            }
            answer = response.content.unwrap_or(Value::Null);
        } else if let Some(value) = step.get("succeed") {
            let output = if value == "$answer" {
                answer.clone()
            } else {
                value.clone()
            };
            update(&runs, &id, |r| {
                r.record.state = TaskState::Completed;
                r.record.engine_status = "SUCCEEDED".into();
                r.record.output = Some(output);
            });
            return;
        } else if let Some(error) = step.get("fail").and_then(Value::as_str) {
            let cause = step.get("cause").and_then(Value::as_str).map(str::to_owned);
            update(&runs, &id, |r| {
                r.record.state = TaskState::Failed;
                r.record.engine_status = "FAILED".into();
                r.record.failure = Some(EngineFailure {
                    error: error.to_owned(),
                    cause,
                });
            });
            return;
        }
    }
    update(&runs, &id, |r| {
        r.record.state = TaskState::Completed;
        r.record.engine_status = "SUCCEEDED".into();
        r.record.output = Some(Value::Null);
    });
}

fn not_found(what: &str) -> EngineError {
    EngineError::NotFound {
        engine: KIND,
        what: what.to_owned(),
    }
}

#[async_trait]
impl Engine for FakeEngine {
    fn kind(&self) -> &'static str {
        KIND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::all()
    }

    async fn start(&self, request: StartRequest) -> Result<Started, EngineError> {
        let script = match request.arguments.get("script") {
            Some(Value::Array(steps)) => steps.clone(),
            None => Vec::new(),
            Some(_) => {
                return Err(EngineError::InvalidInput {
                    engine: KIND,
                    message: "script must be an array".into(),
                });
            }
        };
        let id = format!("fake-{}", request.idempotency_key);
        let mut runs = lock(&self.runs);
        if let Some(run) = runs.get(&id) {
            // The same call again (a retried start): the execution it already started.
            return Ok(Started {
                execution: ExecutionRef(id),
                created_at: run.record.created_at,
            });
        }
        let now = Utc::now();
        runs.insert(
            id.clone(),
            Run {
                record: ExecutionRecord::new(TaskState::Submitted, "QUEUED", now),
                principal_tag: request.principal_tag,
                waiting: None,
                task: None,
            },
        );
        let task = tokio::spawn(drive(self.runs.clone(), id.clone(), script));
        if let Some(run) = runs.get_mut(&id) {
            run.task = Some(task);
        }
        if self
            .lose_next_start_answer
            .swap(false, std::sync::atomic::Ordering::SeqCst)
        {
            return Err(EngineError::Timeout {
                engine: KIND,
                message: "start: the answer was lost".into(),
            });
        }
        Ok(Started {
            execution: ExecutionRef(id),
            created_at: now,
        })
    }

    async fn get(&self, execution: &ExecutionRef) -> Result<ExecutionRecord, EngineError> {
        self.reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if self.read_fails() {
            return Err(EngineError::Unavailable {
                engine: KIND,
                message: "read: a staged transient fault".into(),
                source: None,
            });
        }
        lock(&self.runs)
            .get(&execution.0)
            .map(|r| r.record.clone())
            .ok_or_else(|| not_found(&execution.0))
    }

    async fn respond(
        &self,
        execution: &ExecutionRef,
        key: &str,
        response: InputResponse,
    ) -> Result<(), EngineError> {
        let mut runs = lock(&self.runs);
        let run = runs
            .get_mut(&execution.0)
            .ok_or_else(|| not_found(&execution.0))?;
        match run.waiting.take() {
            Some((waiting_key, tx)) if waiting_key == key => {
                let _ = tx.send(response);
                Ok(())
            }
            other => {
                run.waiting = other;
                Err(not_found(key))
            }
        }
    }

    async fn cancel(&self, execution: &ExecutionRef) -> Result<(), EngineError> {
        let mut runs = lock(&self.runs);
        let run = runs
            .get_mut(&execution.0)
            .ok_or_else(|| not_found(&execution.0))?;
        if !run.record.state.is_terminal() {
            if let Some(task) = run.task.take() {
                task.abort();
            }
            run.waiting = None;
            run.record.state = TaskState::Cancelled;
            run.record.engine_status = "CANCELLED".into();
            run.record.input_requests.clear();
            run.record.updated_at = Utc::now();
        }
        Ok(())
    }

    async fn list(&self, filter: ListFilter) -> Result<Vec<ExecutionSummary>, EngineError> {
        let runs = lock(&self.runs);
        let mut out: Vec<_> = runs
            .iter()
            .filter(|(_, r)| {
                filter
                    .principal_tag
                    .as_ref()
                    .is_none_or(|p| *p == r.principal_tag)
            })
            .map(|(id, r)| ExecutionSummary {
                execution: ExecutionRef(id.clone()),
                state: r.record.state,
                created_at: r.record.created_at,
            })
            .collect();
        out.sort_by_key(|s| std::cmp::Reverse(s.created_at));
        out.truncate(filter.limit.unwrap_or(usize::MAX));
        Ok(out)
    }
}

/// Registers [`FakeEngine`] as engine kind `fake`; every tool shares one instance.
pub fn register(registry: &mut crate::Registry, engine: FakeEngine) {
    registry.register(
        KIND,
        Box::new(move |_spec| Ok(Arc::new(engine.clone()) as Arc<dyn Engine>)),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conformance::{Case, Fixture, run_all};

    #[test]
    fn a_forgery_is_never_the_handle() {
        for id in ["fg2.xyzA", "fg2.xyzB", "fg2.xyz9", ""] {
            let forged = super::forged(id);
            assert_ne!(forged, id);
            assert_eq!(forged.len(), id.len().max(1));
        }
    }

    fn case(engine: &FakeEngine, script: Value) -> Case {
        Case {
            engine: Arc::new(engine.clone()),
            arguments: json!({ "script": script }),
        }
    }

    #[tokio::test]
    async fn fake_engine_passes_the_conformance_suite() {
        let e = FakeEngine::new();
        let fixture = Fixture {
            success: case(
                &e,
                json!([{"work": 50, "status": "step 1"}, {"succeed": {"n": 1}}]),
            ),
            expected_output: json!({"n": 1}),
            failure: case(
                &e,
                json!([{"work": 20}, {"fail": "Boom", "cause": "it broke"}]),
            ),
            expected_failure: "it broke".into(),
            slow: case(&e, json!([{"work": 60_000}])),
            asks: Some(case(
                &e,
                json!([{"work": 20}, {"ask": "Name?"}, {"succeed": "$answer"}]),
            )),
            answer: json!({"answer": "Alice"}),
            timeout: Duration::from_secs(10),
            lose_next_start_answer: Some(crate::conformance::LoseNextStartAnswer(Arc::new({
                let e = e.clone();
                move || e.lose_next_start_answer()
            }))),
            transient_read_fault: Some(crate::conformance::TransientReadFault(Arc::new({
                let e = e.clone();
                move |skip| e.arm_read_fault(skip)
            }))),
        };
        run_all(&fixture).await;
    }

    #[tokio::test]
    async fn list_filters_by_principal() {
        let e = FakeEngine::new();
        for p in ["a", "a", "b"] {
            e.start(StartRequest::new("t", json!({}), p))
                .await
                .expect("start");
        }
        let filter = ListFilter {
            principal_tag: Some("a".into()),
            limit: None,
        };
        assert_eq!(e.list(filter).await.expect("list").len(), 2);
    }
}
