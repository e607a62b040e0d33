//! What the modules share: engines bound to the fake's workflows, starting, waiting.

use std::sync::Arc;
use std::time::{Duration, Instant};

use flowgate_core::{Engine, ExecutionRecord, ExecutionRef, StartRequest};
use flowgate_github_actions::GitHubActionsEngine;
use flowgate_github_actions::testing::Fake;
use serde_json::{Value, json};

pub(crate) const WAIT: Duration = Duration::from_secs(40);

pub(crate) fn engine(fake: &Fake, workflow: &str, extra: Value) -> Arc<GitHubActionsEngine> {
    Arc::new(GitHubActionsEngine::new(fake.target(workflow, extra)).expect("engine"))
}

/// `greet.yml` (its result artifact is the output), in repository `repo`.
pub(crate) fn greet_in(fake: &Fake, repo: &str) -> Arc<GitHubActionsEngine> {
    engine(
        fake,
        "greet.yml",
        json!({"repo": repo, "result_artifact": {"name": "result", "path": "result.json"},
               "cancel_grace_ms": 3000}),
    )
}

pub(crate) fn greet(fake: &Fake) -> Arc<GitHubActionsEngine> {
    greet_in(fake, "app")
}

pub(crate) async fn start(e: &GitHubActionsEngine, arguments: Value) -> ExecutionRef {
    e.start(StartRequest::new("t", arguments, "tests"))
        .await
        .expect("start")
        .execution
}

pub(crate) async fn wait_for(
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

/// The run's jobs as the fake's API lists them (name -> job JSON).
pub(crate) fn jobs(fake: &Fake, repo: &str, run: &ExecutionRef) -> Value {
    let (status, body) = fake.request(
        "GET",
        &format!("/repos/acme/{repo}/actions/runs/{}/jobs", run.0),
        Some(&fake.token),
        Value::Null,
    );
    assert_eq!(status, 200, "{body}");
    let mut out = serde_json::Map::new();
    for job in body["jobs"].as_array().cloned().unwrap_or_default() {
        out.insert(job["name"].as_str().unwrap_or("").to_owned(), job);
    }
    Value::Object(out)
}

/// The names and conclusions of a job's steps.
pub(crate) fn steps(job: &Value) -> Vec<(String, String)> {
    job["steps"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|s| {
            (
                s["name"].as_str().unwrap_or("").to_owned(),
                s["conclusion"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}
