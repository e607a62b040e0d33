//! The binary in Lambda mode, driven by a local Lambda Runtime API that hands it Function URL
//! events, exactly as Lambda does: `GET .../invocation/next`, then `POST .../response`.

use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::routing::{get, post};
use serde_json::{Value, json};
use tokio::sync::{Mutex as AsyncMutex, mpsc, oneshot};

use crate::support::{KEY, bin};

const HOST: &str = "abc123.lambda-url.us-east-1.on.aws";

/// The binary under test: the test build, or another build (a release binary about to ship)
/// when `FLOWGATE_RELEASE_BIN` names it.
fn function_bin() -> std::path::PathBuf {
    std::env::var_os("FLOWGATE_RELEASE_BIN")
        .map(Into::into)
        .unwrap_or_else(bin)
}

/// Invocations waiting to be handed out: (request id, event).
type Queue = mpsc::Receiver<(String, Value)>;

#[derive(Clone, Default)]
struct Runtime {
    events: Arc<AsyncMutex<Option<Queue>>>,
    waiting: Arc<Mutex<HashMap<String, oneshot::Sender<Value>>>>,
}

async fn next(State(rt): State<Runtime>) -> (HeaderMap, String) {
    let mut guard = rt.events.lock().await;
    let Some(rx) = guard.as_mut() else {
        return (HeaderMap::new(), String::new());
    };
    let Some((id, event)) = rx.recv().await else {
        return (HeaderMap::new(), String::new());
    };
    let mut headers = HeaderMap::new();
    let deadline = chrono::Utc::now().timestamp_millis() + 30_000;
    let insert = |h: &mut HeaderMap, k: &'static str, v: String| {
        h.insert(k, HeaderValue::from_str(&v).expect("header"));
    };
    insert(&mut headers, "lambda-runtime-aws-request-id", id);
    insert(
        &mut headers,
        "lambda-runtime-deadline-ms",
        deadline.to_string(),
    );
    insert(
        &mut headers,
        "lambda-runtime-invoked-function-arn",
        "arn:aws:lambda:us-east-1:123456789012:function:flowgate".into(),
    );
    insert(
        &mut headers,
        "lambda-runtime-trace-id",
        "Root=1-00000000-000000000000000000000000;Sampled=0".into(),
    );
    (headers, event.to_string())
}

async fn respond(State(rt): State<Runtime>, Path(id): Path<String>, body: String) -> StatusCode {
    let value: Value = serde_json::from_str(&body).unwrap_or(Value::String(body));
    if let Some(tx) = rt
        .waiting
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&id)
    {
        let _ = tx.send(value);
    }
    StatusCode::ACCEPTED
}

async fn error(State(rt): State<Runtime>, Path(id): Path<String>, body: String) -> StatusCode {
    respond(
        State(rt),
        Path(id),
        json!({"runtimeError": body}).to_string(),
    )
    .await
}

/// A fake Lambda service: a Runtime API plus a `flowgate serve` function process polling it.
struct Function {
    tx: mpsc::Sender<(String, Value)>,
    runtime: Runtime,
    child: Child,
    invocations: u32,
}

