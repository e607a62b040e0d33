//! Blocking manual jobs as questions: answered with job inputs (no pipeline variables needed),
//! played in GitLab instead, declined (reported as declined, by whom), answered from another
//! server process.

use flowgate_core::{Action, Engine, EngineError, InputResponse, StartRequest, TaskState};
use flowgate_gitlab_ci::testing::FakeGitLab;
use serde_json::json;

use crate::{api, gated_on, start, wait};

#[tokio::test]
async fn a_manual_gate_is_a_question_and_playing_it_in_gitlab_ends_the_wait() {
    let fake = FakeGitLab::start();
    let e = gated_on(&fake, "gated");
    let x = start(&e, json!({"SERVICE": "api"})).await;
    // A blocking manual job is a question as soon as it can be played; the pipeline shows
    // `manual` once nothing else runs.
    let r = wait(&e, &x, |r| {
        r.state == TaskState::InputRequired && r.engine_status == "manual"
    })
    .await;
    assert_eq!(r.input_requests.len(), 1, "only the blocking job: {r:?}");
    let q = &r.input_requests[0];
    assert_eq!(q.message, "Deploy to production?");
    assert!(q.key.starts_with("job-"));
    assert_eq!(
        r.status_message.as_deref(),
        Some("waiting for manual job approve")
    );
    // Someone plays the job in GitLab (the same API the UI uses) with a job input.
    let job = q.key.trim_start_matches("job-");
    let (status, body) = api(
        &fake,
        "POST",
        &format!("projects/flowgate%2Fgated/jobs/{job}/play"),
        Some(json!({"job_inputs": {"approver": "Ops On Call"}})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let done = wait(&e, &x, |r| r.state.is_terminal()).await;
    assert_eq!(done.state, TaskState::Completed, "{done:?}");
    assert_eq!(
        done.output,
        Some(json!({"service": "api", "approver": "Ops On Call"}))
    );
    // The question was answered in GitLab: answering it here is not-found, not a second play.
    let late = e
        .respond(
            &x,
            &q.key,
            InputResponse {
                action: Action::Accept,
                content: Some(json!({"approver": "x"})),
            },
        )
        .await;
    assert!(
        matches!(late, Err(EngineError::NotFound { .. })),
        "{late:?}"
    );
}

#[tokio::test]
async fn a_declined_question_is_reported_as_declined_by_whom_and_the_pipeline_cancelled() {
    let fake = FakeGitLab::start();
    let e = gated_on(&fake, "gated");
    let x = start(&e, json!({"SERVICE": "api"})).await;
    let r = wait(&e, &x, |r| r.state == TaskState::InputRequired).await;
    let key = r.input_requests[0].key.clone();
    e.respond(
        &x,
        &key,
        InputResponse {
            action: Action::Decline,
            content: None,
        },
    )
    .await
    .expect("decline");
    let done = wait(&e, &x, |r| r.state.is_terminal()).await;
    assert_eq!(done.state, TaskState::Failed, "{done:?}");
    assert_eq!(done.engine_status, "canceled");
    assert!(done.input_requests.is_empty());
    let failure = done.failure.expect("the decline is the failure");
    assert_eq!(failure.error, "manual job approve was declined");
    let cause = failure.cause.clone().expect("cause");
    assert!(cause.contains("@flowgate-bot"), "who declined: {cause}");
    assert!(cause.contains("the pipeline was cancelled"), "{cause}");
    // Another server process reads the same answer from GitLab.
    let other = gated_on(&fake, "gated");
    let again = other.get(&x).await.expect("get");
    assert_eq!(again.state, TaskState::Failed);
    assert_eq!(again.failure, Some(failure));
    // A plain cancel is a plain cancelled.
    let y = start(&e, json!({"SERVICE": "db"})).await;
    wait(&e, &y, |r| r.state == TaskState::InputRequired).await;
    e.cancel(&y).await.expect("cancel");
    let done = wait(&e, &y, |r| r.state.is_terminal()).await;
    assert_eq!(done.state, TaskState::Cancelled, "{done:?}");
}

#[tokio::test]
async fn answers_as_job_variables_are_refused_where_pipeline_variables_are_restricted() {
    let fake = FakeGitLab::start();
    let e = fake.engine(
        "gated",
        json!({"questions": {"approve": {
            "message": "Deploy?",
            "requested_schema": {"type": "object", "properties": {"approver": {"type": "string"}}},
            "variables": {"approver": "APPROVER"}
        }}}),
    );
    let x = start(&e, json!({"SERVICE": "api"})).await;
    let r = wait(&e, &x, |r| r.state == TaskState::InputRequired).await;
    let err = e
        .respond(
            &x,
            &r.input_requests[0].key,
            InputResponse {
                action: Action::Accept,
                content: Some(json!({"approver": "Alice"})),
            },
        )
        .await
        .expect_err("GitLab answers 403 to job variables here");
    assert!(matches!(err, EngineError::Misconfigured { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("tell an operator"), "{text}");
    assert!(
        text.contains("ci_pipeline_variables_minimum_override_role"),
        "{text}"
    );
    assert!(text.contains("questions.approve.inputs"), "the fix: {text}");
    // Still asked: nothing was played.
    let still = e.get(&x).await.expect("get");
    assert_eq!(still.state, TaskState::InputRequired);
    e.cancel(&x).await.expect("cancel");
}

#[tokio::test]
async fn another_instance_answers_and_a_lost_create_answer_starts_one_pipeline() {
    let fake = FakeGitLab::start();
    // A copy of gated of its own: the hooks and the count are for this project only.
    let gated = |fake: &FakeGitLab| gated_on(fake, "retried");
    let first = gated(&fake);
    let request = StartRequest::new("deploy", json!({"SERVICE": "db"}), "p");
    let scope = json!({"project": "flowgate/retried"});
    let count = || {
        fake.hook("counts", scope.clone())["project_pipelines_created"]
            .as_u64()
            .expect("count")
    };
    let before = count();
    fake.hook("lose_next_create", scope.clone());
    let lost = first.start(request.clone()).await;
    assert!(
        matches!(&lost, Err(e) if e.is_retryable()),
        "a lost answer is retryable: {lost:?}"
    );
    // The retry comes from another server process: a fresh engine with no memory of the first.
    let second = gated(&fake);
    let x = second
        .start(request.clone())
        .await
        .expect("retry")
        .execution;
    let after = count();
    assert_eq!(after - before, 1, "one call, one pipeline");
    let r = wait(&second, &x, |r| r.state == TaskState::InputRequired).await;
    let third = gated(&fake);
    third
        .respond(
            &x,
            &r.input_requests[0].key,
            InputResponse {
                action: Action::Accept,
                content: Some(json!({"approver": "Dee"})),
            },
        )
        .await
        .expect("another instance answers");
    let done = wait(&first, &x, |r| r.state.is_terminal()).await;
    assert_eq!(
        done.output,
        Some(json!({"service": "db", "approver": "Dee"}))
    );
}
