//! The Airflow engine against a real Airflow 3 (started by scripts/test through
//! scripts/lib/airflow.sh, running tests/fakes/airflow/dags): the shared engine conformance
//! suite through a fault-staging proxy, then what only this engine promises.

use std::sync::Arc;
use std::time::{Duration, Instant};

use flowgate_airflow::AirflowEngine;
use flowgate_airflow::testing::{FaultProxy, TestAirflow};
use flowgate_core::conformance::{Case, Fixture, run_all};
use flowgate_core::{
    Action, Engine, EngineError, ExecutionRecord, ExecutionRef, InputResponse, ListFilter,
    StartRequest, TaskState,
};
use serde_json::{Value, json};

/// How long a test waits for a run (tasks run for real; the machine may be busy).
const PATIENCE: Duration = Duration::from_secs(90);

fn request(arguments: Value) -> StartRequest {
    StartRequest::new("t", arguments, "0123456789abcdef")
}

/// Polls until `done` holds.
async fn until(
    engine: &AirflowEngine,
    run: &ExecutionRef,
    done: impl Fn(&ExecutionRecord) -> bool,
) -> ExecutionRecord {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let record = engine.get(run).await.expect("get");
        if done(&record) {
            return record;
        }
        assert!(
            Instant::now() < deadline,
            "timed out on {run}: last record {record:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn airflow_engine_passes_the_conformance_suite_on_real_airflow() {
    let airflow = TestAirflow::get();
    let proxy = FaultProxy::start(&airflow.url).await;
    let case = |dag: &str, extra: Value, args: Value| Case {
        engine: Arc::new(airflow.engine_at(&proxy.url, dag, extra)),
        arguments: args,
    };
    let fixture = Fixture {
        success: case(
            "flowgate_hello",
            json!({"result_task": "greet"}),
            json!({"name": "Ada"}),
        ),
        expected_output: json!({"greeting": "hello Ada"}),
        failure: case("flowgate_fails", json!({}), json!({"day": "2026-12-01"})),
        expected_failure: "no rows for 2026-12-01".into(),
        slow: case("flowgate_slow", json!({}), json!({"seconds": 600})),
        asks: Some(case(
            "flowgate_approval",
            json!({"result_task": "deploy"}),
            json!({"service": "web"}),
        )),
        answer: json!({"approver": "Alice"}),
        timeout: PATIENCE,
        lose_next_start_answer: Some(proxy.lose_next_start_answer()),
        transient_read_fault: Some(proxy.transient_read_fault()),
    };
    run_all(&fixture).await;
    let (faults, lost) = proxy.staged();
    assert!(
        faults > 0 && lost == 1,
        "staged {faults} faults, {lost} lost"
    );
}

async fn waiting_question(engine: &AirflowEngine, run: &ExecutionRef) -> ExecutionRecord {
    let record = until(engine, run, |r| {
        r.state == TaskState::InputRequired || r.state.is_terminal()
    })
    .await;
    assert_eq!(record.state, TaskState::InputRequired, "{record:?}");
    record
}

fn accept(content: Value) -> InputResponse {
    InputResponse {
        action: Action::Accept,
        content: Some(content),
    }
}

/// Airflow 3.3 fails a step answered within about half a second of it starting to wait: the
/// engine answers the moment the question shows, and the run still completes with the answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instant_answer_is_held_back_until_airflow_takes_it() {
    let airflow = TestAirflow::get();
    let engine = airflow.engine("flowgate_approval", json!({"result_task": "deploy"}));
    let run = engine
        .start(request(json!({"service": "api"})))
        .await
        .expect("start")
        .execution;
    // Polled without pause, so the answer follows the wait's start as closely as a client
    // can make it (with the guard off, Airflow fails most such steps).
    let deadline = Instant::now() + PATIENCE;
    let asked = loop {
        let record = engine.get(&run).await.expect("get");
        if record.state == TaskState::InputRequired || record.state.is_terminal() {
            break record;
        }
        assert!(Instant::now() < deadline, "no question: {record:?}");
    };
    let question = &asked.input_requests[0];
    assert_eq!(question.key, "approve/-1/1");
    assert!(
        question.message.starts_with("Deploy api to production?"),
        "{question:?}"
    );
    assert_eq!(
        question.requested_schema["properties"]["approver"]["type"],
        "string"
    );
    let t0 = Instant::now();
    engine
        .respond(&run, &question.key, accept(json!({"approver": "Grace"})))
        .await
        .expect("respond");
    let held = t0.elapsed();
    let done = until(&engine, &run, |r| r.state.is_terminal()).await;
    assert_eq!(
        done.state,
        TaskState::Completed,
        "{done:?} (answer held {held:?})"
    );
    assert_eq!(
        done.output,
        Some(json!({"service": "api", "approved_by": "Grace"}))
    );
}

