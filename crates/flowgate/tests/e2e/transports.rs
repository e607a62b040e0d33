//! One message, three transports, one answer: every transport hands its messages to the same
//! dispatcher, so the same message gets the same JSON-RPC answer over HTTP (`flowgate serve`),
//! stdio (`flowgate serve --stdio`) and AWS Lambda (the emulator's Function URL, with the same
//! handle key and state), and the same HTTP status over the two HTTP ones. The messages are
//! the ones that go wrong: forged and unknown task handles, another principal's task, wrong
//! params, unknown methods and revisions, missing capabilities, bodies that are no message,
//! and (HTTP only) headers that contradict the body.

use std::io::{BufRead as _, BufReader, Write as _};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use serde_json::{Value, json};

use crate::lambda::{Config, Lambda};
use crate::support::{KEY, Post, Server, bin};

/// `flowgate serve --stdio`, spoken to a line at a time.
struct StdioServer {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl StdioServer {
    fn start(state_dir: &std::path::Path) -> StdioServer {
        let mut child = Command::new(bin())
            .args(["serve", "--stdio"])
            .env("FLOWGATE_STATE_DIR", state_dir)
            .env("FLOWGATE_HANDLE_KEYS", KEY)
            .env("FLOWGATE_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("flowgate serve --stdio");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        StdioServer {
            child,
            stdin,
            stdout,
        }
    }

    /// Writes `line` and reads the answer (the next line).
    fn ask(&mut self, line: &str) -> Value {
        writeln!(self.stdin, "{line}").expect("write");
        self.stdin.flush().expect("flush");
        let mut answer = String::new();
        self.stdout.read_line(&mut answer).expect("read");
        serde_json::from_str(&answer).unwrap_or_else(|_| panic!("not JSON: {answer:?}"))
    }
}

impl Drop for StdioServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The 2026-07-28 `_meta` of a client that declares the tasks extension (or not).
fn meta(tasks: bool) -> Value {
    crate::support::meta("transports", tasks)
}

/// A 2026-07-28 request's body.
fn body(id: u32, method: &str, mut params: Value) -> Value {
    if params.get("_meta").is_none() {
        params["_meta"] = meta(true);
    }
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

/// One case: its name, the body as sent, and the headers HTTP sends with it.
struct Case {
    name: &'static str,
    body: String,
    headers: Vec<(&'static str, String)>,
    /// Whether stdio can send it (a header fault is HTTP's alone).
    on_stdio: bool,
    /// Whether the Lambda function answers it as the others do: it reads the local engine's
    /// runs from its own task root, so a task started elsewhere is another deployment's.
    on_lambda: bool,
}

fn case(name: &'static str, body: &Value) -> Case {
    let method = body["method"].as_str().unwrap_or_default();
    let mut headers = vec![
        ("mcp-protocol-version", "2026-07-28".to_owned()),
        ("mcp-method", method.to_owned()),
    ];
    let named = match method {
        "tools/call" => body["params"]["name"].as_str(),
        m if m.starts_with("tasks/") => body["params"]["taskId"].as_str(),
        _ => None,
    };
    if let Some(name) = named {
        headers.push(("mcp-name", name.to_owned()));
    }
    Case {
        name,
        body: body.to_string(),
        headers,
        on_stdio: true,
        on_lambda: true,
    }
}

impl Case {
    fn with_header(mut self, name: &'static str, value: &str) -> Case {
        self.headers.retain(|(n, _)| *n != name);
        self.headers.push((name, value.to_owned()));
        self.on_stdio = false;
        self
    }

    fn not_on_lambda(mut self) -> Case {
        self.on_lambda = false;
        self
    }

    fn raw(name: &'static str, text: &str) -> Case {
        Case {
            name,
            body: text.to_owned(),
            headers: vec![("mcp-protocol-version", "2026-07-28".to_owned())],
            on_stdio: true,
            on_lambda: true,
        }
    }
}

/// An answer with what varies between two reads of the same task (its last update) removed.
fn steady(mut answer: Value) -> Value {
    if let Some(result) = answer.get_mut("result").and_then(Value::as_object_mut) {
        result.remove("lastUpdatedAt");
        result.remove("statusMessage");
    }
    answer
}

#[tokio::test]
async fn every_transport_answers_a_message_as_the_others_do() {
    let state = tempfile::tempdir().expect("tempdir");
    let http = Server::start(state.path(), None);
    let lambda = Lambda::start_with(
        state.path(),
        Config {
            auth_type: "NONE",
            env: vec![("FLOWGATE_ALLOW_UNAUTHENTICATED".into(), "true".into())],
            ..Config::default()
        },
    );
    let mut stdio = StdioServer::start(state.path());

    // A task, started over HTTP: every transport reads it (same key, same principal).
    let started = Post::rpc(
        &http.url,
        "tools/call",
        json!({"name": "long_job", "arguments": {"steps": 60}}),
    )
    .name(Some("long_job"))
    .send()
    .await;
    let task = started.body["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("a task: {:?}", started.body))
        .to_owned();
    let forged = flowgate_core::testing::forged(&task);

    let cases = vec![
        case("tools/list", &body(1, "tools/list", json!({}))),
        case("tasks/get", &body(2, "tasks/get", json!({"taskId": task}))).not_on_lambda(),
        case(
            "tasks/get forged",
            &body(3, "tasks/get", json!({"taskId": forged})),
        ),
        case(
            "tasks/get not a handle",
            &body(4, "tasks/get", json!({"taskId": "nope"})),
        ),
        case(
            "tasks/get taskId a number",
            &body(5, "tasks/get", json!({"taskId": 7})),
        ),
        case(
            "tasks/cancel forged",
            &body(6, "tasks/cancel", json!({"taskId": forged})),
        ),
        case(
            "tasks/update forged",
            &body(
                7,
                "tasks/update",
                json!({"taskId": forged, "inputResponses": {}}),
            ),
        ),
        case(
            "tasks/get without the extension",
            &body(
                8,
                "tasks/get",
                json!({"taskId": task, "_meta": meta(false)}),
            ),
        ),
        case(
            "tools/call unknown tool",
            &body(9, "tools/call", json!({"name": "nope", "arguments": {}})),
        ),
        case(
            "tools/call wrong arguments",
            &body(
                10,
                "tools/call",
                json!({"name": "long_job", "arguments": {"steps": "x"}}),
            ),
        ),
        case("unknown method", &body(11, "nope/nope", json!({}))),
        case("ping is not 2026-07-28's", &body(12, "ping", json!({}))),
        case(
            "_meta without capabilities",
            &body(
                13,
                "tools/list",
                json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}),
            ),
        ),
        case(
            "an unknown revision in _meta",
            &body(
                14,
                "tools/list",
                json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "2099-01-01",
                    "io.modelcontextprotocol/clientCapabilities": {}}}),
            ),
        )
        .with_header("mcp-protocol-version", "2099-01-01"),
        Case::raw("a body that is not JSON", "{nope"),
        Case::raw("JSON that is no message", r#"{"jsonrpc":"2.0","id":15}"#),
        case("Mcp-Method contradicts", &body(16, "tools/list", json!({})))
            .with_header("mcp-method", "tools/call"),
        case(
            "Mcp-Name contradicts",
            &body(17, "tasks/get", json!({"taskId": task})),
        )
        .with_header("mcp-name", "other"),
        case(
            "the version header contradicts _meta",
            &body(18, "tools/list", json!({})),
        )
        .with_header("mcp-protocol-version", "2025-11-25"),
    ];

