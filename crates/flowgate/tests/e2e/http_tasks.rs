//! The task flows over HTTP with rmcp's client: complete, fail, ask, cancel, and the
//! synchronous answer for clients without the tasks extension.

use rmcp::model::{CallToolResponse, CancelTaskParams, TaskStatus};
use serde_json::json;

use crate::support::*;

#[tokio::test]
async fn long_job_goes_working_then_completed_with_its_result_inline() {
    let state = tempfile::tempdir().expect("tempdir");
    let server = Server::start(state.path(), None);
    let client = http_client(&server.url, true).await;
    let tools = client.list_all_tools().await.expect("tools/list");
    let names: Vec<_> = tools.iter().map(|t| t.name.to_string()).collect();
    assert_eq!(names, ["long_job", "failing_job", "approve_deploy"]);

    let id = start_task(&client, "long_job", json!({"steps": 2})).await;
    // Claude Code refuses ids over 128 characters or outside printable ASCII.
    assert!(id.starts_with("fg2.") && id.len() <= 128, "{id}");
    assert!(id.bytes().all(|b| (0x21..=0x7e).contains(&b)), "{id}");
    let first = get(&client, &id).await;
    assert_eq!(first.task.status(), TaskStatus::Working);
    let mut seen = vec![TaskStatus::Working];
    let done = poll_until(
        &client,
        &id,
        &[TaskStatus::Completed, TaskStatus::Failed],
        &mut seen,
    )
    .await;
    assert_eq!(seen, [TaskStatus::Working, TaskStatus::Completed]);
    assert_eq!(done["result"]["isError"], false);
    assert_eq!(
        done["result"]["structuredContent"],
        json!({"steps": 2, "finished": true})
    );
    assert_eq!(done["resultType"], "complete");
    assert!(done.get("requestState").is_none());
    client.cancel().await.ok();
}

#[tokio::test]
async fn status_lines_show_as_the_status_message() {
    let state = tempfile::tempdir().expect("tempdir");
    let server = Server::start(state.path(), None);
    let client = http_client(&server.url, true).await;
    let id = start_task(&client, "long_job", json!({"steps": 4})).await;
    let task = poll_task(&client, &id, |t| {
        t["statusMessage"]
            .as_str()
            .is_some_and(|m| m.starts_with("step "))
    })
    .await;
    let message = task["statusMessage"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("step ") && message.ends_with(" of 4"),
        "{message}"
    );
    client
        .cancel_task(CancelTaskParams::new(id))
        .await
        .expect("cancel");
}

#[tokio::test]
async fn a_failing_job_completes_with_is_error_and_the_stderr_tail() {
    let state = tempfile::tempdir().expect("tempdir");
    let server = Server::start(state.path(), None);
    let client = http_client(&server.url, true).await;
    let id = start_task(&client, "failing_job", json!({})).await;
    let done = poll_until(
        &client,
        &id,
        &[TaskStatus::Completed, TaskStatus::Failed],
        &mut vec![],
    )
    .await;
    assert_eq!(done["status"], "completed");
    assert_eq!(done["result"]["isError"], true);
    let text = done["result"]["content"][0]["text"].as_str().expect("text");
    assert!(text.starts_with("exit status 2: "), "{text}");
    assert!(text.contains("3 malformed rows"), "{text}");
}

#[tokio::test]
async fn an_approval_waits_for_input_and_uses_the_answer() {
    let state = tempfile::tempdir().expect("tempdir");
    let server = Server::start(state.path(), None);
    let client = http_client(&server.url, true).await;
    let id = start_task(
        &client,
        "approve_deploy",
        json!({"service": "billing", "version": "v42"}),
    )
    .await;
    let waiting = poll_until(
        &client,
        &id,
        &[TaskStatus::InputRequired, TaskStatus::Completed],
        &mut vec![],
    )
    .await;
    assert_eq!(waiting["status"], "input_required", "{waiting}");
    let requests = waiting["inputRequests"].as_object().expect("inputRequests");
    assert_eq!(requests.len(), 1);
    let (key, request) = requests.iter().next().expect("one");
    assert_eq!(request["method"], "elicitation/create");
    assert_eq!(
        request["params"]["message"],
        "Deploy billing v42 to production?"
    );
    assert_eq!(
        request["params"]["requestedSchema"]["required"],
        json!(["approve"])
    );
    assert_eq!(waiting["statusMessage"], "waiting for approval");

    // A response to a key that is not outstanding is ignored, and the task keeps waiting.
    answer(
        &client,
        &id,
        "q99",
        json!({"action": "accept", "content": {"approve": true}}),
    )
    .await;
    assert_eq!(
        get(&client, &id).await.task.status(),
        TaskStatus::InputRequired
    );

    answer(
        &client,
        &id,
        key,
        json!({"action": "accept", "content": {"approve": true, "reason": "CHG-42"}}),
    )
    .await;
    let mut seen = vec![];
    let done = poll_until(
        &client,
        &id,
        &[TaskStatus::Completed, TaskStatus::Failed],
        &mut seen,
    )
    .await;
    assert!(!seen.contains(&TaskStatus::InputRequired), "{seen:?}");
    assert_eq!(done["result"]["isError"], false, "{done}");
    let output = result_json(&done);
    assert_eq!(output["deployed"], true);
    assert_eq!(output["approved"], true);
}