/// A step with several options, several choices, defaults and params is a form with all of
/// them; an answer that is not one of its options is refused before it reaches Airflow, and
/// the question stays open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_form_step_offers_options_params_and_defaults_and_checks_answers() {
    let airflow = TestAirflow::get();
    let engine = airflow.engine("flowgate_form", json!({"result_task": "report"}));
    let run = engine
        .start(request(json!({})))
        .await
        .expect("start")
        .execution;
    let asked = waiting_question(&engine, &run).await;
    let q = &asked.input_requests[0];
    let schema = &q.requested_schema;
    assert_eq!(schema["properties"]["choice"]["type"], "array");
    assert_eq!(
        schema["properties"]["choice"]["items"]["enum"],
        json!(["eu", "us", "apac"])
    );
    assert_eq!(schema["properties"]["choice"]["default"], json!(["eu"]));
    assert_eq!(schema["properties"]["replicas"]["type"], "integer");
    assert_eq!(schema["properties"]["replicas"]["default"], 2);
    assert_eq!(
        asked.status_message.as_deref(),
        Some("waiting for an answer at choose")
    );
    let bad = engine
        .respond(&run, &q.key, accept(json!({"choice": ["mars"]})))
        .await;
    assert!(
        matches!(bad, Err(EngineError::InvalidInput { .. })),
        "{bad:?}"
    );
    let still = engine.get(&run).await.expect("get");
    assert_eq!(still.state, TaskState::InputRequired);
    engine
        .respond(
            &run,
            &q.key,
            accept(json!({"choice": ["us", "apac"], "replicas": 3})),
        )
        .await
        .expect("respond");
    let done = until(&engine, &run, |r| r.state.is_terminal()).await;
    assert_eq!(
        done.output,
        Some(json!({"regions": ["us", "apac"], "replicas": 3})),
        "{done:?}"
    );
}

/// Declining an approval answers it `Reject`: the deploy is skipped and the call fails saying
/// it was rejected, and by whom.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declined_approval_is_reported_as_rejected() {
    let airflow = TestAirflow::get();
    let engine = airflow.engine("flowgate_approval", json!({"result_task": "deploy"}));
    let run = engine
        .start(request(json!({"service": "db"})))
        .await
        .expect("start")
        .execution;
    let asked = waiting_question(&engine, &run).await;
    engine
        .respond(
            &run,
            &asked.input_requests[0].key,
            InputResponse {
                action: Action::Decline,
                content: None,
            },
        )
        .await
        .expect("decline");
    let done = until(&engine, &run, |r| r.state.is_terminal()).await;
    assert_eq!(done.state, TaskState::Failed, "{done:?}");
    let failure = done.failure.expect("failure");
    assert_eq!(failure.error, "approve was answered Reject");
    let cause = failure.cause.unwrap_or_default();
    assert!(
        cause.contains("Deploy db to production?") && cause.contains("by flowgate"),
        "{cause}"
    );
}

