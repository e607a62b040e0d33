//! `Mcp-Name` on `tasks/*`: tolerated when absent (shipped clients omit it), refused when it
//! contradicts the body.

use serde_json::json;

use crate::support::{Server, http_client, raw, start_task};

#[tokio::test]
async fn a_missing_mcp_name_is_tolerated_and_a_wrong_one_refused() {
    let state = tempfile::tempdir().expect("tempdir");
    let server = Server::start(state.path(), None);
    let client = http_client(&server.url, true).await;
    let id = start_task(&client, "long_job", json!({"steps": 30})).await;

    let (status, body) = raw(&server.url, "tasks/get", None, json!({"taskId": id})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["result"]["taskId"], id.as_str(), "{body}");
    let (status, body) = raw(
        &server.url,
        "tasks/update",
        None,
        json!({"taskId": id, "inputResponses": {}}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(body.get("error").is_none(), "{body}");

    let (status, body) = raw(
        &server.url,
        "tasks/get",
        Some("fg1.other"),
        json!({"taskId": id}),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], -32020, "{body}");

    let (status, body) = raw(&server.url, "tasks/cancel", None, json!({"taskId": id})).await;
    assert_eq!(status, 200, "{body}");
    let (_, body) = raw(&server.url, "tasks/get", None, json!({"taskId": id})).await;
    assert_eq!(body["result"]["status"], "cancelled", "{body}");
}
