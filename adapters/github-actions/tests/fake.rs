//! The GitHub Actions engine against the REST fake whose runs really run with act: the shared
//! engine conformance suite, then what only this engine promises (job and step progress,
//! result artifacts, failure log tails, environment reviews, cancel and force-cancel, paging,
//! conditional requests and rate limits).

use std::sync::Arc;
use std::time::{Duration, Instant};

use flowgate_core::conformance::{Case, Fixture, LoseNextStartAnswer, run_all};
use flowgate_core::{
    Action, Engine, EngineError, ExecutionRecord, ExecutionRef, IdempotencyKey, InputResponse,
    ListFilter, StartRequest, TaskState,
};
use flowgate_github_actions::GitHubActionsEngine;
use flowgate_github_actions::testing::Fake;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(30);

fn engine(fake: &Fake, workflow: &str, extra: Value) -> Arc<GitHubActionsEngine> {
    Arc::new(GitHubActionsEngine::new(fake.target(workflow, extra)).expect("engine"))
}

fn greet(fake: &Fake) -> Arc<GitHubActionsEngine> {
    engine(
        fake,
        "greet.yml",
        json!({"result_artifact": {"name": "result", "path": "result.json"}, "cancel_grace_ms": 3000}),
    )
}

async fn start(e: &GitHubActionsEngine, arguments: Value) -> ExecutionRef {
    e.start(StartRequest::new("t", arguments, "tests"))
        .await
        .expect("start")
        .execution
}

