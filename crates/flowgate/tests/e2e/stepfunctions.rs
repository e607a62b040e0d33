//! Step Functions tools through the whole server, against moto running real state machines.

use std::path::Path;

use flowgate_stepfunctions::testing::*;
use rmcp::model::TaskStatus;
use serde_json::json;

use crate::support::*;

struct Machines {
    pass_wait_pass: String,
    failing: String,
    long_wait: String,
    approval: String,
}

async fn machines(url: &str) -> Machines {
    let admin = admin_client(url);
    let queue = create_queue(url, &unique("e2e-approvals")).await;
    Machines {
        pass_wait_pass: create_machine(&admin, &unique("e2e-pwp"), &pass_wait_pass(2)).await,
        failing: create_machine(
            &admin,
            &unique("e2e-fail"),
            &failing("Etl.BadInput", "3 rows were malformed"),
        )
        .await,
        long_wait: create_machine(&admin, &unique("e2e-long"), &pass_wait_pass(600)).await,
        approval: create_machine(&admin, &unique("e2e-ask"), &asks(&queue, "Ship it?")).await,
    }
}

fn manifest(dir: &Path, url: &str, m: &Machines) -> std::path::PathBuf {
    let tool = |name: &str, arn: &str| {
        format!(
            "  - name: {name}\n    input_schema: {{type: object, properties: {{name: {{type: string}}}}}}\n    task: required\n    poll_interval_ms: 200\n    target: {{engine: stepfunctions, state_machine_arn: \"{arn}\", endpoint_url: \"{url}\"}}\n"
        )
    };
    let text = format!(
        "tools:\n{}{}{}{}",
        tool("greet_slowly", &m.pass_wait_pass),
        tool("etl", &m.failing),
        tool("wait_long", &m.long_wait),
        tool("ship", &m.approval),
    );
    let path = dir.join("sfn.yaml");
    std::fs::write(&path, text).expect("write manifest");
    path
}

#[tokio::test]
async fn stepfunctions_tasks_complete_fail_ask_cancel_and_survive_a_server_restart() {
    let url = moto_url();
    let m = machines(&url).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = manifest(dir.path(), &url, &m);

    // Started by one server process...
    let mut first = Server::start(dir.path(), Some(&manifest));
    let client = http_client(&first.url, true).await;
    let greeting = start_task(&client, "greet_slowly", json!({"name": "Ada"})).await;
    let etl = start_task(&client, "etl", json!({})).await;
    let ship = start_task(&client, "ship", json!({"name": "v42"})).await;
    let first_poll = get(&client, &greeting).await;
    assert_eq!(first_poll.task.status(), TaskStatus::Working);
    drop(client);
    first.kill();

    // ...answered by another.
    let second = Server::start(dir.path(), Some(&manifest));
    let client = http_client(&second.url, true).await;

    let mut seen = vec![];
    let done = poll_until(
        &client,
        &greeting,
        &[TaskStatus::Completed, TaskStatus::Failed],
        &mut seen,
    )
    .await;
    assert_eq!(seen, [TaskStatus::Working, TaskStatus::Completed]);
    let output = result_json(&done);
    assert_eq!(
        output,
        json!({"greeting": "hello Ada", "waited": 2}),
        "the real execution output"
    );
    assert_eq!(
        done["ttlMs"],
        90u64 * 24 * 3600 * 1000,
        "Step Functions keeps executions 90 days"
    );

    let failed = poll_until(
        &client,
        &etl,
        &[TaskStatus::Completed, TaskStatus::Failed],
        &mut vec![],
    )
    .await;
    assert_eq!(failed["status"], "completed");
    assert_eq!(failed["result"]["isError"], true);
    let text = failed["result"]["content"][0]["text"]
        .as_str()
        .expect("text");
    assert_eq!(text, "Etl.BadInput: 3 rows were malformed");

    let waiting = poll_until(
        &client,
        &ship,
        &[TaskStatus::InputRequired, TaskStatus::Completed],
        &mut vec![],
    )
    .await;
    assert_eq!(waiting["status"], "input_required", "{waiting}");
    assert_eq!(waiting["statusMessage"], "In state Approve");
    let (key, request) = waiting["inputRequests"]
        .as_object()
        .and_then(|m| m.iter().next())
        .expect("request");
    assert!(key.starts_with("sfn-"), "{key}");
    assert_eq!(request["params"]["message"], "Ship it?");
    answer(
        &client,
        &ship,
        key,
        json!({"action": "accept", "content": {"answer": "yes, ship"}}),
    )
    .await;
    let shipped = poll_until(
        &client,
        &ship,
        &[TaskStatus::Completed, TaskStatus::Failed],
        &mut vec![],
    )
    .await;
    let output = result_json(&shipped);
    assert_eq!(
        output["approval"],
        json!({"answer": "yes, ship"}),
        "{shipped}"
    );

    let long = start_task(&client, "wait_long", json!({"name": "x"})).await;
    let cancelled = cancel_and_settle(&client, &long).await;
    assert_eq!(cancelled["status"], "cancelled");
    let admin = admin_client(&url);
    let listed = admin
        .list_executions()
        .state_machine_arn(&m.long_wait)
        .send()
        .await
        .expect("list");
    assert_eq!(listed.executions().len(), 1);
    assert_eq!(listed.executions()[0].status.as_str(), "ABORTED");
    client.cancel().await.ok();
}

