//! The policy on a scripted engine, on tokio's paused clock: attempts, backoff, what is not
//! retried, and the deadlines.

use std::collections::VecDeque;
use std::sync::Mutex;

use chrono::Utc;
use serde_json::json;

use super::*;
use crate::TaskState;

/// How the scripted engine answers a call.
#[derive(Debug)]
enum Answer {
    Ok,
    Fail(EngineError),
    Hang,
}

/// An engine answering each call with the next scripted answer (then `Ok`), noting which
/// attempt each call was.
#[derive(Debug, Default)]
struct Scripted {
    answers: Mutex<VecDeque<Answer>>,
    attempts: Mutex<Vec<u32>>,
}

impl Scripted {
    fn new(answers: impl IntoIterator<Item = Answer>) -> Retrying<Self> {
        Retrying::new(Scripted {
            answers: Mutex::new(answers.into_iter().collect()),
            attempts: Mutex::default(),
        })
    }

    /// The attempt numbers of the calls made so far.
    fn attempts(&self) -> Vec<u32> {
        self.attempts.lock().expect("attempts").clone()
    }

    async fn answer(&self) -> Result<(), EngineError> {
        self.attempts.lock().expect("attempts").push(attempt());
        let next = self.answers.lock().expect("answers").pop_front();
        match next.unwrap_or(Answer::Ok) {
            Answer::Ok => Ok(()),
            Answer::Fail(e) => Err(e),
            Answer::Hang => std::future::pending().await,
        }
    }
}

#[async_trait]
impl Engine for Scripted {
    fn kind(&self) -> &'static str {
        "scripted"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::all()
    }

    async fn run_sync(&self, _: StartRequest) -> Result<ExecutionRecord, EngineError> {
        self.answer().await?;
        Ok(ExecutionRecord::new(
            TaskState::Completed,
            "DONE",
            Utc::now(),
        ))
    }

    async fn start(&self, _: StartRequest) -> Result<Started, EngineError> {
        self.answer().await?;
        Ok(Started {
            execution: ExecutionRef("run-1".into()),
            created_at: Utc::now(),
        })
    }

    async fn get(&self, _: &ExecutionRef) -> Result<ExecutionRecord, EngineError> {
        self.answer().await?;
        Ok(ExecutionRecord::new(
            TaskState::Working,
            "RUNNING",
            Utc::now(),
        ))
    }

    async fn respond(
        &self,
        _: &ExecutionRef,
        _: &str,
        _: InputResponse,
    ) -> Result<(), EngineError> {
        self.answer().await
    }

    async fn cancel(&self, _: &ExecutionRef) -> Result<(), EngineError> {
        self.answer().await
    }

    async fn list(&self, _: ListFilter) -> Result<Vec<ExecutionSummary>, EngineError> {
        self.answer().await.map(|()| Vec::new())
    }
}

fn unavailable() -> Answer {
    Answer::Fail(EngineError::Unavailable {
        engine: "scripted",
        message: "down".into(),
        source: None,
    })
}

fn throttled(retry_after: Option<Duration>) -> Answer {
    Answer::Fail(EngineError::Throttled {
        engine: "scripted",
        retry_after,
    })
}

fn request() -> StartRequest {
    StartRequest::new("t", json!({}), "p")
}

fn declined() -> InputResponse {
    InputResponse {
        action: crate::Action::Decline,
        content: None,
    }
}

fn run() -> ExecutionRef {
    ExecutionRef("run-1".into())
}

#[tokio::test(start_paused = true)]
async fn passing_faults_are_retried_with_backoff_then_given_up() {
    let engine = Scripted::new([unavailable(), unavailable(), unavailable(), unavailable()]);
    let began = Instant::now();
    let started = engine.start(request()).await;
    assert!(
        matches!(started, Err(EngineError::Unavailable { .. })),
        "{started:?}"
    );
    assert_eq!(
        engine.inner().attempts(),
        [1, 2, 3],
        "each attempt says which it is"
    );
    assert_eq!(
        began.elapsed(),
        FIRST_DELAY + FIRST_DELAY * 2,
        "the backoff doubles"
    );

    // A fault that passes in time is not seen at all.
    let engine = Scripted::new([unavailable()]);
    engine.cancel(&run()).await.expect("the second attempt");
    assert_eq!(engine.inner().attempts(), [1, 2]);
}

#[tokio::test(start_paused = true)]
async fn lasting_faults_are_not_retried() {
    let engine = Scripted::new([Answer::Fail(EngineError::NotFound {
        engine: "scripted",
        what: "run-1".into(),
    })]);
    let got = engine.get(&run()).await;
    assert!(got.is_err_and(|e| e.is_not_found()));
    assert_eq!(engine.inner().attempts(), [1]);
}

#[tokio::test(start_paused = true)]
async fn a_throttled_read_is_not_retried_and_a_throttled_change_waits_its_retry_after() {
    for read in ["get", "list"] {
        let engine = Scripted::new([throttled(None)]);
        let got = match read {
            "get" => engine.get(&run()).await.map(drop),
            _ => engine.list(ListFilter::default()).await.map(drop),
        };
        assert!(
            matches!(got, Err(EngineError::Throttled { .. })),
            "{read}: {got:?}"
        );
        assert_eq!(engine.inner().attempts(), [1], "{read}");
    }
    // A read that was unreachable is retried, as a change that was throttled is: after the
    // engine's Retry-After, capped.
    let engine = Scripted::new([unavailable()]);
    engine.get(&run()).await.expect("the second read");
    assert_eq!(engine.inner().attempts(), [1, 2]);
    let engine = Scripted::new([
        throttled(Some(Duration::from_millis(700))),
        throttled(Some(Duration::from_secs(60))),
    ]);
    let began = Instant::now();
    engine
        .respond(&run(), "k", declined())
        .await
        .expect("the third attempt");
    assert_eq!(engine.inner().attempts(), [1, 2, 3]);
    assert_eq!(began.elapsed(), Duration::from_millis(700) + MAX_DELAY);
}

