//! Google Cloud Workflows tools through the whole server, against the executions-API fake that
//! runs the real workflow YAML.

use flowgate_google_workflows::testing::{fake_url, set_backlog};
use rmcp::model::TaskStatus;
use serde_json::json;

use crate::support::*;

fn manifest(dir: &std::path::Path, url: &str) -> std::path::PathBuf {
    let tool = |name: &str, workflow: &str, extra: &str| {
        format!(
            "  - name: {name}\n    task: required\n    poll_interval_ms: 200\n    target: {{engine: google-workflows, project: flowgate-tests, location: us-central1, workflow: {workflow}, endpoint: \"{url}\"{extra}}}\n"
        )
    };
    let text = format!(
        "tools:\n{}{}{}",
        tool("nap", "sleepy", ""),
        tool("report", "raises", ""),
        tool(
            "approve",
            "approval",
            ", inputs: {await_approval: {message: 'Approve this release?', requested_schema: {type: object, properties: {answer: {type: string}}, required: [answer]}}}"
        ),
    );
    let path = dir.join("gcw.yaml");
    std::fs::write(&path, text).expect("write manifest");
    path
}

async fn execution_state(url: &str, name_hint: &str) -> String {
    // The fake's list, newest first: the state the engine itself reports.
    let list: serde_json::Value = reqwest::get(format!(
        "{url}/v1/projects/flowgate-tests/locations/us-central1/workflows/{name_hint}/executions?view=FULL"
    ))
    .await
    .expect("list")
    .json()
    .await
    .expect("json");
    list["executions"][0]["state"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn workflows_tasks_complete_fail_ask_cancel_and_survive_a_server_restart() {
    let url = fake_url();
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = manifest(dir.path(), &url);

    let mut first = Server::start(dir.path(), Some(&manifest));
    let client = http_client(&first.url, true).await;
    let nap = start_task(&client, "nap", json!({"name": "Ada", "seconds": 2})).await;
    let report = start_task(&client, "report", json!({"day": "2026-12-01"})).await;
    let approve = start_task(&client, "approve", json!({"service": "web"})).await;
    let napping = poll_task(&client, &nap, |t| t.get("statusMessage").is_some()).await;
    assert_eq!(
        napping["statusMessage"], "In step nap",
        "the current step while it sleeps"
    );
    drop(client);
    first.kill();

    let second = Server::start(dir.path(), Some(&manifest));
    let client = http_client(&second.url, true).await;

    let done = poll_until(
        &client,
        &nap,
        &[TaskStatus::Completed, TaskStatus::Failed],
        &mut vec![],
    )
    .await;
    assert_eq!(
        result_json(&done),
        json!({"greeting": "hello Ada", "slept": 2}),
        "the workflow's real return value"
    );

    let failed = poll_until(
        &client,
        &report,
        &[TaskStatus::Completed, TaskStatus::Failed],
        &mut vec![],
    )
    .await;
    assert_eq!(failed["result"]["isError"], true);
    let text = failed["result"]["content"][0]["text"]
        .as_str()
        .expect("text");
    assert!(
        text.starts_with("ValueError: no rows for 2026-12-01: "),
        "{text}"
    );
    assert!(
        text.contains("422"),
        "the error payload reaches the result: {text}"
    );

    let waiting = poll_until(
        &client,
        &approve,
        &[TaskStatus::InputRequired, TaskStatus::Completed],
        &mut vec![],
    )
    .await;
    assert_eq!(waiting["status"], "input_required", "{waiting}");
    assert_eq!(waiting["statusMessage"], "In step await_approval");
    let key = first_input_key(&waiting);
    assert_eq!(
        waiting["inputRequests"][&key]["params"]["message"],
        "Approve this release?"
    );
    answer(
        &client,
        &approve,
        &key,
        json!({"action": "accept", "content": {"answer": "Alice"}}),
    )
    .await;
    let approved = poll_until(
        &client,
        &approve,
        &[TaskStatus::Completed, TaskStatus::Failed],
        &mut vec![],
    )
    .await;
    assert_eq!(
        result_json(&approved),
        json!({"approved_by": "Alice", "service": "web"})
    );

    let long = start_task(&client, "nap", json!({"name": "Bo", "seconds": 600})).await;
    // Cancelled while it sleeps in its step.
    poll_task(&client, &long, |t| t["statusMessage"] == "In step nap").await;
    let cancelled = cancel_and_settle(&client, &long).await;
    assert_eq!(cancelled["status"], "cancelled");
    assert_eq!(
        execution_state(&url, "sleepy").await,
        "CANCELLED",
        "the execution itself was cancelled"
    );
    client.cancel().await.ok();
}

/// A task whose execution waits QUEUED in the workflow's backlog (no start time yet) is
/// `working` with a real `createdAt`, the task's creation, never 1970.
#[tokio::test]
async fn a_queued_execution_has_the_tasks_creation_time() {
    let url = fake_url();
    set_backlog(&url, "backlogged", Some(1));
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("backlog.yaml");
    std::fs::write(
        &path,
        format!(
            "tools:\n  - name: hold\n    task: required\n    target: {{engine: google-workflows, project: flowgate-tests, location: us-central1, workflow: backlogged, endpoint: \"{url}\"}}\n"
        ),
    )
    .expect("write manifest");
    let server = Server::start(dir.path(), Some(&path));
    let client = http_client(&server.url, true).await;
    let running = start_task(&client, "hold", json!({"seconds": 600})).await;
    let rmcp::model::CallToolResponse::Task(created) = client
        .call_tool_once(call("hold", json!({"seconds": 600})))
        .await
        .expect("tools/call")
    else {
        panic!("expected a task")
    };
    let queued = created.task.task_id.clone();
    let got = get(&client, &queued).await;
    assert_eq!(got.task.status(), TaskStatus::Working);
    let message = got.task.task.status_message.clone().unwrap_or_default();
    assert!(message.contains("backlog"), "{message}");
    assert_eq!(got.task.task.created_at, created.task.created_at);
    assert!(
        !got.task.task.created_at.starts_with("1970"),
        "{}",
        got.task.task.created_at
    );
    for id in [&running, &queued] {
        client
            .cancel_task(rmcp::model::CancelTaskParams::new(id.to_string()))
            .await
            .expect("cancel");
    }
    set_backlog(&url, "backlogged", None);
}

/// With `credentials: adc`, the Application Default Credentials (here an external-account file
/// whose token exchange the fake answers) reach every call: the client crate's and the REST
/// calls flowgate makes itself (callbacks list, the callback), with `x-goog-user-project`.
/// Without credentials, a project that needs them refuses, and the tool error says so.
#[tokio::test]
async fn adc_credentials_and_the_quota_project_reach_every_call() {
    let url = fake_url();
    let dir = tempfile::tempdir().expect("tempdir");
    let subject = dir.path().join("subject.jwt");
    std::fs::write(&subject, "eyJhbGciOiJub25lIn0.eyJzdWIiOiJjaSJ9.").expect("subject token");
    let adc = dir.path().join("adc.json");
    std::fs::write(
        &adc,
        json!({
            "type": "external_account",
            "audience": "//iam.googleapis.com/projects/123456789012/locations/global/workloadIdentityPools/ci/providers/fake",
            "subject_token_type": "urn:ietf:params:oauth:token-type:jwt",
            "token_url": format!("{url}/v1/token"),
            "credential_source": {"file": subject},
        })
        .to_string(),
    )
    .expect("adc file");
    let tool = |name: &str, credentials: &str| {
        format!(
            "  - name: {name}\n    task: required\n    poll_interval_ms: 200\n    target: {{engine: google-workflows, project: flowgate-secure, location: us-central1, workflow: approval, endpoint: \"{url}\", credentials: {credentials}, inputs: {{'*': {{message: 'Go?'}}}}}}\n"
        )
    };
    let path = dir.path().join("secure.yaml");
    std::fs::write(
        &path,
        format!(
            "tools:\n{}{}",
            tool("signed", "adc"),
            tool("unsigned", "anonymous")
        ),
    )
    .expect("manifest");
    let adc_path = adc.to_string_lossy().into_owned();
    let server = Server::start_with(
        dir.path(),
        Some(&path),
        &[
            ("GOOGLE_APPLICATION_CREDENTIALS", adc_path.as_str()),
            ("GOOGLE_CLOUD_QUOTA_PROJECT", "billing-project"),
        ],
        None,
    );
    let client = http_client(&server.url, true).await;

    let id = start_task(&client, "signed", json!({"service": "web"})).await;
    let asked = poll_until(&client, &id, &[TaskStatus::InputRequired], &mut vec![]).await;
    let key = first_input_key(&asked);
    answer(
        &client,
        &id,
        &key,
        json!({"action": "accept", "content": {"answer": "ok"}}),
    )
    .await;
    let done = poll_until(
        &client,
        &id,
        &[TaskStatus::Completed, TaskStatus::Failed],
        &mut vec![],
    )
    .await;
    assert_eq!(done["status"], "completed", "{done}");

    let seen: serde_json::Value = reqwest::get(format!("{url}/fake/seen?project=flowgate-secure"))
        .await
        .expect("seen")
        .json()
        .await
        .expect("json");
    let requests = seen["requests"].as_array().cloned().unwrap_or_default();
    let kinds = |needle: &str| {
        requests
            .iter()
            .filter(|r| r["path"].as_str().unwrap_or("").contains(needle))
            .count()
    };
    assert!(
        kinds("/executions") > 0 && kinds("/callbacks") > 0,
        "{seen}"
    );
    for r in &requests {
        assert_eq!(r["token_ok"], true, "{r}");
        assert_eq!(r["user_project"], "billing-project", "{r}");
    }

    let rmcp::model::CallToolResponse::Complete(refused) = client
        .call_tool_once(call("unsigned", json!({"service": "web"})))
        .await
        .expect("tools/call")
    else {
        panic!("expected a tool error")
    };
    assert_eq!(refused.is_error, Some(true));
    let text = serde_json::to_value(&refused).expect("json")["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(text.contains("credentials"), "{text}");
}