#[tokio::test]
async fn an_unreachable_engine_is_a_clear_tool_error_and_the_server_keeps_serving() {
    moto_url(); // needs moto and the AWS_* test credentials scripts/test sets
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("down.yaml");
    std::fs::write(
        &path,
        "tools:\n  - name: nightly\n    target: {engine: stepfunctions, state_machine_arn: 'arn:aws:states:us-east-1:123456789012:stateMachine:nightly', endpoint_url: 'http://127.0.0.1:9'}\n",
    )
    .expect("write");
    let server = Server::start(dir.path(), Some(&path));
    let client = http_client(&server.url, true).await;
    let response = client
        .call_tool_once(call("nightly", json!({})))
        .await
        .expect("tools/call");
    let rmcp::model::CallToolResponse::Complete(result) = response else {
        panic!("expected a tool error")
    };
    assert_eq!(result.is_error, Some(true));
    let text = serde_json::to_value(&result).expect("json")["content"][0]["text"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    assert!(
        text.starts_with("nightly: stepfunctions: unavailable: StartExecution on arn:"),
        "{text}"
    );
    assert!(
        text.contains("could not be reached") && text.contains("nothing was started"),
        "{text}"
    );
    assert_eq!(
        client.list_all_tools().await.expect("still serving").len(),
        1
    );
}

#[tokio::test]
async fn an_engine_outage_is_reported_on_the_task_and_loses_nothing() {
    let url = moto_url();
    let arn = create_machine(
        &admin_client(&url),
        &unique("e2e-outage"),
        &pass_wait_pass(1),
    )
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let write = |name: &str, endpoint: &str| {
        let path = dir.path().join(name);
        let text = format!(
            "tools:\n  - name: job\n    task: required\n    poll_interval_ms: 500\n    target: {{engine: stepfunctions, state_machine_arn: \"{arn}\", endpoint_url: \"{endpoint}\"}}\n"
        );
        std::fs::write(&path, text).expect("write manifest");
        path
    };
    let reachable = write("up.yaml", &url);
    let unreachable = write("down.yaml", "http://127.0.0.1:9");

    let up = Server::start(dir.path(), Some(&reachable));
    let client = http_client(&up.url, true).await;
    let id = start_task(&client, "job", json!({"name": "Ada"})).await;
    drop(client);
    drop(up);

    // An instance that cannot reach the engine keeps the task: working, saying why, polled less often.
    let down = Server::start(dir.path(), Some(&unreachable));
    let client = http_client(&down.url, true).await;
    let during = get(&client, &id).await;
    assert_eq!(during.task.status(), TaskStatus::Working);
    let message = during.task.task.status_message.clone().unwrap_or_default();
    assert!(
        message.starts_with("The engine is unreachable"),
        "{message}"
    );
    assert_eq!(
        during.task.task.poll_interval_ms,
        Some(2000),
        "four times the tool's interval"
    );
    drop(client);
    drop(down);

    // Once the engine is reachable again, the same handle finds the finished execution.
    let back = Server::start(dir.path(), Some(&reachable));
    let client = http_client(&back.url, true).await;
    let done = poll_until(
        &client,
        &id,
        &[TaskStatus::Completed, TaskStatus::Failed],
        &mut vec![],
    )
    .await;
    assert_eq!(
        result_json(&done),
        json!({"greeting": "hello Ada", "waited": 1})
    );
}
