//! Starting `flowgate serve` as a real process, and connecting clients to it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rmcp::RoleClient;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, ClientCapabilities, ClientConfig,
    GetTaskParams, GetTaskResult, Implementation, ProtocolVersion, TaskStatus, UpdateTaskParams,
};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use serde_json::{Value, json};

/// A fixed handle key, so two server processes can share tasks.
pub(crate) const KEY: &str = "k1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8";

pub(crate) fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_flowgate"))
}

/// A `flowgate serve` process on a free loopback port; killed when dropped.
pub(crate) struct Server {
    pub(crate) child: Child,
    pub(crate) url: String,
}

impl Server {
    pub(crate) fn start(state_dir: &Path, manifest: Option<&Path>) -> Server {
        Server::start_with(state_dir, manifest, &[], None)
    }

    /// Starts `flowgate serve` with extra environment variables and, optionally, its stderr
    /// (the logs) in a file.
    pub(crate) fn start_with(
        state_dir: &Path,
        manifest: Option<&Path>,
        env: &[(&str, &str)],
        log: Option<&Path>,
    ) -> Server {
        let port = free_port();
        let mut cmd = Command::new(bin());
        cmd.args(["serve", "--listen", &format!("127.0.0.1:{port}")])
            .env("FLOWGATE_STATE_DIR", state_dir)
            .env("FLOWGATE_HANDLE_KEYS", KEY)
            .env("FLOWGATE_SYNC_WAIT_SECS", "10")
            .env("FLOWGATE_LOG", "warn")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(match log {
                Some(path) => Stdio::from(std::fs::File::create(path).expect("log file")),
                None => Stdio::inherit(),
            });
        if let Some(m) = manifest {
            cmd.arg("--manifest").arg(m);
        }
        let child = cmd.spawn().expect("spawn flowgate serve");
        let server = Server {
            child,
            url: format!("http://127.0.0.1:{port}/mcp"),
        };
        wait_for_port(port);
        server
    }

    /// Stops the process the hard way, as a crash would.
    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A free loopback port.
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port()
}

/// Waits up to 20 s for something to listen on `port`.
pub(crate) fn wait_for_port(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "nothing listened on port {port} within 20 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub(crate) type Client = RunningService<RoleClient, ClientConfig>;

fn client_config(tasks: bool) -> ClientConfig {
    let mut caps = ClientCapabilities::default();
    if tasks {
        caps = ClientCapabilities::builder().enable_tasks().build();
    }
    caps.elicitation = serde_json::from_value(json!({"form": {}})).ok();
    ClientConfig::new(caps, Implementation::new("flowgate-e2e", "0.0.0"))
}

fn modern() -> ClientLifecycleMode {
    ClientLifecycleMode::Discover {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
    }
}

/// An rmcp client over HTTP on the 2026-07-28 stateless wire.
pub(crate) async fn http_client(url: &str, tasks: bool) -> Client {
    let transport = StreamableHttpClientTransport::from_uri(url.to_owned());
    client_config(tasks)
        .serve_with_lifecycle(transport, modern())
        .await
        .expect("connect over HTTP")
}

/// An rmcp client on the stdio of a `flowgate serve --stdio` child.
pub(crate) async fn stdio_client(state_dir: &Path) -> Client {
    let mut cmd = tokio::process::Command::new(bin());
    cmd.args(["serve", "--stdio"])
        .env("FLOWGATE_STATE_DIR", state_dir)
        .env("FLOWGATE_HANDLE_KEYS", KEY)
        .env("FLOWGATE_LOG", "warn");
    let transport = rmcp::transport::TokioChildProcess::new(cmd).expect("spawn stdio server");
    client_config(true)
        .serve_with_lifecycle(transport, modern())
        .await
        .expect("connect over stdio")
}

pub(crate) fn call(name: &str, arguments: Value) -> CallToolRequestParams {
    let mut p = CallToolRequestParams::new(name.to_owned());
    p.arguments = arguments.as_object().cloned();
    p
}

/// Calls a tool and expects a task; returns its id.
pub(crate) async fn start_task(client: &Client, name: &str, arguments: Value) -> String {
    match client
        .call_tool_once(call(name, arguments))
        .await
        .expect("tools/call")
    {
        CallToolResponse::Task(t) => {
            assert_eq!(t.task.status, TaskStatus::Working);
            assert!(t.task.poll_interval_ms.is_some());
            t.task.task_id
        }
        other => panic!("expected a task, got {other:?}"),
    }
}

pub(crate) async fn get(client: &Client, task_id: &str) -> GetTaskResult {
    client
        .get_task(GetTaskParams::new(task_id.to_owned()))
        .await
        .expect("tasks/get")
}

/// Polls until the task reaches one of `until`, recording every status seen.
pub(crate) async fn poll_until(
    client: &Client,
    task_id: &str,
    until: &[TaskStatus],
    seen: &mut Vec<TaskStatus>,
) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = get(client, task_id).await;
        let status = r.task.status();
        if seen.last() != Some(&status) {
            seen.push(status);
        }
        if until.contains(&status) {
            return serde_json::to_value(&r).expect("json");
        }
        assert!(Instant::now() < deadline, "task stuck; seen {seen:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Sends `tasks/cancel` and polls until the task settles (cancelled, or finished first).
pub(crate) async fn cancel_and_settle(client: &Client, task_id: &str) -> Value {
    client
        .cancel_task(CancelTaskParams::new(task_id.to_owned()))
        .await
        .expect("tasks/cancel");
    let settled = [
        TaskStatus::Cancelled,
        TaskStatus::Completed,
        TaskStatus::Failed,
    ];
    poll_until(client, task_id, &settled, &mut vec![]).await
}

/// Sends one `tasks/update` answering `key` with `response` (an elicitation result).
pub(crate) async fn answer(client: &Client, task_id: &str, key: &str, response: Value) {
    let mut params = UpdateTaskParams::new(task_id.to_owned(), Default::default());
    params.input_responses.insert(key.to_owned(), response);
    client.update_task(params).await.expect("tasks/update");
}

/// The key of the first outstanding input request of a `tasks/get` result.
pub(crate) fn first_input_key(task: &Value) -> String {
    task["inputRequests"]
        .as_object()
        .and_then(|m| m.keys().next().cloned())
        .unwrap_or_else(|| panic!("no inputRequests in {task}"))
}

/// The text of a completed task's result, parsed as JSON.
pub(crate) fn result_json(task: &Value) -> Value {
    let text = task["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text in {task}"));
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// Every run folder of the local engine under `state_dir`.
pub(crate) fn runs(state_dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(state_dir.join("runs"))
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    v.sort();
    v
}

/// Whether any process of the group is alive.
pub(crate) fn group_alive(pgid: &str) -> bool {
    Command::new("kill")
        .args(["-0", "--", &format!("-{}", pgid.trim())])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A raw JSON-RPC POST on the 2026-07-28 wire, with the headers a client must send.
pub(crate) async fn raw(
    url: &str,
    method: &str,
    name: Option<&str>,
    params: Value,
) -> (u16, Value) {
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
    });
    let mut params = params;
    params["_meta"] = meta;
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    raw_body(url, method, name, &body.to_string()).await
}

pub(crate) async fn raw_body(
    url: &str,
    method: &str,
    name: Option<&str>,
    body: &str,
) -> (u16, Value) {
    let mut req = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method)
        .body(body.to_owned());
    if let Some(n) = name {
        req = req.header("mcp-name", n);
    }
    let resp = req.send().await.expect("http");
    let status = resp.status().as_u16();
    let text = resp.text().await.expect("body");
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}
