//! The engine conformance suite: the contract every adapter owes the server, checked the same
//! way for every engine.
//!
//! An adapter's tests build a [`Fixture`] (which arguments make its engine succeed, fail, run
//! long, ask a question) and call [`run_all`]. Each scenario is also public, for adapters that
//! can only run some of them. Scenarios panic with a message naming the broken promise.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::{
    Action, Engine, EngineError, ExecutionRecord, ExecutionRef, IdempotencyKey, InputResponse,
    ListFilter, StartRequest, TaskState,
};

/// A hook into the backend behind an engine (a proxy in front of an emulator, a fake), for
/// what the engine alone cannot stage: it makes the backend accept the next start and then
/// lose its answer, the ambiguous failure that exactly-once starts exist for.
#[derive(Clone)]
pub struct LoseNextStartAnswer(pub Arc<dyn Fn() + Send + Sync>);

impl std::fmt::Debug for LoseNextStartAnswer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LoseNextStartAnswer")
    }
}

/// A hook into the backend behind an engine for transient read faults: `Some(skip)` lets the
/// next `skip` reads the engine makes of the backend through and fails the one after that the
/// way a busy or flaky service does (a 429, a 5xx, a dropped connection: whatever the backend
/// can stage); `None` disarms it. Arming again replaces what was armed.
///
/// "Reads" are whatever an engine reads to build a record: an execution's status, its history,
/// a job list, an artifact, a log, a file of a run folder. Counting them lets the suite put a
/// fault at every position of a poll, including after the read that said the run has ended.
#[derive(Clone)]
pub struct TransientReadFault(pub Arc<dyn Fn(Option<u32>) + Send + Sync>);

impl std::fmt::Debug for TransientReadFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TransientReadFault")
    }
}

/// One way to call an engine.
#[derive(Debug, Clone)]
pub struct Case {
    /// The engine (bound to its tool's target).
    pub engine: Arc<dyn Engine>,
    /// The call's arguments.
    pub arguments: Value,
}

/// How to make an engine do each thing the suite checks.
#[derive(Debug, Clone)]
pub struct Fixture {
    /// Completes with [`Fixture::expected_output`].
    pub success: Case,
    /// The output of `success`.
    pub expected_output: Value,
    /// Ends in an engine-reported failure.
    pub failure: Case,
    /// Text the failure's error or cause contains.
    pub expected_failure: String,
    /// Runs for longer than the suite's timeout unless cancelled.
    pub slow: Case,
    /// Asks one question, then completes with output that contains the answer.
    pub asks: Option<Case>,
    /// The content to answer `asks` with.
    pub answer: Value,
    /// How long any one scenario may wait for the engine.
    pub timeout: Duration,
    /// Stages a start whose answer is lost, where the test's backend can (see
    /// [`retried_start_is_exactly_once`]).
    pub lose_next_start_answer: Option<LoseNextStartAnswer>,
    /// Stages transient read faults, where the test's backend can (see
    /// [`transient_read_faults_change_nothing`]).
    pub transient_read_fault: Option<TransientReadFault>,
}

/// Runs every scenario the engine's capabilities allow.
pub async fn run_all(fx: &Fixture) {
    start_is_visible_at_once(fx).await;
    run_completes_with_output(fx).await;
    failure_is_reported_with_its_cause(fx).await;
    unknown_references_are_not_found(fx).await;
    retried_start_is_exactly_once(fx).await;
    transient_read_faults_change_nothing(fx).await;
    answers_to_keys_not_asked_are_not_found(fx).await;
    if fx.slow.engine.capabilities().cancel {
        cancel_ends_cancelled(fx).await;
        cancel_after_the_end_changes_nothing(fx).await;
    }
    if fx.slow.engine.capabilities().inputs && fx.asks.is_some() {
        input_request_is_answered(fx).await;
        declined_input_ends_the_wait(fx).await;
    }
}

async fn start(case: &Case) -> ExecutionRef {
    let request = StartRequest::new("conformance", case.arguments.clone(), "conformance");
    case.engine
        .start(request)
        .await
        .expect("start must succeed")
        .execution
}

