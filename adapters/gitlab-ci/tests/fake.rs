//! The GitLab CI engine against the GitLab API fake, whose pipelines really run their
//! `.gitlab-ci.yml` scripts: the shared engine conformance suite, then what only this engine
//! promises (manual jobs as questions, artifacts and dotenv results, trace tails, cancel that
//! stops the job's processes, rate limits, inputs).

use std::sync::Arc;
use std::time::{Duration, Instant};

use flowgate_core::conformance::{Case, Fixture, LoseNextStartAnswer, run_all};
use flowgate_core::{
    Action, Engine, EngineError, ExecutionRecord, ExecutionRef, IdempotencyKey, InputResponse,
    StartRequest, TaskState,
};
use flowgate_gitlab_ci::GitLabEngine;
use flowgate_gitlab_ci::testing::{FakeGitLab, TEST_TOKEN};
use serde_json::{Value, json};

fn gated(fake: &FakeGitLab) -> GitLabEngine {
    gated_on(fake, "gated")
}

/// The gated tool on fixture project `flowgate/<project>` (a copy of gated).
fn gated_on(fake: &FakeGitLab, project: &str) -> GitLabEngine {
    fake.engine(
        project,
        json!({
            "questions": {"approve": {
                "message": "Deploy to production?",
                "requested_schema": {"type": "object", "properties": {"approver": {"type": "string"}}, "required": ["approver"]},
                "variables": {"approver": "APPROVER"}
            }},
            "result_artifact": {"job": "deploy", "path": "result.json"}
        }),
    )
}

fn hello(fake: &FakeGitLab) -> GitLabEngine {
    fake.engine(
        "hello",
        json!({"result_artifact": {"job": "build", "path": "result.json"}}),
    )
}

async fn start(e: &GitLabEngine, args: Value) -> ExecutionRef {
    let request = StartRequest {
        tool: "t".into(),
        arguments: args,
        principal_tag: "p".into(),
        idempotency_key: IdempotencyKey::new(),
        ttl_ms: None,
    };
    e.start(request).await.expect("start").execution
}

async fn wait(
    e: &GitLabEngine,
    x: &ExecutionRef,
    done: impl Fn(&ExecutionRecord) -> bool,
) -> ExecutionRecord {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = e.get(x).await.expect("get");
        if done(&r) {
            return r;
        }
        assert!(Instant::now() < deadline, "timed out; last {r:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The processes whose environment holds `marker` (the job's own processes).
fn processes_with(marker: &str) -> usize {
    let needle = format!("NAME={marker}");
    std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter(|p| {
                    std::fs::read(p.path().join("environ"))
                        .map(|env| env.split(|b| *b == 0).any(|kv| kv == needle.as_bytes()))
                        .unwrap_or(false)
                })
                .count()
        })
        .unwrap_or(0)
}

#[tokio::test]
async fn gitlab_engine_passes_the_conformance_suite_on_the_fake() {
    let fake = FakeGitLab::start();
    let case = |e: GitLabEngine, args: Value| Case {
        engine: Arc::new(e),
        arguments: args,
    };
    let lose = {
        let url = fake.url.clone();
        LoseNextStartAnswer(Arc::new(move || {
            let f = FakeGitLabHandle(url.clone());
            f.hook("lose_next_create", json!({"project": "flowgate/slow"}));
        }))
    };
    let fixture = Fixture {
        success: case(hello(&fake), json!({"NAME": "Ada"})),
        expected_output: json!({"greeting": "hello Ada"}),
        failure: case(
            fake.engine("fails", json!({})),
            json!({"DAY": "2026-12-01"}),
        ),
        expected_failure: "no rows for 2026-12-01".into(),
        // A project of its own: the lost-answer hook applies to it only.
        slow: case(
            fake.engine(
                "slow",
                json!({"result_artifact": {"job": "build", "path": "result.json"}}),
            ),
            json!({"NAME": "Bo", "SECONDS_TO_SLEEP": "600"}),
        ),
        asks: Some(case(gated(&fake), json!({"SERVICE": "web"}))),
        answer: json!({"approver": "Alice"}),
        timeout: Duration::from_secs(20),
        lose_next_start_answer: Some(lose),
        transient_read_fault: None,
    };
    run_all(&fixture).await;
    let created = fake.hook("counts", json!({}))["pipelines_created"]
        .as_u64()
        .expect("count");
    assert!(created > 0);
}

/// Calls a hook on a fake known only by its URL (the conformance hook must be `'static`).
struct FakeGitLabHandle(String);

impl FakeGitLabHandle {
    fn hook(&self, name: &str, body: Value) {
        let client = std::thread::spawn({
            let url = format!("{}/__fake/{name}", self.0);
            move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("runtime");
                rt.block_on(async {
                    let answer = reqwest::Client::new()
                        .post(url)
                        .json(&body)
                        .send()
                        .await
                        .expect("hook");
                    assert!(answer.status().is_success(), "hook: {}", answer.status());
                })
            }
        });
        client.join().expect("hook thread");
    }
}

