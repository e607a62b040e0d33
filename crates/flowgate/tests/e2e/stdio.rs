//! The same flow over stdio.

use rmcp::model::TaskStatus;
use serde_json::json;

use crate::support::*;

#[tokio::test]
async fn tasks_work_over_stdio() {
    let state = tempfile::tempdir().expect("tempdir");
    let client = stdio_client(state.path()).await;
    let id = start_task(&client, "long_job", json!({"steps": 1})).await;
    let done = poll_until(
        &client,
        &id,
        &[TaskStatus::Completed, TaskStatus::Failed],
        &mut vec![],
    )
    .await;
    assert_eq!(done["result"]["structuredContent"]["finished"], true);

    let id = start_task(
        &client,
        "approve_deploy",
        json!({"service": "api", "version": "7"}),
    )
    .await;
    let waiting = poll_until(&client, &id, &[TaskStatus::InputRequired], &mut vec![]).await;
    let key = first_input_key(&waiting);
    answer(
        &client,
        &id,
        &key,
        json!({"action": "accept", "content": {"approve": true}}),
    )
    .await;
    let done = poll_until(
        &client,
        &id,
        &[TaskStatus::Completed, TaskStatus::Failed],
        &mut vec![],
    )
    .await;
    assert_eq!(done["result"]["isError"], false, "{done}");
    client.cancel().await.ok();
}
