//! GitHub Actions tools through the whole server, against the REST fake whose runs really run
//! the workflow files with act: a task started by one server process is answered by another.

use flowgate_github_actions::testing::Fake;
use rmcp::model::{CallToolResponse, TaskStatus};
use serde_json::{Value, json};

use crate::support::*;

const TOKEN_VAR: &str = "FLOWGATE_E2E_GITHUB_TOKEN";

fn manifest(dir: &std::path::Path, fake: &Fake) -> std::path::PathBuf {
    let url = &fake.url;
    let tool = |name: &str, workflow: &str, extra: &str| {
        let schema = if name == "greet" {
            "    output_schema: {type: object, properties: {greeting: {type: string}}, required: [greeting]}\n"
        } else {
            ""
        };
        format!(
            "  - name: {name}\n{schema}    task: required\n    poll_interval_ms: 200\n    target: {{engine: github-actions, owner: acme, repo: app, workflow: {workflow}, ref: main, api_url: \"{url}\", token_env: {TOKEN_VAR}{extra}}}\n"
        )
    };
    let text = format!(
        "tools:\n{}{}{}{}{}{}",
        tool(
            "greet",
            "greet.yml",
            ", result_artifact: {name: result, path: result.json}, cancel_grace_ms: 3000"
        ),
        tool("checks", "fails.yml", ""),
        tool("release", "release.yml", ""),
        tool("deploy", "deploy.yml", ""),
        tool("pushed", "nodispatch.yml", ""),
        tool("typed", "typed.yml", ""),
    );
    let path = dir.join("github.yaml");
    std::fs::write(&path, text).expect("write manifest");
    path
}

#[tokio::test]
async fn github_runs_complete_fail_ask_cancel_and_survive_a_server_restart() {
    let fake = Fake::shared();
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = manifest(dir.path(), &fake);
    let env = [(TOKEN_VAR, fake.token.as_str())];

    let mut first = Server::start_with(dir.path(), Some(&manifest), &env, None);
    let client = http_client(&first.url, true).await;
    let greet = start_task(&client, "greet", json!({"name": "Ada", "seconds": 2})).await;
    let checks = start_task(&client, "checks", json!({"day": "2026-12-01"})).await;
    let release = start_task(&client, "release", json!({"version": "4.2"})).await;
    let waiting = poll_task(&client, &greet, |t| {
        t["statusMessage"]
            .as_str()
            .is_some_and(|m| m.contains("Wait"))
    })
    .await;
    assert_eq!(
        waiting["statusMessage"], "Build greeting: Wait (step 3 of 3)",
        "the running job and step (act has reported three steps so far)"
    );
    drop(client);
    first.kill();

    let second = Server::start_with(dir.path(), Some(&manifest), &env, None);
    let client = http_client(&second.url, true).await;
    let done = poll_until(
        &client,
        &greet,
        &[TaskStatus::Completed, TaskStatus::Failed],
        &mut vec![],
    )
    .await;
    assert_eq!(result_json(&done), json!({"greeting": "hello Ada"}));
    assert_eq!(
        done["result"]["structuredContent"],
        json!({"greeting": "hello Ada"}),
        "the artifact's JSON is the structured result: {done}"
    );

    let failed = poll_until(
        &client,
        &checks,
        &[TaskStatus::Completed, TaskStatus::Failed],
        &mut vec![],
    )
    .await;
    assert_eq!(failed["result"]["isError"], true, "{failed}");
    let text = failed["result"]["content"][0]["text"]
        .as_str()
        .expect("text");
    assert!(
        text.contains("\"Unit tests\"") && text.contains("\"Run checks\""),
        "{text}"
    );
    assert!(
        text.contains("no rows for 2026-12-01"),
        "the log tail: {text}"
    );

    let waiting = poll_until(
        &client,
        &release,
        &[TaskStatus::InputRequired, TaskStatus::Completed],
        &mut vec![],
    )
    .await;
    assert_eq!(waiting["status"], "input_required", "{waiting}");
    let key = first_input_key(&waiting);
    answer(
        &client,
        &release,
        &key,
        json!({"action": "accept", "content": {"decision": "approve", "comment": "lgtm"}}),
    )
    .await;
    let released = poll_until(
        &client,
        &release,
        &[TaskStatus::Completed, TaskStatus::Failed],
        &mut vec![],
    )
    .await;
    let out = result_json(&released);
    assert_eq!(out["jobs"]["deploy"], "success", "{out}");
    assert_eq!(out["reviews"][0]["comment"], "lgtm");

    let long = start_task(&client, "greet", json!({"name": "Bo", "seconds": 600})).await;
    // Cancelled while the job waits in its step.
    poll_task(&client, &long, |t| {
        t["statusMessage"]
            .as_str()
            .is_some_and(|m| m.contains("Wait"))
    })
    .await;
    let cancelled = cancel_and_settle(&client, &long).await;
    assert_eq!(cancelled["status"], "cancelled", "{cancelled}");
    client.cancel().await.ok();
}

