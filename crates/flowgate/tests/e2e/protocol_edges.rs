//! The protocol edges: answers checked against the question's schema, results checked against
//! the tool's output schema, a synchronous caller who hangs up, foreign `Origin`s, wrongly typed
//! params and invalid JSON (over HTTP and stdio).

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use rmcp::model::{CallToolResponse, TaskStatus, UpdateTaskParams};
use serde_json::{Value, json};

use crate::support::*;

const MANIFEST: &str = r#"
tools:
  - name: two_questions
    description: Asks two questions at once and prints both answers.
    input_schema: { type: object }
    task: required
    target:
      engine: local
      command:
        - /bin/sh
        - -c
        - |
          d=$(mktemp -d)
          flowgate ask --message "How many?" --schema '{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}' > "$d/count" &
          flowgate ask --message "Sure?" --confirm > "$d/sure" &
          wait
          printf '{"count": %s, "sure": %s}\n' "$(cat "$d/count")" "$(cat "$d/sure")"
  - name: bad_output
    description: Returns a result that breaks its output schema.
    input_schema: { type: object }
    output_schema: { type: object, properties: { count: { type: integer } }, required: [count] }
    target:
      engine: local
      command: [/bin/sh, -c, 'printf "{\"count\": \"three\"}\n"']
  - name: text_output
    description: Returns plain text although it declares an output schema.
    input_schema: { type: object }
    output_schema: { type: object, properties: { count: { type: integer } } }
    target:
      engine: local
      command: [/bin/sh, -c, 'echo three']
  - name: good_output
    description: Returns a result that matches its output schema.
    input_schema: { type: object }
    output_schema: { type: object, properties: { count: { type: integer } }, required: [count] }
    target:
      engine: local
      command: [/bin/sh, -c, 'printf "{\"count\": 3}\n"']
  - name: sleeper
    description: Writes its process id to the file it is given, then sleeps.
    input_schema: { type: object, properties: { pid_file: { type: string } }, required: [pid_file] }
    task: optional
    target:
      engine: local
      command: [/bin/sh, -c, 'echo $$ > "$FLOWGATE_ARG_PID_FILE"; exec sleep 120']
"#;

/// The 2026-07-28 `_meta` of a request; `tasks` says whether it declares the tasks extension.
fn meta(tasks: bool) -> Value {
    crate::support::meta("edges", tasks)
}

fn manifest(dir: &Path) -> PathBuf {
    let path = dir.join("edges.yaml");
    std::fs::write(&path, MANIFEST).expect("write manifest");
    path
}

/// A `tools/list` from a client without the tasks extension, with exactly `headers` besides
/// the ones every client sends: (status, body).
async fn list_with(url: &str, headers: &[(&str, &str)]) -> (u16, Value) {
    let mut post = Post::rpc_as(url, "tools/list", json!({}), false);
    for (name, value) in headers {
        post = post.header(name, *value);
    }
    let answer = post.send().await;
    (answer.status, answer.body)
}