impl Function {
    async fn start(state_dir: &std::path::Path) -> Function {
        let (tx, rx) = mpsc::channel(8);
        let runtime = Runtime {
            events: Arc::new(AsyncMutex::new(Some(rx))),
            ..Default::default()
        };
        let app = Router::new()
            .route("/2018-06-01/runtime/invocation/next", get(next))
            .route(
                "/2018-06-01/runtime/invocation/{id}/response",
                post(respond),
            )
            .route("/2018-06-01/runtime/invocation/{id}/error", post(error))
            .with_state(runtime.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        let child = Command::new(function_bin())
            .arg("serve")
            .env("AWS_LAMBDA_RUNTIME_API", addr.to_string())
            .env("AWS_LAMBDA_FUNCTION_NAME", "flowgate")
            .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
            .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256")
            .env("AWS_LAMBDA_LOG_GROUP_NAME", "/aws/lambda/flowgate")
            .env("AWS_LAMBDA_LOG_STREAM_NAME", "test")
            .env("FLOWGATE_STATE_DIR", state_dir)
            .env("FLOWGATE_HANDLE_KEYS", KEY)
            .env("FLOWGATE_ALLOWED_HOSTS", HOST)
            .env("FLOWGATE_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn the function");
        Function {
            tx,
            runtime,
            child,
            invocations: 0,
        }
    }

    /// Sends one Function URL request (payload format 2.0) and returns the function's response.
    async fn invoke(&mut self, method: &str, name: &str, params: Value) -> Value {
        self.invocations += 1;
        let id = format!("req-{}-{}", std::process::id(), self.invocations);
        let mut params = params;
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "lambda-test", "version": "0"},
            "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
        });
        let body =
            json!({"jsonrpc": "2.0", "id": self.invocations, "method": method, "params": params})
                .to_string();
        let mut headers = json!({
            "host": HOST,
            "content-type": "application/json",
            "accept": "application/json, text/event-stream",
            "mcp-protocol-version": "2026-07-28",
            "mcp-method": method,
            "x-amzn-trace-id": format!("Root=1-{id}"),
        });
        if !name.is_empty() {
            headers["mcp-name"] = json!(name);
        }
        let event = json!({
            "version": "2.0",
            "routeKey": "$default",
            "rawPath": "/mcp",
            "rawQueryString": "",
            "headers": headers,
            "requestContext": {
                "accountId": "anonymous",
                "apiId": "abc123",
                "domainName": HOST,
                "domainPrefix": "abc123",
                "http": {"method": "POST", "path": "/mcp", "protocol": "HTTP/1.1", "sourceIp": "127.0.0.1", "userAgent": "lambda-test"},
                "requestId": id,
                "routeKey": "$default",
                "stage": "$default",
                "time": "02/Dec/2026:10:00:00 +0000",
                "timeEpoch": 1_796_205_600_000u64
            },
            "body": body,
            "isBase64Encoded": false
        });
        let (done_tx, done_rx) = oneshot::channel();
        self.runtime
            .waiting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.clone(), done_tx);
        self.tx.send((id, event)).await.expect("queue the event");
        let response = tokio::time::timeout(Duration::from_secs(30), done_rx)
            .await
            .expect("the function answered within 30 s")
            .expect("response");
        assert_eq!(response["statusCode"], 200, "{response}");
        let body = response["body"].as_str().expect("a body");
        serde_json::from_str(body).expect("a JSON-RPC body")
    }
}

impl Drop for Function {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn a_task_created_in_one_function_process_is_finished_in_another() {
    let state = tempfile::tempdir().expect("tempdir");
    let mut first = Function::start(state.path()).await;
    let created = first
        .invoke(
            "tools/call",
            "long_job",
            json!({"name": "long_job", "arguments": {"steps": 1}}),
        )
        .await;
    let result = &created["result"];
    assert_eq!(result["resultType"], "task", "{created}");
    let task_id = result["taskId"].as_str().expect("taskId").to_owned();
    drop(first);

    let mut second = Function::start(state.path()).await;
    for _ in 0..60 {
        let got = second
            .invoke("tasks/get", &task_id, json!({"taskId": task_id}))
            .await;
        let status = got["result"]["status"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        if status == "completed" {
            assert_eq!(
                got["result"]["result"]["structuredContent"],
                json!({"steps": 1, "finished": true}),
                "{got}"
            );
            return;
        }
        assert_eq!(status, "working", "{got}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!("the task did not complete");
}

#[tokio::test]
async fn tools_list_answers_in_lambda_mode() {
    let state = tempfile::tempdir().expect("tempdir");
    let mut f = Function::start(state.path()).await;
    let ok = f.invoke("tools/list", "", json!({})).await;
    assert_eq!(
        ok["result"]["tools"].as_array().map(Vec::len),
        Some(3),
        "{ok}"
    );
}
