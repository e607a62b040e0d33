//! The GitLab CI engine against the GitLab API fake, whose pipelines really run their
//! `.gitlab-ci.yml` scripts (tests/fakes/gitlab): the shared engine conformance suite, then what
//! only this engine promises. Every fixture project restricts pipeline variables as GitLab.com
//! does (`ci_pipeline_variables_minimum_override_role: no_one_allowed`) except `flowgate/vars`.

mod conformance;
mod faults;
mod fidelity;
mod questions;
mod results;
mod starts;

use std::time::{Duration, Instant};

use flowgate_core::{Engine, ExecutionRecord, ExecutionRef, StartRequest};
use flowgate_gitlab_ci::GitLabEngine;
use flowgate_gitlab_ci::testing::{FakeGitLab, TEST_TOKEN};
use serde_json::{Value, json};

/// How long a test waits for a pipeline (jobs run for real; the machine may be busy).
const PATIENCE: Duration = Duration::from_secs(60);

fn gated_on(fake: &FakeGitLab, project: &str) -> GitLabEngine {
    fake.engine(
        project,
        json!({
            "questions": {"approve": {
                "message": "Deploy to production?",
                "requested_schema": {"type": "object", "properties": {"approver": {"type": "string"}}, "required": ["approver"]},
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
    e.start(StartRequest::new("t", args, "p"))
        .await
        .expect("start")
        .execution
}

async fn wait(
    e: &GitLabEngine,
    x: &ExecutionRef,
    done: impl Fn(&ExecutionRecord) -> bool,
) -> ExecutionRecord {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let r = e.get(x).await.expect("get");
        if done(&r) {
            return r;
        }
        assert!(Instant::now() < deadline, "timed out; last {r:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A request straight to the fake's API, as GitLab's UI or another client would make it.
async fn api(fake: &FakeGitLab, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let client = reqwest::Client::new();
    let url = format!("{}/api/v4/{path}", fake.url);
    let req = match method {
        "POST" => client.post(url),
        "PUT" => client.put(url),
        _ => client.get(url),
    }
    .header("PRIVATE-TOKEN", TEST_TOKEN);
    let req = match body {
        Some(b) => req.json(&b),
        None => req,
    };
    let answer = req.send().await.expect("the fake answers");
    let status = answer.status().as_u16();
    let text = answer.text().await.unwrap_or_default();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// The jobs of a pipeline, by name, as GitLab lists them.
async fn jobs(fake: &FakeGitLab, project: &str, pipeline: &ExecutionRef) -> Vec<Value> {
    let (status, jobs) = api(
        fake,
        "GET",
        &format!("projects/flowgate%2F{project}/pipelines/{pipeline}/jobs"),
        None,
    )
    .await;
    assert_eq!(status, 200, "{jobs}");
    jobs.as_array().cloned().unwrap_or_default()
}

fn count(requests: &Value, kind: &str) -> u64 {
    requests[kind].as_u64().unwrap_or(0)
}