/// Polls until `done` holds, checking every observed move against the seven-state rules.
async fn poll_until(
    case: &Case,
    execution: &ExecutionRef,
    timeout: Duration,
    done: impl Fn(&ExecutionRecord) -> bool,
) -> ExecutionRecord {
    let deadline = Instant::now() + timeout;
    let mut last: Option<TaskState> = None;
    loop {
        let record = case
            .engine
            .get(execution)
            .await
            .expect("get of a started execution");
        if let Some(prev) = last {
            assert!(
                prev.can_transition_to(record.state),
                "illegal transition {prev} -> {} for {execution}",
                record.state
            );
        }
        assert!(
            record.updated_at >= record.created_at,
            "updated before created: {record:?}"
        );
        last = Some(record.state);
        if done(&record) {
            return record;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting on {execution}; last record {record:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A started execution is visible to `get` at once, not terminal, with the creation time.
pub async fn start_is_visible_at_once(fx: &Fixture) {
    let before = chrono::Utc::now() - chrono::Duration::seconds(5);
    let execution = start(&fx.slow).await;
    let record = fx
        .slow
        .engine
        .get(&execution)
        .await
        .expect("get right after start");
    assert!(
        !record.state.is_terminal(),
        "slow run already terminal: {record:?}"
    );
    assert!(
        record.created_at >= before,
        "created_at not from this start: {record:?}"
    );
    let _ = fx.slow.engine.cancel(&execution).await;
}

/// A run reaches completed with its output.
pub async fn run_completes_with_output(fx: &Fixture) {
    let execution = start(&fx.success).await;
    let record = poll_until(&fx.success, &execution, fx.timeout, |r| {
        r.state.is_terminal()
    })
    .await;
    assert_eq!(record.state, TaskState::Completed, "{record:?}");
    assert_eq!(
        record.output.as_ref(),
        Some(&fx.expected_output),
        "{record:?}"
    );
    assert!(record.failure.is_none());
}

/// An engine-reported failure ends failed, with its error and cause.
pub async fn failure_is_reported_with_its_cause(fx: &Fixture) {
    let execution = start(&fx.failure).await;
    let record = poll_until(&fx.failure, &execution, fx.timeout, |r| {
        r.state.is_terminal()
    })
    .await;
    assert_eq!(record.state, TaskState::Failed, "{record:?}");
    let failure = record
        .failure
        .as_ref()
        .expect("a failed record carries its failure");
    let text = format!(
        "{} {}",
        failure.error,
        failure.cause.as_deref().unwrap_or("")
    );
    assert!(
        text.contains(&fx.expected_failure),
        "{text:?} lacks {:?}",
        fx.expected_failure
    );
}

/// A cancel ends cancelled; cancelling again is not an error; the state then stays put.
pub async fn cancel_ends_cancelled(fx: &Fixture) {
    let execution = start(&fx.slow).await;
    poll_until(&fx.slow, &execution, fx.timeout, |r| {
        r.state != TaskState::Submitted
    })
    .await;
    fx.slow
        .engine
        .cancel(&execution)
        .await
        .expect("cancel of a running execution");
    let record = poll_until(&fx.slow, &execution, fx.timeout, |r| r.state.is_terminal()).await;
    assert_eq!(record.state, TaskState::Cancelled, "{record:?}");
    fx.slow
        .engine
        .cancel(&execution)
        .await
        .expect("cancel of a cancelled execution");
    let again = fx
        .slow
        .engine
        .get(&execution)
        .await
        .expect("get after cancel");
    assert_eq!(again.state, TaskState::Cancelled);
}

/// The same call started again with the same idempotency key (a retry) reaches the execution
/// the first attempt started, also when the first attempt's answer was lost on the way back
/// (staged with [`Fixture::lose_next_start_answer`]); exactly one execution exists for it.
pub async fn retried_start_is_exactly_once(fx: &Fixture) {
    // A principal tag as the server makes them: 16 lowercase hex digits.
    let principal = format!("{:016x}", rand::random::<u64>());
    let request = StartRequest {
        tool: "conformance".into(),
        arguments: fx.slow.arguments.clone(),
        principal_tag: principal.clone(),
        idempotency_key: IdempotencyKey::new(),
        ttl_ms: None,
    };
    let engine = &fx.slow.engine;
    if let Some(lose) = &fx.lose_next_start_answer {
        (lose.0)();
        let first = engine.start(request.clone()).await;
        assert!(
            matches!(&first, Err(e) if e.is_retryable()),
            "a start whose answer was lost must fail as retryable, got {first:?}"
        );
    }
    let a = engine.start(request.clone()).await.expect("start");
    let b = engine.start(request.clone()).await.expect("retried start");
    assert_eq!(
        a.execution, b.execution,
        "a retried start reached another execution"
    );
    if engine.capabilities().list {
        let listed = engine
            .list(ListFilter::for_principal(principal, None))
            .await
            .expect("list");
        assert_eq!(
            listed.len(),
            1,
            "one call with one key must leave exactly one execution: {listed:?}"
        );
        assert_eq!(listed[0].execution, a.execution);
    }
    let _ = engine.cancel(&a.execution).await;
}

/// An answer to a key the execution never asked (while it runs, and after it ended) is
/// not-found: it is never reported as delivered.
pub async fn answers_to_keys_not_asked_are_not_found(fx: &Fixture) {
    let answer = || InputResponse {
        action: Action::Accept,
        content: Some(serde_json::json!({"answer": "x"})),
    };
    let running = start(&fx.slow).await;
    let got = fx
        .slow
        .engine
        .respond(&running, "never-asked", answer())
        .await;
    assert!(
        matches!(got, Err(EngineError::NotFound { .. })),
        "answer to a key not asked, while running: {got:?}"
    );
    let _ = fx.slow.engine.cancel(&running).await;
    let done = start(&fx.success).await;
    poll_until(&fx.success, &done, fx.timeout, |r| r.state.is_terminal()).await;
    let got = fx
        .success
        .engine
        .respond(&done, "never-asked", answer())
        .await;
    assert!(
        matches!(got, Err(EngineError::NotFound { .. })),
        "answer after the end: {got:?}"
    );
}

/// Cancelling an execution that already completed is not an error and changes nothing: it
/// stays completed with its output.
pub async fn cancel_after_the_end_changes_nothing(fx: &Fixture) {
    let execution = start(&fx.success).await;
    let before = poll_until(&fx.success, &execution, fx.timeout, |r| {
        r.state.is_terminal()
    })
    .await;
    assert_eq!(before.state, TaskState::Completed, "{before:?}");
    fx.success
        .engine
        .cancel(&execution)
        .await
        .expect("cancel of a completed execution is not an error");
    let after = fx
        .success
        .engine
        .get(&execution)
        .await
        .expect("get after cancel");
    assert_eq!(
        after.state,
        TaskState::Completed,
        "a cancel changed a finished run: {after:?}"
    );
    assert_eq!(after.output, before.output);
}

/// An input request appears with a key, `respond` answers it, and the run uses the answer.
pub async fn input_request_is_answered(fx: &Fixture) {
    let Some(asks) = &fx.asks else { return };
    let execution = start(asks).await;
    let record = poll_until(asks, &execution, fx.timeout, |r| {
        r.state != TaskState::Submitted && r.state != TaskState::Working
    })
    .await;
    assert_eq!(record.state, TaskState::InputRequired, "{record:?}");
    let request = record
        .input_requests
        .first()
        .expect("input_required lists its requests");
    assert!(!request.key.is_empty() && !request.message.is_empty());
    assert_eq!(request.requested_schema["type"], "object");
    let bogus = asks
        .engine
        .respond(
            &execution,
            "no-such-key",
            InputResponse {
                action: Action::Accept,
                content: None,
            },
        )
        .await;
    assert!(
        matches!(bogus, Err(EngineError::NotFound { .. })),
        "unknown key: {bogus:?}"
    );
    let answer = InputResponse {
        action: Action::Accept,
        content: Some(fx.answer.clone()),
    };
    asks.engine
        .respond(&execution, &request.key, answer)
        .await
        .expect("respond");
    let done = poll_until(asks, &execution, fx.timeout, |r| r.state.is_terminal()).await;
    assert_eq!(done.state, TaskState::Completed, "{done:?}");
    let wanted = fx
        .answer
        .as_object()
        .and_then(|o| o.values().next())
        .cloned()
        .unwrap_or(Value::Null);
    let wanted = wanted
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| wanted.to_string());
    let output = done.output.map(|o| o.to_string()).unwrap_or_default();
    assert!(
        output.contains(&wanted),
        "output {output} does not use the answer {wanted}"
    );
    let again = asks
        .engine
        .respond(
            &execution,
            &request.key,
            InputResponse {
                action: Action::Accept,
                content: None,
            },
        )
        .await;
    assert!(
        matches!(again, Err(EngineError::NotFound { .. })),
        "a key is answered once, then not-found: {again:?}"
    );
}

/// A declined question is reported to the execution, which does not stay waiting.
pub async fn declined_input_ends_the_wait(fx: &Fixture) {
    let Some(asks) = &fx.asks else { return };
    let execution = start(asks).await;
    let record = poll_until(asks, &execution, fx.timeout, |r| {
        r.state == TaskState::InputRequired || r.state.is_terminal()
    })
    .await;
    let key = record
        .input_requests
        .first()
        .map(|r| r.key.clone())
        .expect("a question");
    asks.engine
        .respond(
            &execution,
            &key,
            InputResponse {
                action: Action::Decline,
                content: None,
            },
        )
        .await
        .expect("respond decline");
    let done = poll_until(asks, &execution, fx.timeout, |r| r.state.is_terminal()).await;
    assert!(done.input_requests.is_empty(), "{done:?}");
}

/// References the engine never issued are not-found, never a panic or another error.
pub async fn unknown_references_are_not_found(fx: &Fixture) {
    for bogus in [
        "does-not-exist-0000",
        "",
        "../../etc/passwd",
        "x".repeat(300).as_str(),
    ] {
        let execution = ExecutionRef(bogus.to_owned());
        let got = fx.success.engine.get(&execution).await;
        assert!(
            matches!(got, Err(EngineError::NotFound { .. })),
            "get {bogus:?}: {got:?}"
        );
        let cancelled = fx.success.engine.cancel(&execution).await;
        assert!(
            matches!(
                cancelled,
                Err(EngineError::NotFound { .. }) | Err(EngineError::Unsupported { .. })
            ),
            "cancel {bogus:?}: {cancelled:?}"
        );
    }
}

/// How many read positions of one poll [`transient_read_faults_change_nothing`] puts a fault
/// at, in turn: enough for an engine that reads a status, a job list, an artifact and a log.
const FAULT_POSITIONS: u32 = 6;

/// A transient fault while reading a run (a 429, a 5xx, a timeout) is never a result: `get`
/// answers a retryable error (the task stays as it was and is polled again) or the record it
/// would have answered without the fault. The terminal record reached through faults at every
/// read position of every poll is the one reached without faults (state, output, failure), and
/// it never changes afterwards, faults or not.
///
/// Runs the success and the failure case, each once without faults (the reference) and once
/// with a fault armed before every poll, at positions `0..FAULT_POSITIONS` in turn; then polls
/// the ended run once more at each position. Skipped when the fixture cannot stage faults.
pub async fn transient_read_faults_change_nothing(fx: &Fixture) {
    let Some(fault) = &fx.transient_read_fault else {
        return;
    };
    for case in [&fx.success, &fx.failure] {
        let reference = start(case).await;
        let faulted = start(case).await;
        let wanted = poll_until(case, &reference, fx.timeout, |r| r.state.is_terminal()).await;
        let same = |got: &ExecutionRecord, when: &str| {
            assert_eq!(
                (got.state, &got.output, &got.failure),
                (wanted.state, &wanted.output, &wanted.failure),
                "{when}: a run read through transient faults ended otherwise than without them"
            );
        };
        let deadline = Instant::now() + fx.timeout;
        let mut faults_met = 0;
        let mut last: Option<TaskState> = None;
        let mut position = 0;
        loop {
            (fault.0)(Some(position % FAULT_POSITIONS));
            position += 1;
            match case.engine.get(&faulted).await {
                Err(e) if e.is_retryable() => faults_met += 1,
                Err(e) => panic!("a transient read fault became a lasting error: {e:?}"),
                Ok(record) => {
                    if let Some(prev) = last {
                        assert!(
                            prev.can_transition_to(record.state),
                            "illegal transition {prev} -> {} under read faults",
                            record.state
                        );
                    }
                    last = Some(record.state);
                    if record.state.is_terminal() {
                        same(&record, "first terminal record");
                        break;
                    }
                }
            }
            assert!(
                Instant::now() < deadline,
                "timed out polling through read faults; last state {last:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        for position in 0..FAULT_POSITIONS {
            (fault.0)(Some(position));
            match case.engine.get(&faulted).await {
                Err(e) if e.is_retryable() => faults_met += 1,
                Err(e) => panic!("a transient read fault of an ended run: {e:?}"),
                Ok(record) => same(&record, "a later poll of the ended run"),
            }
        }
        (fault.0)(None);
        let settled = case.engine.get(&faulted).await.expect("get without faults");
        same(&settled, "the ended run without faults");
        assert!(
            faults_met > 0,
            "the fixture's fault hook never made a read fail: it stages nothing"
        );
    }
}
