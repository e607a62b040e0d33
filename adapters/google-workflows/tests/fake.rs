//! The Workflows engine against the executions-API fake, whose executions really run their
//! YAML: the shared engine conformance suite, then what only this engine promises.

use std::sync::Arc;
use std::time::Duration;

use flowgate_core::conformance::{Case, Fixture, run_all};
use flowgate_core::{Engine, ListFilter, StartRequest, TaskState};
use flowgate_google_workflows::WorkflowsEngine;
use flowgate_google_workflows::testing::{
    fake_url, lose_next_start_answer, make_unavailable, target,
};
use serde_json::json;

fn case(url: &str, workflow: &str, arguments: serde_json::Value) -> Case {
    Case {
        engine: Arc::new(WorkflowsEngine::new(target(url, workflow, json!({})))),
        arguments,
    }
}

#[tokio::test]
async fn workflows_engine_passes_the_conformance_suite_on_the_fake() {
    let url = fake_url();
    let fixture = Fixture {
        success: case(&url, "sleepy", json!({"name": "Ada", "seconds": 1})),
        expected_output: json!({"greeting": "hello Ada", "slept": 1}),
        failure: case(&url, "raises", json!({"day": "2026-12-01"})),
        expected_failure: "no rows for 2026-12-01".into(),
        slow: case(&url, "sleepy", json!({"name": "Bo", "seconds": 600})),
        asks: Some(case(&url, "approval", json!({"service": "web"}))),
        answer: json!({"answer": "Alice"}),
        timeout: Duration::from_secs(15),
        lose_next_start_answer: Some(lose_next_start_answer(&url)),
    };
    run_all(&fixture).await;
}

