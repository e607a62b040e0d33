//! A run's life: the running job and step, the result artifact, a failing step with its log
//! tail, and runs queued for a runner.

use flowgate_core::{Engine, TaskState};
use flowgate_github_actions::testing::Fake;
use serde_json::json;

use crate::support::{engine, greet, start, wait_for};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_shows_its_job_and_step_then_completes_with_the_artifact_json() {
    let fake = Fake::shared();
    let e = greet(&fake);
    let x = start(&e, json!({"name": "Cy", "seconds": 3})).await;
    let working = wait_for(&e, &x, |r| {
        r.status_message
            .as_deref()
            .is_some_and(|m| m.contains("Build greeting: Wait (step"))
    })
    .await;
    assert_eq!(working.state, TaskState::Working, "{working:?}");
    assert!(
        working
            .console_url
            .as_deref()
            .is_some_and(|u| u.contains(&x.0))
    );
    let done = wait_for(&e, &x, |r| r.state.is_terminal()).await;
    assert_eq!(done.state, TaskState::Completed, "{done:?}");
    assert_eq!(done.output, Some(json!({"greeting": "hello Cy"})));
    assert_eq!(done.engine_status, "completed/success");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_step_is_named_with_its_job_and_the_log_tail() {
    let fake = Fake::shared();
    let e = engine(&fake, "fails.yml", json!({"log_tail_lines": 12}));
    let x = start(&e, json!({"day": "d-7"})).await;
    let done = wait_for(&e, &x, |r| r.state.is_terminal()).await;
    assert_eq!(done.state, TaskState::Failed, "{done:?}");
    let f = done.failure.expect("failure");
    assert!(
        f.error.contains("\"Unit tests\"") && f.error.contains("\"Run checks\""),
        "{f:?}"
    );
    let tail = f.cause.expect("log tail");
    assert!(
        tail.contains("check 5 passed") && tail.contains("no rows for d-7"),
        "{tail}"
    );
    assert!(tail.lines().count() <= 12, "{tail}");
    assert!(!tail.contains("2026-"), "timestamps are stripped: {tail}");
    // on_failure: completed reports the same run as a completed task carrying the failure.
    let lenient = engine(&fake, "fails.yml", json!({"on_failure": "completed"}));
    let r = lenient.get(&x).await.expect("get");
    assert_eq!(r.state, TaskState::Completed);
    let out = r.output.expect("output");
    assert_eq!(out["conclusion"], "failure");
    assert!(
        out["log_tail"]
            .as_str()
            .is_some_and(|t| t.contains("no rows for d-7"))
    );
}

/// GitHub queues a run until a runner is free: the task is submitted meanwhile, then works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_waiting_for_a_runner_is_submitted_then_runs() {
    let fake = Fake::start_with(&["--runners", "1"]);
    let e = greet(&fake);
    let first = start(&e, json!({"name": "One", "seconds": 4})).await;
    let second = start(&e, json!({"name": "Two", "seconds": 0})).await;
    let queued = e.get(&second).await.expect("get");
    assert_eq!(queued.state, TaskState::Submitted, "{queued:?}");
    assert_eq!(queued.engine_status, "queued");
    assert!(
        queued
            .status_message
            .as_deref()
            .is_some_and(|m| m.contains("waiting for a runner")),
        "{queued:?}"
    );
    wait_for(&e, &first, |r| r.state.is_terminal()).await;
    let done = wait_for(&e, &second, |r| r.state.is_terminal()).await;
    assert_eq!(done.output, Some(json!({"greeting": "hello Two"})));
}

/// Arguments the schema does not require, left out of a call: the input of one with a schema
/// default gets that default; the others are not sent, so the workflow's own defaults apply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn optional_arguments_left_out_take_the_schema_default_or_the_workflows() {
    let fake = Fake::shared();
    let e = engine(
        &fake,
        "typed.yml",
        json!({
            "input_schema": {"type": "object", "properties": {
                "level": {"type": "string", "enum": ["info", "debug"], "default": "debug"},
                "count": {"type": "integer"},
                "note": {"type": "string"},
                "dry": {"type": "boolean"}
            }},
            "inputs": {"level": "{level}", "count": "{count}", "note": "{note}", "dry_run": "{dry}"},
            "result_artifact": {"name": "result", "path": "result.json"}
        }),
    );
    let x = start(&e, json!({"count": 3})).await;
    let done = wait_for(&e, &x, |r| r.state.is_terminal()).await;
    assert_eq!(
        done.output,
        Some(json!({"dry_run": "false", "level": "debug", "count": "3", "note": "no note"})),
        "{done:?}"
    );
}

/// A ref template whose argument is left out runs on the repository's default branch; given,
/// on the branch it names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ref_whose_argument_is_left_out_is_the_default_branch() {
    let fake = Fake::shared();
    let e = engine(
        &fake,
        "greet.yml",
        json!({"ref": "{branch}", "input_schema": {"type": "object", "properties": {
            "name": {"type": "string"}, "branch": {"type": "string"}}},
            "inputs": {"name": "{name}"}}),
    );
    for (arguments, branch) in [
        (json!({"name": "x"}), "main"),
        (json!({"name": "y", "branch": "release/1.x"}), "release/1.x"),
    ] {
        let x = start(&e, arguments).await;
        let (status, run) = fake.request(
            "GET",
            &format!("/repos/acme/app/actions/runs/{}", x.0),
            Some(&fake.token),
            serde_json::Value::Null,
        );
        assert_eq!(status, 200, "{run}");
        assert_eq!(run["head_branch"], branch, "{run}");
    }
}
