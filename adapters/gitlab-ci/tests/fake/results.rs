//! Results and failures: artifacts, dotenv files, the end of a failing job's log (complete,
//! bounded, masked), a finished pipeline read once, expired artifacts, invalid configurations.

use flowgate_core::{Engine, TaskState};
use flowgate_gitlab_ci::testing::{FakeGitLab, TEST_TRIGGER_TOKEN};
use flowgate_http::Secret;
use serde_json::json;

use crate::{api, count, jobs, start, wait};

#[tokio::test]
async fn a_dotenv_file_is_the_result_and_plain_runs_report_job_statuses() {
    let fake = FakeGitLab::start();
    let e = fake.engine(
        "hello",
        json!({"result_dotenv": {"job": "report", "path": "greeting.env"}}),
    );
    let x = start(&e, json!({"NAME": "Ada"})).await;
    let done = wait(&e, &x, |r| r.state.is_terminal()).await;
    assert_eq!(
        done.output,
        Some(json!({"GREETING": "hello Ada", "PIPELINE": "api"}))
    );
    let plain = fake.engine("hello", json!({}));
    let x = start(&plain, json!({"NAME": "Bo"})).await;
    let done = wait(&plain, &x, |r| r.state.is_terminal()).await;
    assert_eq!(done.state, TaskState::Completed);
    assert_eq!(
        done.output,
        Some(
            json!({"status": "success", "jobs": {"build": "success", "report": "success", "lint": "failed"}})
        ),
        "an allowed failure does not fail the pipeline"
    );
    assert!(
        done.console_url
            .expect("url")
            .ends_with(&format!("/-/pipelines/{x}"))
    );
}

#[tokio::test]
async fn a_failing_job_is_named_with_the_end_of_its_log() {
    let fake = FakeGitLab::start();
    let e = fake.engine("fails", json!({"trace_tail_lines": 4}));
    let x = start(&e, json!({"DAY": "2026-11-30"})).await;
    let done = wait(&e, &x, |r| r.state.is_terminal()).await;
    assert_eq!(done.state, TaskState::Failed, "{done:?}");
    let failure = done.failure.expect("failure");
    assert_eq!(failure.error, "job load failed (script_failure)");
    let cause = failure.cause.expect("cause");
    assert!(cause.contains("no rows for 2026-11-30"), "{cause}");
    assert!(cause.contains("ERROR: Job failed: exit code 3"), "{cause}");
    assert!(
        !cause.contains("Running with gitlab-runner"),
        "only the end: {cause}"
    );
    assert!(!cause.contains('\u{1b}'), "no ANSI codes: {cause}");
    assert!(!cause.contains("section_"), "no section markers: {cause}");
}

#[tokio::test]
async fn a_long_log_is_kept_whole_and_its_end_is_bounded_masked_and_read_once() {
    let fake = FakeGitLab::start();
    let e = fake.engine("noisy", json!({"trace_tail_lines": 200}));
    let x = start(&e, json!({})).await;
    let done = wait(&e, &x, |r| r.state.is_terminal()).await;
    assert_eq!(done.state, TaskState::Failed, "{done:?}");
    // The fake keeps the whole log, as GitLab does: its last line is the runner's verdict.
    let job = &jobs(&fake, "noisy", &x).await[0];
    let log = reqwest::Client::new()
        .get(format!(
            "{}/api/v4/projects/flowgate%2Fnoisy/jobs/{}/trace",
            fake.url, job["id"]
        ))
        .header("PRIVATE-TOKEN", flowgate_gitlab_ci::testing::TEST_TOKEN)
        .send()
        .await
        .expect("trace")
        .text()
        .await
        .expect("text");
    assert!(log.len() > 500_000, "{}", log.len());
    assert!(log.contains("\n50000\n"), "every line is there");
    assert!(log.contains("THE END of the log"));
    assert!(
        log.trim_end().ends_with("exit code 4\n\u{1b}[0;m")
            || log.contains("ERROR: Job failed: exit code 4")
    );
    assert!(
        !log.contains("hunter2-very-secret"),
        "a masked variable never shows"
    );
    let cause = done.failure.expect("failure").cause.expect("cause");
    assert!(
        cause.len() <= 16 * 1024 + 64,
        "bounded: {} bytes",
        cause.len()
    );
    assert!(cause.contains("THE END of the log"), "{cause:.300}");
    assert!(cause.contains("ERROR: Job failed: exit code 4"));
    assert!(
        cause.contains("more bytes cut]"),
        "the long line is cut with a marker"
    );
    assert!(cause.contains("deploying with [MASKED]"), "{cause:.300}");
    // Polling the finished pipeline again reads nothing more from GitLab.
    let before = fake.requests("noisy");
    for _ in 0..5 {
        let again = e.get(&x).await.expect("get");
        assert_eq!(again.state, TaskState::Failed);
    }
    let after = fake.requests("noisy");
    assert_eq!(count(&after, "trace"), count(&before, "trace"), "{after}");
    assert_eq!(count(&after, "pipeline"), count(&before, "pipeline"));
}

