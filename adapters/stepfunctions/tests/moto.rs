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
        SfnTarget::from_manifest(target.as_object().expect("object")).expect("target"),
    )
}

fn request(arguments: Value) -> StartRequest {
    StartRequest {
        tool: "t".into(),
        arguments,
        principal_digest: "p".into(),
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
    let case = |arn: String| Case {
        engine: Arc::new(engine(&url, &arn, json!({}))),
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
        lose_next_start_answer: None,
    };
    run_all(&fixture).await;
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
        err.to_string().contains("stateMachine:faults")
            && err.to_string().contains("not authorized"),
        "{err}"
    );

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
}
