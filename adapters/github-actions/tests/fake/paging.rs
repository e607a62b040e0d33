//! Lists across pages, a second instance answering, conditional requests and rate limits.

use std::time::Duration;

use flowgate_core::{Engine, EngineError, ExecutionRef, IdempotencyKey, ListFilter, StartRequest};
use flowgate_github_actions::testing::Fake;
use serde_json::{Value, json};

use crate::support::{greet, start, wait_for};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_started_by_one_instance_is_answered_by_another_and_a_lost_answer_starts_one_run() {
    let fake = Fake::start_with(&["--max-per-page", "2"]);
    let first = greet(&fake);
    let request = StartRequest {
        tool: "t".into(),
        arguments: json!({"name": "Ed", "seconds": 0}),
        principal_tag: "alice".into(),
        idempotency_key: IdempotencyKey::new(),
        ttl_ms: None,
    };
    // Three more runs, so the workflow's run list spans pages of two.
    for name in ["a", "b", "c"] {
        start(&first, json!({"name": name, "seconds": 0})).await;
    }
    fake.hook("lose-next-dispatch-answer", json!({}));
    let lost = first.start(request.clone()).await;
    assert!(matches!(&lost, Err(e) if e.is_retryable()), "{lost:?}");
    // Another process (no shared client or cache) retries the same call and answers it.
    let second = greet(&fake);
    let found = second.start(request.clone()).await.expect("retried start");
    let done = wait_for(&second, &found.execution, |r| r.state.is_terminal()).await;
    assert_eq!(done.output, Some(json!({"greeting": "hello Ed"})));
    let mine = second
        .list(ListFilter::for_principal("alice", None))
        .await
        .expect("list across pages");
    assert_eq!(mine.len(), 1, "{mine:?}");
    let stats = fake.hook("stats", Value::Null);
    assert_eq!(stats["dispatches"], 4, "one dispatch per call: {stats}");
    let everyone = second.list(ListFilter::default()).await.expect("list");
    assert_eq!(everyone.len(), 4, "every page was followed: {everyone:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unchanged_polls_are_304s_and_rate_limit_headers_drive_pacing() {
    let fake = Fake::start();
    let e = greet(&fake);
    let x = start(&e, json!({"name": "Flo", "seconds": 0})).await;
    wait_for(&e, &x, |r| r.state.is_terminal()).await;
    let before = fake.hook("stats", Value::Null)["not_modified"]
        .as_u64()
        .unwrap_or(0);
    for _ in 0..5 {
        let r = e.get(&x).await.expect("get");
        assert_eq!(r.output, Some(json!({"greeting": "hello Flo"})));
    }
    let after = fake.hook("stats", Value::Null)["not_modified"]
        .as_u64()
        .unwrap_or(0);
    // Each poll of a finished run asks the run, its jobs and its artifact list: all unchanged.
    assert!(after - before >= 15, "304s: {before} -> {after}");

    fake.hook(
        "rate-limit",
        json!({"limit": 5000, "remaining": 20, "reset_in": 600}),
    );
    e.get(&x).await.expect("get");
    let pacing = e.pacing().expect("pacing after rate-limit headers");
    assert!(pacing > Duration::from_secs(20), "{pacing:?}");

    fake.hook("throttle", json!({"count": 1, "retry_after": 7}));
    let throttled = e.get(&x).await;
    match throttled {
        Err(EngineError::Throttled { retry_after, .. }) => {
            assert_eq!(retry_after, Some(Duration::from_secs(7)));
        }
        other => panic!("a secondary limit is Throttled: {other:?}"),
    }
    fake.hook(
        "rate-limit",
        json!({"limit": 5000, "remaining": 0, "reset_in": 50}),
    );
    let spent = e.get(&ExecutionRef(x.0.clone())).await;
    assert!(
        matches!(spent, Err(EngineError::Throttled { .. })),
        "{spent:?}"
    );
}