#[tokio::test]
async fn running_executions_show_their_step_and_carry_flowgate_labels() {
    let url = fake_url();
    let e = WorkflowsEngine::new(target(
        &url,
        "sleepy",
        json!({"inputs": {"*": {"message": "unused"}}}),
    ));
    let request = StartRequest {
        tool: "Nightly ETL".into(),
        arguments: json!({"name": "x", "seconds": 30}),
        principal_digest: "abc123".into(),
        idempotency_key: flowgate_core::IdempotencyKey::new(),
        ttl_ms: None,
    };
    let x = e.start(request).await.expect("start").execution;
    let mut message = None;
    for _ in 0..50 {
        message = e.get(&x).await.expect("get").status_message;
        if message.as_deref() == Some("In step nap") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(message.as_deref(), Some("In step nap"));
    let r = e.get(&x).await.expect("get");
    assert_eq!(
        r.state,
        TaskState::Working,
        "a sleeping execution asks nothing"
    );
    let mine = e
        .list(ListFilter::for_principal("abc123", None))
        .await
        .expect("list");
    assert!(
        mine.iter().any(|s| s.execution == x),
        "listed by its principal label"
    );
    let theirs = e
        .list(ListFilter::for_principal("someone-else", None))
        .await
        .expect("list");
    assert!(!theirs.iter().any(|s| s.execution == x));
    e.cancel(&x).await.expect("cancel");
    assert_eq!(e.get(&x).await.expect("get").state, TaskState::Cancelled);
}

#[tokio::test]
async fn a_failed_execution_carries_the_error_payload_and_context() {
    let url = fake_url();
    let e = WorkflowsEngine::new(target(&url, "raises", json!({})));
    let request = StartRequest {
        tool: "t".into(),
        arguments: json!({"day": "2026-11-30"}),
        principal_digest: "p".into(),
        idempotency_key: flowgate_core::IdempotencyKey::new(),
        ttl_ms: None,
    };
    let x = e.start(request).await.expect("start").execution;
    for _ in 0..50 {
        let r = e.get(&x).await.expect("get");
        if r.state.is_terminal() {
            let failure = r.failure.expect("failure");
            assert_eq!(failure.error, "ValueError: no rows for 2026-11-30");
            let cause = failure.cause.expect("cause");
            assert!(
                cause.contains("\"code\":422") || cause.contains("\"code\": 422"),
                "{cause}"
            );
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("did not fail");
}

#[tokio::test]
async fn an_unreachable_endpoint_is_unavailable_and_names_the_workflow() {
    let e = WorkflowsEngine::new(target("http://127.0.0.1:9", "sleepy", json!({})));
    let request = StartRequest {
        tool: "t".into(),
        arguments: json!({}),
        principal_digest: "p".into(),
        idempotency_key: flowgate_core::IdempotencyKey::new(),
        ttl_ms: None,
    };
    let err = e.start(request).await.expect_err("down");
    assert!(err.is_retryable(), "{err:?}");
    assert!(err.to_string().contains("workflows/sleepy"), "{err}");
}

/// The real API names executions with the project number although the manifest gives the
/// project id; such names are this tool's own, and every operation works on them.
#[tokio::test]
async fn names_with_the_project_number_are_accepted_and_unavailable_is_not_an_end() {
    let url = fake_url();
    let e = WorkflowsEngine::new(target(&url, "sleepy", json!({})));
    let request = StartRequest {
        tool: "t".into(),
        arguments: json!({"name": "n", "seconds": 30}),
        principal_digest: "p".into(),
        idempotency_key: flowgate_core::IdempotencyKey::new(),
        ttl_ms: None,
    };
    let x = e.start(request).await.expect("start").execution;
    let project = x.0.split('/').nth(1).unwrap_or_default().to_owned();
    assert!(
        project.len() == 12 && project.bytes().all(|b| b.is_ascii_digit()),
        "the fake names executions with the project number: {x}"
    );
    assert_eq!(e.get(&x).await.expect("get").state, TaskState::Working);

    make_unavailable(
        &url,
        &x.0,
        Some("KMS key projects/k/cryptoKeys/c is disabled"),
    );
    let r = e.get(&x).await.expect("get while unavailable");
    assert_eq!(
        r.state,
        TaskState::Working,
        "UNAVAILABLE is not an end: {r:?}"
    );
    assert_eq!(r.engine_status, "UNAVAILABLE");
    assert!(
        r.min_poll_interval.is_some(),
        "polls an unavailable execution less often"
    );
    let message = r.status_message.unwrap_or_default();
    assert!(message.contains("cryptoKeys/c is disabled"), "{message}");

    make_unavailable(&url, &x.0, None);
    e.cancel(&x).await.expect("cancel");
    assert_eq!(e.get(&x).await.expect("get").state, TaskState::Cancelled);
}

/// `list` honours its limit, and without a principal lists the executions flowgate started
/// (the `labels.flowgate-tool:*` has-filter), newest first.
#[tokio::test]
async fn list_honours_the_limit_and_the_tool_label_filter() {
    let url = fake_url();
    let e = WorkflowsEngine::new(target(&url, "sleepy", json!({})));
    let principal = format!("lister-{:08x}", std::process::id());
    let mut started = Vec::new();
    for _ in 0..3 {
        let request = StartRequest {
            tool: "t".into(),
            arguments: json!({"name": "n", "seconds": 30}),
            principal_digest: principal.clone(),
            idempotency_key: flowgate_core::IdempotencyKey::new(),
            ttl_ms: None,
        };
        started.push(e.start(request).await.expect("start").execution);
    }
    let two = e
        .list(ListFilter::for_principal(principal.clone(), Some(2)))
        .await
        .expect("list");
    assert_eq!(two.len(), 2, "{two:?}");
    let all = e
        .list(ListFilter::for_principal(principal.clone(), None))
        .await
        .expect("list");
    assert_eq!(all.len(), 3, "{all:?}");
    let everyone = e
        .list(ListFilter::default())
        .await
        .expect("list without a principal");
    assert!(
        started
            .iter()
            .all(|x| everyone.iter().any(|s| &s.execution == x))
    );
    for x in &started {
        e.cancel(x).await.expect("cancel");
    }
}
