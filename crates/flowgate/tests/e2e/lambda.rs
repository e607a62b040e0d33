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
    /// A function as deploy/lambda/template.yaml configures it: `--auth-mode aws-iam`.
    async fn start(state_dir: &std::path::Path) -> Function {
        Function::start_with(state_dir, &[("FLOWGATE_AUTH_MODE", "aws-iam")]).await
    }

    async fn start_with(state_dir: &std::path::Path, env: &[(&str, &str)]) -> Function {
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
            .envs(env.iter().copied())
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

    /// Sends one Function URL request signed by [`CALLER`] and returns its JSON-RPC answer.
    async fn invoke(&mut self, method: &str, name: &str, params: Value) -> Value {
        let response = self
            .invoke_as(method, name, params, Some(iam_authorizer(CALLER)))
            .await;
        assert_eq!(response["statusCode"], 200, "{response}");
        let body = response["body"].as_str().expect("a body");
        serde_json::from_str(body).expect("a JSON-RPC body")
    }

    /// Sends one Function URL request (payload format 2.0) whose request context carries
    /// `authorizer` (as Lambda sets it for AWS_IAM URLs), and returns the function's response.
    async fn invoke_as(
        &mut self,
        method: &str,
        name: &str,
        params: Value,
        authorizer: Option<Value>,
    ) -> Value {
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
        let mut event = json!({
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
        if let Some(authorizer) = authorizer {
            event["requestContext"]["authorizer"] = authorizer;
        }
        let (done_tx, done_rx) = oneshot::channel();
        self.runtime
            .waiting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.clone(), done_tx);
        self.tx.send((id, event)).await.expect("queue the event");
        tokio::time::timeout(Duration::from_secs(30), done_rx)
            .await
            .expect("the function answered within 30 s")
            .expect("response")
    }
}

/// The IAM role every test call is signed by, unless a test says otherwise.
const CALLER: &str = "arn:aws:sts::123456789012:assumed-role/mcp-client/session-1";

/// The `authorizer` of a Function URL request with AuthType AWS_IAM, signed by `arn` (the
/// shape Lambda documents for payload format 2.0).
fn iam_authorizer(arn: &str) -> Value {
    json!({"iam": {
        "accessKey": "ASIAEXAMPLEEXAMPLE",
        "accountId": "123456789012",
        "callerId": "AROAEXAMPLEEXAMPLE:session-1",
        "cognitoIdentity": null,
        "principalOrgId": null,
        "userArn": arn,
        "userId": "AROAEXAMPLEEXAMPLE:session-1"
    }})
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

/// The body of a Function URL response, as JSON.
fn body_of(response: &Value) -> Value {
    let body = response["body"].as_str().unwrap_or_default();
    serde_json::from_str(body).unwrap_or(Value::String(body.to_owned()))
}

#[tokio::test]
async fn aws_iam_mode_seals_tasks_to_the_callers_arn_and_refuses_unsigned_requests() {
    let state = tempfile::tempdir().expect("tempdir");
    let mut f = Function::start(state.path()).await;

    // No IAM context (a Function URL left at AuthType NONE): refused before MCP.
    let bare = f.invoke_as("tools/list", "", json!({}), None).await;
    assert_eq!(bare["statusCode"], 401, "{bare}");
    assert!(
        body_of(&bare).to_string().contains("AWS_IAM"),
        "the refusal says what is missing: {bare}"
    );

    let created = f
        .invoke(
            "tools/call",
            "long_job",
            json!({"name": "long_job", "arguments": {"steps": 20}}),
        )
        .await;
    let task_id = created["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("a task: {created}"))
        .to_owned();

    // Another role's view of the task is that of a task that does not exist.
    let other = iam_authorizer("arn:aws:iam::123456789012:user/someone-else");
    for (method, params) in [
        ("tasks/get", json!({"taskId": task_id})),
        ("tasks/cancel", json!({"taskId": task_id})),
        (
            "tasks/update",
            json!({"taskId": task_id, "inputResponses": {}}),
        ),
    ] {
        let theirs = f
            .invoke_as(method, &task_id, params, Some(other.clone()))
            .await;
        assert_eq!(theirs["statusCode"], 200, "{theirs}");
        assert_eq!(
            body_of(&theirs)["error"]["code"],
            -32602,
            "{method}: {theirs}"
        );
    }
    // The caller's own view is untouched, and it can still end its task.
    let mine = f
        .invoke("tasks/get", &task_id, json!({"taskId": task_id}))
        .await;
    assert_eq!(mine["result"]["status"], "working", "{mine}");
    let cancelled = f
        .invoke("tasks/cancel", &task_id, json!({"taskId": task_id}))
        .await;
    assert!(cancelled.get("result").is_some(), "{cancelled}");
}

/// Without `--auth-mode aws-iam` the request context is not read at all: every caller is the
/// same anonymous principal, whatever ARN the context names.
#[tokio::test]
async fn the_iam_context_is_ignored_unless_configured() {
    let state = tempfile::tempdir().expect("tempdir");
    let mut f =
        Function::start_with(state.path(), &[("FLOWGATE_ALLOW_UNAUTHENTICATED", "true")]).await;
    let created = f
        .invoke(
            "tools/call",
            "long_job",
            json!({"name": "long_job", "arguments": {"steps": 20}}),
        )
        .await;
    let task_id = created["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("a task: {created}"))
        .to_owned();
    let other = iam_authorizer("arn:aws:iam::123456789012:user/someone-else");
    let theirs = f
        .invoke_as(
            "tasks/cancel",
            &task_id,
            json!({"taskId": task_id}),
            Some(other),
        )
        .await;
    assert!(body_of(&theirs).get("result").is_some(), "{theirs}");
}

#[tokio::test]
async fn api_gateway_jwt_and_lambda_authorizer_contexts_name_the_caller() {
    let state = tempfile::tempdir().expect("tempdir");
    let mut jwt = Function::start_with(state.path(), &[("FLOWGATE_AUTH_MODE", "apigw-jwt")]).await;
    let claims = |sub: &str| json!({"jwt": {"claims": {"iss": "https://issuer.example", "sub": sub, "scope": "a b"}, "scopes": null}});
    let created = jwt
        .invoke_as(
            "tools/call",
            "long_job",
            json!({"name": "long_job", "arguments": {"steps": 20}}),
            Some(claims("alice")),
        )
        .await;
    let task_id = body_of(&created)["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("a task: {created}"))
        .to_owned();
    let bob = jwt
        .invoke_as(
            "tasks/get",
            &task_id,
            json!({"taskId": task_id}),
            Some(claims("bob")),
        )
        .await;
    assert_eq!(body_of(&bob)["error"]["code"], -32602, "{bob}");
    let alice = jwt
        .invoke_as(
            "tasks/cancel",
            &task_id,
            json!({"taskId": task_id}),
            Some(claims("alice")),
        )
        .await;
    assert!(body_of(&alice).get("result").is_some(), "{alice}");
    // An IAM context is not a JWT authorizer's.
    let iam = jwt
        .invoke_as("tools/list", "", json!({}), Some(iam_authorizer(CALLER)))
        .await;
    assert_eq!(iam["statusCode"], 401, "{iam}");
    drop(jwt);

    let mut lambda =
        Function::start_with(state.path(), &[("FLOWGATE_AUTH_MODE", "apigw-authorizer")]).await;
    let ok = lambda
        .invoke_as(
            "tools/list",
            "",
            json!({}),
            Some(json!({"lambda": {"principalId": "tenant-7"}})),
        )
        .await;
    assert_eq!(ok["statusCode"], 200, "{ok}");
    let nameless = lambda
        .invoke_as(
            "tools/list",
            "",
            json!({}),
            Some(json!({"lambda": {"role": "admin"}})),
        )
        .await;
    assert_eq!(nameless["statusCode"], 401, "{nameless}");
}

#[tokio::test]
async fn each_invocations_spans_are_exported_before_it_answers() {
    // A batch that would wait ten minutes: only the flush at the end of the invocation can
    // have exported the spans by the time the answer arrives.
    let state = tempfile::tempdir().expect("tempdir");
    let service = crate::telemetry::unique("flowgate-lambda");
    let endpoint = crate::telemetry::otlp_http();
    let mut function = Function::start_with(
        state.path(),
        &[
            ("FLOWGATE_AUTH_MODE", "aws-iam"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_SERVICE_NAME", &service),
            ("OTEL_BSP_SCHEDULE_DELAY", "600000"),
        ],
    )
    .await;
    let created = function
        .invoke(
            "tools/call",
            "long_job",
            json!({"name": "long_job", "arguments": {"steps": 1}}),
        )
        .await;
    assert!(created["result"]["taskId"].is_string(), "{created}");
    let spans = crate::telemetry::spans(&service).await;
    let start = spans
        .iter()
        .find(|s| s["name"] == "local start")
        .unwrap_or_else(|| panic!("the invocation's spans were not exported: {spans:#?}"));
    let call = spans
        .iter()
        .find(|s| s["name"] == "tools/call long_job")
        .unwrap_or_else(|| panic!("no request span: {spans:#?}"));
    assert_eq!(start["parent_span_id"], call["span_id"]);
    // The caller's issuer is on the request's span; its identity (the ARN) is not.
    assert_eq!(call["attributes"]["flowgate.principal.issuer"], "aws:iam");
    assert!(
        !spans.iter().any(|s| s.to_string().contains(CALLER)),
        "{spans:#?}"
    );
}
