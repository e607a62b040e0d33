//! A transient fault while reading a result (an artifact, a log, a job list) keeps the task
//! where it was and is retried; it never becomes the task's answer.

use flowgate_core::{Engine, EngineError, ExecutionRecord, ExecutionRef, TaskState};
use flowgate_gitlab_ci::GitLabEngine;
use flowgate_gitlab_ci::testing::FakeGitLab;
use serde_json::json;

use crate::{jobs, start};

/// Waits in GitLab (not through the engine, which would read the result at once) until the
/// pipeline has ended.
async fn ended(fake: &FakeGitLab, project: &str, x: &ExecutionRef) {
    let deadline = std::time::Instant::now() + crate::PATIENCE;
    loop {
        let (_, p) = crate::api(
            fake,
            "GET",
            &format!("projects/flowgate%2F{project}/pipelines/{x}"),
            None,
        )
        .await;
        if matches!(
            p["status"].as_str(),
            Some("success" | "failed" | "canceled")
        ) {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "{p}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// A `get` with a fault staged at the read of `kind`: a retryable error, never a record.
async fn faulted(
    fake: &FakeGitLab,
    e: &GitLabEngine,
    project: &str,
    x: &ExecutionRef,
    kind: &str,
    fault: serde_json::Value,
) -> EngineError {
    fake.hook(
        "fault_next",
        json!({"project": format!("flowgate/{project}"), "reads": [kind], "fault": fault}),
    );
    let got = e.get(x).await;
    fake.hook(
        "fault_next",
        json!({"project": format!("flowgate/{project}"), "disarm": true}),
    );
    match got {
        Err(err) if err.is_retryable() => err,
        other => panic!("a {fault} on the {kind} read must be a retryable error, got {other:?}"),
    }
}

async fn settled(e: &GitLabEngine, x: &ExecutionRef) -> ExecutionRecord {
    let r = e.get(x).await.expect("get without faults");
    assert!(r.state.is_terminal(), "{r:?}");
    r
}

#[tokio::test]
async fn a_fault_reading_the_result_artifact_is_retried_not_answered() {
    let fake = FakeGitLab::start();
    let e = fake.engine(
        "faulty",
        json!({"result_artifact": {"job": "build", "path": "result.json"}}),
    );
    let x = start(&e, json!({"NAME": "Flo"})).await;
    ended(&fake, "faulty", &x).await;
    for fault in [json!(503), json!(429), json!(500), json!("reset")] {
        faulted(&fake, &e, "faulty", &x, "artifacts", fault).await;
    }
    faulted(&fake, &e, "faulty", &x, "jobs", json!(502)).await;
    faulted(&fake, &e, "faulty", &x, "pipeline", json!(503)).await;
    let done = settled(&e, &x).await;
    assert_eq!(done.state, TaskState::Completed, "{done:?}");
    assert_eq!(done.output, Some(json!({"greeting": "hello Flo"})));
}

#[tokio::test]
async fn a_fault_reading_a_dotenv_report_is_retried_not_answered() {
    let fake = FakeGitLab::start();
    let e = fake.engine(
        "faulty-dotenv",
        json!({"result_dotenv": {"job": "report", "path": "greeting.env"}}),
    );
    let x = start(&e, json!({"NAME": "Gus"})).await;
    ended(&fake, "faulty-dotenv", &x).await;
    faulted(&fake, &e, "faulty-dotenv", &x, "artifacts", json!(503)).await;
    let done = settled(&e, &x).await;
    assert_eq!(
        done.output,
        Some(json!({"GREETING": "hello Gus", "PIPELINE": "api"}))
    );
}

#[tokio::test]
async fn a_fault_reading_the_failing_jobs_log_is_retried_not_answered() {
    let fake = FakeGitLab::start();
    let e = fake.engine("faulty-fails", json!({}));
    let x = start(&e, json!({"DAY": "2026-10-10"})).await;
    ended(&fake, "faulty-fails", &x).await;
    for fault in [json!(503), json!(429), json!("reset")] {
        faulted(&fake, &e, "faulty-fails", &x, "trace", fault).await;
    }
    let stalled = GitLabEngine::with_token(
        fake.target("faulty-fails", json!({})),
        &flowgate_http::HttpConfig {
            request_timeout: std::time::Duration::from_secs(1),
            ..Default::default()
        },
        Some(flowgate_http::Secret::new(
            flowgate_gitlab_ci::testing::TEST_TOKEN,
        )),
    )
    .expect("engine");
    let err = faulted(&fake, &stalled, "faulty-fails", &x, "trace", json!("stall")).await;
    assert!(matches!(err, EngineError::Timeout { .. }), "{err:?}");
    let done = settled(&e, &x).await;
    assert_eq!(done.state, TaskState::Failed);
    let cause = done.failure.expect("failure").cause.expect("cause");
    assert!(cause.contains("no rows for 2026-10-10"), "{cause}");
    // The job list is still there: nothing about the fault stayed.
    assert!(!jobs(&fake, "faulty-fails", &x).await.is_empty());
}
