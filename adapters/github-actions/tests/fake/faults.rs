//! A transient fault while reading a finished run is never its answer: the read fails as
//! retryable and a later read gives the same terminal record (the conformance suite checks
//! the artifact and the log; this checks the reviews a rejection is read from, and the
//! questions of a waiting run).

use flowgate_core::{Action, Engine, ExecutionRecord, InputResponse, TaskState};
use flowgate_github_actions::testing::Fake;
use serde_json::json;

use crate::support::{engine, start, wait_for};

const REPO: &str = "faults";

fn same(a: &ExecutionRecord, b: &ExecutionRecord) -> bool {
    (a.state, &a.output, &a.failure, &a.input_requests)
        == (b.state, &b.output, &b.failure, &b.input_requests)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_while_reading_reviews_never_change_a_question_or_a_rejection() {
    let fake = Fake::shared();
    let fault = fake.transient_read_fault(&format!("acme/{REPO}"));
    let e = engine(&fake, "deploy.yml", json!({"repo": REPO}));
    let x = start(&e, json!({"target": "production"})).await;
    let asked = wait_for(&e, &x, |r| r.state == TaskState::InputRequired).await;
    let mut met = 0;
    for position in 0..6 {
        (fault.0)(Some(position));
        match e.get(&x).await {
            Err(err) => {
                assert!(err.is_retryable(), "{err:?}");
                met += 1;
            }
            Ok(r) => assert!(same(&r, &asked), "{r:?} vs {asked:?}"),
        }
    }
    (fault.0)(None);
    e.respond(
        &x,
        &asked.input_requests[0].key,
        InputResponse {
            action: Action::Accept,
            content: Some(json!({"decision": "reject", "comment": "no"})),
        },
    )
    .await
    .expect("reject");
    let rejected = wait_for(&e, &x, |r| r.state.is_terminal()).await;
    assert_eq!(rejected.state, TaskState::Failed, "{rejected:?}");
    for position in 0..6 {
        (fault.0)(Some(position));
        match e.get(&x).await {
            Err(err) => {
                assert!(err.is_retryable(), "{err:?}");
                met += 1;
            }
            Ok(r) => assert!(same(&r, &rejected), "{r:?} vs {rejected:?}"),
        }
    }
    (fault.0)(None);
    assert!(met >= 6, "the faults met the reads: {met}");
}
