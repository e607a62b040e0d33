//! The binary in Lambda mode, run by the Lambda emulator (tests/fakes/lambda/emulator.py) as
//! Lambda runs a custom runtime: sandboxes polling the Runtime API, invocation deadlines after
//! which the sandbox is killed and started cold, a Function URL (payload format 2.0, SigV4 for
//! AWS_IAM) in front, and the Invoke API for API Gateway's events.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{KEY, bin, eventually};

/// The Function URL's host (the emulator's default).
const HOST: &str = "abc123xyz.lambda-url.us-east-1.on.aws";

/// The IAM role every test call is signed by, unless a test says otherwise.
const CALLER: &str = "arn:aws:sts::123456789012:assumed-role/mcp-client/session-1";
/// Another principal allowed to invoke the URL.
const OTHER: &str = "arn:aws:iam::123456789012:user/someone-else";

/// The binary under test: the test build, or another build (a release binary about to ship)
/// when `FLOWGATE_RELEASE_BIN` names it.
fn function_bin() -> PathBuf {
    std::env::var_os("FLOWGATE_RELEASE_BIN")
        .map(Into::into)
        .unwrap_or_else(bin)
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The Python that runs the emulator: `FLOWGATE_TEST_LAMBDA_PYTHON` (scripts/test points it at
/// a venv with botocore, which the signing proxy uses), else `python3`.
fn python() -> PathBuf {
    std::env::var_os("FLOWGATE_TEST_LAMBDA_PYTHON")
        .map(Into::into)
        .unwrap_or_else(|| "python3".into())
}

/// How the function and its URL are configured.
pub(crate) struct Config<'a> {
    pub(crate) timeout_secs: f64,
    pub(crate) invoke_mode: &'a str,
    pub(crate) auth_type: &'a str,
    pub(crate) env: Vec<(String, String)>,
    pub(crate) max_sandboxes: u32,
    /// Sandboxes frozen between invocations, as Lambda freezes them (the emulator's
    /// `--freeze`; off by default because the local engine's runs would freeze with them).
    pub(crate) freeze: bool,
}

impl Default for Config<'_> {
    /// As deploy/lambda/template.yaml configures it: `FLOWGATE_AUTH_MODE=aws-iam` behind an
    /// AWS_IAM URL.
    fn default() -> Self {
        Config {
            timeout_secs: 30.0,
            invoke_mode: "BUFFERED",
            auth_type: "AWS_IAM",
            env: vec![("FLOWGATE_AUTH_MODE".into(), "aws-iam".into())],
            max_sandboxes: 4,
            freeze: false,
        }
    }
}

/// A running emulator with a function whose runtime is [`function_bin`].
pub(crate) struct Lambda {
    child: Child,
    stdin: Option<ChildStdin>,
    pub(crate) function_url: String,
    pub(crate) invoke_api: String,
    pub(crate) signing_proxy: String,
    http: reqwest::Client,
}

/// An HTTP answer: status, headers, body.
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) headers: reqwest::header::HeaderMap,
    pub(crate) body: String,
}

impl Answer {
    /// The body as JSON: a JSON body, or the last `data:` event of an SSE body.
    pub(crate) fn json(&self) -> Value {
        if let Ok(v) = serde_json::from_str(&self.body) {
            return v;
        }
        self.body
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str(d.trim()).ok())
            .next_back()
            .unwrap_or(Value::String(self.body.clone()))
    }
}

impl Lambda {
    /// The test build, configured as the template configures it, with the local engine's state
    /// in `state_dir`.
    pub(crate) fn start(state_dir: &Path) -> Lambda {
        Lambda::start_with(state_dir, Config::default())
    }

    pub(crate) fn start_with(state_dir: &Path, config: Config<'_>) -> Lambda {
        Lambda::start_function(&function_bin(), state_dir, config)
    }