#[tokio::test(start_paused = true)]
async fn a_synchronous_run_is_never_retried() {
    let engine = Scripted::new([unavailable()]);
    let got = engine.run_sync(request()).await;
    assert!(
        matches!(got, Err(EngineError::Unavailable { .. })),
        "{got:?}"
    );
    assert_eq!(engine.inner().attempts(), [1]);
}

#[tokio::test(start_paused = true)]
async fn each_call_ends_by_its_deadline_as_a_timeout() {
    let engine = Scripted::new([Answer::Hang, Answer::Hang, Answer::Hang]);
    let began = Instant::now();
    let got = engine.get(&run()).await;
    assert!(matches!(got, Err(EngineError::Timeout { .. })), "{got:?}");
    assert_eq!(began.elapsed(), READ_DEADLINE);
    let began = Instant::now();
    let got = engine.start(request()).await;
    assert!(matches!(got, Err(EngineError::Timeout { .. })), "{got:?}");
    assert_eq!(began.elapsed(), START_DEADLINE);
    // Retries included: faults then a hang end at the call's deadline too.
    let engine = Scripted::new([unavailable(), Answer::Hang]);
    let began = Instant::now();
    let got = engine.cancel(&run()).await;
    assert!(matches!(got, Err(EngineError::Timeout { .. })), "{got:?}");
    assert_eq!(began.elapsed(), START_DEADLINE);
    assert_eq!(engine.inner().attempts(), [1, 2]);
}

#[tokio::test(start_paused = true)]
async fn the_requests_deadline_ends_every_call_first_when_it_is_sooner() {
    let engine = Scripted::new((0..6).map(|_| Answer::Hang));
    let by = Instant::now() + Duration::from_secs(3);
    answer_by(Some(by), async {
        assert_eq!(request_deadline(), Some(by));
        let got = engine.start(request()).await;
        assert!(matches!(got, Err(EngineError::Timeout { .. })), "{got:?}");
        assert_eq!(Instant::now(), by);
        // Past it, at once.
        let got = engine.get(&run()).await;
        assert!(matches!(got, Err(EngineError::Timeout { .. })), "{got:?}");
        assert_eq!(Instant::now(), by);
        // A synchronous run, which has no deadline of its own, ends by the request's.
        let later = by + Duration::from_secs(30);
        let got = answer_by(Some(later), engine.run_sync(request())).await;
        assert!(matches!(got, Err(EngineError::Timeout { .. })), "{got:?}");
        assert_eq!(
            Instant::now(),
            later,
            "an inner deadline replaces the outer"
        );
    })
    .await;
    assert_eq!(request_deadline(), None, "only inside the request");
    // A later deadline leaves the call its own.
    let began = Instant::now();
    let far = Some(began + Duration::from_secs(600));
    let got = answer_by(far, engine.get(&run())).await;
    assert!(matches!(got, Err(EngineError::Timeout { .. })), "{got:?}");
    assert_eq!(began.elapsed(), READ_DEADLINE);
}

#[tokio::test]
async fn a_start_whose_answer_was_lost_is_retried_into_the_same_execution() {
    let fake = crate::testing::FakeEngine::new();
    let engine = Retrying::new(fake.clone());
    fake.lose_next_start_answer();
    let request = StartRequest::new("t", json!({"script": [{"succeed": 1}]}), "p");
    let started = engine.start(request).await.expect("the retried start");
    assert_eq!(fake.execution_count(), 1, "one execution for the call");
    engine.get(&started.execution).await.expect("found");
}

#[tokio::test]
async fn the_decorator_changes_no_answer() {
    // The conformance suite every adapter passes, through the decorator (without the staged
    // faults, which the decorator absorbs: the tests above hold what it does with them).
    use std::sync::Arc;

    use crate::conformance::{Case, Fixture, run_all};
    let engine: Arc<dyn Engine> = Arc::new(Retrying::new(crate::testing::FakeEngine::new()));
    let case = |script: serde_json::Value| Case {
        engine: Arc::clone(&engine),
        arguments: json!({ "script": script }),
    };
    let fixture = Fixture {
        success: case(json!([{"work": 50, "status": "step 1"}, {"succeed": {"n": 1}}])),
        expected_output: json!({"n": 1}),
        failure: case(json!([{"work": 20}, {"fail": "Boom", "cause": "it broke"}])),
        expected_failure: "it broke".into(),
        slow: case(json!([{"work": 60_000}])),
        asks: Some(case(
            json!([{"work": 20}, {"ask": "Name?"}, {"succeed": "$answer"}]),
        )),
        answer: json!({"answer": "Alice"}),
        timeout: Duration::from_secs(10),
        lose_next_start_answer: None,
        transient_read_fault: None,
    };
    run_all(&fixture).await;
}