/// An answer given in Airflow itself (its UI, its API) ends the wait just the same, a second
/// flowgate instance sees the same question, and an answer to it afterwards is not-found.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_given_in_airflow_ends_the_wait_for_every_instance() {
    let airflow = TestAirflow::get();
    let extra = json!({"result_task": "deploy"});
    let first = airflow.engine("flowgate_approval", extra.clone());
    let second = airflow.engine("flowgate_approval", extra);
    let run = first
        .start(request(json!({"service": "cache"})))
        .await
        .expect("start")
        .execution;
    let asked = waiting_question(&first, &run).await;
    let seen = second.get(&run).await.expect("second instance");
    assert_eq!(seen.input_requests, asked.input_requests);
    // Past Airflow's early-answer window, as a person in its UI would be.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (status, _) = airflow
        .call(
            "PATCH",
            &format!(
                "/api/v2/dags/flowgate_approval/dagRuns/{}/taskInstances/approve/-1/hitlDetails",
                run.0
            ),
            Some(json!({"chosen_options": ["Approve"], "params_input": {"approver": "Ui"}})),
        )
        .await;
    assert_eq!(status, 200);
    let done = until(&second, &run, |r| r.state.is_terminal()).await;
    assert_eq!(
        done.output,
        Some(json!({"service": "cache", "approved_by": "Ui"}))
    );
    let late = first
        .respond(
            &run,
            &asked.input_requests[0].key,
            accept(json!({"approver": "x"})),
        )
        .await;
    assert!(
        matches!(late, Err(EngineError::NotFound { .. })),
        "{late:?}"
    );
}

/// A step whose response timeout passes takes its default, and the run goes on with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_step_takes_its_default() {
    let airflow = TestAirflow::get();
    let engine = airflow.engine("flowgate_timeout", json!({"result_task": "after"}));
    let run = engine
        .start(request(json!({})))
        .await
        .expect("start")
        .execution;
    let done = until(&engine, &run, |r| r.state.is_terminal()).await;
    assert_eq!(done.state, TaskState::Completed, "{done:?}");
    assert_eq!(done.output, Some(json!({"chosen": ["no"]})));
}

/// A task that fails and is retried is reported working while it retries; the run completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_task_keeps_the_run_working() {
    let airflow = TestAirflow::get();
    let engine = airflow.engine("flowgate_retry", json!({"result_task": "flaky"}));
    let run = engine
        .start(request(json!({})))
        .await
        .expect("start")
        .execution;
    let done = until(&engine, &run, |r| r.state.is_terminal()).await;
    assert_eq!(done.state, TaskState::Completed, "{done:?}");
    assert_eq!(done.output, Some(json!({"try": 2})));
}

/// A run of a paused DAG stays queued: the status message says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_dag_is_named_while_its_run_waits() {
    let airflow = TestAirflow::get();
    let (status, _) = airflow
        .call(
            "PATCH",
            "/api/v2/dags/flowgate_paused",
            Some(json!({"is_paused": true})),
        )
        .await;
    assert_eq!(status, 200);
    let engine = airflow.engine("flowgate_paused", json!({}));
    let run = engine
        .start(request(json!({})))
        .await
        .expect("start")
        .execution;
    let record = engine.get(&run).await.expect("get");
    assert_eq!(record.state, TaskState::Submitted, "{record:?}");
    assert!(
        record
            .status_message
            .as_deref()
            .is_some_and(|m| m.contains("flowgate_paused is paused")),
        "{record:?}"
    );
    engine.cancel(&run).await.expect("cancel a queued run");
    let cancelled = until(&engine, &run, |r| r.state.is_terminal()).await;
    assert_eq!(cancelled.state, TaskState::Cancelled);
}

/// A DAG Airflow does not have is the operator's problem, not the caller's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_dag_is_an_operator_error() {
    let airflow = TestAirflow::get();
    let engine = airflow.engine("flowgate_no_such_dag", json!({}));
    let got = engine.start(request(json!({}))).await;
    match got {
        Err(EngineError::Misconfigured { message, .. }) => {
            assert!(message.contains("flowgate_no_such_dag"), "{message}")
        }
        other => panic!("{other:?}"),
    }
}

