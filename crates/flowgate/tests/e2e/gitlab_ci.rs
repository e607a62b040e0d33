//! GitLab CI tools through the whole server, against the GitLab API fake whose pipelines run
//! their `.gitlab-ci.yml` scripts, on projects that restrict pipeline variables as GitLab.com
//! does (arguments and the call's name travel as spec:inputs, answers as job inputs): a result
//! artifact as structuredContent, a failing job with the end of its log, a manual gate answered
//! over MCP, and a task another server process answers.

use flowgate_gitlab_ci::testing::{FakeGitLab, TEST_TOKEN};
use rmcp::model::TaskStatus;
use serde_json::json;

use crate::support::*;

/// The variable the server reads the fake's token from (scripts/test exports it).
const TOKEN_ENV: &str = "FLOWGATE_TEST_GITLAB_TOKEN";

fn manifest(dir: &std::path::Path, url: &str) -> std::path::PathBuf {
    let tool = |name: &str, project: &str, extra: &str| {
        format!(
            "  - name: {name}\n    task: required\n    poll_interval_ms: 200\n    target: {{engine: gitlab-ci, base_url: \"{url}\", project: flowgate/{project}, ref: main, token_env: {TOKEN_ENV}{extra}}}\n"
        )
    };
    let text = format!(
        "tools:\n{}{}{}",
        tool(
            "greet",
            "hello",
            ", result_artifact: {job: build, path: result.json}"
        ),
        tool("load", "fails", ""),
        tool(
            "deploy",
            "gated",
            ", questions: {approve: {message: 'Deploy?', requested_schema: {type: object, properties: {approver: {type: string}}, required: [approver]}}}, result_artifact: {job: deploy, path: result.json}"
        ),
    );
    let path = dir.join("gitlab.yaml");
    std::fs::write(&path, text).expect("write manifest");
    path
}

#[tokio::test]
async fn gitlab_pipelines_complete_fail_ask_and_survive_a_server_restart() {
    assert_eq!(
        std::env::var(TOKEN_ENV).as_deref(),
        Ok(TEST_TOKEN),
        "{TOKEN_ENV} must hold the fake's token: run scripts/test, which exports it"
    );
    let fake = FakeGitLab::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = manifest(dir.path(), &fake.url);

    let mut first = Server::start(dir.path(), Some(&manifest));
    let client = http_client(&first.url, true).await;
    let greet = start_task(&client, "greet", json!({"NAME": "Ada"})).await;
    let load = start_task(&client, "load", json!({"DAY": "2026-12-01"})).await;
    let deploy = start_task(&client, "deploy", json!({"SERVICE": "web"})).await;
    drop(client);
    first.kill();

    let second = Server::start(dir.path(), Some(&manifest));
    let client = http_client(&second.url, true).await;
    let done = poll_until(
        &client,
        &greet,
        &[TaskStatus::Completed, TaskStatus::Failed],
        &mut vec![],
    )
    .await;
    assert_eq!(result_json(&done), json!({"greeting": "hello Ada"}));

    let failed = poll_until(
        &client,
        &load,
        &[TaskStatus::Completed, TaskStatus::Failed],
        &mut vec![],
    )
    .await;
    assert_eq!(failed["result"]["isError"], true, "{failed}");
    let text = failed["result"]["content"][0]["text"].to_string();
    assert!(text.contains("job load failed"), "{text}");
    assert!(
        text.contains("no rows for 2026-12-01"),
        "the trace tail: {text}"
    );

    let waiting = poll_until(
        &client,
        &deploy,
        &[TaskStatus::InputRequired, TaskStatus::Completed],
        &mut vec![],
    )
    .await;
    assert_eq!(waiting["status"], "input_required", "{waiting}");
    let key = first_input_key(&waiting);
    answer(
        &client,
        &deploy,
        &key,
        json!({"action": "accept", "content": {"approver": "Alice"}}),
    )
    .await;
    let approved = poll_until(
        &client,
        &deploy,
        &[TaskStatus::Completed, TaskStatus::Failed],
        &mut vec![],
    )
    .await;
    assert_eq!(
        result_json(&approved),
        json!({"service": "web", "approver": "Alice"})
    );
    client.cancel().await.ok();
}
