//! The Step Functions engine against moto running real state machines: the shared engine
//! conformance suite, then what only this engine promises.

use std::sync::Arc;
use std::time::Duration;

use flowgate_core::conformance::{Case, Fixture, run_all};
use flowgate_core::{Engine, EngineError, ExecutionRef, ListFilter, StartRequest, TaskState};
use flowgate_stepfunctions::testing::*;
use flowgate_stepfunctions::{SfnTarget, StepFunctionsEngine};
use serde_json::{Value, json};

fn engine(url: &str, arn: &str, extra: Value) -> StepFunctionsEngine {
    let mut target = json!({"state_machine_arn": arn, "endpoint_url": url});
    if let (Some(t), Value::Object(extra)) = (target.as_object_mut(), extra) {
        t.extend(extra);
    }
    StepFunctionsEngine::new(
        SfnTarget::from_config(target.as_object().expect("object"), &tool_schema())
            .expect("target"),
    )
}

/// The input schema of the tests' tools: every argument their templates name.
fn tool_schema() -> serde_json::Map<String, Value> {
    let schema = json!({"type": "object", "properties": {
        "service": {}, "version": {}, "who": {}, "day": {}, "name": {}
    }});
    schema.as_object().cloned().unwrap_or_default()
}

fn request(arguments: Value) -> StartRequest {
    StartRequest {
        tool: "t".into(),
        arguments,
        principal_tag: "p".into(),
        idempotency_key: flowgate_core::IdempotencyKey::new(),
        ttl_ms: None,
    }
}

#[tokio::test]
async fn stepfunctions_engine_passes_the_conformance_suite_on_moto() {
    let url = moto_url();
    let admin = admin_client(&url);
    let queue = create_queue(&url, &unique("approvals")).await;
    let machine = |name: &str, def: Value| {
        let admin = admin.clone();
        let name = unique(name);
        async move { create_machine(&admin, &name, &def).await }
    };
    // Through the proxy: AWS's paging, and a start whose answer can be lost.
    let scope = ProxyScope::new("conformance", json!({})).await;
    let case = |arn: String| Case {
        engine: Arc::new(engine(&scope.endpoint, &arn, json!({}))),
        arguments: json!({"name": "Ada"}),
    };
    let fixture = Fixture {
        success: case(machine("pwp", pass_wait_pass(1)).await),
        expected_output: json!({"greeting": "hello Ada", "waited": 1}),
        failure: case(machine("fail", failing("Deploy.Broken", "the disk is full")).await),
        expected_failure: "the disk is full".into(),
        slow: case(machine("slow", pass_wait_pass(600)).await),
        asks: Some(case(machine("asks", asks(&queue, "Your name?")).await)),
        answer: json!({"answer": "Alice"}),
        timeout: Duration::from_secs(20),
        lose_next_start_answer: Some(scope.lose_next_start_answer()),
        transient_read_fault: Some(scope.transient_read_fault()),
    };
    run_all(&fixture).await;
    assert_eq!(scope.report().await["dropped"]["StartExecution"], 1);
}