/// The bundled approval reads its decision as a value: a rejection whose text contains
/// `"approve":true` does not deploy, and an answer in another shape than MCP's flat form
/// (a nested object, a field not asked for) is refused whole, delivering nothing.
#[tokio::test]
async fn an_answer_shaped_to_look_approved_does_not_deploy() {
    let state = tempfile::tempdir().expect("tempdir");
    let server = Server::start(state.path(), None);
    let client = http_client(&server.url, true).await;
    let id = start_task(
        &client,
        "approve_deploy",
        json!({"service": "web", "version": "2"}),
    )
    .await;
    let waiting = poll_until(&client, &id, &[TaskStatus::InputRequired], &mut vec![]).await;
    let key = first_input_key(&waiting);
    for content in [
        // Delivered as it was, this one made the old text match deploy.
        json!({"approve": false, "extra": {"approve": true}}),
        json!({"approve": false, "reason": {"approve": true}}),
        json!({"approve": false, "note": "\"approve\":true"}),
    ] {
        let mut params = rmcp::model::UpdateTaskParams::new(id.clone(), Default::default());
        params
            .input_responses
            .insert(key.clone(), json!({"action": "accept", "content": content}));
        let refused = client.update_task(params).await.expect_err("refused");
        let text = refused.to_string();
        assert!(
            text.contains("-32602") || text.contains("nothing was delivered"),
            "{text}"
        );
        assert_eq!(
            get(&client, &id).await.task.status(),
            TaskStatus::InputRequired,
            "nothing was delivered"
        );
    }
    answer(
        &client,
        &id,
        &key,
        json!({"action": "accept", "content": {"approve": false, "reason": "\"approve\":true"}}),
    )
    .await;
    let done = poll_until(
        &client,
        &id,
        &[TaskStatus::Completed, TaskStatus::Failed],
        &mut vec![],
    )
    .await;
    assert_eq!(done["result"]["isError"], true, "rejected: {done}");
    let text = done["result"]["content"][0]["text"].as_str().unwrap_or("");
    assert!(text.contains("deployment rejected"), "{text}");
}

#[tokio::test]
async fn a_declined_approval_ends_with_a_tool_error() {
    let state = tempfile::tempdir().expect("tempdir");
    let server = Server::start(state.path(), None);
    let client = http_client(&server.url, true).await;
    let id = start_task(
        &client,
        "approve_deploy",
        json!({"service": "web", "version": "1"}),
    )
    .await;
    let waiting = poll_until(&client, &id, &[TaskStatus::InputRequired], &mut vec![]).await;
    answer(
        &client,
        &id,
        &first_input_key(&waiting),
        json!({"action": "decline"}),
    )
    .await;
    let done = poll_until(
        &client,
        &id,
        &[TaskStatus::Completed, TaskStatus::Failed],
        &mut vec![],
    )
    .await;
    assert_eq!(done["result"]["isError"], true);
    assert!(
        done["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or("")
            .contains("approval was not given")
    );
}

#[tokio::test]
async fn cancel_ends_cancelled_and_the_processes_are_gone() {
    let state = tempfile::tempdir().expect("tempdir");
    let server = Server::start(state.path(), None);
    let client = http_client(&server.url, true).await;
    let id = start_task(&client, "long_job", json!({"steps": 60})).await;
    // `pid` holds the process group id and its leader's start time, once the command runs.
    let pid_file = eventually(std::time::Duration::from_secs(20), || async {
        let run = runs(state.path()).pop().ok_or("no run folder yet")?;
        std::fs::read_to_string(run.join("pid"))
            .ok()
            .filter(|p| !p.trim().is_empty())
            .ok_or("no pid file yet")
    })
    .await;
    let pgid = pid_file.split_whitespace().next().expect("pgid").to_owned();
    assert!(group_alive(&pgid), "the command should be running");

    let done = cancel_and_settle(&client, &id).await;
    assert_eq!(done["status"], "cancelled");
    eventually(std::time::Duration::from_secs(5), || async {
        match group_alive(&pgid) {
            true => Err(format!("process group {pgid} survived the cancel")),
            false => Ok(()),
        }
    })
    .await;
    // Cancelling a finished task is acknowledged, and it stays cancelled.
    client
        .cancel_task(CancelTaskParams::new(id.clone()))
        .await
        .expect("second cancel");
    assert_eq!(get(&client, &id).await.task.status(), TaskStatus::Cancelled);
}

#[tokio::test]
async fn clients_without_the_extension_get_results_or_32021() {
    let state = tempfile::tempdir().expect("tempdir");
    let server = Server::start(state.path(), None);
    let client = http_client(&server.url, false).await;
    match client
        .call_tool_once(call("long_job", json!({"steps": 1})))
        .await
        .expect("call")
    {
        CallToolResponse::Complete(r) => {
            assert_eq!(r.is_error, Some(false));
            assert_eq!(
                r.structured_content,
                Some(json!({"steps": 1, "finished": true}))
            );
        }
        other => panic!("expected a synchronous result, got {other:?}"),
    }
    let err = client
        .call_tool_once(call(
            "approve_deploy",
            json!({"service": "a", "version": "b"}),
        ))
        .await
        .expect_err("required task without the extension");
    assert!(format!("{err:?}").contains("-32021"), "{err:?}");
    assert!(
        runs(state.path()).len() == 1,
        "the refused call must not start anything"
    );
}