    /// Starts the emulator with `bootstrap` as the runtime and `task_root` as /var/task.
    pub(crate) fn start_function(bootstrap: &Path, task_root: &Path, config: Config<'_>) -> Lambda {
        let mut cmd = Command::new(python());
        cmd.arg(repo().join("tests/fakes/lambda/emulator.py"))
            .arg("--task-root")
            .arg(task_root)
            .arg("--bootstrap")
            .arg(bootstrap)
            .args(["--timeout", &config.timeout_secs.to_string()])
            .args(["--invoke-mode", config.invoke_mode])
            .args(["--auth-type", config.auth_type])
            .args(["--max-sandboxes", &config.max_sandboxes.to_string()])
            .args(["--host", HOST])
            .args(["--iam-user", &format!("AKIDCALLER1:caller-secret:{CALLER}")])
            .args(["--iam-user", &format!("AKIDOTHER01:other-secret:{OTHER}")])
            .arg("--exit-with-stdin");
        if config.freeze {
            cmd.arg("--freeze");
        }
        let mut env: Vec<(String, String)> = vec![
            ("FLOWGATE_STATE_DIR".into(), task_root.display().to_string()),
            ("FLOWGATE_HANDLE_KEYS".into(), KEY.into()),
            ("FLOWGATE_ALLOWED_HOSTS".into(), HOST.into()),
            ("FLOWGATE_LOG".into(), "warn".into()),
        ];
        env.extend(config.env);
        for (k, v) in &env {
            cmd.arg("--env").arg(format!("{k}={v}"));
        }
        for name in [
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_SESSION_TOKEN",
        ] {
            cmd.args(["--pass-env", name]);
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the Lambda emulator (python3 tests/fakes/lambda/emulator.py)");
        let stdin = child.stdin.take().expect("stdin");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("the emulator's address line");
        let ready: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("the emulator did not start ({e}): {line:?}"));
        let field = |k: &str| ready[k].as_str().unwrap_or_default().to_owned();
        Lambda {
            function_url: field("function_url"),
            invoke_api: field("invoke_api"),
            signing_proxy: field("signing_proxy"),
            child,
            stdin: Some(stdin),
            http: reqwest::Client::new(),
        }
    }

    /// The emulator's counters (inits, timeouts, kills, invocations, ...).
    pub(crate) async fn state(&self) -> Value {
        self.http
            .get(format!("{}/_emulator/state", self.invoke_api))
            .send()
            .await
            .expect("state")
            .json()
            .await
            .expect("state JSON")
    }

