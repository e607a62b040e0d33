//! `subscriptions/listen` through the binary: a client that listens for its task ids sees each
//! status change of a local-engine task to its end without polling, never another caller's
//! task, and a listener of the tool list is told of a manifest reload.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::Server;
use crate::telemetry::rpc;

/// A task-only tool that says where it is (`flowgate status`) between naps, then answers.
const MANIFEST: &str = r#"
tools:
  - name: stages
    description: Three stages, each announced.
    input_schema: { type: object }
    task: required
    poll_interval_ms: 200
    target:
      engine: local
      command: ["/bin/sh", "-c", "flowgate status 'stage 1'; sleep 1; flowgate status 'stage 2'; sleep 1; flowgate status 'stage 3'; sleep 1; echo '{\"done\": true}'"]
"#;

/// A `subscriptions/listen` request's SSE stream, read message by message.
pub(crate) struct Listening {
    response: reqwest::Response,
    buffer: String,
}

impl Listening {
    pub(crate) async fn open(url: &str, notifications: Value) -> Listening {
        let body = json!({
            "jsonrpc": "2.0", "id": "listen-e2e", "method": "subscriptions/listen",
            "params": {"notifications": notifications, "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": {"name": "listen-e2e", "version": "0"},
                "io.modelcontextprotocol/clientCapabilities":
                    {"extensions": {"io.modelcontextprotocol/tasks": {}}},
            }},
        });
        let response = reqwest::Client::new()
            .post(url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "subscriptions/listen")
            .body(body.to_string())
            .send()
            .await
            .expect("listen");
        assert_eq!(response.status(), 200);
        assert_eq!(
            response
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok()),
            Some("text/event-stream")
        );
        Listening {
            response,
            buffer: String::new(),
        }
    }

    /// The next message (`None` at the end of the stream); within a minute.
    pub(crate) async fn next(&mut self) -> Option<Value> {
        let reading = async {
            loop {
                if let Some(at) = self.buffer.find("\n\n") {
                    let event: String = self.buffer.drain(..at + 2).collect();
                    let data: String = event
                        .lines()
                        .filter_map(|l| l.strip_prefix("data:"))
                        .map(str::trim)
                        .collect();
                    if !data.is_empty() {
                        return Some(serde_json::from_str(&data).expect("a JSON event"));
                    }
                    continue;
                }
                let chunk = self.response.chunk().await.expect("the stream")?;
                self.buffer.push_str(&String::from_utf8_lossy(&chunk));
            }
        };
        tokio::time::timeout(Duration::from_secs(60), reading)
            .await
            .expect("a message within a minute")
    }
}

fn start(dir: &Path) -> Server {
    let manifest = dir.join("tools.yaml");
    std::fs::write(&manifest, MANIFEST).expect("manifest");
    Server::start_with(
        &dir.join("state"),
        Some(&manifest),
        &[("FLOWGATE_WATCH", "true")],
        None,
    )
}

async fn started(url: &str) -> String {
    let created = rpc(
        url,
        "tools/call",
        json!({"name": "stages", "arguments": {}}),
        &[],
    )
    .await;
    created["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("a task: {created}"))
        .to_owned()
}

/// Every status message of the task arrives, in order, and the last push is the completed
/// task with its result; the stream then ends with the listen's result. The client makes no
/// request but the listen.
#[tokio::test]
async fn a_listener_sees_every_stage_of_a_local_task_to_its_end() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = start(dir.path());
    let task = started(&server.url).await;
    let forged = flowgate_core::testing::forged(&task);
    let mut listening = Listening::open(&server.url, json!({"taskIds": [task, forged]})).await;
    let ack = listening.next().await.expect("the acknowledgement");
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    assert_eq!(ack["params"]["notifications"], json!({"taskIds": [task]}));
    let mut messages = Vec::new();
    let mut pushed = Vec::new();
    while let Some(message) = listening.next().await {
        if message["method"] == "notifications/tasks" {
            assert_eq!(message["params"]["taskId"], task.as_str(), "{message}");
            pushed.push(message["params"].clone());
        }
        messages.push(message);
    }
    let stages: Vec<&str> = pushed
        .iter()
        .filter(|t| t["status"] == "working")
        .filter_map(|t| t["statusMessage"].as_str())
        .filter(|m| m.starts_with("stage "))
        .collect();
    assert_eq!(stages, ["stage 1", "stage 2", "stage 3"], "{pushed:?}");
    let last = pushed.last().expect("pushes");
    assert_eq!(last["status"], "completed", "{last}");
    let text = last["result"]["content"][0]["text"].as_str().unwrap_or("");
    assert!(text.contains("\"done\""), "{last}");
    let end = messages.last().expect("messages");
    assert_eq!(end["id"], "listen-e2e");
    assert_eq!(end["result"]["resultType"], "complete", "{end}");
    // What `tasks/get` answers now is what the last push said.
    let got = rpc(&server.url, "tasks/get", json!({"taskId": task}), &[]).await;
    assert_eq!(got["result"]["status"], last["status"]);
    assert_eq!(got["result"]["result"], last["result"]);
}

/// A listener of the tool list hears of a reload of the manifest.
#[tokio::test]
async fn a_reload_reaches_a_listener_of_the_tool_list() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = start(dir.path());
    let mut listening = Listening::open(&server.url, json!({"toolsListChanged": true})).await;
    let ack = listening.next().await.expect("the acknowledgement");
    assert_eq!(
        ack["params"]["notifications"],
        json!({"toolsListChanged": true})
    );
    let manifest = dir.path().join("tools.yaml");
    let temporary = dir.path().join("tools.tmp");
    std::fs::write(&temporary, MANIFEST.replace("stages", "phases")).expect("write");
    std::fs::rename(&temporary, &manifest).expect("replace");
    let pushed = listening.next().await.expect("a push");
    assert_eq!(
        pushed["method"], "notifications/tools/list_changed",
        "{pushed}"
    );
    let listed = rpc(&server.url, "tools/list", json!({}), &[]).await;
    assert_eq!(listed["result"]["tools"][0]["name"], "phases", "{listed}");
}