#[tokio::test]
async fn running_executions_show_their_current_state() {
    let url = moto_url();
    let arn = create_machine(&admin_client(&url), &unique("state"), &pass_wait_pass(30)).await;
    let e = engine(&url, &arn, json!({}));
    let x = e
        .start(request(json!({"name": "x"})))
        .await
        .expect("start")
        .execution;
    let mut message = None;
    for _ in 0..50 {
        message = e.get(&x).await.expect("get").status_message;
        if message.as_deref() == Some("In state Wait") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(message.as_deref(), Some("In state Wait"));
    let r = e.get(&x).await.expect("get");
    assert!(
        r.console_url
            .expect("console")
            .contains("/states/home?region=us-east-1#/v2/executions/details/")
    );
    e.cancel(&x).await.expect("cancel");
    let admin = admin_client(&url);
    let d = admin
        .describe_execution()
        .execution_arn(&x.0)
        .send()
        .await
        .expect("describe");
    assert_eq!(
        d.status.as_str(),
        "ABORTED",
        "the execution itself was stopped"
    );
}

#[tokio::test]
async fn a_retried_named_start_reaches_the_same_execution() {
    let url = moto_url();
    let admin = admin_client(&url);
    let arn = create_machine(&admin, &unique("named"), &pass_wait_pass(30)).await;
    let e = engine(
        &url,
        &arn,
        json!({"execution_name": "deploy-{service}-{version}"}),
    );
    let args = json!({"name": "n", "service": "web", "version": 7});
    let first = e.start(request(args.clone())).await.expect("first start");
    let second = e.start(request(args)).await.expect("retried start");
    assert_eq!(first.execution, second.execution);
    assert!(
        first.execution.0.ends_with(":deploy-web-7"),
        "{}",
        first.execution
    );
    assert_eq!(first.created_at, second.created_at);
    let listed = admin
        .list_executions()
        .state_machine_arn(&arn)
        .send()
        .await
        .expect("list");
    assert_eq!(
        listed.executions().len(),
        1,
        "no second execution was started"
    );
    assert_eq!(e.list(ListFilter::default()).await.expect("list").len(), 1);
    let other = e
        .start(request(
            json!({"name": "n", "service": "web", "version": 8}),
        ))
        .await
        .expect("start");
    assert_ne!(other.execution, first.execution);
    e.cancel(&first.execution).await.expect("cancel");
    e.cancel(&other.execution).await.expect("cancel");
}

/// A call that leaves out an optional argument its name template uses is not refused: with
/// no schema default, the execution is named by the call's key (still exactly once per call);
/// with one, the default fills the name.
#[tokio::test]
async fn a_name_template_with_a_left_out_optional_argument_still_starts() {
    let url = moto_url();
    let arn = create_machine(&admin_client(&url), &unique("opt"), &pass_wait_pass(30)).await;
    let e = engine(
        &url,
        &arn,
        json!({"execution_name": "deploy-{service}-{version}"}),
    );
    let call = request(json!({"name": "n", "service": "web"}));
    let first = e.start(call.clone()).await.expect("start without version");
    let again = e.start(call.clone()).await.expect("retried start");
    assert_eq!(first.execution, again.execution, "exactly once per call");
    assert!(
        first
            .execution
            .0
            .ends_with(&call.idempotency_key.to_string()),
        "named by the call's key: {}",
        first.execution
    );
    e.cancel(&first.execution).await.expect("cancel");
    let schema = json!({"type": "object", "properties": {
        "name": {}, "service": {}, "version": {"type": "string", "default": "latest"}
    }});
    let with_default = StepFunctionsEngine::new(
        SfnTarget::from_config(
            json!({"state_machine_arn": arn, "endpoint_url": url,
                   "execution_name": "deploy-{service}-{version}"})
            .as_object()
            .expect("object"),
            schema.as_object().expect("object"),
        )
        .expect("target"),
    );
    let x = with_default
        .start(request(json!({"name": "n", "service": "web"})))
        .await
        .expect("start");
    assert!(
        x.execution.0.ends_with(":deploy-web-latest"),
        "{}",
        x.execution
    );
    with_default.cancel(&x.execution).await.expect("cancel");
}

#[tokio::test]
async fn unknown_executions_and_foreign_arns_are_not_found() {
    let url = moto_url();
    let arn = create_machine(&admin_client(&url), &unique("nf"), &pass_wait_pass(1)).await;
    let e = engine(&url, &arn, json!({}));
    let missing = ExecutionRef(arn.replacen(":stateMachine:", ":execution:", 1) + ":never-started");
    assert!(matches!(
        e.get(&missing).await,
        Err(EngineError::NotFound { .. })
    ));
    let foreign = ExecutionRef("arn:aws:states:us-east-1:123456789012:execution:other:x".into());
    assert!(matches!(
        e.get(&foreign).await,
        Err(EngineError::NotFound { .. })
    ));
}

#[tokio::test]
async fn an_output_pointer_and_input_key_shape_the_call() {
    let url = moto_url();
    let def = json!({"StartAt": "Echo", "States": {"Echo": {"Type": "Pass", "Parameters": {"summary": {"got.$": "$.args.name"}}, "End": true}}});
    let arn = create_machine(&admin_client(&url), &unique("shape"), &def).await;
    let e = engine(
        &url,
        &arn,
        json!({"input_key": "args", "output_pointer": "/summary"}),
    );
    let x = e
        .start(request(json!({"name": "Zed"})))
        .await
        .expect("start")
        .execution;
    for _ in 0..50 {
        let r = e.get(&x).await.expect("get");
        if r.state.is_terminal() {
            assert_eq!(r.state, TaskState::Completed, "{r:?}");
            assert_eq!(r.output, Some(json!({"got": "Zed"})));
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("did not finish");
}

/// A one-response HTTP server standing in for an AWS endpoint that answers with an error.
async fn answering(status: u16, body: &'static str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let mut buf = vec![0u8; 65536];
            let _ = socket.read(&mut buf).await;
            let response = format!(
                "HTTP/1.1 {status} Error\r\ncontent-type: application/x-amz-json-1.0\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = socket.write_all(response.as_bytes()).await;
        }
    });
    format!("http://{addr}")
}

#[tokio::test]
async fn engine_faults_are_classified_and_name_the_state_machine() {
    moto_url(); // needs moto and the AWS_* test credentials scripts/test sets
    let arn = "arn:aws:states:us-east-1:123456789012:stateMachine:faults";
    let throttled = answering(
        400,
        r#"{"__type":"ThrottlingException","message":"Rate exceeded"}"#,
    )
    .await;
    let err = engine(&throttled, arn, json!({}))
        .start(request(json!({})))
        .await
        .expect_err("throttled");
    assert!(
        matches!(err, EngineError::Throttled { .. }) && err.is_retryable(),
        "{err:?}"
    );

    let denied = answering(400, r#"{"__type":"AccessDeniedException","message":"not authorized to perform states:StartExecution"}"#).await;
    let err = engine(&denied, arn, json!({}))
        .start(request(json!({})))
        .await
        .expect_err("denied");
    assert!(matches!(err, EngineError::Denied { .. }), "{err:?}");
    assert!(
        err.to_string().contains("state machine faults")
            && err.to_string().contains("not authorized"),
        "{err}"
    );
    assert_no_account(&err.to_string());

    let unreachable = engine("http://127.0.0.1:9", arn, json!({}));
    let err = unreachable
        .get(&ExecutionRef(format!(
            "{}:x",
            arn.replacen(":stateMachine:", ":execution:", 1)
        )))
        .await
        .expect_err("down");
    assert!(
        matches!(err, EngineError::Unavailable { .. }) && err.is_retryable(),
        "{err:?}"
    );
    assert!(err.to_string().contains("could not be reached"), "{err}");
    assert_no_account(&err.to_string());
}

/// Client-facing text names the state machine, never an ARN or the account.
fn assert_no_account(text: &str) {
    assert!(
        !text.contains("arn:") && !text.contains(ACCOUNT),
        "an ARN or the account id reached client-facing text: {text}"
    );
}

/// An engine whose calls go through a proxy scope.
fn proxied(scope: &ProxyScope, arn: &str, extra: Value) -> StepFunctionsEngine {
    engine(&scope.endpoint, arn, extra)
}

async fn until<F, Fut>(what: &str, mut check: F) -> flowgate_core::ExecutionRecord
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<flowgate_core::ExecutionRecord>>,
{
    for _ in 0..300 {
        if let Some(r) = check().await {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("timed out waiting for {what}");
}

#[tokio::test]
async fn a_start_whose_answer_was_lost_is_retried_into_the_one_execution() {
    let url = moto_url();
    let admin = admin_client(&url);
    let arn = create_machine(&admin, &unique("lost"), &pass_wait_pass(30)).await;
    let scope = ProxyScope::new("lost", json!({"drop": {"StartExecution": 1}})).await;
    let e = proxied(&scope, &arn, json!({}));
    // One call, one key: the first attempt reaches AWS, its answer does not reach flowgate.
    let call = request(json!({"name": "once"}));
    let first = e
        .start(call.clone())
        .await
        .expect_err("the answer was dropped");
    assert!(first.is_retryable(), "{first:?}");
    let retried = e
        .start(call)
        .await
        .expect("the retry reaches the same execution");
    let listed = admin
        .list_executions()
        .state_machine_arn(&arn)
        .send()
        .await
        .expect("list");
    assert_eq!(listed.executions().len(), 1, "exactly one execution ran");
    assert_eq!(listed.executions()[0].execution_arn, retried.execution.0);
    assert_eq!(scope.calls("StartExecution").await, 2);
    e.cancel(&retried.execution).await.expect("cancel");
}

#[tokio::test]
async fn a_name_clash_with_other_arguments_is_a_tool_error_not_another_callers_execution() {
    let url = moto_url();
    let admin = admin_client(&url);
    let arn = create_machine(&admin, &unique("clash"), &pass_wait_pass(30)).await;
    let e = engine(&url, &arn, json!({"execution_name": "run-{who}"}));
    // Values that clean to one string get names of their own.
    let a = e
        .start(request(json!({"name": "a", "who": "ann lee"})))
        .await
        .expect("a");
    let b = e
        .start(request(json!({"name": "b", "who": "ann/lee"})))
        .await
        .expect("b");
    let c = e
        .start(request(json!({"name": "c", "who": "ann-lee"})))
        .await
        .expect("c");
    assert_ne!(a.execution, b.execution);
    assert_ne!(a.execution, c.execution);
    assert_ne!(b.execution, c.execution);
    // A template without the distinguishing argument: same name, other input.
    let fixed = engine(&url, &arn, json!({"execution_name": "nightly-{day}"}));
    let first = fixed
        .start(request(json!({"name": "x", "day": "mon"})))
        .await
        .expect("first");
    let same = fixed
        .start(request(json!({"name": "x", "day": "mon"})))
        .await
        .expect("the same call again");
    assert_eq!(same.execution, first.execution);
    let err = fixed
        .start(request(json!({"name": "y", "day": "mon"})))
        .await
        .expect_err("other arguments under the same name");
    assert!(matches!(err, EngineError::InvalidInput { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("already has an execution named nightly-mon"),
        "{text}"
    );
    assert_no_account(&text);
    for x in [a, b, c, first] {
        e.cancel(&x.execution).await.expect("cancel");
    }
}

#[tokio::test]
async fn a_wait_behind_a_chatty_parallel_branch_is_found_and_answered() {
    let url = moto_url();
    let admin = admin_client(&url);
    let queue = create_queue(&url, &unique("chatty")).await;
    let arn = create_machine(
        &admin,
        &unique("chatty"),
        &asks_beside_a_chatty_branch(&queue, 300),
    )
    .await;
    let scope = ProxyScope::new("chatty", json!({})).await;
    let e = proxied(&scope, &arn, json!({}));
    let x = e.start(request(json!({}))).await.expect("start").execution;
    // Wait until the chatty branch is done: over a thousand events after the question, more
    // than one page of AWS's largest.
    let mut events = 0;
    for _ in 0..600 {
        let h = admin
            .get_execution_history()
            .execution_arn(&x.0)
            .send()
            .await
            .expect("history");
        events = h.events().len();
        if h.events().iter().any(|e| {
            e.state_exited_event_details
                .as_ref()
                .is_some_and(|d| d.name == "Done")
        }) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(events > 1000, "the branch wrote {events} events");
    let r = e.get(&x).await.expect("get");
    assert_eq!(r.state, TaskState::InputRequired, "{r:?}");
    assert_eq!(r.input_requests.len(), 1);
    // An instance whose pages come back small (100 events) reads the history across polls,
    // saying so, and never shows a wait it cannot yet vouch for.
    let small = ProxyScope::new("chatty-small", json!({"page_cap": 100})).await;
    let slow_reader = proxied(&small, &arn, json!({}));
    let first = slow_reader.get(&x).await.expect("get");
    assert_eq!(first.state, TaskState::Working, "{first:?}");
    assert!(first.input_requests.is_empty());
    assert!(
        first
            .status_message
            .as_deref()
            .is_some_and(|m| m.starts_with("Reading the execution's history")),
        "{first:?}"
    );
    let mut polls = 1;
    let caught_up = loop {
        tokio::time::sleep(Duration::from_millis(1100)).await;
        polls += 1;
        let r = slow_reader.get(&x).await.expect("get");
        if r.state == TaskState::InputRequired || polls > 10 {
            break r;
        }
    };
    assert_eq!(
        caught_up.input_requests, r.input_requests,
        "after {polls} polls"
    );
    // Another instance, which has never seen the execution, finds the same wait.
    let fresh = proxied(&scope, &arn, json!({}));
    let again = fresh.get(&x).await.expect("get");
    assert_eq!(again.input_requests, r.input_requests);
    assert!(
        scope.calls("GetExecutionHistory").await >= 4,
        "the reads paged through the history"
    );
    // A key that is not outstanding is not delivered.
    let stray = fresh
        .respond(&x, "sfn-999999", accept("no"))
        .await
        .expect_err("a stray key");
    assert!(stray.is_not_found(), "{stray:?}");
    let key = r.input_requests[0].key.clone();
    fresh
        .respond(&x, &key, accept("yes"))
        .await
        .expect("respond");
    let done = until("the execution to finish", || async {
        let r = e.get(&x).await.expect("get");
        r.state.is_terminal().then_some(r)
    })
    .await;
    assert_eq!(done.state, TaskState::Completed, "{done:?}");
}

fn accept(answer: &str) -> flowgate_core::InputResponse {
    flowgate_core::InputResponse {
        action: flowgate_core::Action::Accept,
        content: Some(json!({"answer": answer})),
    }
}

#[tokio::test]
async fn polls_cost_one_call_and_concurrent_polls_share_it() {
    let url = moto_url();
    let admin = admin_client(&url);
    let slow = create_machine(&admin, &unique("steady"), &pass_wait_pass(60)).await;
    let quick = create_machine(&admin, &unique("quick"), &pass_wait_pass(0)).await;
    let scope = ProxyScope::new("steady", json!({})).await;
    let e = Arc::new(proxied(&scope, &slow, json!({})));
    let x = e
        .start(request(json!({"name": "s"})))
        .await
        .expect("start")
        .execution;
    for _ in 0..3 {
        let r = e.get(&x).await.expect("get");
        assert_eq!(r.state, TaskState::Working);
        tokio::time::sleep(Duration::from_millis(1100)).await;
    }
    let report = scope.report().await;
    assert_eq!(report["calls"]["GetExecutionHistory"], 3, "{report}");
    assert_eq!(report["calls"].get("DescribeExecution"), None, "{report}");
    // Ten polls at once: one call.
    let polls: Vec<_> = (0..10)
        .map(|_| {
            let e = e.clone();
            let x = x.clone();
            tokio::spawn(async move { e.get(&x).await })
        })
        .collect();
    for p in polls {
        p.await.expect("join").expect("get");
    }
    assert_eq!(scope.calls("GetExecutionHistory").await, 4);
    e.cancel(&x).await.expect("cancel");

    // A finished execution: one call, then none.
    let q = proxied(&scope, &quick, json!({}));
    let y = q
        .start(request(json!({"name": "q"})))
        .await
        .expect("start")
        .execution;
    let before = scope.calls("GetExecutionHistory").await;
    let mut reads = 0;
    let done = until("the quick execution to finish", || {
        reads += 1;
        let q = &q;
        let y = &y;
        async move {
            let r = q.get(y).await.expect("get");
            r.state.is_terminal().then_some(r)
        }
    })
    .await;
    assert_eq!(done.state, TaskState::Completed);
    assert_eq!(
        done.output,
        Some(json!({"greeting": "hello q", "waited": 0}))
    );
    let spent = scope.calls("GetExecutionHistory").await - before;
    assert!(spent <= reads, "{spent} calls for {reads} polls");
    for _ in 0..5 {
        assert_eq!(q.get(&y).await.expect("get"), done);
    }
    assert_eq!(
        scope.calls("GetExecutionHistory").await - before,
        spent,
        "a finished execution is not read again"
    );
    assert_eq!(scope.calls("DescribeExecution").await, 0);
}

#[tokio::test]
async fn throttling_keeps_the_task_as_last_seen_and_slows_polling() {
    let url = moto_url();
    let arn = create_machine(
        &admin_client(&url),
        &unique("throttle"),
        &pass_wait_pass(60),
    )
    .await;
    // A bucket of two calls refilled once every 20 s.
    let scope = ProxyScope::new(
        "throttle",
        json!({"buckets": {"GetExecutionHistory": [2, 0.05]}}),
    )
    .await;
    let e = proxied(&scope, &arn, json!({}));
    let x = e
        .start(request(json!({"name": "t"})))
        .await
        .expect("start")
        .execution;
    let seen = e.get(&x).await.expect("first poll");
    let calm = seen.min_poll_interval.expect("an interval");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    e.get(&x).await.expect("second poll");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let throttled = e.get(&x).await.expect("a throttled poll is not an error");
    assert_eq!(throttled.state, TaskState::Working);
    assert_eq!(throttled.status_message, seen.status_message);
    let slower = throttled.min_poll_interval.expect("an interval");
    assert!(
        slower > calm,
        "{slower:?} after throttling, {calm:?} before"
    );
    assert_eq!(scope.report().await["throttled"]["GetExecutionHistory"], 1);
    assert_eq!(e.throttled_count(), 1);
    // An instance with nothing to show yet says "throttled", with when to come back (later
    // than before throttling; the rate climbs back from the cut, so perhaps sooner than the
    // interval advertised at the cut).
    let fresh = proxied(&scope, &arn, json!({}));
    match fresh.get(&x).await {
        Err(EngineError::Throttled {
            retry_after: Some(after),
            ..
        }) => assert!(after > calm, "{after:?}"),
        other => panic!("expected throttled, got {other:?}"),
    }
    engine(&url, &arn, json!({}))
        .cancel(&x)
        .await
        .expect("cancel");
}

#[tokio::test]
async fn tasks_list_spends_the_listing_budget_and_its_throttling_slows_listings() {
    let url = moto_url();
    let arn = create_machine(&admin_client(&url), &unique("lists"), &pass_wait_pass(1)).await;
    // A bucket of 3 ListExecutions calls refilled once every 20 s.
    let scope = ProxyScope::new(
        "tasks-list-budget",
        json!({"buckets": {"ListExecutions": [3, 0.05]}}),
    )
    .await;
    let e = proxied(&scope, &arn, json!({}));
    assert_eq!(e.listing_interval(), Duration::ZERO, "nothing listed yet");
    e.list(ListFilter::default()).await.expect("list");
    // A listing page is one call each cycle at 80% of 5 a second: 250 ms of the cycle.
    let spent = e.listing_interval();
    assert!(spent >= Duration::from_millis(249), "{spent:?}");
    let mut throttled = false;
    for _ in 0..20 {
        if let Err(EngineError::Throttled { .. }) = e.list(ListFilter::default()).await {
            throttled = true;
            break;
        }
    }
    assert!(throttled, "the bucket ran dry");
    assert_eq!(e.throttled_count(), 1);
    assert!(e.listing_interval() > spent, "throttling slows listings");
}

#[tokio::test]
async fn a_stalled_endpoint_times_out_instead_of_hanging() {
    let url = moto_url();
    let arn = create_machine(&admin_client(&url), &unique("stall"), &pass_wait_pass(60)).await;
    let direct = engine(&url, &arn, json!({}));
    let x = direct
        .start(request(json!({"name": "s"})))
        .await
        .expect("start")
        .execution;
    let scope = ProxyScope::new("stall", json!({"stall": {"GetExecutionHistory": 1}})).await;
    let e = proxied(&scope, &arn, json!({}));
    let t0 = std::time::Instant::now();
    let err = tokio::time::timeout(Duration::from_secs(30), e.get(&x))
        .await
        .expect("the engine call has its own deadline")
        .expect_err("stalled");
    assert!(matches!(err, EngineError::Timeout { .. }), "{err:?}");
    assert!(err.is_retryable());
    assert_no_account(&err.to_string());
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    // The stall is over: the next poll answers.
    assert_eq!(e.get(&x).await.expect("get").state, TaskState::Working);
    direct.cancel(&x).await.expect("cancel");
}

#[tokio::test]
async fn the_policy_grants_exactly_the_calls_the_engine_makes() {
    let url = moto_url();
    let admin = admin_client(&url);
    let queue = create_queue(&url, &unique("policy")).await;
    let asking = create_machine(&admin, &unique("policy"), &asks(&queue, "Go?")).await;
    let scope = ProxyScope::new("policy", json!({})).await;
    let e = proxied(&scope, &asking, json!({}));
    // Every operation: start (and a retried start), get, respond both ways, cancel, list.
    let call = request(json!({}));
    let x = e.start(call.clone()).await.expect("start").execution;
    e.start(call).await.expect("retried start");
    let r = until("the question", || async {
        let r = e.get(&x).await.expect("get");
        (r.state == TaskState::InputRequired).then_some(r)
    })
    .await;
    e.respond(&x, &r.input_requests[0].key, accept("ok"))
        .await
        .expect("accept");
    let y = e.start(request(json!({}))).await.expect("start").execution;
    let r = until("the question", || async {
        let r = e.get(&y).await.expect("get");
        (r.state == TaskState::InputRequired).then_some(r)
    })
    .await;
    let decline = flowgate_core::InputResponse {
        action: flowgate_core::Action::Decline,
        content: None,
    };
    e.respond(&y, &r.input_requests[0].key, decline)
        .await
        .expect("decline");
    let z = e.start(request(json!({}))).await.expect("start").execution;
    e.cancel(&z).await.expect("cancel");
    e.list(ListFilter::default()).await.expect("list");
    // A name clash: the engine describes the execution that has the name.
    let named = proxied(&scope, &asking, json!({"execution_name": "policy-fixed"}));
    let n = named
        .start(request(json!({"a": 1})))
        .await
        .expect("start")
        .execution;
    named
        .start(request(json!({"a": 2})))
        .await
        .expect_err("a clash");
    named.cancel(&n).await.expect("cancel");

    let report = scope.report().await;
    let mut made: Vec<String> = report["calls"]
        .as_object()
        .expect("calls")
        .keys()
        .cloned()
        .collect();
    made.sort();
    let mut granted: Vec<String> = flowgate_stepfunctions::granted_actions()
        .iter()
        .map(|a| (*a).to_owned())
        .collect();
    granted.sort();
    // moto has no StartSyncExecution: express tools are held to it by the unit tests only.
    granted.retain(|a| a != "StartSyncExecution");
    assert_eq!(made, granted, "the calls made are the actions granted");
}

#[tokio::test]
async fn a_version_or_alias_arn_starts_there_and_follows_the_execution() {
    let url = moto_url();
    let admin = admin_client(&url);
    let created = admin
        .create_state_machine()
        .name(unique("versioned"))
        .definition(pass_wait_pass(60).to_string())
        .role_arn(format!("arn:aws:iam::{ACCOUNT}:role/flowgate-tests"))
        .publish(true)
        .send()
        .await
        .expect("create a machine with a version");
    let arn = created.state_machine_arn;
    let version = created.state_machine_version_arn.expect("a version ARN");
    assert!(version.starts_with(&format!("{arn}:")), "{version}");
    // Through the proxy: moto cannot start a version itself.
    let scope = ProxyScope::new("versioned", json!({})).await;
    let e = proxied(&scope, &version, json!({}));
    let x = e
        .start(request(json!({"name": "v"})))
        .await
        .expect("start")
        .execution;
    assert!(
        x.0.starts_with(&arn.replacen(":stateMachine:", ":execution:", 1)),
        "{x}"
    );
    assert_eq!(e.get(&x).await.expect("get").state, TaskState::Working);
    e.cancel(&x).await.expect("cancel");
    let policy = flowgate_stepfunctions::policies(&[SfnTarget::from_config(
        json!({"state_machine_arn": version})
            .as_object()
            .expect("object"),
        &tool_schema(),
    )
    .expect("target")]);
    let text = policy.to_string();
    assert!(
        text.contains(&version) && text.contains(&format!("\"{arn}\"")),
        "{text}"
    );
}

/// More executions than the history budget can read within an end's worth of time: a listing
/// (ListExecutions, a bucket of its own) tells which ended, and a poll shows the end within the
/// advertised interval, while the other executions' histories are read in turn, least recently
/// read first, within the budget.
#[tokio::test]
async fn an_end_is_seen_within_the_advertised_interval_while_the_history_budget_is_spent() {
    let url = moto_url();
    let arn = create_machine(
        &admin_client(&url),
        &unique("ends"),
        &waits_for_input_seconds(),
    )
    .await;
    // The listing lags a second behind, as AWS's may (it is eventually consistent).
    let scope = ProxyScope::new("ends", json!({"list_lag": 1})).await;
    // A quarter of the account: 4 history reads a second, one listing a second. 64 executions
    // take 16 s to read in turn; a listing and a poll show an end within about 3 s. The short
    // one is read first, while it runs, and ends long before its next turn.
    let target = SfnTarget::from_config(
        json!({"state_machine_arn": arn, "endpoint_url": scope.endpoint})
            .as_object()
            .expect("object"),
        &tool_schema(),
    )
    .expect("target");
    let e = StepFunctionsEngine::with_quota_share(target, 0.25);
    let t0 = std::time::Instant::now();
    let short = e
        .start(request(json!({"seconds": 10})))
        .await
        .expect("start")
        .execution;
    let mut long = Vec::new();
    for _ in 0..63 {
        long.push(
            e.start(request(json!({"seconds": 300})))
                .await
                .expect("start")
                .execution,
        );
    }
    let interval = e.pacing().expect("an interval");
    assert_eq!(
        interval,
        Duration::from_secs(2),
        "the end's interval is advertised, not the 16 s history cycle"
    );
    let first = e.get(&short).await.expect("get");
    assert_eq!(
        first.status_message.as_deref(),
        Some("In state Wait"),
        "{first:?}"
    );
    // The clients: the short execution's polls come every half second, the others' every
    // advertised interval.
    let mut next_round = std::time::Instant::now();
    let ended = loop {
        let r = e.get(&short).await.expect("get");
        if r.state.is_terminal() {
            break r;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(40),
            "the end was never seen"
        );
        if std::time::Instant::now() >= next_round {
            for x in &long {
                let r = e
                    .get(x)
                    .await
                    .expect("a poll that does not read is no error");
                assert_eq!(r.state, TaskState::Working, "{r:?}");
                assert_eq!(r.min_poll_interval, Some(interval), "{r:?}");
            }
            next_round += interval;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert_eq!(ended.state, TaskState::Completed, "{ended:?}");
    let late = (chrono::Utc::now() - ended.updated_at)
        .to_std()
        .expect("seen after it ended");
    assert!(
        late < Duration::from_secs(5),
        "the end was seen {late:?} after it happened"
    );
    let spent = t0.elapsed().as_secs_f64();
    let report = scope.report().await;
    assert_eq!(report["throttled"], json!({}), "{report}");
    assert!(
        report["calls"]["ListExecutions"].as_u64().unwrap_or(0) >= 1,
        "{report}"
    );
    // Within the budget: a bucket of 8 reads, 4 a second, and the end's read out of it.
    let reads = report["calls"]["GetExecutionHistory"].as_u64().unwrap_or(0);
    assert!(
        (reads as f64) <= 8.0 + 4.0 * spent + 1.0,
        "{reads} reads in {spent:.1} s"
    );
    // Least recently read first: every read of the others went to one never read before
    // (the short execution's two reads: its first, and the one that found its end), and no
    // read went to an execution the lagging listing did not show yet.
    let mut read = 0;
    for x in &long {
        let r = e.get(x).await.expect("get");
        if r.status_message.as_deref() == Some("In state Wait") {
            read += 1;
        }
    }
    let reads = scope.calls("GetExecutionHistory").await;
    assert_eq!(read + 2, reads, "{read} executions read, {reads} reads");
    assert!(read < 63, "the budget cannot have read them all yet");
    for x in &long {
        e.cancel(x).await.expect("cancel");
    }
}