    /// Waits until no sandbox is busy. A request sent while the last invocation's runtime has
    /// not yet asked for its next event starts another sandbox, as Lambda starts another
    /// execution environment, and that one's /tmp holds none of the first one's local-engine
    /// runs; a loaded machine stretches that moment past the client's next request. The tests
    /// mean one warm environment, so each request waits for it.
    pub(crate) async fn settled(&self) {
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        loop {
            let state = self.state().await;
            if state["busy"] == 0 {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "a sandbox is still busy 15 s after the last answer: {state}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Kills every sandbox: the next invocations start cold, in new processes.
    pub(crate) async fn reset(&self) {
        self.http
            .post(format!("{}/_emulator/reset", self.invoke_api))
            .send()
            .await
            .expect("reset");
    }

    /// POSTs `body` to the Function URL's /mcp with `headers`, SigV4-signed as `signer`
    /// ("session-1" is [`CALLER`], "someone-else" is [`OTHER`]) or, with None, unsigned.
    pub(crate) async fn post(
        &self,
        signer: Option<&str>,
        headers: &[(&str, &str)],
        body: &Value,
    ) -> Answer {
        self.post_text(signer, headers, body.to_string()).await
    }

    /// [`Lambda::post`] with a body that need not be JSON.
    pub(crate) async fn post_text(
        &self,
        signer: Option<&str>,
        headers: &[(&str, &str)],
        body: String,
    ) -> Answer {
        self.settled().await;
        let base = match signer {
            Some(_) => &self.signing_proxy,
            None => &self.function_url,
        };
        let mut req = self
            .http
            .post(format!("{base}/mcp"))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body)
            .timeout(Duration::from_secs(120));
        if let Some(name) = signer {
            req = req.header("x-emulator-sign-as", name);
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let response = req.send().await.expect("the Function URL answers");
        Answer {
            status: response.status().as_u16(),
            headers: response.headers().clone(),
            body: response.text().await.unwrap_or_default(),
        }
    }

    /// Invokes the function with a raw event (as API Gateway does) and returns Lambda's answer:
    /// the function's response object, or Lambda's error object.
    pub(crate) async fn invoke_event(&self, event: &Value) -> Value {
        self.settled().await;
        self.http
            .post(format!(
                "{}/2015-03-31/functions/flowgate/invocations",
                self.invoke_api
            ))
            .body(event.to_string())
            .timeout(Duration::from_secs(120))
            .send()
            .await
            .expect("Invoke")
            .json()
            .await
            .expect("Invoke answers JSON")
    }
}

impl Drop for Lambda {
    fn drop(&mut self) {
        // Closing stdin stops the emulator and its sandboxes (frozen ones too, which would not
        // notice the emulator gone); kill it if it lingers.
        drop(self.stdin.take());
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while std::time::Instant::now() < deadline {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A 2026-07-28 JSON-RPC request with the tasks extension, and its MCP headers.
fn request(id: u32, method: &str, name: &str, params: Value) -> (Value, Vec<(String, String)>) {
    let mut params = params;
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "lambda-test", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
    });
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    let mut headers = vec![
        ("mcp-protocol-version".to_owned(), "2026-07-28".to_owned()),
        ("mcp-method".to_owned(), method.to_owned()),
    ];
    if !name.is_empty() {
        headers.push(("mcp-name".to_owned(), name.to_owned()));
    }
    (body, headers)
}

impl Lambda {
    /// One MCP request through the Function URL, signed as `signer`; the HTTP answer.
    pub(crate) async fn mcp_as(
        &self,
        signer: Option<&str>,
        method: &str,
        name: &str,
        params: Value,
    ) -> Answer {
        let (body, headers) = request(1, method, name, params);
        let headers: Vec<(&str, &str)> = headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        self.post(signer, &headers, &body).await
    }

    /// One MCP request signed by [`CALLER`]; its JSON-RPC answer (the URL answered 200).
    pub(crate) async fn mcp(&self, method: &str, name: &str, params: Value) -> Value {
        let answer = self.mcp_as(Some("session-1"), method, name, params).await;
        assert_eq!(answer.status, 200, "{}", answer.body);
        answer.json()
    }

    /// Calls `tool` with `arguments` and returns the id of the task it created.
    pub(crate) async fn started(&self, tool: &str, arguments: Value) -> String {
        let created = self
            .mcp(
                "tools/call",
                tool,
                json!({"name": tool, "arguments": arguments}),
            )
            .await;
        created["result"]["taskId"]
            .as_str()
            .unwrap_or_else(|| panic!("a task: {created}"))
            .to_owned()
    }
}

/// An API Gateway HTTP API event (payload format 2.0) for an MCP request, whose request
/// context carries `authorizer` as the HTTP API's authorizer sets it.
fn http_api_event(method: &str, name: &str, params: Value, authorizer: Value) -> Value {
    let (body, headers) = request(1, method, name, params);
    let mut h = json!({
        "host": HOST,
        "content-type": "application/json",
        "accept": "application/json, text/event-stream",
    });
    for (k, v) in headers {
        h[k] = json!(v);
    }
    json!({
        "version": "2.0",
        "routeKey": "POST /mcp",
        "rawPath": "/mcp",
        "rawQueryString": "",
        "headers": h,
        "requestContext": {
            "accountId": "123456789012",
            "apiId": "api123",
            "authorizer": authorizer,
            "domainName": HOST,
            "domainPrefix": "api123",
            "http": {"method": "POST", "path": "/mcp", "protocol": "HTTP/1.1", "sourceIp": "127.0.0.1", "userAgent": "lambda-test"},
            "requestId": "req-1",
            "routeKey": "POST /mcp",
            "stage": "$default",
            "time": "02/Dec/2026:10:00:00 +0000",
            "timeEpoch": 1_796_205_600_000u64
        },
        "body": body.to_string(),
        "isBase64Encoded": false
    })
}

/// The HTTP status and JSON body of a function's HTTP response object.
fn http_answer(response: &Value) -> (u64, Value) {
    let body = response["body"].as_str().unwrap_or_default();
    (
        response["statusCode"].as_u64().unwrap_or_default(),
        serde_json::from_str(body).unwrap_or(Value::String(body.to_owned())),
    )
}

#[tokio::test]
async fn a_task_created_in_one_function_process_is_finished_in_another() {
    let state = tempfile::tempdir().expect("tempdir");
    let lambda = Lambda::start(state.path());
    let created = lambda
        .mcp(
            "tools/call",
            "long_job",
            json!({"name": "long_job", "arguments": {"steps": 1}}),
        )
        .await;
    let result = &created["result"];
    assert_eq!(result["resultType"], "task", "{created}");
    let task_id = result["taskId"].as_str().expect("taskId").to_owned();
    let inits = lambda.state().await["inits"].as_u64().unwrap_or_default();
    lambda.reset().await;

    let got = eventually(Duration::from_secs(15), || async {
        let got = lambda
            .mcp("tasks/get", &task_id, json!({"taskId": task_id}))
            .await;
        match got["result"]["status"].as_str() {
            Some("completed") => Ok(got),
            Some("working") => Err(format!("still working: {got}")),
            _ => panic!("neither working nor completed: {got}"),
        }
    })
    .await;
    assert_eq!(
        got["result"]["result"]["structuredContent"],
        json!({"steps": 1, "finished": true}),
        "{got}"
    );
    assert!(
        lambda.state().await["inits"].as_u64().unwrap_or_default() > inits,
        "the task was read by a process started after the reset"
    );
}

#[tokio::test]
async fn tools_list_answers_in_lambda_mode() {
    let state = tempfile::tempdir().expect("tempdir");
    let lambda = Lambda::start(state.path());
    let ok = lambda.mcp("tools/list", "", json!({})).await;
    assert_eq!(
        ok["result"]["tools"].as_array().map(Vec::len),
        Some(3),
        "{ok}"
    );
}

#[tokio::test]
async fn aws_iam_mode_seals_tasks_to_the_callers_arn_and_refuses_unsigned_requests() {
    let state = tempfile::tempdir().expect("tempdir");
    let lambda = Lambda::start(state.path());

    // Unsigned: the AWS_IAM Function URL itself refuses, before the function runs.
    let bare = lambda.mcp_as(None, "tools/list", "", json!({})).await;
    assert_eq!(bare.status, 403, "{}", bare.body);

    let task_id = lambda.started("long_job", json!({"steps": 20})).await;

    // Another role's view of the task is that of a task that does not exist.
    for (method, params) in [
        ("tasks/get", json!({"taskId": task_id})),
        ("tasks/cancel", json!({"taskId": task_id})),
        (
            "tasks/update",
            json!({"taskId": task_id, "inputResponses": {}}),
        ),
    ] {
        let theirs = lambda
            .mcp_as(Some("someone-else"), method, &task_id, params)
            .await;
        assert_eq!(theirs.status, 200, "{}", theirs.body);
        assert_eq!(
            theirs.json()["error"]["code"],
            -32602,
            "{method}: {}",
            theirs.body
        );
    }
    // The caller's own view is untouched, and it can still end its task.
    let mine = lambda
        .mcp("tasks/get", &task_id, json!({"taskId": task_id}))
        .await;
    assert_eq!(mine["result"]["status"], "working", "{mine}");
    let cancelled = lambda
        .mcp("tasks/cancel", &task_id, json!({"taskId": task_id}))
        .await;
    assert!(cancelled.get("result").is_some(), "{cancelled}");
}

/// A Function URL left at `AuthType: NONE` carries no IAM context: flowgate in aws-iam mode
/// refuses every request and says what is missing.
#[tokio::test]
async fn aws_iam_mode_behind_a_url_without_iam_auth_refuses() {
    let state = tempfile::tempdir().expect("tempdir");
    let lambda = Lambda::start_with(
        state.path(),
        Config {
            auth_type: "NONE",
            ..Config::default()
        },
    );
    let bare = lambda.mcp_as(None, "tools/list", "", json!({})).await;
    assert_eq!(bare.status, 401, "{}", bare.body);
    assert!(
        bare.body.contains("AWS_IAM"),
        "the refusal says what is missing: {}",
        bare.body
    );
}

/// Without `--auth-mode aws-iam` the request context is not read at all: every caller is the
/// same anonymous principal, whatever ARN the context names.
#[tokio::test]
async fn the_iam_context_is_ignored_unless_configured() {
    let state = tempfile::tempdir().expect("tempdir");
    let lambda = Lambda::start_with(
        state.path(),
        Config {
            env: vec![("FLOWGATE_ALLOW_UNAUTHENTICATED".into(), "true".into())],
            ..Config::default()
        },
    );
    let task_id = lambda.started("long_job", json!({"steps": 20})).await;
    let theirs = lambda
        .mcp_as(
            Some("someone-else"),
            "tasks/cancel",
            &task_id,
            json!({"taskId": task_id}),
        )
        .await;
    assert!(theirs.json().get("result").is_some(), "{}", theirs.body);
}

/// API Gateway HTTP APIs invoke the function with the Invoke API; their authorizers' results
/// are in the event's request context.
#[tokio::test]
async fn api_gateway_jwt_and_lambda_authorizer_contexts_name_the_caller() {
    let state = tempfile::tempdir().expect("tempdir");
    let jwt = Lambda::start_with(
        state.path(),
        Config {
            env: vec![("FLOWGATE_AUTH_MODE".into(), "apigw-jwt".into())],
            ..Config::default()
        },
    );
    let claims = |sub: &str| json!({"jwt": {"claims": {"iss": "https://issuer.example", "sub": sub, "scope": "a b"}, "scopes": null}});
    let created = jwt
        .invoke_event(&http_api_event(
            "tools/call",
            "long_job",
            json!({"name": "long_job", "arguments": {"steps": 20}}),
            claims("alice"),
        ))
        .await;
    let (_, created) = http_answer(&created);
    let task_id = created["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("a task: {created}"))
        .to_owned();
    let (_, bob) = http_answer(
        &jwt.invoke_event(&http_api_event(
            "tasks/get",
            &task_id,
            json!({"taskId": task_id}),
            claims("bob"),
        ))
        .await,
    );
    assert_eq!(bob["error"]["code"], -32602, "{bob}");
    let (_, alice) = http_answer(
        &jwt.invoke_event(&http_api_event(
            "tasks/cancel",
            &task_id,
            json!({"taskId": task_id}),
            claims("alice"),
        ))
        .await,
    );
    assert!(alice.get("result").is_some(), "{alice}");
    // An IAM context is not a JWT authorizer's.
    let (status, _) = http_answer(
        &jwt.invoke_event(&http_api_event(
            "tools/list",
            "",
            json!({}),
            json!({"iam": {"userArn": CALLER, "callerId": "x"}}),
        ))
        .await,
    );
    assert_eq!(status, 401);
    drop(jwt);

    let lambda = Lambda::start_with(
        state.path(),
        Config {
            env: vec![("FLOWGATE_AUTH_MODE".into(), "apigw-authorizer".into())],
            ..Config::default()
        },
    );
    let (status, ok) = http_answer(
        &lambda
            .invoke_event(&http_api_event(
                "tools/list",
                "",
                json!({}),
                json!({"lambda": {"principalId": "tenant-7"}}),
            ))
            .await,
    );
    assert_eq!(status, 200, "{ok}");
    let (status, _) = http_answer(
        &lambda
            .invoke_event(&http_api_event(
                "tools/list",
                "",
                json!({}),
                json!({"lambda": {"role": "admin"}}),
            ))
            .await,
    );
    assert_eq!(status, 401);
}

/// A tool whose output is 1 MiB of control characters: 6 MiB once JSON-escaped as the tool's
/// text, 7 MiB escaped again inside Lambda's response object.
const DENSE_OUTPUT: &str = "tools:\n  - name: dense\n    input_schema: {type: object}\n    task: optional\n    poll_interval_ms: 200\n    target:\n      engine: local\n      command: [/bin/sh, -c, \"head -c 1048576 /dev/zero | tr '\\\\000' '\\\\001'\"]\n";

fn dense(invoke_mode: &str) -> Config<'_> {
    Config {
        invoke_mode,
        env: vec![
            ("FLOWGATE_AUTH_MODE".into(), "aws-iam".into()),
            ("FLOWGATE_MANIFEST_YAML".into(), DENSE_OUTPUT.into()),
            ("FLOWGATE_LAMBDA_INVOKE_MODE".into(), invoke_mode.into()),
        ],
        ..Config::default()
    }
}

/// An answer that would not fit Lambda's 6 MB buffered response is a JSON-RPC error naming
/// its size, the same on every tasks/get of the task: never the platform's 502.
#[tokio::test]
async fn an_answer_over_the_buffered_limit_is_an_error_naming_its_size() {
    let state = tempfile::tempdir().expect("tempdir");
    let lambda = Lambda::start_with(state.path(), dense("BUFFERED"));
    let task_id = lambda.started("dense", json!({})).await;
    let mut errors = 0;
    for _ in 0..120 {
        let got = lambda
            .mcp_as(
                Some("session-1"),
                "tasks/get",
                &task_id,
                json!({"taskId": task_id}),
            )
            .await;
        assert_eq!(got.status, 200, "never the platform's error: {}", got.body);
        let answer = got.json();
        if let Some(error) = answer.get("error") {
            assert_eq!(error["code"], -32603, "{answer}");
            assert_eq!(error["data"]["limit"], 6_291_556, "{answer}");
            assert!(
                error["data"]["size"].as_u64().unwrap_or_default() > 6_291_556,
                "{answer}"
            );
            assert!(
                error["message"]
                    .as_str()
                    .unwrap_or_default()
                    .contains("bytes"),
                "{answer}"
            );
            errors += 1;
            if errors == 2 {
                assert_eq!(lambda.state().await["timeouts"], 0);
                return;
            }
            continue;
        }
        assert_eq!(answer["result"]["status"], "working", "{answer}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("tasks/get never answered the finished task");
}

/// A streamed Function URL (RESPONSE_STREAM) carries up to 200 MB: the same answer arrives
/// whole, through the streaming runner's prelude.
#[tokio::test]
async fn response_stream_mode_carries_what_buffered_mode_cannot() {
    let state = tempfile::tempdir().expect("tempdir");
    let lambda = Lambda::start_with(state.path(), dense("RESPONSE_STREAM"));
    let listed = lambda
        .mcp_as(Some("session-1"), "tools/list", "", json!({}))
        .await;
    assert_eq!(listed.status, 200, "{}", listed.body);
    assert!(
        listed.headers.get("content-type").is_some_and(|v| v
            .to_str()
            .unwrap_or_default()
            .starts_with("application/json")),
        "the prelude's headers reach the client: {:?}",
        listed.headers
    );
    let task_id = lambda.started("dense", json!({})).await;
    for _ in 0..120 {
        let got = lambda
            .mcp("tasks/get", &task_id, json!({"taskId": task_id}))
            .await;
        if got["result"]["status"] == "completed" {
            let text = got["result"]["result"]["content"][0]["text"]
                .as_str()
                .unwrap_or_default();
            assert_eq!(text.len(), 1 << 20, "the whole output");
            return;
        }
        assert_eq!(got["result"]["status"], "working", "{got}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("the task did not complete");
}

/// A 2025-11-25 request through the Function URL, signed as [`CALLER`], with `extra` headers.
async fn post_2025(lambda: &Lambda, body: Value, extra: &[(&str, &str)]) -> Answer {
    let mut headers = vec![("mcp-protocol-version", "2025-11-25")];
    headers.extend_from_slice(extra);
    lambda.post(Some("session-1"), &headers, &body).await
}

/// A GET of the Function URL's /mcp with `headers`, signed as [`CALLER`].
async fn get_2025(lambda: &Lambda, headers: &[(&str, &str)]) -> Answer {
    lambda.settled().await;
    let mut req = reqwest::Client::new()
        .get(format!("{}/mcp", lambda.signing_proxy))
        .header("x-emulator-sign-as", "session-1")
        .header("accept", "text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .timeout(Duration::from_secs(120));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let response = req.send().await.expect("the Function URL answers");
    Answer {
        status: response.status().as_u16(),
        headers: response.headers().clone(),
        body: response.text().await.unwrap_or_default(),
    }
}

/// The `id:` of the last event of an SSE body that has one.
fn last_event_id(body: &str) -> Option<String> {
    body.lines()
        .filter_map(|l| l.strip_prefix("id:"))
        .map(|v| v.trim().to_owned())
        .next_back()
}

/// A 2025-11-25 client's tasks/result on a 6 s function while the task runs 10 s: each hold
/// ends before the invocation's deadline without the answer (never the platform's timeout),
/// the client reconnects with Last-Event-ID as the revision's resumable streams say, and the
/// hold resumes in whichever process gets the request until the answer comes, under the
/// original request id.
#[tokio::test]
async fn tasks_result_holds_end_before_the_deadline_and_resume() {
    let state = tempfile::tempdir().expect("tempdir");
    let lambda = Lambda::start_with(
        state.path(),
        Config {
            timeout_secs: 6.0,
            invoke_mode: "RESPONSE_STREAM",
            env: vec![
                ("FLOWGATE_AUTH_MODE".into(), "aws-iam".into()),
                (
                    "FLOWGATE_LAMBDA_INVOKE_MODE".into(),
                    "RESPONSE_STREAM".into(),
                ),
            ],
            ..Config::default()
        },
    );
    let created = post_2025(
        &lambda,
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
               "params": {"name": "long_job", "arguments": {"steps": 10}, "task": {}}}),
        &[],
    )
    .await;
    let task_id = created.json()["result"]["task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("a task: {}", created.body))
        .to_owned();
    let mut answer = post_2025(
        &lambda,
        json!({"jsonrpc": "2.0", "id": 77, "method": "tasks/result", "params": {"taskId": task_id}}),
        &[("accept", "application/json, text/event-stream")],
    )
    .await;
    let mut resumes = 0;
    loop {
        assert_eq!(answer.status, 200, "{}", answer.body);
        assert!(
            answer.body.contains("retry:"),
            "a resumable stream: {}",
            answer.body
        );
        let last = answer.json();
        if last.get("result").is_some() || last.get("error").is_some() {
            assert_eq!(last["id"], 77, "the original request id: {last}");
            assert_eq!(
                last["result"]["structuredContent"],
                json!({"steps": 10, "finished": true}),
                "{last}"
            );
            break;
        }
        resumes += 1;
        assert!(resumes < 10, "never finished: {}", answer.body);
        let id = last_event_id(&answer.body).expect("an event id to resume from");
        answer = get_2025(&lambda, &[("last-event-id", &id)]).await;
    }
    assert!(resumes >= 1, "the 10 s task outlived a 6 s invocation");
    assert_eq!(
        lambda.state().await["timeouts"],
        0,
        "no invocation ran into its deadline"
    );
}

/// Behind a buffered Function URL the body reaches the client only when the invocation
/// ends: tasks/result ends as soon as the task asks, with the question's elicitation/create in
/// the body, so the client sees it, answers, and reconnects.
#[tokio::test]
async fn a_buffered_tasks_result_ends_at_the_question() {
    let state = tempfile::tempdir().expect("tempdir");
    // Shipped inside the function's files (the task root is /var/task), as a deployment ships
    // it: a path into the checkout would name the sandbox's private /tmp when the checkout is
    // under /tmp.
    std::fs::copy(
        repo().join("tests/clients/tools.yaml"),
        state.path().join("tools.yaml"),
    )
    .expect("ship the manifest");
    let lambda = Lambda::start_with(
        state.path(),
        Config {
            timeout_secs: 20.0,
            env: vec![
                ("FLOWGATE_AUTH_MODE".into(), "aws-iam".into()),
                ("FLOWGATE_MANIFEST".into(), "/var/task/tools.yaml".into()),
            ],
            ..Config::default()
        },
    );
    let created = post_2025(
        &lambda,
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
               "params": {"name": "approve_deploy", "arguments": {"service": "web"}, "task": {}}}),
        &[],
    )
    .await;
    let task_id = created.json()["result"]["task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("a task: {}", created.body))
        .to_owned();
    let started = std::time::Instant::now();
    let answer = post_2025(
        &lambda,
        json!({"jsonrpc": "2.0", "id": 5, "method": "tasks/result", "params": {"taskId": task_id}}),
        &[("accept", "application/json, text/event-stream")],
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert!(
        answer.body.contains("elicitation/create") && answer.body.contains("Deploy web"),
        "the question is in the body: {}",
        answer.body
    );
    assert!(
        !answer.body.contains("\"result\""),
        "and no answer yet: {}",
        answer.body
    );
    assert!(
        last_event_id(&answer.body).is_some(),
        "with an id to resume from"
    );
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "it ended at the question, not at the deadline"
    );
    assert_eq!(lambda.state().await["timeouts"], 0);
}

#[tokio::test]
async fn each_invocations_spans_are_exported_before_it_answers() {
    // Sandboxes frozen between invocations as Lambda freezes them, and the batch's default
    // delay (5 s): only the export at the end of each invocation, before its answer, can have
    // delivered its spans by the time the answer arrives.
    let state = tempfile::tempdir().expect("tempdir");
    let service = crate::telemetry::unique("flowgate-lambda");
    let endpoint = crate::telemetry::otlp_http();
    let lambda = Lambda::start_with(
        state.path(),
        Config {
            env: vec![
                ("FLOWGATE_AUTH_MODE".into(), "aws-iam".into()),
                ("OTEL_EXPORTER_OTLP_ENDPOINT".into(), endpoint),
                ("OTEL_SERVICE_NAME".into(), service.clone()),
            ],
            freeze: true,
            ..Config::default()
        },
    );
    let task = lambda.started("long_job", json!({"steps": 1})).await;
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
    // The next invocation, in the thawed sandbox, exports its own before answering too.
    let got = lambda
        .mcp("tasks/get", &task, json!({"taskId": task}))
        .await;
    assert!(got.get("result").is_some(), "{got}");
    let spans = crate::telemetry::spans(&service).await;
    let poll = spans
        .iter()
        .find(|s| s["name"] == "tasks/get")
        .unwrap_or_else(|| panic!("the second invocation's spans were not exported: {spans:#?}"));
    assert_eq!(poll["attributes"]["flowgate.tool"], "long_job");
    assert!(lambda.state().await["freezes"].as_u64() >= Some(1));
}

/// A client without tasks behind a 6 s function, with the default 60 s synchronous wait: the
/// call answers before the invocation's deadline (never the platform's timeout), says why it
/// stopped, and the execution is stopped (no run is left that nobody holds).
#[tokio::test]
async fn a_synchronous_call_answers_before_the_invocation_deadline_and_stops_its_run() {
    let state = tempfile::tempdir().expect("tempdir");
    let lambda = Lambda::start_with(
        state.path(),
        Config {
            timeout_secs: 6.0,
            ..Config::default()
        },
    );
    let (mut body, headers) = request(
        1,
        "tools/call",
        "long_job",
        json!({"name": "long_job", "arguments": {"steps": 30}}),
    );
    // A client without the tasks extension.
    body["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] = json!({});
    let headers: Vec<(&str, &str)> = headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let started = std::time::Instant::now();
    let answer = lambda.post(Some("session-1"), &headers, &body).await;
    let took = started.elapsed();
    assert_eq!(
        answer.status, 200,
        "never the platform's error: {}",
        answer.body
    );
    assert!(took < Duration::from_secs(6), "answered in {took:?}");
    let result = &answer.json()["result"];
    assert_eq!(result["isError"], true, "{}", answer.body);
    let text = result["content"][0]["text"].as_str().unwrap_or_default();
    assert!(
        text.contains("before this request's deadline") && text.contains("stopped"),
        "{text}"
    );
    assert_eq!(lambda.state().await["timeouts"], 0);
    // The run is the caller's only task, and it was stopped.
    let listed = post_2025(
        &lambda,
        json!({"jsonrpc": "2.0", "id": 2, "method": "tasks/list", "params": {}}),
        &[],
    )
    .await;
    let tasks = listed.json()["result"]["tasks"].clone();
    assert_eq!(tasks.as_array().map(Vec::len), Some(1), "{tasks}");
    assert_eq!(tasks[0]["status"], "cancelled", "{tasks}");
}
