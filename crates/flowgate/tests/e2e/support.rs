//! Starting `flowgate serve` as a real process, connecting clients to it, and waiting for what
//! a test waits for:
//!
//! - [`eventually`] (and [`wait_until`] outside async code): a probe retried until it succeeds
//!   or the time is up, the last failure then being the panic message;
//! - [`poll_task`]: `tasks/get` until the task shows what the test waits for;
//! - [`Post`]: the one raw HTTP client, for requests a well-behaved client would never send
//!   and answers a test must see whole (status, headers, body).

use std::fmt::Display;
use std::future::Future;
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

/// How often [`eventually`] and [`wait_until`] try again.
const RETRY_EVERY: Duration = Duration::from_millis(50);

/// Retries `probe` every 50 ms until it succeeds, for at most `timeout`, and returns what it
/// gave. Past `timeout` the test fails with the probe's last error, which should say what was
/// seen instead.
pub(crate) async fn eventually<T, E, F, Fut>(timeout: Duration, mut probe: F) -> T
where
    E: Display,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        match probe().await {
            Ok(done) => return done,
            Err(e) if Instant::now() >= deadline => panic!("not within {timeout:?}: {e}"),
            Err(_) => tokio::time::sleep(RETRY_EVERY).await,
        }
    }
}

/// [`eventually`] for code that is not async (a server starting, a process exiting).
pub(crate) fn wait_until<T, E: Display>(
    timeout: Duration,
    probe: impl FnMut() -> Result<T, E>,
) -> T {
    retry_until(timeout, probe).unwrap_or_else(|e| panic!("not within {timeout:?}: {e}"))
}

/// [`wait_until`] that gives the last failure back instead of failing the test.
fn retry_until<T, E>(timeout: Duration, mut probe: impl FnMut() -> Result<T, E>) -> Result<T, E> {
    let deadline = Instant::now() + timeout;
    loop {
        match probe() {
            Ok(done) => return Ok(done),
            Err(e) if Instant::now() >= deadline => return Err(e),
            Err(_) => std::thread::sleep(RETRY_EVERY),
        }
    }
}

/// Waits up to 20 s for something to listen on `port`.
pub(crate) fn wait_for_port(port: u16) {
    wait_until(Duration::from_secs(20), || {
        std::net::TcpStream::connect(("127.0.0.1", port))
            .map_err(|e| format!("nothing listens on port {port}: {e}"))
    });
}

