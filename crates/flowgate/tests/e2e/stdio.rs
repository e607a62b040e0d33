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

/// A raw stdio session with `flowgate serve --stdio`: JSON-RPC lines in, lines out.
struct Lines {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    stdout: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
}

impl Lines {
    fn start(state_dir: &std::path::Path, manifest: &std::path::Path) -> Lines {
        let mut child = tokio::process::Command::new(bin())
            .args(["serve", "--stdio", "--manifest"])
            .arg(manifest)
            .env("FLOWGATE_STATE_DIR", state_dir)
            .env("FLOWGATE_HANDLE_KEYS", KEY)
            .env("FLOWGATE_LOG", "warn")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn flowgate serve --stdio");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = child.stdout.take().expect("stdout");
        use tokio::io::AsyncBufReadExt as _;
        Lines {
            child,
            stdin,
            stdout: tokio::io::BufReader::new(stdout).lines(),
        }
    }

    async fn send(&mut self, message: serde_json::Value) {
        use tokio::io::AsyncWriteExt as _;
        self.stdin
            .write_all(format!("{message}\n").as_bytes())
            .await
            .expect("write");
    }

    /// The next message the server writes, within 30 s.
    async fn next(&mut self) -> serde_json::Value {
        let line =
            tokio::time::timeout(std::time::Duration::from_secs(30), self.stdout.next_line())
                .await
                .expect("the server went quiet")
                .expect("read")
                .expect("the server closed stdout");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
    }

    /// Sends a request and returns its answer.
    async fn request(
        &mut self,
        id: u64,
        method: &str,
        params: serde_json::Value,
    ) -> serde_json::Value {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        let answer = self.next().await;
        assert_eq!(answer["id"], id, "{answer}");
        answer
    }
}

/// The 2025-11-25 tasks dialect on stdio, as on HTTP: the initialize answer declares the
/// revision's tasks capability, tools show their taskSupport, a call with `task` creates one,
/// `tasks/result` asks the workflow's question as an `elicitation/create` request on stdout and
/// delivers the answer written back, then answers with the result; tasks/get, tasks/list and
/// tasks/cancel answer in the revision's shapes.
#[tokio::test]
async fn the_2025_11_25_tasks_dialect_works_over_stdio() {
    let state = tempfile::tempdir().expect("tempdir");
    let manifest =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/clients/tools.yaml");
    let mut s = Lines::start(state.path(), &manifest);

    let init = s
        .request(
            1,
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}},
                "clientInfo": {"name": "raw-2025-stdio", "version": "1"}}),
        )
        .await;
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25", "{init}");
    assert!(
        init["result"]["capabilities"]["tasks"]["requests"]["tools"]["call"].is_object(),
        "{init}"
    );
    s.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;

    let tools = s.request(2, "tools/list", json!({})).await;
    let support: Vec<&str> = tools["result"]["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["execution"]["taskSupport"].as_str())
        .collect();
    assert_eq!(support, ["required", "required"], "{tools}");

    let created = s
        .request(
            3,
            "tools/call",
            json!({"name": "approve_deploy", "arguments": {"service": "ledger"}, "task": {"ttl": 60000}}),
        )
        .await;
    assert_eq!(created["result"]["task"]["status"], "working", "{created}");
    let task = created["result"]["task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("no task: {created}"))
        .to_owned();

    s.send(
        json!({"jsonrpc": "2.0", "id": 4, "method": "tasks/result", "params": {"taskId": task}}),
    )
    .await;
    let ask = s.next().await;
    assert_eq!(ask["method"], "elicitation/create", "{ask}");
    assert_eq!(ask["params"]["message"], "Deploy ledger to production?");
    assert_eq!(
        ask["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        task.as_str()
    );
    s.send(json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"action": "accept", "content": {"confirm": true}}}))
        .await;
    let done = s.next().await;
    assert_eq!(done["id"], 4, "{done}");
    assert_eq!(
        done["result"]["content"][0]["text"], "Deployed ledger",
        "{done}"
    );
    assert_eq!(
        done["result"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        task.as_str()
    );

    let got = s.request(5, "tasks/get", json!({"taskId": task})).await;
    assert_eq!(got["result"]["status"], "completed", "{got}");
    assert_eq!(got["result"]["pollInterval"], 200, "{got}");
    let listed = s.request(6, "tasks/list", json!({})).await;
    assert_eq!(
        listed["result"]["tasks"][0]["status"], "completed",
        "{listed}"
    );
    let again = s.request(7, "tasks/cancel", json!({"taskId": task})).await;
    assert_eq!(again["error"]["code"], -32602, "{again}");

    let long = s
        .request(
            8,
            "tools/call",
            json!({"name": "long_report", "arguments": {"days": 2, "seconds": 60}, "task": {}}),
        )
        .await;
    let long = long["result"]["task"]["taskId"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let cancelled = s.request(9, "tasks/cancel", json!({"taskId": long})).await;
    assert_eq!(cancelled["result"]["status"], "cancelled", "{cancelled}");

    // A forged task id is the same -32602 as on HTTP.
    let forged = s
        .request(10, "tasks/get", json!({"taskId": "fg1.nope.x"}))
        .await;
    assert_eq!(forged["error"]["code"], -32602, "{forged}");
    drop(s.stdin);
    let _ = s.child.wait().await;
}

/// A `notifications/cancelled` ends the 2025-11-25 hold it names even when the request's id is
/// no token (the log's request id replaces such an id; the session must still find the hold by
/// the id the client chose): the cancelled `tasks/result` is never answered.
#[tokio::test]
async fn a_cancelled_hold_whose_id_is_no_token_is_never_answered() {
    let state = tempfile::tempdir().expect("tempdir");
    let manifest =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/clients/tools.yaml");
    let mut s = Lines::start(state.path(), &manifest);
    s.request(
        1,
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "raw-2025-stdio", "version": "1"}}),
    )
    .await;
    s.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
    let created = s
        .request(
            2,
            "tools/call",
            json!({"name": "long_report", "arguments": {"days": 1, "seconds": 2}, "task": {}}),
        )
        .await;
    let task = created["result"]["task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("no task: {created}"))
        .to_owned();
    let hold = "hold of\nthe report";
    s.send(
        json!({"jsonrpc": "2.0", "id": hold, "method": "tasks/result", "params": {"taskId": task}}),
    )
    .await;
    s.send(
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": hold, "reason": "the user moved on"}}),
    )
    .await;
    // Past the task's end: a hold still running would have answered by now.
    let mut id = 3;
    loop {
        let got = s.request(id, "tasks/get", json!({"taskId": task})).await;
        if got["result"]["status"] == "completed" {
            break;
        }
        assert!(id < 200, "the task never ended: {got}");
        id += 1;
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    s.send(
        json!({"jsonrpc": "2.0", "id": "last", "method": "tasks/get", "params": {"taskId": task}}),
    )
    .await;
    let next = s.next().await;
    assert_eq!(
        next["id"], "last",
        "the cancelled hold was answered: {next}"
    );
    drop(s.stdin);
    let _ = s.child.wait().await;
}