/// The text of every content block of a tool result.
fn texts(result: &Value) -> String {
    result["content"]
        .as_array()
        .map(|blocks| {
            blocks
                .iter()
                .filter_map(|b| b["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

/// The key of the outstanding question whose message is `message`.
fn key_asking(task: &Value, message: &str) -> String {
    task["inputRequests"]
        .as_object()
        .and_then(|m| {
            m.iter()
                .find(|(_, r)| r["params"]["message"] == message)
                .map(|(k, _)| k.clone())
        })
        .unwrap_or_else(|| panic!("no question {message:?} in {task}"))
}

async fn update(client: &Client, task_id: &str, answers: Value) -> Result<(), String> {
    let mut params = UpdateTaskParams::new(task_id.to_owned(), Default::default());
    for (key, answer) in answers.as_object().expect("answers object") {
        params.input_responses.insert(key.clone(), answer.clone());
    }
    client.update_task(params).await.map_err(|e| e.to_string())
}

#[tokio::test]
async fn answers_are_checked_whole_against_the_question_schema() {
    let state = tempfile::tempdir().expect("tempdir");
    let server = Server::start(state.path(), Some(&manifest(state.path())));
    let client = http_client(&server.url, true).await;
    let id = start_task(&client, "two_questions", json!({})).await;
    let waiting = poll_task(&client, &id, |t| {
        t["status"] == "input_required"
            && t["inputRequests"].as_object().is_some_and(|m| m.len() == 2)
    })
    .await;
    let count = key_asking(&waiting, "How many?");
    let sure = key_asking(&waiting, "Sure?");

    // A valid answer next to a malformed one: the update is refused whole.
    let refused = update(
        &client,
        &id,
        json!({
            count.clone(): {"action": "accept", "content": {"n": 3}},
            sure.clone(): {"action": "accept", "content": {"confirm": "yes"}},
        }),
    )
    .await
    .expect_err("a malformed answer must be refused");
    assert!(refused.contains("-32602"), "{refused}");
    assert!(refused.contains(&sure), "names the key: {refused}");
    assert!(refused.contains("/confirm"), "names the field: {refused}");
    let missing = update(
        &client,
        &id,
        json!({count.clone(): {"action": "accept", "content": {}}}),
    )
    .await
    .expect_err("a missing required field must be refused");
    assert!(
        missing.contains(&count) && missing.contains("\"n\""),
        "{missing}"
    );

    // Nothing was delivered: no answer was recorded, and both questions are still open.
    assert_eq!(recorded_answers(state.path()), 0, "an answer was recorded");
    let still = serde_json::to_value(get(&client, &id).await).expect("json");
    assert_eq!(still["status"], "input_required", "{still}");
    assert_eq!(still["inputRequests"].as_object().map(|m| m.len()), Some(2));

    update(
        &client,
        &id,
        json!({
            count: {"action": "accept", "content": {"n": 3}},
            sure: {"action": "accept", "content": {"confirm": true}},
        }),
    )
    .await
    .expect("valid answers are delivered");
    let done = poll_until(
        &client,
        &id,
        &[TaskStatus::Completed, TaskStatus::Failed],
        &mut vec![],
    )
    .await;
    assert_eq!(
        result_json(&done),
        json!({"count": {"n": 3}, "sure": {"confirm": true}})
    );
    client.cancel().await.ok();
}

#[tokio::test]
async fn results_that_break_the_output_schema_are_tool_errors() {
    let state = tempfile::tempdir().expect("tempdir");
    let server = Server::start(state.path(), Some(&manifest(state.path())));
    let tasks = http_client(&server.url, true).await;
    let id = start_task(&tasks, "bad_output", json!({})).await;
    let done = poll_until(
        &tasks,
        &id,
        &[TaskStatus::Completed, TaskStatus::Failed],
        &mut vec![],
    )
    .await;
    let result = &done["result"];
    assert_eq!(result["isError"], true, "{done}");
    assert!(result.get("structuredContent").is_none(), "{done}");
    let text = texts(result);
    assert!(text.contains("output schema"), "{text}");
    assert!(text.contains("/count"), "names the field: {text}");
    assert!(text.contains("three"), "keeps the output: {text}");

    let sync = http_client(&server.url, false).await;
    for (tool, problem) in [("bad_output", "/count"), ("text_output", "object")] {
        let CallToolResponse::Complete(result) = sync
            .call_tool_once(call(tool, json!({})))
            .await
            .expect("tools/call")
        else {
            panic!("expected a synchronous result")
        };
        let result = serde_json::to_value(&result).expect("json");
        assert_eq!(result["isError"], true, "{tool}: {result}");
        assert!(result.get("structuredContent").is_none(), "{result}");
        assert!(texts(&result).contains(problem), "{tool}: {result}");
    }

    let CallToolResponse::Complete(good) = sync
        .call_tool_once(call("good_output", json!({})))
        .await
        .expect("tools/call")
    else {
        panic!("expected a synchronous result")
    };
    let good = serde_json::to_value(&good).expect("json");
    assert_eq!(good["isError"], false, "{good}");
    assert_eq!(good["structuredContent"], json!({"count": 3}));
    tasks.cancel().await.ok();
    sync.cancel().await.ok();
}

/// Whether process `pid` is running (a zombie waiting to be reaped counts as gone).
fn running(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{}/stat", pid.trim()))
        .ok()
        .and_then(|stat| {
            stat.rsplit_once(") ")
                .map(|(_, rest)| !rest.starts_with('Z'))
        })
        .unwrap_or(false)
}

#[tokio::test]
async fn a_synchronous_caller_who_hangs_up_stops_its_run() {
    let state = tempfile::tempdir().expect("tempdir");
    let log = state.path().join("serve.log");
    // A long synchronous wait, so only the hang-up can stop the run within the test; the
    // audit lines say when the call is waiting and when flowgate stopped its run.
    let server = Server::start_with(
        state.path(),
        Some(&manifest(state.path())),
        &[("FLOWGATE_SYNC_WAIT_SECS", "600"), ("FLOWGATE_LOG", "info")],
        Some(&log),
    );
    let pid_file = state.path().join("sleeper.pid");
    let call = Post::rpc_as(
        &server.url,
        "tools/call",
        json!({"name": "sleeper", "arguments": {"pid_file": pid_file}}),
        false,
    )
    .name(Some("sleeper"));
    let waiting = tokio::spawn(call.request().send());
    let pid = eventually(Duration::from_secs(20), || async {
        std::fs::read_to_string(&pid_file)
            .ok()
            .filter(|p| !p.trim().is_empty())
            .ok_or("the run never started")
    })
    .await;
    assert!(running(&pid), "the command should be running");
    // Once the start is in the audit trail, the call waits for the run: the caller goes away.
    eventually(Duration::from_secs(20), || async {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("event=\"started\"") || text.contains("event=started") {
            Ok(())
        } else {
            Err(format!("no start in the log yet:\n{text}"))
        }
    })
    .await;
    waiting.abort();
    let _ = waiting.await;
    eventually(Duration::from_secs(15), || async {
        if running(&pid) {
            Err(format!("process {pid} still runs after its caller hung up"))
        } else {
            Ok(())
        }
    })
    .await;
}

#[tokio::test]
async fn a_foreign_origin_is_refused_unless_allowed() {
    let state = tempfile::tempdir().expect("tempdir");
    let server = Server::start(state.path(), None);
    let url = server.url.clone();
    let own = url.trim_end_matches("/mcp").to_owned();
    let (status, answer) = list_with(&url, &[("Origin", "http://evil.example")]).await;
    assert_eq!(status, 403, "{answer}");
    let (status, answer) = list_with(&url, &[("Origin", "null")]).await;
    assert_eq!(status, 403, "{answer}");
    for origin in [own.as_str(), "http://localhost:3000", "http://[::1]:6274"] {
        let (status, answer) = list_with(&url, &[("Origin", origin)]).await;
        assert_eq!(status, 200, "{origin}: {answer}");
        assert!(answer.to_string().contains("long_job"), "{answer}");
    }
    let (status, answer) = list_with(&url, &[]).await;
    assert_eq!(status, 200, "no Origin at all is fine: {answer}");

    let allowed = Server::start_with(
        state.path(),
        None,
        &[(
            "FLOWGATE_ALLOWED_ORIGINS",
            "https://app.example,http://evil.example:8080",
        )],
        None,
    );
    for (origin, expected) in [
        ("https://app.example", 200),
        ("https://app.example:443", 200),
        ("https://app.example:8443", 403),
        ("http://evil.example:8080", 200),
        ("http://evil.example", 403),
    ] {
        let (status, answer) = list_with(&allowed.url, &[("Origin", origin)]).await;
        assert_eq!(status, expected, "{origin}: {answer}");
    }
}

#[tokio::test]
async fn wrongly_typed_params_are_invalid_params() {
    let state = tempfile::tempdir().expect("tempdir");
    let server = Server::start(state.path(), None);
    let client = http_client(&server.url, true).await;
    let id = start_task(&client, "long_job", json!({"steps": 30})).await;
    let cases = [
        ("tasks/get", None, json!({"taskId": 123}), "taskId"),
        ("tasks/cancel", None, json!({"taskId": ["x"]}), "taskId"),
        (
            "tasks/update",
            Some(id.as_str()),
            json!({"taskId": id, "inputResponses": []}),
            "inputResponses",
        ),
        (
            "tools/call",
            Some("long_job"),
            json!({"name": "long_job", "arguments": "x"}),
            "arguments",
        ),
    ];
    for (method, name, params, field) in cases {
        let (status, body) = raw(&server.url, method, name, params).await;
        assert_ne!(status, 404, "{method}: {body}");
        assert_eq!(
            body["error"]["code"], -32602,
            "{method}: HTTP {status} {body}"
        );
        let message = body["error"]["message"].as_str().unwrap_or("");
        assert!(message.contains(field), "{method}: names {field}: {body}");
    }
    // Methods flowgate does not serve are still method-not-found.
    let (status, body) = raw(&server.url, "tasks/list", None, json!({})).await;
    assert_eq!(body["error"]["code"], -32601, "HTTP {status} {body}");
    cancel_and_settle(&client, &id).await;
    client.cancel().await.ok();
}

#[tokio::test]
async fn invalid_json_is_a_parse_error_over_http() {
    let state = tempfile::tempdir().expect("tempdir");
    let server = Server::start(state.path(), None);
    let (status, body) = raw_body(&server.url, "tools/list", None, "{\"jsonrpc\": \"2.0\", ").await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["jsonrpc"], "2.0", "{body}");
    assert_eq!(body["error"]["code"], -32700, "{body}");
    // Well-formed JSON that is no JSON-RPC message is an invalid request.
    let (status, body) = raw_body(&server.url, "tools/list", None, "[1, 2]").await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], -32600, "{body}");
}

/// Lines from a child's stdout, readable with a deadline.
fn lines_of(stdout: std::process::ChildStdout) -> std::sync::mpsc::Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

#[test]
fn invalid_json_is_a_parse_error_over_stdio() {
    let state = tempfile::tempdir().expect("tempdir");
    let mut child = Command::new(bin())
        .args(["serve", "--stdio"])
        .env("FLOWGATE_STATE_DIR", state.path())
        .env("FLOWGATE_HANDLE_KEYS", KEY)
        .env("FLOWGATE_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn stdio server");
    let mut stdin = child.stdin.take().expect("stdin");
    let answers = lines_of(child.stdout.take().expect("stdout"));
    let next = || {
        let line = answers
            .recv_timeout(Duration::from_secs(10))
            .expect("an answer within 10 s");
        serde_json::from_str::<Value>(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
    };

    stdin
        .write_all(b"{\"jsonrpc\": \"2.0\", \"id\": 1,\n")
        .expect("write");
    let answer = next();
    assert_eq!(answer["error"]["code"], -32700, "{answer}");

    let typed = json!({"jsonrpc": "2.0", "id": 2, "method": "tasks/get",
        "params": {"taskId": 123, "_meta": meta(true)}});
    stdin
        .write_all(format!("{typed}\n").as_bytes())
        .expect("write");
    let answer = next();
    assert_eq!(answer["id"], 2, "{answer}");
    assert_eq!(answer["error"]["code"], -32602, "{answer}");

    // The server is still there for well-formed requests.
    let discover = json!({"jsonrpc": "2.0", "id": 3, "method": "server/discover",
        "params": {"_meta": meta(true)}});
    stdin
        .write_all(format!("{discover}\n").as_bytes())
        .expect("write");
    let answer = next();
    assert_eq!(answer["id"], 3, "{answer}");
    assert!(answer["result"]["supportedVersions"].is_array(), "{answer}");
    drop(stdin);
    let _ = child.kill();
    let _ = child.wait();
}