#[tokio::test]
async fn a_manual_gate_is_a_question_and_playing_it_in_gitlab_ends_the_wait() {
    let fake = FakeGitLab::start();
    let e = gated(&fake);
    let x = start(&e, json!({"SERVICE": "api"})).await;
    // A blocking manual job is a question as soon as it can be played; the pipeline shows
    // `manual` once nothing else runs.
    let r = wait(&e, &x, |r| {
        r.state == TaskState::InputRequired && r.engine_status == "manual"
    })
    .await;
    assert_eq!(
        r.input_requests.len(),
        1,
        "only the blocking job is a question: {r:?}"
    );
    let q = &r.input_requests[0];
    assert_eq!(q.message, "Deploy to production?");
    assert!(q.key.starts_with("job-"));
    assert_eq!(
        r.status_message.as_deref(),
        Some("waiting for manual job approve")
    );
    // Someone plays the job in GitLab (the same API the UI uses), with their own variables.
    let job = q.key.trim_start_matches("job-");
    let played = reqwest::Client::new()
        .post(format!(
            "{}/api/v4/projects/flowgate%2Fgated/jobs/{job}/play",
            fake.url
        ))
        .header("PRIVATE-TOKEN", TEST_TOKEN)
        .json(&json!({"job_variables_attributes": [{"key": "APPROVER", "value": "Ops On Call"}]}))
        .send()
        .await
        .expect("play");
    assert_eq!(played.status(), 200);
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
async fn declining_cancels_the_pipeline() {
    let fake = FakeGitLab::start();
    let e = gated(&fake);
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
    assert_eq!(done.state, TaskState::Cancelled, "{done:?}");
    assert!(done.input_requests.is_empty());
}

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
async fn a_failing_job_is_named_with_its_trace_tail() {
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
        "only the tail: {cause}"
    );
    assert!(!cause.contains('\u{1b}'), "no ANSI codes: {cause}");
}

#[tokio::test]
async fn cancel_during_a_long_job_stops_its_processes() {
    let fake = FakeGitLab::start();
    let e = hello(&fake);
    let marker = format!("cancel-{:016x}", rand_u64());
    let x = start(&e, json!({"NAME": marker, "SECONDS_TO_SLEEP": "600"})).await;
    // lint (allowed to fail) ends within seconds; then only build runs.
    let r = wait(&e, &x, |r| {
        r.status_message.as_deref() == Some("stage build: running build")
    })
    .await;
    assert_eq!(r.state, TaskState::Working);
    let deadline = Instant::now() + Duration::from_secs(10);
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

fn rand_u64() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(7)
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

#[tokio::test]
async fn pipeline_inputs_keep_their_types_and_bad_ones_are_refused() {
    let fake = FakeGitLab::start();
    let e = fake.engine(
        "inputs",
        json!({
            "inputs": {"environment": "{{env}}", "replicas": "{{replicas}}"},
            "result_artifact": {"job": "scale", "path": "result.json"}
        }),
    );
    let x = start(&e, json!({"env": "staging", "replicas": 3})).await;
    let done = wait(&e, &x, |r| r.state.is_terminal()).await;
    assert_eq!(
        done.output,
        Some(json!({"environment": "staging", "replicas": 3}))
    );
    let request = StartRequest::new("t", json!({"env": "moon", "replicas": 1}), "p");
    let err = e.start(request).await.expect_err("bad option");
    assert!(matches!(err, EngineError::InvalidInput { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains("not in the list of allowed options"),
        "{err}"
    );
    let request = StartRequest::new("t", json!({"replicas": 1}), "p");
    let err = e.start(request).await.expect_err("missing argument");
    assert!(err.to_string().contains("env"), "{err}");
}

#[tokio::test]
async fn bad_credentials_and_unknown_projects_are_told_apart() {
    let fake = FakeGitLab::start();
    let nobody = GitLabEngine::with_token(
        fake.target("hello", json!({})),
        &flowgate_http::HttpConfig::default(),
        Some(flowgate_http::Secret::new("wrong")),
    )
    .expect("engine");
    let err = nobody
        .start(StartRequest::new("t", json!({"NAME": "x"}), "p"))
        .await
        .expect_err("wrong token");
    assert!(matches!(err, EngineError::Denied { .. }), "{err:?}");
    assert!(
        !err.to_string().contains("wrong"),
        "the token never shows: {err}"
    );
    let missing = fake.engine("no-such-project", json!({}));
    let err = missing
        .get(&ExecutionRef("1001".into()))
        .await
        .expect_err("no project");
    assert!(err.is_not_found(), "{err:?}");
    assert!(err.to_string().contains("404 Project Not Found"), "{err}");
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

#[tokio::test]
async fn a_trigger_token_starts_the_pipeline() {
    let fake = FakeGitLab::start();
    let e = hello(&fake).with_trigger_token(Some(flowgate_http::Secret::new(
        flowgate_gitlab_ci::testing::TEST_TRIGGER_TOKEN,
    )));
    let x = start(&e, json!({"NAME": "Eve"})).await;
    let done = wait(&e, &x, |r| r.state.is_terminal()).await;
    assert_eq!(done.output, Some(json!({"greeting": "hello Eve"})));
    let bad = hello(&fake).with_trigger_token(Some(flowgate_http::Secret::new("nope")));
    let err = bad
        .start(StartRequest::new("t", json!({"NAME": "x"}), "p"))
        .await
        .expect_err("bad trigger token");
    assert!(
        matches!(err, EngineError::Denied { .. }),
        "GitLab answers 404 for a bad trigger token; a start reports it as denied: {err:?}"
    );
}
