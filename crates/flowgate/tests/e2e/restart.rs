//! A task outlives the server process that created it.

use rmcp::model::TaskStatus;
use serde_json::json;

use crate::support::*;

#[tokio::test]
async fn a_new_server_process_answers_for_a_task_the_killed_one_created() {
    let state = tempfile::tempdir().expect("tempdir");
    let mut first = Server::start(state.path(), None);
    let client = http_client(&first.url, true).await;
    let id = start_task(&client, "long_job", json!({"steps": 3})).await;
    drop(client);
    first.kill();

    let second = Server::start(state.path(), None);
    assert_ne!(first.url, second.url);
    let client = http_client(&second.url, true).await;
    let mut seen = vec![];
    let done = poll_until(
        &client,
        &id,
        &[TaskStatus::Completed, TaskStatus::Failed],
        &mut seen,
    )
    .await;
    assert_eq!(
        done["result"]["structuredContent"],
        json!({"steps": 3, "finished": true}),
        "{done}"
    );
    assert_eq!(
        seen.first(),
        Some(&TaskStatus::Working),
        "it was still running after the kill"
    );
}