/// The text of a `tools/call` answered with a tool error (nothing started).
async fn refusal(client: &Client, tool: &str, arguments: Value) -> String {
    let CallToolResponse::Complete(refused) = client
        .call_tool_once(call(tool, arguments))
        .await
        .expect("tools/call")
    else {
        panic!("{tool}: expected a tool error, not a task")
    };
    assert_eq!(refused.is_error, Some(true), "{refused:?}");
    serde_json::to_value(&refused).expect("json")["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// A workflow flowgate cannot start is an operator's problem, told so (never "check the
/// arguments", which would have a model retry forever); a value the workflow refuses is the
/// caller's. A rejected deployment ends the task failed, saying who rejected it and why.
#[tokio::test]
async fn github_setup_faults_go_to_an_operator_and_rejections_say_who_and_why() {
    let fake = Fake::shared();
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = manifest(dir.path(), &fake);
    let env = [(TOKEN_VAR, fake.token.as_str())];
    let server = Server::start_with(dir.path(), Some(&manifest), &env, None);
    let client = http_client(&server.url, true).await;

    let text = refusal(&client, "pushed", json!({})).await;
    assert!(
        text.contains("tell an operator") && text.contains("workflow_dispatch"),
        "{text}"
    );
    assert!(!text.contains("Check the arguments"), "{text}");
    let text = refusal(&client, "typed", json!({"level": "trace"})).await;
    assert!(
        text.contains("Check the arguments") && text.contains("'trace'"),
        "{text}"
    );

    let task = start_task(&client, "deploy", json!({"target": "production"})).await;
    let waiting = poll_until(
        &client,
        &task,
        &[TaskStatus::InputRequired, TaskStatus::Failed],
        &mut vec![],
    )
    .await;
    let key = first_input_key(&waiting);
    answer(
        &client,
        &task,
        &key,
        json!({"action": "accept", "content": {"decision": "reject", "comment": "change freeze"}}),
    )
    .await;
    let failed = poll_until(
        &client,
        &task,
        &[TaskStatus::Completed, TaskStatus::Failed],
        &mut vec![],
    )
    .await;
    assert_eq!(failed["result"]["isError"], true, "{failed}");
    let text = failed["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(
        text.contains("the deployment to production was rejected by @flowgate-tests")
            && text.contains("change freeze"),
        "{text}"
    );

    // Reviewers flowgate's token is not among: the question names who can answer.
    let task = start_task(&client, "deploy", json!({"target": "approvals"})).await;
    let waiting = poll_until(
        &client,
        &task,
        &[TaskStatus::InputRequired, TaskStatus::Failed],
        &mut vec![],
    )
    .await;
    let question = waiting["inputRequests"].to_string();
    assert!(
        question.contains("flowgate cannot answer this one") && question.contains("@alice"),
        "{question}"
    );
    let cancelled = cancel_and_settle(&client, &task).await;
    assert_eq!(cancelled["status"], "cancelled", "{cancelled}");
    client.cancel().await.ok();
}

/// A listener of a GitHub Actions run is pushed each job and step the run reports, then the
/// completed task with the artifact's result, without a single `tasks/get` of the client's.
/// The listener reads at the pace the token's quota affords (about two seconds for a lone run
/// on the fake's 5,000 an hour), so the run waits longer than that in one step.
#[tokio::test]
async fn a_listener_follows_a_github_run_to_its_end() {
    let fake = Fake::shared();
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = manifest(dir.path(), &fake);
    let env = [(TOKEN_VAR, fake.token.as_str())];
    let server = Server::start_with(dir.path(), Some(&manifest), &env, None);
    let created = crate::telemetry::rpc(
        &server.url,
        "tools/call",
        json!({"name": "greet", "arguments": {"name": "Ada", "seconds": 6}}),
        &[],
    )
    .await;
    let task = created["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("a task: {created}"))
        .to_owned();
    let mut listening =
        crate::listen::Listening::open(&server.url, json!({"taskIds": [task]})).await;
    let ack = listening.next().await.expect("the acknowledgement");
    assert_eq!(ack["params"]["notifications"], json!({"taskIds": [task]}));
    let mut pushed: Vec<Value> = Vec::new();
    while let Some(message) = listening.next().await {
        if message["method"] == "notifications/tasks" {
            pushed.push(message["params"].clone());
        }
    }
    let steps: Vec<&str> = pushed
        .iter()
        .filter(|t| t["status"] == "working")
        .filter_map(|t| t["statusMessage"].as_str())
        .collect();
    assert!(
        steps.iter().any(|m| m.contains("step")),
        "the run's steps were pushed: {steps:?}"
    );
    let last = pushed.last().expect("pushes");
    assert_eq!(last["status"], "completed", "{last}");
    assert_eq!(
        last["result"]["structuredContent"],
        json!({"greeting": "hello Ada"}),
        "{last}"
    );
}
