//! Environments holding a run: required reviewers flowgate's token is one of (questions it
//! answers), reviewers it is not (questions that say who can answer), wait timers (no
//! question), and rejections reported from the run's reviews.

use flowgate_core::{Action, Engine, EngineError, ExecutionRef, InputResponse, TaskState};
use flowgate_github_actions::GitHubActionsEngine;
use flowgate_github_actions::testing::Fake;
use serde_json::json;

use crate::support::{engine, jobs, start, steps, wait_for};

async fn waiting_for_review(e: &GitHubActionsEngine, version: &str) -> (ExecutionRef, String) {
    let x = start(e, json!({"version": version})).await;
    let r = wait_for(e, &x, |r| r.state == TaskState::InputRequired).await;
    assert_eq!(r.input_requests.len(), 1, "{r:?}");
    let q = &r.input_requests[0];
    assert!(q.message.contains("production"), "{q:?}");
    assert!(!q.message.contains("cannot answer"), "{q:?}");
    assert_eq!(
        q.requested_schema["properties"]["decision"]["enum"],
        json!(["approve", "reject"])
    );
    assert!(
        r.status_message
            .as_deref()
            .is_some_and(|m| m.contains("deploy: waiting for its environment")),
        "{r:?}"
    );
    (x, q.key.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn environment_reviews_are_questions_approve_runs_the_deploy() {
    let fake = Fake::shared();
    let e = engine(&fake, "release.yml", json!({}));
    let (x, key) = waiting_for_review(&e, "2.0").await;
    let approve = InputResponse {
        action: Action::Accept,
        content: Some(json!({"decision": "approve", "comment": "go"})),
    };
    e.respond(&x, &key, approve.clone()).await.expect("approve");
    let done = wait_for(&e, &x, |r| r.state.is_terminal()).await;
    assert_eq!(done.state, TaskState::Completed, "{done:?}");
    let out = done.output.expect("output");
    assert_eq!(out["jobs"]["deploy"], "success", "{out}");
    assert_eq!(out["reviews"][0]["state"], "approved");
    assert_eq!(out["reviews"][0]["comment"], "go");
    assert_eq!(out["reviews"][0]["user"], "flowgate-tests");
    let again = e.respond(&x, &key, approve).await;
    assert!(
        matches!(again, Err(EngineError::NotFound { .. })),
        "{again:?}"
    );
}

/// GitHub never runs a rejected job: it has no steps and no log. The failure says the
/// deployment was rejected, by whom, with the reviewer's comment, from the run's reviews.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_deployment_is_reported_as_rejected_by_whom_with_the_comment() {
    let fake = Fake::shared();
    let e = engine(&fake, "deploy.yml", json!({}));
    let x = start(&e, json!({"target": "production"})).await;
    let r = wait_for(&e, &x, |r| r.state == TaskState::InputRequired).await;
    let key = r.input_requests[0].key.clone();
    let reject = InputResponse {
        action: Action::Accept,
        content: Some(json!({"decision": "reject", "comment": "not during the freeze"})),
    };
    e.respond(&x, &key, reject).await.expect("reject");
    let done = wait_for(&e, &x, |r| r.state.is_terminal()).await;
    assert_eq!(done.state, TaskState::Failed, "{done:?}");
    let f = done.failure.expect("failure");
    assert_eq!(
        f.error,
        "run failure: the deployment to production was rejected by @flowgate-tests"
    );
    assert_eq!(
        f.cause.as_deref(),
        Some("the reviewer's comment: not during the freeze")
    );
    let jobs = jobs(&fake, "app", &x);
    assert_eq!(jobs["deploy"]["conclusion"], "failure", "{jobs}");
    assert!(
        steps(&jobs["deploy"]).is_empty(),
        "a rejected job never ran, not even its always() step: {jobs}"
    );
    let (status, _) = fake.request(
        "GET",
        &format!("/repos/acme/app/actions/jobs/{}/logs", jobs["deploy"]["id"]),
        Some(&fake.token),
        serde_json::Value::Null,
    );
    assert_eq!(status, 404, "a job that never ran has no log");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_review_given_in_github_ends_the_wait_just_the_same() {
    let fake = Fake::shared();
    let e = engine(&fake, "release.yml", json!({}));
    let (x, key) = waiting_for_review(&e, "3.0").await;
    // Another client (GitHub's UI) reviews through the API.
    let env_id: u64 = key
        .split('-')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("environment id in the key");
    let other = engine(&fake, "release.yml", json!({}));
    other
        .respond(
            &x,
            &key,
            InputResponse {
                action: Action::Accept,
                content: Some(json!({"comment": "from the UI"})),
            },
        )
        .await
        .expect("review elsewhere");
    let done = wait_for(&e, &x, |r| r.state.is_terminal()).await;
    assert_eq!(done.state, TaskState::Completed, "{done:?}");
    assert!(done.input_requests.is_empty());
    let late = e
        .respond(
            &x,
            &format!("env-{env_id}-1"),
            InputResponse {
                action: Action::Decline,
                content: None,
            },
        )
        .await;
    assert!(
        matches!(late, Err(EngineError::NotFound { .. })),
        "{late:?}"
    );
}

/// Required reviewers flowgate's token is not among: the question says who can answer it, and
/// an answer through flowgate is refused with the same names (nothing is sent to GitHub).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_flowgate_cannot_answer_names_who_can() {
    let fake = Fake::shared();
    let e = engine(&fake, "deploy.yml", json!({}));
    let x = start(&e, json!({"target": "approvals"})).await;
    let r = wait_for(&e, &x, |r| r.state == TaskState::InputRequired).await;
    let q = &r.input_requests[0];
    assert!(
        q.message.contains("flowgate cannot answer this one")
            && q.message.contains("@alice")
            && q.message.contains("team ops")
            && q.message.contains(&x.0),
        "{q:?}"
    );
    let got = e
        .respond(
            &x,
            &q.key,
            InputResponse {
                action: Action::Accept,
                content: Some(json!({"decision": "approve"})),
            },
        )
        .await;
    match got {
        Err(EngineError::Denied { message, .. }) => {
            assert!(message.contains("@alice or team ops"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    let still = e.get(&x).await.expect("get");
    assert_eq!(
        still.state,
        TaskState::InputRequired,
        "nothing was answered"
    );
    e.cancel(&x).await.expect("cancel");
    let done = wait_for(&e, &x, |r| r.state.is_terminal()).await;
    assert_eq!(done.state, TaskState::Cancelled, "{done:?}");
}

/// An environment that only has a wait timer asks nobody anything: the task works, saying
/// until when, then the deployment goes on by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_timer_is_working_until_it_runs_out_not_a_question() {
    let fake = Fake::shared();
    let e = engine(&fake, "deploy.yml", json!({}));
    let x = start(&e, json!({"target": "timed"})).await;
    let held = wait_for(&e, &x, |r| {
        r.state.is_terminal()
            || r.status_message
                .as_deref()
                .is_some_and(|m| m.contains("timed: wait timer of 2 min"))
    })
    .await;
    assert_eq!(held.state, TaskState::Working, "{held:?}");
    assert!(held.input_requests.is_empty(), "{held:?}");
    let done = wait_for(&e, &x, |r| {
        assert_ne!(r.state, TaskState::InputRequired, "{r:?}");
        r.state.is_terminal()
    })
    .await;
    assert_eq!(done.state, TaskState::Completed, "{done:?}");
    assert_eq!(done.output.expect("output")["jobs"]["deploy"], "success");
}

/// An environment that prevents self-review, whose required reviewers include flowgate's token
/// user: that user started the run, so GitHub lets it not approve. The question and the refused
/// answer say so (the setting, who started the run, who else can approve), instead of "not a
/// reviewer".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_self_review_github_refuses_is_named_as_such() {
    let fake = Fake::shared();
    let e = engine(&fake, "deploy.yml", json!({}));
    let x = start(&e, json!({"target": "selfreview"})).await;
    let r = wait_for(&e, &x, |r| r.state == TaskState::InputRequired).await;
    let q = &r.input_requests[0];
    assert!(
        q.message.contains("flowgate cannot answer this one")
            && q.message.contains("Prevent self-review")
            && q.message
                .contains("@flowgate-tests, flowgate's token, started the run")
            && q.message.contains("other than @flowgate-tests, @alice")
            && !q.message.contains("is not one of them"),
        "{q:?}"
    );
    let got = e
        .respond(
            &x,
            &q.key,
            InputResponse {
                action: Action::Accept,
                content: Some(json!({"decision": "approve"})),
            },
        )
        .await;
    match got {
        Err(EngineError::Denied { message, .. }) => {
            assert!(message.contains("Prevent self-review"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    e.cancel(&x).await.expect("cancel");
    let done = wait_for(&e, &x, |r| r.state.is_terminal()).await;
    assert_eq!(done.state, TaskState::Cancelled, "{done:?}");
}
