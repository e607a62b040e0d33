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
        text.starts_with(
            "nightly: stepfunctions: unavailable: StartExecution for state machine nightly:"
        ),
        "{text}"
    );
    assert_no_account(&text);
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
    let reachable = one_tool(dir.path(), "up.yaml", &arn, &url);
    let unreachable = one_tool(dir.path(), "down.yaml", &arn, "http://127.0.0.1:9");

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
    assert_no_account(&message);
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

/// Client-facing text names the tool and the state machine, never an ARN or the account.
fn assert_no_account(text: &str) {
    assert!(
        !text.contains("arn:") && !text.contains(ACCOUNT),
        "an ARN or the account id reached a client: {text}"
    );
}

fn one_tool(dir: &Path, file: &str, arn: &str, endpoint: &str) -> std::path::PathBuf {
    let path = dir.join(file);
    let text = format!(
        "tools:\n  - name: job\n    task: required\n    poll_interval_ms: 500\n    target: {{engine: stepfunctions, state_machine_arn: \"{arn}\", endpoint_url: \"{endpoint}\"}}\n"
    );
    std::fs::write(&path, text).expect("write manifest");
    path
}

#[tokio::test]
async fn a_stalled_engine_gets_answers_within_ten_seconds_and_a_start_names_its_task() {
    let url = moto_url();
    let arn = create_machine(
        &admin_client(&url),
        &unique("e2e-stall"),
        &pass_wait_pass(60),
    )
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let up = Server::start(
        dir.path(),
        Some(&one_tool(dir.path(), "up.yaml", &arn, &url)),
    );
    let client = http_client(&up.url, true).await;
    let id = start_task(&client, "job", json!({"name": "Ada"})).await;

    // Every call to the engine is accepted and never answered.
    let scope = ProxyScope::new("e2e-stall", json!({"stall": {"*": 1000}})).await;
    let stalled = one_tool(dir.path(), "stalled.yaml", &arn, &scope.endpoint);
    let down = Server::start(dir.path(), Some(&stalled));
    let stuck = http_client(&down.url, true).await;
    let t0 = std::time::Instant::now();
    let during = get(&stuck, &id).await;
    assert!(
        t0.elapsed() < std::time::Duration::from_secs(10),
        "{:?}",
        t0.elapsed()
    );
    assert_eq!(during.task.status(), TaskStatus::Working);
    let message = during.task.task.status_message.clone().unwrap_or_default();
    assert!(
        message.starts_with("The engine is unreachable"),
        "{message}"
    );
    assert_no_account(&message);

    // A start that gets no answer says it may have started, and which task to check.
    let rmcp::model::CallToolResponse::Complete(result) = stuck
        .call_tool_once(call("job", json!({"name": "Bob"})))
        .await
        .expect("tools/call")
    else {
        panic!("expected a tool error")
    };
    assert_eq!(result.is_error, Some(true));
    let text = serde_json::to_value(&result).expect("json")["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n");
    assert!(text.contains("may or may not have started"), "{text}");
    assert_no_account(&text);
    let maybe = text
        .split("it is task ")
        .nth(1)
        .and_then(|rest| rest.split(':').next())
        .expect("the task to check")
        .to_owned();
    // The stalled start never reached the engine: that task does not exist.
    let err = client
        .get_task(rmcp::model::GetTaskParams::new(maybe))
        .await
        .expect_err("never started");
    assert!(err.to_string().contains("Task not found"), "{err}");
    cancel(&client, &id).await;
}

/// Cancels task `id` through a server that reaches the engine.
async fn cancel(client: &Client, id: &str) {
    client
        .cancel_task(rmcp::model::CancelTaskParams::new(id.to_owned()))
        .await
        .expect("cancel");
}

#[tokio::test]
async fn a_throttled_poll_is_a_working_task_with_a_longer_interval() {
    let url = moto_url();
    let arn = create_machine(&admin_client(&url), &unique("e2e-thr"), &pass_wait_pass(60)).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let up = Server::start(
        dir.path(),
        Some(&one_tool(dir.path(), "up.yaml", &arn, &url)),
    );
    let client = http_client(&up.url, true).await;
    let id = start_task(&client, "job", json!({"name": "Ada"})).await;
    // An account whose history quota is one call, refilled every 1000 s.
    let scope = ProxyScope::new(
        "e2e-thr",
        json!({"buckets": {"GetExecutionHistory": [1, 0.001]}}),
    )
    .await;
    let limited = one_tool(dir.path(), "limited.yaml", &arn, &scope.endpoint);
    let first = Server::start(dir.path(), Some(&limited));
    let a = http_client(&first.url, true).await;
    assert_eq!(get(&a, &id).await.task.status(), TaskStatus::Working);
    // Another instance, with nothing seen yet, meets the empty bucket.
    let second = Server::start(dir.path(), Some(&limited));
    let b = http_client(&second.url, true).await;
    let throttled = get(&b, &id).await;
    assert_eq!(throttled.task.status(), TaskStatus::Working);
    let message = throttled
        .task
        .task
        .status_message
        .clone()
        .unwrap_or_default();
    assert!(message.contains("rate-limiting"), "{message}");
    assert!(
        throttled.task.task.poll_interval_ms.unwrap_or(0) >= 2000,
        "{:?}",
        throttled.task.task.poll_interval_ms
    );
    assert_eq!(scope.report().await["throttled"]["GetExecutionHistory"], 1);
    cancel(&client, &id).await;
}

/// A listener of a Step Functions task sees it working, then completed with its output, pushed
/// without a single `tasks/get` of the client's; the listen then ends by itself.
#[tokio::test]
async fn a_listener_follows_a_stepfunctions_task_to_its_end() {
    let url = moto_url();
    let admin = admin_client(&url);
    let arn = create_machine(&admin, &unique("e2e-listen"), &pass_wait_pass(2)).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = one_tool(dir.path(), "listen.yaml", &arn, &url);
    let server = Server::start(dir.path(), Some(&manifest));
    let created = crate::telemetry::rpc(
        &server.url,
        "tools/call",
        json!({"name": "job", "arguments": {"name": "Ada"}}),
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
    let mut statuses = Vec::new();
    let mut last = serde_json::Value::Null;
    while let Some(message) = listening.next().await {
        if message["method"] == "notifications/tasks" {
            statuses.push(
                message["params"]["status"]
                    .as_str()
                    .unwrap_or("")
                    .to_owned(),
            );
            last = message["params"].clone();
        }
    }
    assert_eq!(
        statuses.first().map(String::as_str),
        Some("working"),
        "{statuses:?}"
    );
    assert_eq!(
        statuses.last().map(String::as_str),
        Some("completed"),
        "{last}"
    );
    let text = last["result"]["content"][0]["text"].as_str().unwrap_or("");
    assert!(text.contains("Ada"), "{last}");
}