/// A run id taken by a run that is not this call's (Airflow answers 409 without comparing
/// conf) is never taken for this call's run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_id_taken_by_another_run_is_not_this_calls() {
    let airflow = TestAirflow::get();
    let engine = airflow.engine("flowgate_hello", json!({}));
    let req = request(json!({"name": "x"}));
    let run = engine.execution_for(&req).expect("run id");
    let (status, _) = airflow
        .call(
            "POST",
            "/api/v2/dags/flowgate_hello/dagRuns",
            Some(json!({"dag_run_id": run.0, "logical_date": null, "conf": {}})),
        )
        .await;
    assert_eq!(status, 200);
    let got = engine.start(req).await;
    assert!(
        matches!(got, Err(EngineError::Misconfigured { .. })),
        "{got:?}"
    );
    // Not listed either: it carries no call marker.
    let listed = engine
        .list(ListFilter::for_principal("0123456789abcdef", None))
        .await
        .expect("list");
    assert!(listed.iter().all(|s| s.execution != run), "{listed:?}");
}

/// A DAG whose file Airflow cannot import is an operator error naming the file and its error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dag_file_that_does_not_import_is_named() {
    let airflow = TestAirflow::get();
    let engine = airflow.engine("flowgate_broken", json!({}));
    match engine.start(request(json!({}))).await {
        Err(EngineError::Misconfigured { message, .. }) => assert!(
            message.contains("flowgate_broken.py") && message.contains("broken on purpose"),
            "{message}"
        ),
        other => panic!("{other:?}"),
    }
}

/// An expired token is renewed with the password once Airflow refuses it; the call goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_token_is_renewed() {
    let airflow = TestAirflow::get();
    let proxy = FaultProxy::start(&airflow.url).await;
    let engine = airflow.engine_at(
        &proxy.url,
        "flowgate_hello",
        json!({"result_task": "greet"}),
    );
    let run = engine
        .start(request(json!({"name": "Tok"})))
        .await
        .expect("start")
        .execution;
    proxy.expire_next_token();
    let done = until(&engine, &run, |r| r.state.is_terminal()).await;
    assert_eq!(done.output, Some(json!({"greeting": "hello Tok"})));
}

/// While Airflow is down every read is a retryable error (the task stays as it was); when it
/// is back the run is read to its end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn airflow_down_keeps_the_task_as_it_was() {
    let airflow = TestAirflow::get();
    let proxy = FaultProxy::start(&airflow.url).await;
    let engine = airflow.engine_at(
        &proxy.url,
        "flowgate_hello",
        json!({"result_task": "greet"}),
    );
    let run = engine
        .start(request(json!({"name": "Down"})))
        .await
        .expect("start")
        .execution;
    proxy.set_down(true);
    for _ in 0..5 {
        let got = engine.get(&run).await;
        assert!(matches!(&got, Err(e) if e.is_retryable()), "{got:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let cancel = engine.cancel(&run).await;
    assert!(matches!(&cancel, Err(e) if e.is_retryable()), "{cancel:?}");
    proxy.set_down(false);
    let done = until(&engine, &run, |r| r.state.is_terminal()).await;
    assert_eq!(done.output, Some(json!({"greeting": "hello Down"})));
}

/// A run that outlives its DAG's `dagrun_timeout` fails saying so, naming what was stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_past_its_dagrun_timeout_fails_saying_so() {
    let airflow = TestAirflow::get();
    let engine = airflow.engine("flowgate_run_timeout", json!({}));
    let run = engine
        .start(request(json!({})))
        .await
        .expect("start")
        .execution;
    let done = until(&engine, &run, |r| r.state.is_terminal()).await;
    assert_eq!(done.state, TaskState::Failed, "{done:?}");
    let failure = done.failure.expect("failure");
    assert_eq!(failure.error, "the run exceeded its dagrun_timeout of 4 s");
    assert!(
        failure
            .cause
            .as_deref()
            .is_some_and(|c| c.contains("linger")),
        "{failure:?}"
    );
}
