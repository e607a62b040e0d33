//! Exactly one run per call on every path: a dispatch GitHub answers with a bare 204, an
//! answer lost on the way back, a run list that lags behind the dispatch.

use std::time::{Duration, Instant};

use flowgate_core::{Engine, EngineError, IdempotencyKey, StartRequest, TaskState};
use flowgate_github_actions::testing::Fake;
use serde_json::json;

use crate::support::{engine, greet_in, wait_for};

/// Older GitHub Enterprise Server answers a dispatch 204 without naming the run, and its run
/// list lags: the start keeps looking for the run by its key, and a retry of the call never
/// dispatches again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dispatch_answered_204_is_found_by_its_key_and_never_dispatched_twice() {
    let fake = Fake::start_with(&["--dispatch-204", "--list-lag-ms", "2500"]);
    let e = greet_in(&fake, "ghes");
    let request = StartRequest::new("t", json!({"name": "Gus", "seconds": 0}), "tests");
    let began = Instant::now();
    let first = e.start(request.clone()).await.expect("start after a 204");
    assert!(
        began.elapsed() >= Duration::from_millis(2000),
        "the run was listed only after the lag"
    );
    let again = e.start(request).await.expect("the same call again");
    assert_eq!(first.execution, again.execution);
    assert_eq!(fake.stats("acme/ghes")["dispatches"], 1);
    let done = wait_for(&e, &first.execution, |r| r.state.is_terminal()).await;
    assert_eq!(done.output, Some(json!({"greeting": "hello Gus"})));
}

/// A dispatch whose answer is lost, retried while the run list still lags: the retry looks
/// for the run (never dispatches again) until it is listed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_answer_while_the_list_lags_is_never_dispatched_again() {
    let fake = Fake::shared();
    // A repository of this test's own: the shared fake counts its dispatches apart.
    let repo = format!("lagging-{}", IdempotencyKey::new());
    let full = format!("acme/{repo}");
    fake.hook("list-lag", json!({"repo": full, "ms": 3000}));
    let e = greet_in(&fake, &repo);
    let request = StartRequest::new("t", json!({"name": "Hal", "seconds": 0}), "tests");
    fake.hook("lose-next-dispatch-answer", json!({"repo": full}));
    let lost = e.start(request.clone()).await;
    assert!(matches!(&lost, Err(e) if e.is_retryable()), "{lost:?}");
    let found = e.start(request.clone()).await.expect("the retried start");
    let stats = fake.stats(&full);
    assert_eq!(stats["dispatches"], 1, "one call, one run: {stats}");
    let done = wait_for(&e, &found.execution, |r| r.state.is_terminal()).await;
    assert_eq!(done.state, TaskState::Completed, "{done:?}");
}

/// A workflow whose run-name lacks the key: after a 204 its run can never be found, so the
/// start ends within the call's deadline saying how to fix the workflow, and a retry of the
/// call does not dispatch a second run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_never_found_after_a_204_says_to_put_the_key_in_the_run_name() {
    let fake = Fake::start_with(&["--dispatch-204"]);
    let e = engine(&fake, "untitled.yml", json!({"repo": "untitled"}));
    let request = StartRequest::new("t", json!({}), "tests");
    let began = Instant::now();
    let got = e.start(request.clone()).await;
    let took = began.elapsed();
    match &got {
        Err(EngineError::Misconfigured { message, .. }) => assert!(
            message.contains("run-name") && message.contains("${{ inputs.flowgate_call }}"),
            "{message}"
        ),
        other => panic!("{other:?}"),
    }
    assert!(
        took < Duration::from_secs(18),
        "within the server's 20 s start deadline: {took:?}"
    );
    let again = e.start(request).await;
    assert!(
        matches!(again, Err(EngineError::Misconfigured { .. })),
        "{again:?}"
    );
    assert_eq!(fake.stats("acme/untitled")["dispatches"], 1);
}

/// GitHub named the run, then the first read of it failed for a passing reason: the retry of
/// the call reaches that run by its id (even a workflow whose run-name lacks the key), and never
/// dispatches again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_run_whose_first_read_failed_is_the_retrys_run() {
    let fake = Fake::shared();
    let repo = format!("named-{}", IdempotencyKey::new());
    let full = format!("acme/{repo}");
    let e = engine(&fake, "untitled.yml", json!({"repo": repo}));
    let request = StartRequest::new("t", json!({}), "tests");
    // The run list is read first (let through), then the run itself (fails).
    fake.hook(
        "faults",
        json!({"repo": full, "skip": 1, "match": ["runs"], "kinds": [503]}),
    );
    let first = e.start(request.clone()).await;
    assert!(matches!(&first, Err(e) if e.is_retryable()), "{first:?}");
    let again = e.start(request).await.expect("the retried start");
    let stats = fake.stats(&full);
    assert_eq!(stats["dispatches"], 1, "{stats}");
    let done = wait_for(&e, &again.execution, |r| r.state.is_terminal()).await;
    assert_eq!(done.state, TaskState::Completed, "{done:?}");
}