#[tokio::test]
async fn the_runners_log_limit_shows_in_the_failure() {
    let fake = FakeGitLab::start_with(&["--trace-limit", "65536"]);
    let e = fake.engine("noisy", json!({}));
    let x = start(&e, json!({})).await;
    let done = wait(&e, &x, |r| r.state.is_terminal()).await;
    let cause = done.failure.expect("failure").cause.expect("cause");
    assert!(
        cause.contains("Job's log exceeded limit of 65536 bytes."),
        "{cause}"
    );
    assert!(
        !cause.contains("THE END"),
        "nothing past the limit: {cause}"
    );
}

#[tokio::test]
async fn an_expired_result_artifact_is_a_workflow_failure() {
    let fake = FakeGitLab::start();
    let e = fake.engine(
        "expiry",
        json!({"result_artifact": {"job": "build", "path": "result.json"}}),
    );
    let x = start(&e, json!({})).await;
    // Wait in GitLab (the engine would read and keep the result at once).
    let deadline = std::time::Instant::now() + crate::PATIENCE;
    let job = loop {
        let js = jobs(&fake, "expiry", &x).await;
        if js[0]["status"] == "success" {
            break js[0].clone();
        }
        assert!(std::time::Instant::now() < deadline, "{js:?}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert!(job["artifacts_expire_at"].is_string(), "{job}");
    fake.hook(
        "expire_artifacts",
        json!({"job": job["id"], "project": "flowgate/expiry"}),
    );
    let (status, _) = api(
        &fake,
        "GET",
        &format!(
            "projects/flowgate%2Fexpiry/jobs/{}/artifacts/result.json",
            job["id"]
        ),
        None,
    )
    .await;
    assert_eq!(status, 404);
    let r = e.get(&x).await.expect("get");
    assert_eq!(r.state, TaskState::Failed, "{r:?}");
    let failure = r.failure.expect("failure");
    assert_eq!(failure.error, "result artifact missing");
    assert!(
        failure.cause.as_deref().unwrap_or("").contains("expired"),
        "{failure:?}"
    );
}

#[tokio::test]
async fn an_invalid_configuration_is_an_operator_error_or_a_failed_pipeline() {
    let fake = FakeGitLab::start();
    let e = fake.engine("broken", json!({}));
    let err = e
        .start(flowgate_core::StartRequest::new("t", json!({}), "p"))
        .await
        .expect_err("GitLab refuses it");
    assert!(
        matches!(err, flowgate_core::EngineError::Misconfigured { .. }),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .contains("jobs:build config contains unknown keys: artifact"),
        "{err}"
    );
    // The trigger API saves such a pipeline, failed, with its yaml_errors.
    let e = fake
        .engine("broken", json!({}))
        .with_trigger_token(Some(Secret::new(TEST_TRIGGER_TOKEN)));
    let x = start(&e, json!({})).await;
    let done = wait(&e, &x, |r| r.state.is_terminal()).await;
    assert_eq!(done.state, TaskState::Failed, "{done:?}");
    let failure = done.failure.expect("failure");
    assert_eq!(failure.error, "the pipeline's configuration is invalid");
    assert!(
        failure
            .cause
            .as_deref()
            .unwrap_or("")
            .contains("config contains unknown keys: artifact"),
        "{failure:?}"
    );
}
