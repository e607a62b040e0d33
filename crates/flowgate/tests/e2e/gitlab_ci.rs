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

/// The example manifest (`examples/gitlab-ci/tools.yaml`), as written, against the fake's copy of its pipeline
/// (`tests/fakes/gitlab/projects/examples/migrations`, a project that restricts pipeline
/// variables): only where it runs and its token change.
fn example_manifest(dir: &std::path::Path, url: &str) -> std::path::PathBuf {
    let example = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../examples/gitlab-ci/tools.yaml"),
    )
    .expect("the example");
    let text = example
        .replace(
            "base_url: https://gitlab.com      # or your instance",
            &format!("base_url: \"{url}\"\n      token_env: {TOKEN_ENV}"),
        )
        .replace("acme/platform/migrations", "examples/migrations");
    assert_ne!(
        text, example,
        "the example's target lines moved: update this test"
    );
    let path = dir.join("example.yaml");
    std::fs::write(&path, text).expect("write manifest");
    path
}

#[tokio::test]
async fn the_readme_example_runs_where_pipeline_variables_are_restricted() {
    let fake = FakeGitLab::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = example_manifest(dir.path(), &fake.url);
    let server = Server::start(dir.path(), Some(&manifest));
    let client = http_client(&server.url, true).await;
    // dry_run is left out: the schema's default (false) is sent as a boolean input.
    let task = start_task(&client, "tenant_migration", json!({"tenant": "acme"})).await;
    let waiting = poll_until(
        &client,
        &task,
        &[
            TaskStatus::InputRequired,
            TaskStatus::Completed,
            TaskStatus::Failed,
        ],
        &mut vec![],
    )
    .await;
    assert_eq!(waiting["status"], "input_required", "{waiting}");
    let key = first_input_key(&waiting);
    answer(
        &client,
        &task,
        &key,
        json!({"action": "accept", "content": {"approver": "Alice Ops"}}),
    )
    .await;
    let done = poll_until(
        &client,
        &task,
        &[TaskStatus::Completed, TaskStatus::Failed],
        &mut vec![],
    )
    .await;
    assert_eq!(
        result_json(&done),
        json!({"tenant": "acme", "applied": true}),
        "{done}"
    );
    client.cancel().await.ok();
}

#[test]
fn flowgate_policy_names_the_pipeline_variables_setting_and_what_each_mode_needs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = example_manifest(dir.path(), "https://gitlab.example.com");
    let out = std::process::Command::new(bin())
        .arg("policy")
        .arg(&manifest)
        .output()
        .expect("flowgate policy");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let policy: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let projects = policy["gitlab"].as_array().expect("gitlab entries");
    let migrations = projects
        .iter()
        .find(|p| p["project"] == "examples/migrations")
        .expect("the example's project");
    assert_eq!(
        migrations["pipeline_variables"]["setting"],
        "ci_pipeline_variables_minimum_override_role"
    );
    assert_eq!(migrations["pipeline_variables"]["sent"], json!([]));
    assert_eq!(
        migrations["pipeline_configuration"]["workflow_name"],
        json!(["$[[ inputs.flowgate_call ]]"])
    );
    assert_eq!(
        migrations["pipeline_configuration"]["job_inputs"],
        json!(["apply.approver"])
    );
    // A tool that sends pipeline variables is told the setting must allow them.
    let vars = dir.path().join("vars.yaml");
    std::fs::write(
        &vars,
        "tools:\n  - name: load\n    input_schema: {type: object, properties: {day: {type: string}}}\n    target: {engine: gitlab-ci, project: acme/etl, ref: main, variables: {DAY: '{day}'}, key_variable: FLOWGATE_CALL}\n",
    )
    .expect("write");
    let out = std::process::Command::new(bin())
        .arg("policy")
        .arg(&vars)
        .output()
        .expect("flowgate policy");
    let policy: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let needs = &policy["gitlab"][0]["pipeline_variables"];
    assert_eq!(needs["sent"], json!(["DAY", "FLOWGATE_CALL"]));
    assert!(
        needs["needs"]
            .as_str()
            .unwrap_or("")
            .contains("not no_one_allowed"),
        "{needs}"
    );
    // `flowgate check` of a manifest `name` holding `yaml`, which it refuses: what it said.
    let refused = |name: &str, yaml: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, yaml).expect("write");
        let out = std::process::Command::new(bin())
            .arg("check")
            .arg(&path)
            .output()
            .expect("flowgate check");
        assert!(!out.status.success(), "{name} was accepted");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    // The old template spelling is refused where it is written, with the fix.
    let err = refused(
        "old.yaml",
        "tools:\n  - name: load\n    input_schema: {type: object, properties: {day: {type: string}}}\n    target:\n      engine: gitlab-ci\n      project: acme/etl\n      ref: main\n      inputs:\n        day: \"{{day}}\"\n",
    );
    assert!(err.contains("old.yaml:9:9:"), "at the key's line: {err}");
    assert!(err.contains("write `{day}`"), "the fix: {err}");
    // A template naming an argument the schema does not declare is reported where it is
    // written, naming the argument.
    let err = refused(
        "undeclared.yaml",
        "tools:\n  - name: load\n    input_schema: {type: object, properties: {day: {type: string}}}\n    target:\n      engine: gitlab-ci\n      project: acme/etl\n      ref: main\n      inputs:\n        day: \"{day}\"\n        region: \"{region}\"\n",
    );
    assert!(
        err.contains("undeclared.yaml:10:"),
        "at the key's line: {err}"
    );
    assert!(err.contains("region"), "names the argument: {err}");
}
