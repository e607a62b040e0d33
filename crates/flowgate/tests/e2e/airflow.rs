//! Airflow tools through the whole server, against the real Airflow scripts/test starts
//! (scripts/lib/airflow.sh): the example manifest (`examples/airflow/tools.yaml`) runs its
//! approval DAG to completion, the approval answered over MCP with `tasks/update` by another
//! server process than the one that asked; and `flowgate policy` names what the Airflow user
//! needs.

use flowgate_airflow::testing::{PASSWORD_ENV, TestAirflow, USERNAME_ENV};
use rmcp::model::TaskStatus;
use serde_json::json;

use crate::support::*;

/// The example manifest as written; only where Airflow runs and where the credentials come
/// from change.
fn example_manifest(dir: &std::path::Path, url: &str) -> std::path::PathBuf {
    let example = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/airflow/tools.yaml"),
    )
    .expect("the example");
    let text = example.replace(
        "base_url: http://localhost:8080   # your Airflow API server",
        &format!(
            "base_url: \"{url}\"\n      username_env: {USERNAME_ENV}\n      password_env: {PASSWORD_ENV}"
        ),
    );
    assert_ne!(
        text, example,
        "the example's target lines moved: update this test"
    );
    let path = dir.join("airflow.yaml");
    std::fs::write(&path, text).expect("write manifest");
    path
}

#[tokio::test]
async fn the_example_approval_dag_runs_to_completion_answered_over_mcp() {
    let airflow = TestAirflow::get();
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = example_manifest(dir.path(), &airflow.url);
    let mut first = Server::start(dir.path(), Some(&manifest));
    let client = http_client(&first.url, true).await;
    let task = start_task(
        &client,
        "release",
        json!({"service": "web", "version": "1.2.3"}),
    )
    .await;
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
    let question = &waiting["inputRequests"][&key];
    assert!(
        question
            .to_string()
            .contains("Release web 1.2.3 to production?"),
        "{question}"
    );
    // Another server process (same handle keys, no shared state) answers it.
    drop(client);
    first.kill();
    let second = Server::start(dir.path(), Some(&manifest));
    let client = http_client(&second.url, true).await;
    // Answered at once (an answer that comes too soon is held back until Airflow takes it).
    answer(
        &client,
        &task,
        &key,
        json!({"action": "accept", "content": {"approver": "Alice"}}),
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
        json!({"service": "web", "version": "1.2.3", "image": "web:1.2.3", "approved_by": "Alice"}),
        "{done}"
    );
    client.cancel().await.ok();
}

#[test]
fn flowgate_policy_names_the_dag_and_the_airflow_permissions() {
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = example_manifest(dir.path(), "https://airflow.example.com");
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
    let entry = &policy["airflow"][0];
    assert_eq!(entry["airflow"], "https://airflow.example.com");
    assert_eq!(entry["dags"], json!(["release_approval"]));
    let permissions = entry["permissions"].as_array().expect("permissions");
    for (action, resource) in [
        ("can_create", "DAG Runs"),
        ("can_edit", "DAG Runs"),
        ("can_edit", "HITL Detail"),
        ("can_read", "XComs"),
    ] {
        assert!(
            permissions.iter().any(|p| p["action"] == action
                && p["resource"] == resource
                && p["on"] == json!(["DAG:release_approval"])),
            "{action} on {resource} missing: {entry}"
        );
    }
}