    let mut differences = Vec::new();
    for case in &cases {
        let mut post = Post::body(&http.url, case.body.clone());
        for (name, value) in &case.headers {
            post = post.header(name, value.clone());
        }
        let over_http = post.send().await;
        let headers: Vec<(&str, &str)> =
            case.headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        if case.on_lambda {
            let over_lambda = lambda.post_text(None, &headers, case.body.clone()).await;
            let lambda_json = over_lambda.json();
            if over_http.status != over_lambda.status
                || steady(over_http.body.clone()) != steady(lambda_json.clone())
            {
                differences.push(format!(
                    "{}: HTTP {} {}\n  Lambda {} {}",
                    case.name, over_http.status, over_http.body, over_lambda.status, lambda_json
                ));
            }
        }
        if case.on_stdio {
            let over_stdio = stdio.ask(&case.body);
            if steady(over_http.body.clone()) != steady(over_stdio.clone()) {
                differences.push(format!(
                    "{}: HTTP {}\n  stdio {over_stdio}",
                    case.name, over_http.body
                ));
            }
        }
        // Each case is a refusal but the two reads of the task and the list.
        let answered = &over_http.body;
        let refused = answered.get("error").is_some()
            || answered["result"]["isError"] == true
            || over_http.status >= 400;
        let expected_refusal = !matches!(case.name, "tools/list" | "tasks/get");
        assert_eq!(refused, expected_refusal, "{}: {answered}", case.name);
    }
    assert!(
        differences.is_empty(),
        "{} answers differ:\n{}",
        differences.len(),
        differences.join("\n")
    );

    // Another principal's task is, to it, a task that does not exist: over Lambda signed as
    // another AWS identity, exactly the forged id's answer.
    let iam = Lambda::start(state.path());
    let foreign = iam
        .mcp_as(
            Some("session-1"),
            "tasks/get",
            &task,
            json!({"taskId": task}),
        )
        .await;
    let forged_answer = Post::body(
        &http.url,
        case("", &body(1, "tasks/get", json!({"taskId": forged}))).body,
    )
    .header("mcp-protocol-version", "2026-07-28")
    .header("mcp-method", "tasks/get")
    .header("mcp-name", forged.as_str())
    .send()
    .await;
    assert_eq!(foreign.status, forged_answer.status);
    assert_eq!(
        foreign.json()["error"],
        forged_answer.body["error"],
        "{}",
        foreign.body
    );
}
