//! What the fake does as GitLab does, seen through the engine: rules that refuse a pipeline,
//! jobs that wait (pending, waiting for a resource group, scheduled), job timeouts, canceling
//! while an after_script runs, cancel that stops the job's processes, rate limits.

use std::time::{Duration, Instant};

use flowgate_core::{Engine, EngineError, StartRequest, TaskState};
use flowgate_gitlab_ci::testing::{FakeGitLab, TEST_TRIGGER_TOKEN};
use flowgate_http::Secret;
use serde_json::json;

use crate::{api, hello, jobs, start, wait};

#[tokio::test]
async fn rules_decide_whether_gitlab_creates_the_pipeline() {
    let fake = FakeGitLab::start();
    let e = fake.engine("rules", json!({}));
    let err = e
        .start(StartRequest::new("t", json!({"mode": "skip"}), "p"))
        .await
        .expect_err("workflow:rules say never");
    assert!(matches!(err, EngineError::InvalidInput { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains("Pipeline filtered out by workflow rules."),
        "{err}"
    );
    let err = e
        .start(StartRequest::new("t", json!({"mode": "none"}), "p"))
        .await
        .expect_err("no job is left");
    assert!(
        err.to_string().contains(
            "Pipeline will not run for the selected trigger. The rules configuration prevented any jobs from being added to the pipeline."
        ),
        "{err}"
    );
    // An API pipeline: `job` (rules), not `only_for_triggers` (only: triggers) nor
    // `never_on_main` (except: main).
    let x = start(&e, json!({"mode": "run"})).await;
    let done = wait(&e, &x, |r| r.state.is_terminal()).await;
    assert_eq!(
        done.output,
        Some(json!({"status": "success", "jobs": {"job": "success"}}))
    );
    // A trigger pipeline has both.
    let t = fake
        .engine("rules", json!({}))
        .with_trigger_token(Some(Secret::new(TEST_TRIGGER_TOKEN)));
    let x = start(&t, json!({"mode": "run"})).await;
    let done = wait(&t, &x, |r| r.state.is_terminal()).await;
    assert_eq!(
        done.output,
        Some(
            json!({"status": "success", "jobs": {"job": "success", "only_for_triggers": "success"}})
        )
    );
}

#[tokio::test]
async fn jobs_wait_for_a_runner_a_resource_group_and_their_start_time() {
    let fake = FakeGitLab::start();
    let e = fake.engine("statuses", json!({}));
    let first = start(&e, json!({})).await;
    let r = wait(&e, &first, |r| {
        r.status_message.as_deref() == Some("stage deploy: running deploy")
    })
    .await;
    assert_eq!(r.state, TaskState::Working);
    let second = start(&e, json!({})).await;
    let r = wait(&e, &second, |r| {
        r.status_message.as_deref() == Some("waiting for a resource group: deploy")
    })
    .await;
    assert_eq!(r.engine_status, "waiting_for_resource");
    assert_eq!(r.state, TaskState::Submitted, "{r:?}");
    // The pipeline and its jobs are two reads: wait for a poll in which both say scheduled.
    let r = wait(&e, &first, |r| {
        r.status_message.as_deref() == Some("scheduled announce") && r.engine_status == "scheduled"
    })
    .await;
    assert_eq!(r.engine_status, "scheduled");
    let done = wait(&e, &second, |r| r.state.is_terminal()).await;
    assert_eq!(done.state, TaskState::Completed, "{done:?}");
    let first_jobs = jobs(&fake, "statuses", &first).await;
    assert!(
        first_jobs.iter().all(|j| j["status"] == "success"),
        "{first_jobs:?}"
    );
}

#[tokio::test]
async fn a_job_past_its_timeout_fails_so() {
    let fake = FakeGitLab::start();
    let e = fake.engine("timeout", json!({}));
    let x = start(&e, json!({})).await;
    let done = wait(&e, &x, |r| r.state.is_terminal()).await;
    assert_eq!(done.state, TaskState::Failed, "{done:?}");
    let failure = done.failure.expect("failure");
    assert_eq!(failure.error, "job slow failed (job_execution_timeout)");
    let cause = failure.cause.expect("cause");
    assert!(
        cause.contains("ERROR: Job failed: execution took longer than 3s seconds"),
        "{cause}"
    );
    assert!(
        cause.contains("after the timeout"),
        "after_script ran: {cause}"
    );
}

#[tokio::test]
async fn canceling_is_not_the_end_while_the_after_script_runs() {
    let fake = FakeGitLab::start();
    let e = fake.engine("cleanup", json!({}));
    let x = start(&e, json!({})).await;
    wait(&e, &x, |r| {
        r.status_message.as_deref() == Some("stage test: running work")
    })
    .await;
    e.cancel(&x).await.expect("cancel");
    let r = e.get(&x).await.expect("get");
    assert_eq!(r.engine_status, "canceling", "{r:?}");
    assert_eq!(
        r.state,
        TaskState::Working,
        "canceling is not terminal: {r:?}"
    );
    assert_eq!(
        r.status_message.as_deref(),
        Some("canceling: after_script of work runs")
    );
    let done = wait(&e, &x, |r| r.state.is_terminal()).await;
    assert_eq!(done.state, TaskState::Cancelled, "{done:?}");
    let job = &jobs(&fake, "cleanup", &x).await[0];
    let (_, log) = api(
        &fake,
        "GET",
        &format!("projects/flowgate%2Fcleanup/jobs/{}/trace", job["id"]),
        None,
    )
    .await;
    assert!(log.as_str().unwrap_or("").contains("cleaned up"), "{log}");
}

/// The processes whose environment holds `marker` (the job's own processes).
fn processes_with(marker: &str) -> usize {
    std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter(|p| {
                    std::fs::read(p.path().join("environ"))
                        .map(|env| {
                            env.split(|b| *b == 0)
                                .any(|kv| kv.windows(marker.len()).any(|w| w == marker.as_bytes()))
                        })
                        .unwrap_or(false)
                })
                .count()
        })
        .unwrap_or(0)
}

