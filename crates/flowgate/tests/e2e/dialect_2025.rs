//! The 2025-11-25 tasks dialect over raw HTTP, across two server processes: a question asked
//! on one instance's `tasks/result` stream is answered by a response POSTed to the other, and
//! the first stream ends with the tool's result. Nothing about the question is kept in memory.

use serde_json::{Value, json};

use crate::support::*;

const V2025: &str = "2025-11-25";

/// A message of the revision, answered as a response to read whole or as a stream.
async fn post(url: &str, body: Value) -> reqwest::Response {
    Post::v2025(url, &body)
        .request()
        .send()
        .await
        .expect("POST")
}

/// The JSON-RPC messages of an SSE stream, as they arrive.
struct Events {
    response: reqwest::Response,
    buffer: String,
}

impl Events {
    async fn next(&mut self) -> Value {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let event: String = self.buffer.drain(..end + 2).collect();
                if let Some(data) = event.lines().find_map(|l| l.strip_prefix("data: ")) {
                    return serde_json::from_str(data).expect("an event's JSON");
                }
                continue;
            }
            let chunk =
                tokio::time::timeout(std::time::Duration::from_secs(30), self.response.chunk())
                    .await
                    .expect("the stream went quiet")
                    .expect("read")
                    .expect("the stream ended early");
            self.buffer.push_str(&String::from_utf8_lossy(&chunk));
        }
    }
}

#[tokio::test]
async fn a_question_on_one_instances_stream_is_answered_through_another() {
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/clients/tools.yaml");
    let a = Server::start(dir.path(), Some(&manifest));
    let b = Server::start(dir.path(), Some(&manifest));

    let init = post(
        &a.url,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": V2025, "capabilities": {"elicitation": {}},
            "clientInfo": {"name": "raw-2025", "version": "1"}}}),
    )
    .await
    .json::<Value>()
    .await
    .expect("initialize");
    assert_eq!(init["result"]["protocolVersion"], V2025, "{init}");
    assert!(
        init["result"]["capabilities"]["tasks"]["requests"]["tools"]["call"].is_object(),
        "{init}"
    );

    // A taskSupport: required tool called without `task`: -32601, as the revision says.
    let plain = post(
        &a.url,
        json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {
            "name": "approve_deploy", "arguments": {"service": "ledger"}}}),
    )
    .await
    .json::<Value>()
    .await
    .expect("tools/call");
    assert_eq!(plain["error"]["code"], -32601, "{plain}");

    let created = post(
        &a.url,
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "approve_deploy", "arguments": {"service": "ledger"}, "task": {"ttl": 60000}}}),
    )
    .await
    .json::<Value>()
    .await
    .expect("tools/call");
    let task = created["result"]["task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("no task: {created}"))
        .to_owned();
    assert_eq!(created["result"]["task"]["status"], "working");

    let response = post(
        &a.url,
        json!({"jsonrpc": "2.0", "id": 3, "method": "tasks/result", "params": {"taskId": task}}),
    )
    .await;
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap_or("")
            .starts_with("text/event-stream")
    );
    let mut events = Events {
        response,
        buffer: String::new(),
    };
    let ask = events.next().await;
    assert_eq!(ask["method"], "elicitation/create", "{ask}");
    assert_eq!(ask["params"]["message"], "Deploy ledger to production?");
    assert_eq!(
        ask["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        task.as_str()
    );
    // The answer goes to the other instance.
    let delivered = post(
        &b.url,
        json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"action": "accept", "content": {"confirm": true}}}),
    )
    .await;
    assert_eq!(delivered.status(), reqwest::StatusCode::ACCEPTED);
    let done = events.next().await;
    assert_eq!(done["id"], 3, "{done}");
    assert_eq!(
        done["result"]["content"][0]["text"], "Deployed ledger",
        "{done}"
    );
    assert_eq!(
        done["result"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        task.as_str()
    );

    // tasks/list: this caller's task, and a cursor that is not one is refused.
    let listed = post(
        &b.url,
        json!({"jsonrpc": "2.0", "id": 4, "method": "tasks/list", "params": {}}),
    )
    .await
    .json::<Value>()
    .await
    .expect("tasks/list");
    assert_eq!(
        listed["result"]["tasks"].as_array().map(Vec::len),
        Some(1),
        "{listed}"
    );
    assert_eq!(
        listed["result"]["tasks"][0]["status"], "completed",
        "{listed}"
    );
    assert_eq!(
        listed["result"]["tasks"][0]["taskId"].as_str(),
        Some(task.as_str()),
        "a listed task carries the id the client already holds: {listed}"
    );
    let bad = post(
        &b.url,
        json!({"jsonrpc": "2.0", "id": 5, "method": "tasks/list", "params": {"cursor": "nope"}}),
    )
    .await
    .json::<Value>()
    .await
    .expect("tasks/list");
    assert_eq!(bad["error"]["code"], -32602, "{bad}");

    // A forged answer id is dropped, and never delivers anything.
    let forged = post(
        &b.url,
        json!({"jsonrpc": "2.0", "id": "fge.k1.AAAA", "result": {"action": "accept", "content": {}}}),
    )
    .await;
    assert_eq!(forged.status(), reqwest::StatusCode::ACCEPTED);
}