/// Waits up to `timeout` for `child` to exit: its status, or `None` while it still runs.
pub(crate) fn exited(child: &mut Child, timeout: Duration) -> Option<std::process::ExitStatus> {
    retry_until(timeout, || match child.try_wait() {
        Ok(Some(status)) => Ok(status),
        Ok(None) => Err(()),
        Err(e) => panic!("cannot wait for process {}: {e}", child.id()),
    })
    .ok()
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

/// Polls `tasks/get` until `predicate` holds for the task (its JSON), for at most 30 s, as
/// often as the task's `pollIntervalMs` asks (at most 250 ms apart), and returns it.
pub(crate) async fn poll_task(
    client: &Client,
    task_id: &str,
    mut predicate: impl FnMut(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let task = serde_json::to_value(get(client, task_id).await).expect("json");
        if predicate(&task) {
            return task;
        }
        assert!(
            Instant::now() < deadline,
            "the task never got there: {task}"
        );
        let pause = task["pollIntervalMs"]
            .as_u64()
            .unwrap_or(200)
            .clamp(50, 250);
        tokio::time::sleep(Duration::from_millis(pause)).await;
    }
}

/// Polls until the task reaches one of `until`, recording every status seen.
pub(crate) async fn poll_until(
    client: &Client,
    task_id: &str,
    until: &[TaskStatus],
    seen: &mut Vec<TaskStatus>,
) -> Value {
    poll_task(client, task_id, |task| {
        let Ok(status) = serde_json::from_value::<TaskStatus>(task["status"].clone()) else {
            return false;
        };
        if seen.last() != Some(&status) {
            seen.push(status);
        }
        until.contains(&status)
    })
    .await
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

/// How many answers the local engine has recorded under `state_dir` (it records an answer
/// before `tasks/update` returns, so after a refused update this says whether anything was
/// delivered).
pub(crate) fn recorded_answers(state_dir: &Path) -> usize {
    runs(state_dir)
        .iter()
        .flat_map(|run| {
            std::fs::read_dir(run.join("questions"))
                .into_iter()
                .flatten()
        })
        .filter_map(Result::ok)
        .filter(|question| question.path().join("answer.json").exists())
        .count()
}

/// Stops the local engine's runs under `state_dir` that are still going (a run outlives its
/// server by design; a test that leaves one waiting stops it, so nothing outlives the suite).
pub(crate) fn stop_runs(state_dir: &Path) {
    for run in runs(state_dir) {
        if run.join("exit").exists() {
            continue;
        }
        if let Ok(pid) = std::fs::read_to_string(run.join("pid"))
            && let Some(pgid) = pid.split_whitespace().next()
        {
            let _ = Command::new("kill")
                .args(["-TERM", "--", &format!("-{pgid}")])
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// Whether any process of the group is alive.
pub(crate) fn group_alive(pgid: &str) -> bool {
    Command::new("kill")
        .args(["-0", "--", &format!("-{}", pgid.trim())])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The 2026-07-28 `_meta` of a request; `tasks` says whether it declares the tasks extension.
pub(crate) fn meta(client: &str, tasks: bool) -> Value {
    let capabilities = if tasks {
        json!({"extensions": {"io.modelcontextprotocol/tasks": {}}})
    } else {
        json!({})
    };
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": client, "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    })
}

/// One raw HTTP `POST` to `/mcp`: the one raw client of the tests. It sends exactly the
/// headers it is given (by default those every client sends: the JSON content type, an
/// `Accept` of JSON and SSE, and for [`Post::rpc`] the 2026-07-28 version and `Mcp-Method`).
#[derive(Debug, Clone)]
pub(crate) struct Post {
    url: String,
    headers: Vec<(String, String)>,
    body: String,
}

/// What a [`Post`] was answered.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) headers: reqwest::header::HeaderMap,
    /// The body as JSON, or as a JSON string when it is not JSON.
    pub(crate) body: Value,
}

impl Answer {
    /// A header's value, if it is there and text.
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

impl Post {
    /// `body` as it is, with the content type and `Accept` every client sends.
    pub(crate) fn body(url: &str, body: impl Into<String>) -> Post {
        Post {
            url: url.to_owned(),
            headers: vec![
                ("content-type".into(), "application/json".into()),
                (
                    "accept".into(),
                    "application/json, text/event-stream".into(),
                ),
            ],
            body: body.into(),
        }
    }

    /// A JSON-RPC request (id 1) on the 2026-07-28 wire, from a client that declares the tasks
    /// extension in `_meta`, with `MCP-Protocol-Version` and `Mcp-Method` (no `Mcp-Name`: see
    /// [`Post::name`]).
    pub(crate) fn rpc(url: &str, method: &str, params: Value) -> Post {
        Post::rpc_as(url, method, params, true)
    }

    /// [`Post::rpc`] from a client that declares the tasks extension or not.
    pub(crate) fn rpc_as(url: &str, method: &str, mut params: Value, tasks: bool) -> Post {
        params["_meta"] = meta("raw", tasks);
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        Post::body(url, body.to_string())
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", method)
    }

    /// A JSON-RPC message of the 2025-11-25 revision, with its version header.
    pub(crate) fn v2025(url: &str, message: &Value) -> Post {
        Post::body(url, message.to_string()).header("mcp-protocol-version", "2025-11-25")
    }

    /// With the header `name` set to `value` (replacing any before).
    pub(crate) fn header(mut self, name: &str, value: impl Into<String>) -> Post {
        let name = name.to_ascii_lowercase();
        self.headers.retain(|(n, _)| *n != name);
        self.headers.push((name, value.into()));
        self
    }

    /// With `Mcp-Name`, when there is one.
    pub(crate) fn name(self, name: Option<&str>) -> Post {
        match name {
            Some(name) => self.header("mcp-name", name),
            None => self,
        }
    }

    /// With `Authorization: Bearer <token>`, when there is one.
    pub(crate) fn bearer(self, token: Option<&str>) -> Post {
        match token {
            Some(token) => self.header("authorization", format!("Bearer {token}")),
            None => self,
        }
    }

    /// The request, to send it some other way (in flight while the test does something else,
    /// or read as a stream).
    pub(crate) fn request(&self) -> reqwest::RequestBuilder {
        let mut request = reqwest::Client::new()
            .post(&self.url)
            .body(self.body.clone());
        for (name, value) in &self.headers {
            request = request.header(name, value);
        }
        request
    }

    /// Sends it and reads the whole answer.
    pub(crate) async fn send(&self) -> Answer {
        let response = self.request().send().await.expect("http");
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let text = response.text().await.expect("body");
        Answer {
            status,
            headers,
            body: serde_json::from_str(&text).unwrap_or(Value::String(text)),
        }
    }
}

/// A raw JSON-RPC request on the 2026-07-28 wire with `Mcp-Name` `name`: (status, body).
pub(crate) async fn raw(
    url: &str,
    method: &str,
    name: Option<&str>,
    params: Value,
) -> (u16, Value) {
    let answer = Post::rpc(url, method, params).name(name).send().await;
    (answer.status, answer.body)
}

/// A raw body sent as a `method` request on the 2026-07-28 wire: (status, body).
pub(crate) async fn raw_body(
    url: &str,
    method: &str,
    name: Option<&str>,
    body: &str,
) -> (u16, Value) {
    let answer = Post::body(url, body)
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method)
        .name(name)
        .send()
        .await;
    (answer.status, answer.body)
}
