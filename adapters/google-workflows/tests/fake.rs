//! The Workflows engine against the executions-API fake, whose executions really run their
//! YAML: the shared engine conformance suite, then what only this engine promises.

use std::sync::Arc;
use std::time::Duration;

use flowgate_core::conformance::{Case, Fixture, run_all};
use flowgate_core::{Engine, ListFilter, StartRequest, TaskState};
use flowgate_google_workflows::WorkflowsEngine;
use flowgate_google_workflows::testing::{
    fake_url, lose_next_start_answer, make_unavailable, set_backlog, target, transient_read_fault,
};
use serde_json::json;

fn case(url: &str, workflow: &str, arguments: serde_json::Value) -> Case {
    Case {
        engine: Arc::new(WorkflowsEngine::new(target(
            url,
            workflow,
            json!({"project": CONFORMANCE_PROJECT}),
        ))),
        arguments,
    }
}

/// The suite's own project, so the read faults it stages never reach other tests' reads.
const CONFORMANCE_PROJECT: &str = "flowgate-conformance";

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
        transient_read_fault: Some(transient_read_fault(&url, CONFORMANCE_PROJECT)),
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
        principal_tag: "abc123".into(),
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
        principal_tag: "p".into(),
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
            // The stack trace names the step that raised.
            assert!(cause.contains("(in step "), "{cause}");
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
        principal_tag: "p".into(),
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
        principal_tag: "p".into(),
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
            principal_tag: principal.clone(),
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

fn request(arguments: serde_json::Value) -> StartRequest {
    StartRequest::new("t", arguments, format!("p-{:016x}", rand_u64()))
}

fn rand_u64() -> u64 {
    rand::random()
}

/// An execution held in the workflow's backlog is QUEUED with no start time: submitted, saying
/// so, with no made-up creation time; it starts when a slot frees, and can be cancelled while
/// it waits.
#[tokio::test]
async fn a_queued_execution_is_submitted_without_a_start_time_and_starts_when_a_slot_frees() {
    let url = fake_url();
    set_backlog(&url, "queued", Some(1));
    let e = WorkflowsEngine::new(target(&url, "queued", json!({})));
    let running = e
        .start(request(json!({"seconds": 600})))
        .await
        .expect("start")
        .execution;
    let waiting = e
        .start(request(json!({"seconds": 600})))
        .await
        .expect("start");
    let third = e
        .start(request(json!({"seconds": 600})))
        .await
        .expect("start")
        .execution;
    let r = e.get(&waiting.execution).await.expect("get");
    assert_eq!(r.state, TaskState::Submitted, "{r:?}");
    assert_eq!(r.engine_status, "QUEUED");
    assert!(r.status_message.unwrap_or_default().contains("backlog"));
    assert_eq!(
        r.created_at.timestamp(),
        0,
        "no start time yet: the engine invents none (the server uses the handle's)"
    );
    assert!(
        waiting.created_at.timestamp() > 0,
        "the start's time is real"
    );
    // Cancelled while queued: it never runs.
    e.cancel(&third).await.expect("cancel a queued execution");
    assert_eq!(
        e.get(&third).await.expect("get").state,
        TaskState::Cancelled
    );
    // A slot frees: the queued one starts.
    e.cancel(&running).await.expect("cancel");
    let mut started = None;
    for _ in 0..50 {
        let r = e.get(&waiting.execution).await.expect("get");
        if r.state == TaskState::Working {
            started = Some(r);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let started = started.expect("the queued execution started");
    assert!(started.created_at.timestamp() > 0, "{started:?}");
    e.cancel(&waiting.execution).await.expect("cancel");
    set_backlog(&url, "queued", None);
}

/// The callbacks list comes in pages whose tokens hold `+`, `/` and `=`: the callback waiting
/// on the second page is found and answered.
#[tokio::test]
async fn a_callback_on_a_later_page_is_found_and_answered() {
    let url = fake_url();
    let e = WorkflowsEngine::new(target(&url, "many_callbacks", json!({})));
    let x = e.start(request(json!({}))).await.expect("start").execution;
    let mut asked = None;
    for _ in 0..100 {
        let r = e.get(&x).await.expect("get");
        if r.state == TaskState::InputRequired {
            asked = Some(r);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let asked = asked.expect("the third callback waits");
    assert_eq!(asked.input_requests.len(), 1, "{asked:?}");
    let key = asked.input_requests[0].key.clone();
    let answer = flowgate_core::InputResponse {
        action: flowgate_core::Action::Accept,
        content: Some(json!({"answer": "third"})),
    };
    e.respond(&x, &key, answer).await.expect("respond");
    for _ in 0..100 {
        let r = e.get(&x).await.expect("get");
        if r.state.is_terminal() {
            assert_eq!(r.state, TaskState::Completed, "{r:?}");
            assert_eq!(r.output, Some(json!({"answer": "third"})));
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("did not finish");
}

/// The service's limits reach the caller as bad input, and nothing is started: an argument
/// over 32 KB, a workflow whose YAML does not parse.
#[tokio::test]
async fn oversized_arguments_and_unparsable_workflows_are_refused_and_start_nothing() {
    let url = fake_url();
    let e = WorkflowsEngine::new(target(&url, "sleepy", json!({})));
    let principal = format!("big-{:016x}", rand_u64());
    let big = StartRequest::new(
        "t",
        json!({"name": "x".repeat(33 * 1024)}),
        principal.clone(),
    );
    let err = e.start(big).await.expect_err("over 32 KB");
    assert!(
        matches!(err, flowgate_core::EngineError::InvalidInput { .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("32KB"), "{err}");
    assert!(
        e.list(ListFilter::for_principal(principal, None))
            .await
            .expect("list")
            .is_empty()
    );
    let broken = WorkflowsEngine::new(target(&url, "broken", json!({})));
    let err = broken
        .start(request(json!({})))
        .await
        .expect_err("unparsable workflow");
    assert!(
        matches!(err, flowgate_core::EngineError::InvalidInput { .. }),
        "{err:?}"
    );
}

/// The tool's own labels stay on its executions next to flowgate's (execution labels replace
/// the workflow's, so cost labels must be given here).
#[tokio::test]
async fn the_tools_labels_are_kept_beside_flowgates() {
    let url = fake_url();
    let e = WorkflowsEngine::new(target(
        &url,
        "sleepy",
        json!({"labels": {"cost-center": "eng-42"}}),
    ));
    let x = e
        .start(request(json!({"name": "n", "seconds": 30})))
        .await
        .expect("start")
        .execution;
    let raw: serde_json::Value = reqwest::get(format!("{url}/v1/{}", x.0))
        .await
        .expect("get")
        .json()
        .await
        .expect("json");
    assert_eq!(raw["labels"]["cost-center"], "eng-42", "{raw}");
    assert_eq!(raw["labels"]["flowgate-tool"], "t", "{raw}");
    e.cancel(&x).await.expect("cancel");
}