async fn wait_for(
    e: &GitHubActionsEngine,
    x: &ExecutionRef,
    done: impl Fn(&ExecutionRecord) -> bool,
) -> ExecutionRecord {
    let deadline = Instant::now() + WAIT;
    loop {
        let r = e.get(x).await.expect("get");
        if done(&r) {
            return r;
        }
        assert!(Instant::now() < deadline, "timed out; last record {r:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn github_engine_passes_the_conformance_suite_on_the_fake() {
    let fake = Arc::new(Fake::shared());
    let case = |e: Arc<GitHubActionsEngine>, arguments: Value| Case {
        engine: e,
        arguments,
    };
    let fixture = Fixture {
        success: case(greet(&fake), json!({"name": "Ada", "seconds": 1})),
        expected_output: json!({"greeting": "hello Ada"}),
        failure: case(
            engine(&fake, "fails.yml", json!({})),
            json!({"day": "2026-12-01"}),
        ),
        expected_failure: "no rows for 2026-12-01".into(),
        slow: case(greet(&fake), json!({"name": "Bo", "seconds": 600})),
        asks: Some(case(
            engine(&fake, "release.yml", json!({})),
            json!({"version": "1.2"}),
        )),
        answer: json!({"comment": "ship it"}),
        timeout: WAIT,
        lose_next_start_answer: Some(LoseNextStartAnswer(Arc::new({
            let fake = fake.clone();
            move || {
                fake.hook("lose-next-dispatch-answer", json!({}));
            }
        }))),
        transient_read_fault: None,
    };
    run_all(&fixture).await;
}

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

async fn waiting_for_review(e: &GitHubActionsEngine, version: &str) -> (ExecutionRef, String) {
    let x = start(e, json!({"version": version})).await;
    let r = wait_for(e, &x, |r| r.state == TaskState::InputRequired).await;
    assert_eq!(r.input_requests.len(), 1, "{r:?}");
    let q = &r.input_requests[0];
    assert!(q.message.contains("production"), "{q:?}");
    assert_eq!(
        q.requested_schema["properties"]["decision"]["enum"],
        json!(["approve", "reject"])
    );
    assert!(
        r.status_message
            .as_deref()
            .is_some_and(|m| m.contains("deploy: waiting for review")),
        "{r:?}"
    );
    (x, q.key.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn environment_reviews_are_questions_approve_runs_the_deploy_and_reject_ends_the_run() {
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
    let again = e.respond(&x, &key, approve).await;
    assert!(
        matches!(again, Err(EngineError::NotFound { .. })),
        "{again:?}"
    );

    let (y, key) = waiting_for_review(&e, "2.1").await;
    let reject = InputResponse {
        action: Action::Accept,
        content: Some(json!({"decision": "reject", "comment": "not today"})),
    };
    e.respond(&y, &key, reject).await.expect("reject");
    let done = wait_for(&e, &y, |r| r.state.is_terminal()).await;
    assert_eq!(done.state, TaskState::Failed, "{done:?}");
    assert!(done.failure.expect("failure").error.contains("deploy"));
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_the_long_step_and_force_cancel_ends_a_stubborn_one() {
    let fake = Fake::shared();
    let e = greet(&fake);
    let x = start(&e, json!({"name": "Di", "seconds": 600})).await;
    wait_for(&e, &x, |r| {
        r.status_message
            .as_deref()
            .is_some_and(|m| m.contains("Wait"))
    })
    .await;
    let pids = fake.hook(&format!("runs/{}/processes", x.0), Value::Null);
    assert!(
        pids["pids"].as_array().is_some_and(|p| !p.is_empty()),
        "{pids}"
    );
    e.cancel(&x).await.expect("cancel");
    let done = wait_for(&e, &x, |r| r.state.is_terminal()).await;
    assert_eq!(done.state, TaskState::Cancelled, "{done:?}");
    let pids = fake.hook(&format!("runs/{}/processes", x.0), Value::Null);
    assert_eq!(pids["pids"], json!([]), "the step's processes are gone");

    let stubborn = engine(&fake, "stubborn.yml", json!({"cancel_grace_ms": 1500}));
    let y = start(&stubborn, json!({})).await;
    wait_for(&stubborn, &y, |r| {
        r.status_message
            .as_deref()
            .is_some_and(|m| m.contains("Ignore SIGTERM"))
    })
    .await;
    let began = Instant::now();
    stubborn
        .cancel(&y)
        .await
        .expect("cancel, then force-cancel");
    assert!(
        began.elapsed() >= Duration::from_millis(1500),
        "force-cancel came after the grace period"
    );
    let done = wait_for(&stubborn, &y, |r| r.state.is_terminal()).await;
    assert_eq!(done.state, TaskState::Cancelled, "{done:?}");
    let pids = fake.hook(&format!("runs/{}/processes", y.0), Value::Null);
    assert_eq!(pids["pids"], json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_started_by_one_instance_is_answered_by_another_and_a_lost_answer_starts_one_run() {
    let fake = Fake::start_with(&["--max-per-page", "2"]);
    let first = greet(&fake);
    let request = StartRequest {
        tool: "t".into(),
        arguments: json!({"name": "Ed", "seconds": 0}),
        principal_tag: "alice".into(),
        idempotency_key: IdempotencyKey::new(),
        ttl_ms: None,
    };
    // Three more runs, so the workflow's run list spans pages of two.
    for name in ["a", "b", "c"] {
        start(&first, json!({"name": name, "seconds": 0})).await;
    }
    fake.hook("lose-next-dispatch-answer", json!({}));
    let lost = first.start(request.clone()).await;
    assert!(matches!(&lost, Err(e) if e.is_retryable()), "{lost:?}");
    // Another process (no shared client or cache) retries the same call and answers it.
    let second = greet(&fake);
    let found = second.start(request.clone()).await.expect("retried start");
    let done = wait_for(&second, &found.execution, |r| r.state.is_terminal()).await;
    assert_eq!(done.output, Some(json!({"greeting": "hello Ed"})));
    let mine = second
        .list(ListFilter::for_principal("alice", None))
        .await
        .expect("list across pages");
    assert_eq!(mine.len(), 1, "{mine:?}");
    let stats = fake.hook("stats", Value::Null);
    assert_eq!(stats["dispatches"], 4, "one dispatch per call: {stats}");
    let everyone = second.list(ListFilter::default()).await.expect("list");
    assert_eq!(everyone.len(), 4, "every page was followed: {everyone:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unchanged_polls_are_304s_and_rate_limit_headers_drive_pacing() {
    let fake = Fake::start();
    let e = greet(&fake);
    let x = start(&e, json!({"name": "Flo", "seconds": 0})).await;
    wait_for(&e, &x, |r| r.state.is_terminal()).await;
    let before = fake.hook("stats", Value::Null)["not_modified"]
        .as_u64()
        .unwrap_or(0);
    for _ in 0..5 {
        let r = e.get(&x).await.expect("get");
        assert_eq!(r.output, Some(json!({"greeting": "hello Flo"})));
    }
    let after = fake.hook("stats", Value::Null)["not_modified"]
        .as_u64()
        .unwrap_or(0);
    // Each poll of a finished run asks the run, its jobs and its artifact list: all unchanged.
    assert!(after - before >= 15, "304s: {before} -> {after}");

    fake.hook(
        "rate-limit",
        json!({"limit": 5000, "remaining": 20, "reset_in": 600}),
    );
    e.get(&x).await.expect("get");
    let pacing = e.pacing().expect("pacing after rate-limit headers");
    assert!(pacing > Duration::from_secs(20), "{pacing:?}");

    fake.hook("throttle", json!({"count": 1, "retry_after": 7}));
    let throttled = e.get(&x).await;
    match throttled {
        Err(EngineError::Throttled { retry_after, .. }) => {
            assert_eq!(retry_after, Some(Duration::from_secs(7)));
        }
        other => panic!("a secondary limit is Throttled: {other:?}"),
    }
    fake.hook(
        "rate-limit",
        json!({"limit": 5000, "remaining": 0, "reset_in": 50}),
    );
    let spent = e.get(&ExecutionRef(x.0.clone())).await;
    assert!(
        matches!(spent, Err(EngineError::Throttled { .. })),
        "{spent:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inputs_the_workflow_does_not_declare_are_refused_with_githubs_message() {
    let fake = Fake::shared();
    let e = greet(&fake);
    let got = e
        .start(StartRequest::new(
            "t",
            json!({"name": "x", "colour": "red"}),
            "tests",
        ))
        .await;
    match got {
        Err(EngineError::InvalidInput { message, .. }) => {
            assert!(
                message.contains("Unexpected inputs") && message.contains("colour"),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
    let missing = engine(&fake, "greet.yml", json!({"ref": "{branch}"}))
        .start(StartRequest::new("t", json!({"name": "x"}), "tests"))
        .await;
    assert!(
        matches!(missing, Err(EngineError::InvalidInput { .. })),
        "{missing:?}"
    );
}

/// An RSA key pair made with the openssl CLI: (PKCS#1 private PEM, public key file).
fn app_key_pair(dir: &std::path::Path, name: &str) -> (String, std::path::PathBuf) {
    let private = dir.join(format!("{name}.pem"));
    let public = dir.join(format!("{name}.pub.pem"));
    let ok = std::process::Command::new("openssl")
        .args(["genrsa", "-traditional", "-out"])
        .arg(&private)
        .arg("2048")
        .stderr(std::process::Stdio::null())
        .status()
        .expect("openssl genrsa (the openssl CLI is needed)")
        .success()
        && std::process::Command::new("openssl")
            .args(["rsa", "-pubout", "-in"])
            .arg(&private)
            .arg("-out")
            .arg(&public)
            .stderr(std::process::Stdio::null())
            .status()
            .expect("openssl rsa")
            .success();
    assert!(ok, "openssl could not make a key pair");
    (std::fs::read_to_string(&private).expect("read key"), public)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_github_app_mints_one_installation_token_and_reuses_it() {
    let dir = std::env::temp_dir().join(format!("flowgate-gh-app-{}", IdempotencyKey::new()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let (pem, public) = app_key_pair(&dir, "app");
    let (other_pem, _) = app_key_pair(&dir, "other");
    let public = public.to_string_lossy().into_owned();
    let fake = Fake::start_with(&["--app-id", "424242", "--app-public-key", &public]);
    let as_app = |key: &str| {
        let mut t = fake.target(
            "greet.yml",
            json!({"app": {"app_id": 424242, "installation_id": 77, "private_key_env": "FLOWGATE_UNUSED_KEY_VAR"},
                   "result_artifact": {"name": "result", "path": "result.json"}}),
        );
        t.token = None;
        t.app_key = Some(flowgate_http::Secret::new(key));
        Arc::new(GitHubActionsEngine::new(t).expect("engine"))
    };
    let e = as_app(&pem);
    let x = start(&e, json!({"name": "App", "seconds": 0})).await;
    let done = wait_for(&e, &x, |r| r.state.is_terminal()).await;
    assert_eq!(done.output, Some(json!({"greeting": "hello App"})));
    let stats = fake.hook("stats", Value::Null);
    assert_eq!(
        stats["app_tokens"], 1,
        "one installation token, reused: {stats}"
    );
    assert!(stats["requests"].as_u64().unwrap_or(0) > 3, "{stats}");

    let forged = as_app(&other_pem)
        .start(StartRequest::new("t", json!({"name": "x"}), "tests"))
        .await;
    assert!(
        matches!(forged, Err(EngineError::Denied { .. })),
        "{forged:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