#[tokio::test]
async fn cancel_during_a_long_job_stops_its_processes() {
    let fake = FakeGitLab::start();
    let e = hello(&fake);
    let marker = format!(
        "cancel-{:016x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(7)
    );
    let x = start(&e, json!({"NAME": marker, "SECONDS_TO_SLEEP": "600"})).await;
    // lint (allowed to fail) ends within seconds; then only build runs.
    let r = wait(&e, &x, |r| {
        r.status_message.as_deref() == Some("stage build: running build")
    })
    .await;
    assert_eq!(r.state, TaskState::Working);
    let deadline = Instant::now() + Duration::from_secs(20);
    while processes_with(&marker) == 0 {
        assert!(
            Instant::now() < deadline,
            "the job's processes never appeared"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    e.cancel(&x).await.expect("cancel");
    let done = wait(&e, &x, |r| r.state.is_terminal()).await;
    assert_eq!(done.state, TaskState::Cancelled);
    let deadline = Instant::now() + Duration::from_secs(10);
    while processes_with(&marker) > 0 {
        assert!(
            Instant::now() < deadline,
            "the job's processes outlived the cancel"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn rate_limits_are_honoured() {
    let fake = FakeGitLab::start();
    // A project of its own: the 429 hook applies to it only.
    let e = fake.engine(
        "throttled",
        json!({"result_artifact": {"job": "build", "path": "result.json"}}),
    );
    let x = start(&e, json!({"NAME": "Cy"})).await;
    fake.hook(
        "throttle_next",
        json!({"count": 1, "retry_after": 3, "project": "flowgate/throttled"}),
    );
    let got = e.get(&x).await;
    match got {
        Err(EngineError::Throttled { retry_after, .. }) => {
            assert_eq!(retry_after, Some(Duration::from_secs(3)))
        }
        other => panic!("a 429 must be Throttled with its Retry-After: {other:?}"),
    }
    let pause = e.pacing().expect("pacing after a 429");
    assert!(pause >= Duration::from_secs(2), "{pause:?}");
    e.get(&x).await.expect("answers again after the throttle");
}
