//! The answer corpus: a fixed list of requests (valid ones of every method and revision, and
//! each way a request can be wrong: headers, bodies, versions, capabilities, handles) and the
//! answer each gets, kept in `tests/answers/http.json`. flowgate decides every answer in one
//! dispatcher; this corpus is how a change to it shows every answer it changes. It was first
//! recorded from rmcp's own HTTP server (with flowgate's layers around it), and the dispatcher
//! that replaced it answers the same (status, content type and body) except in these, each on
//! purpose:
//!
//! - plain-text refusals (403, 405, 406, 415) say `text/plain` (rmcp's had no content type);
//! - `initialize` whose `MCP-Protocol-Version` contradicts its `protocolVersion`, and a
//!   request whose header contradicts its `_meta` revision, are refused (400 with `-32600` and
//!   `-32020`: rmcp's own rules) where the 2025-11-25 layer in front of rmcp answered them;
//! - `initialize` without params is `-32602` naming them, not `-32601`;
//! - `subscriptions/listen` (2026-07-28) is served (an SSE stream: the acknowledgement, then
//!   the result once nothing is left to follow; `-32021` for task ids without the tasks
//!   extension), where rmcp's answered `-32601`, and the server's capabilities say
//!   `tools.listChanged` (issue 37).
//!
//! `FLOWGATE_BLESS=1` rewrites the file from the answers of the code under test; review the
//! diff before committing it.

use serde_json::{Value, json};

use crate::http_entry::{Sent, fixture, legacy, modern};

/// One request of the corpus: a name, and the request.
fn corpus(task_id: &str) -> Vec<(&'static str, Sent)> {
    let meta = |caps: Value| {
        json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "corpus", "version": "0"},
            "io.modelcontextprotocol/clientCapabilities": caps,
        })
    };
    let with_header = |mut sent: Sent, name: &str, value: &str| {
        sent.headers.retain(|(n, _)| n != name);
        sent.headers
            .push((name.to_owned(), value.as_bytes().to_vec()));
        sent
    };
    let without_header = |mut sent: Sent, name: &str| {
        sent.headers.retain(|(n, _)| n != name);
        sent
    };
    let with_body = |mut sent: Sent, body: Value| {
        sent.body = body.to_string().into_bytes();
        sent
    };
    let raw_body = |mut sent: Sent, body: &[u8]| {
        sent.body = body.to_vec();
        sent
    };
    let get = modern("tasks/get", Some(task_id), json!({"taskId": task_id}));
    let forged = flowgate_core::testing::forged(task_id);
    let list = modern("tools/list", None, json!({}));
    let quick = || {
        modern(
            "tools/call",
            Some("quick"),
            json!({"name": "quick", "arguments": {"n": 3, "s": "x"}}),
        )
    };
    let no_tasks = |method: &str, name: Option<&str>, params: Value| {
        let mut params = params;
        let sent = modern(method, name, params.clone());
        params["_meta"] = meta(json!({}));
        with_body(
            sent,
            json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}),
        )
    };
    let initialize = |version: &str| {
        legacy(
            "initialize",
            json!({"protocolVersion": version, "capabilities": {},
                   "clientInfo": {"name": "corpus", "version": "0"}}),
        )
    };
    let in_revision =
        |sent: Sent, revision: &str| with_header(sent, "mcp-protocol-version", revision);
    vec![
        // 2026-07-28, valid.
        ("discover", modern("server/discover", None, json!({}))),
        ("tools/list", list.clone()),
        ("tools/call quick (a task)", quick()),
        (
            "tools/call tasked",
            modern(
                "tools/call",
                Some("tasked"),
                json!({"name": "tasked", "arguments": {"n": 2}}),
            ),
        ),
        (
            "tools/call plain (asks for n first)",
            modern(
                "tools/call",
                Some("plain"),
                json!({"name": "plain", "arguments": {}}),
            ),
        ),
        (
            "tools/call without tasks declared",
            no_tasks(
                "tools/call",
                Some("quick"),
                json!({"name": "quick", "arguments": {"n": 1}}),
            ),
        ),
        ("tasks/get", get.clone()),
        (
            "tasks/get with a string id",
            with_body(
                get.clone(),
                json!({"jsonrpc": "2.0", "id": "s-1", "method": "tasks/get", "params": {"taskId": task_id, "_meta": meta(json!({"extensions": {"io.modelcontextprotocol/tasks": {}}}))}}),
            ),
        ),
        (
            "tasks/get without Mcp-Name",
            without_header(get.clone(), "mcp-name"),
        ),
        (
            "tasks/update with nothing to answer",
            modern(
                "tasks/update",
                Some(task_id),
                json!({"taskId": task_id, "inputResponses": {"k": {"action": "accept", "content": {}}}}),
            ),
        ),
        ("ping (not in 2026-07-28)", modern("ping", None, json!({}))),
        (
            "notification",
            with_body(
                modern("notifications/initialized", None, json!({})),
                json!({"jsonrpc": "2.0", "method": "notifications/initialized", "params": {"_meta": meta(json!({}))}}),
            ),
        ),
        // 2026-07-28, refused.
        (
            "tasks/get forged",
            modern("tasks/get", Some(&forged), json!({"taskId": forged})),
        ),
        (
            "tasks/get not a handle",
            modern("tasks/get", Some("nope"), json!({"taskId": "nope"})),
        ),
        (
            "tasks/get taskId a number",
            without_header(modern("tasks/get", None, json!({"taskId": 7})), "mcp-name"),
        ),
        (
            "tasks/get without taskId",
            modern("tasks/get", None, json!({})),
        ),
        (
            "tasks/get without tasks declared",
            no_tasks("tasks/get", Some(task_id), json!({"taskId": task_id})),
        ),
        (
            "tasks/cancel forged",
            modern("tasks/cancel", Some(&forged), json!({"taskId": forged})),
        ),
        (
            "tools/call unknown tool",
            modern(
                "tools/call",
                Some("nope"),
                json!({"name": "nope", "arguments": {}}),
            ),
        ),
        (
            "tools/call wrong arguments",
            modern(
                "tools/call",
                Some("quick"),
                json!({"name": "quick", "arguments": {"n": "three"}}),
            ),
        ),
        (
            "tools/call arguments not an object",
            modern(
                "tools/call",
                Some("quick"),
                json!({"name": "quick", "arguments": "x"}),
            ),
        ),
        ("unknown method", modern("nope/nope", None, json!({}))),
        ("prompts/list", modern("prompts/list", None, json!({}))),
        ("resources/list", modern("resources/list", None, json!({}))),
        (
            "subscriptions/listen",
            modern(
                "subscriptions/listen",
                None,
                json!({"notifications": {"taskIds": [forged]}}),
            ),
        ),
        (
            "subscriptions/listen without tasks declared",
            no_tasks(
                "subscriptions/listen",
                None,
                json!({"notifications": {"taskIds": [task_id]}}),
            ),
        ),
        (
            "subscriptions/listen without notifications",
            modern("subscriptions/listen", None, json!({})),
        ),
        (
            "Mcp-Method missing",
            without_header(list.clone(), "mcp-method"),
        ),
        (
            "Mcp-Method contradicts",
            with_header(list.clone(), "mcp-method", "tools/call"),
        ),
        (
            "Mcp-Name contradicts",
            with_header(get.clone(), "mcp-name", "other"),
        ),
        (
            "Mcp-Name missing on tools/call",
            without_header(quick(), "mcp-name"),
        ),
        (
            "Mcp-Name base64",
            with_header(quick(), "mcp-name", "=?base64?cXVpY2s=?="),
        ),
        (
            "Mcp-Name bad base64",
            with_header(quick(), "mcp-name", "=?base64?***?="),
        ),
        (
            "version header missing",
            without_header(list.clone(), "mcp-protocol-version"),
        ),
        (
            "version header contradicts _meta",
            in_revision(list.clone(), "2025-11-25"),
        ),
        (
            "version header unknown",
            in_revision(list.clone(), "2099-01-01"),
        ),
        (
            "_meta without capabilities",
            with_body(
                list.clone(),
                json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}}),
            ),
        ),
        (
            "_meta with an unknown version",
            in_revision(
                with_body(
                    list.clone(),
                    json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": "2099-01-01", "io.modelcontextprotocol/clientCapabilities": {}}}}),
                ),
                "2099-01-01",
            ),
        ),
        (
            "Accept without SSE",
            with_header(list.clone(), "accept", "application/json"),
        ),
        (
            "Accept with weights",
            with_header(
                list.clone(),
                "accept",
                "application/json;q=0.9, text/event-stream;q=0.5",
            ),
        ),
        (
            "Accept excludes SSE",
            with_header(
                list.clone(),
                "accept",
                "application/json, text/event-stream;q=0",
            ),
        ),
        (
            "Content-Type text",
            with_header(list.clone(), "content-type", "text/plain"),
        ),
        ("body not JSON", raw_body(list.clone(), b"{nope")),
        (
            "body not UTF-8",
            raw_body(list.clone(), b"{\"a\":\"\xff\"}"),
        ),
        (
            "body JSON but no message",
            raw_body(list.clone(), b"{\"hello\":1}"),
        ),
        (
            "body a batch",
            raw_body(
                list.clone(),
                b"[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}]",
            ),
        ),
        (
            "body jsonrpc 1.0",
            with_body(
                list.clone(),
                json!({"jsonrpc": "1.0", "id": 1, "method": "tools/list", "params": {"_meta": meta(json!({}))}}),
            ),
        ),
        (
            "a response",
            with_body(
                list.clone(),
                json!({"jsonrpc": "2.0", "id": 9, "result": {}}),
            ),
        ),
        (
            "GET",
            Sent {
                method: "GET".into(),
                path: "/mcp".into(),
                headers: vec![("accept".into(), b"text/event-stream".to_vec())],
                body: vec![],
            },
        ),
        (
            "DELETE",
            Sent {
                method: "DELETE".into(),
                path: "/mcp".into(),
                headers: vec![],
                body: vec![],
            },
        ),
        (
            "Host not allowed",
            with_header(list.clone(), "host", "evil.example"),
        ),
        (
            "Origin not allowed",
            with_header(list.clone(), "origin", "https://evil.example"),
        ),
        (
            "Origin loopback",
            with_header(list.clone(), "origin", "http://localhost:6274"),
        ),
        // Older revisions.
        ("initialize 2025-11-25", initialize("2025-11-25")),
        ("initialize 2025-06-18", initialize("2025-06-18")),
        ("initialize 2025-03-26", initialize("2025-03-26")),
        ("initialize 2026-07-28", initialize("2026-07-28")),
        ("initialize unknown version", initialize("2099-01-01")),
        (
            "initialize header contradicts",
            in_revision(initialize("2025-06-18"), "2025-11-25"),
        ),
        (
            "initialize in 2026-07-28 (removed)",
            with_body(
                modern("initialize", None, json!({})),
                json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"_meta": meta(json!({}))}}),
            ),
        ),
        (
            "initialize without params",
            with_body(
                initialize("2025-11-25"),
                json!({"jsonrpc": "2.0", "id": 1, "method": "initialize"}),
            ),
        ),
        ("2025-11-25 tools/list", legacy("tools/list", json!({}))),
        (
            "2025-11-25 subscriptions/listen",
            legacy(
                "subscriptions/listen",
                json!({"notifications": {"toolsListChanged": true}}),
            ),
        ),
        (
            "2025-11-25 tools/call (synchronous)",
            legacy(
                "tools/call",
                json!({"name": "quick", "arguments": {"n": 1}}),
            ),
        ),
        (
            "2025-11-25 tools/call as a task",
            legacy(
                "tools/call",
                json!({"name": "quick", "arguments": {"n": 1}, "task": {}}),
            ),
        ),
        (
            "2025-11-25 tools/call wrong arguments",
            legacy(
                "tools/call",
                json!({"name": "quick", "arguments": {"n": "x"}, "task": {}}),
            ),
        ),
        (
            "2025-11-25 tools/call of a task-only tool",
            legacy(
                "tools/call",
                json!({"name": "tasked", "arguments": {"n": 1}}),
            ),
        ),
        ("2025-11-25 ping", legacy("ping", json!({}))),
        (
            "2025-11-25 tasks/get forged",
            legacy("tasks/get", json!({"taskId": forged})),
        ),
        ("2025-11-25 tasks/list", legacy("tasks/list", json!({}))),
        (
            "2025-11-25 tasks/list bad cursor",
            legacy("tasks/list", json!({"cursor": "x"})),
        ),
        ("2025-11-25 unknown method", legacy("nope/nope", json!({}))),
        (
            "2025-11-25 notification",
            with_body(
                legacy("notifications/initialized", json!({})),
                json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            ),
        ),
        (
            "2025-06-18 tools/list",
            in_revision(legacy("tools/list", json!({})), "2025-06-18"),
        ),
        (
            "2025-06-18 tools/call",
            in_revision(
                legacy(
                    "tools/call",
                    json!({"name": "quick", "arguments": {"n": 1}}),
                ),
                "2025-06-18",
            ),
        ),
        (
            "2025-06-18 tasks/get",
            in_revision(
                legacy("tasks/get", json!({"taskId": task_id})),
                "2025-06-18",
            ),
        ),
        (
            "no version header tools/list",
            without_header(legacy("tools/list", json!({})), "mcp-protocol-version"),
        ),
    ]
}

/// An answer with what varies from run to run (task ids, times) replaced by placeholders.
fn recorded(task_id: &str, status: u16, content_type: &str, body: &[u8]) -> Value {
    let text = String::from_utf8_lossy(body).replace(task_id, "<task>");
    let body = match serde_json::from_str::<Value>(&text) {
        Ok(json) => normalised(json),
        Err(_) => Value::String(text),
    };
    json!({"status": status, "content_type": content_type, "body": body})
}

/// `value` with fresh task ids and timestamps replaced.
fn normalised(value: Value) -> Value {
    match value {
        Value::String(s) if s.starts_with("fg2.") => Value::String("<new task>".into()),
        Value::String(s)
            if s.len() >= 20
                && s.as_bytes().get(4) == Some(&b'-')
                && s.contains('T')
                && s.ends_with('Z') =>
        {
            Value::String("<time>".into())
        }
        Value::Array(items) => Value::Array(items.into_iter().map(normalised).collect()),
        // How many tasks a listing shows depends on the other tests of the binary.
        Value::Object(mut map) if map.get("tasks").is_some_and(Value::is_array) => {
            map.insert("tasks".into(), json!(["<tasks>"]));
            Value::Object(map.into_iter().map(|(k, v)| (k, normalised(v))).collect())
        }
        Value::Object(map) => {
            Value::Object(map.into_iter().map(|(k, v)| (k, normalised(v))).collect())
        }
        other => other,
    }
}

#[test]
fn every_answer_of_the_corpus_is_the_recorded_one() {
    let fixture = fixture();
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/answers/http.json");
    let mut answers = serde_json::Map::new();
    for (name, sent) in corpus(&fixture.task_id) {
        let answer = fixture.send(false, &sent);
        answers.insert(
            name.to_owned(),
            recorded(
                &fixture.task_id,
                answer.status.as_u16(),
                &answer.content_type,
                &answer.body,
            ),
        );
    }
    let answers = Value::Object(answers);
    if std::env::var_os("FLOWGATE_BLESS").is_some() {
        let text = serde_json::to_string_pretty(&answers).expect("json") + "\n";
        std::fs::create_dir_all(path.parent().expect("dir")).expect("dir");
        std::fs::write(&path, text).expect("write");
        return;
    }
    let text = std::fs::read_to_string(&path)
        .expect("tests/answers/http.json (FLOWGATE_BLESS=1 writes it)");
    let expected: Value = serde_json::from_str(&text).expect("json");
    let mut differences = Vec::new();
    for (name, answer) in answers.as_object().expect("object") {
        let want = &expected[name];
        if want != answer {
            differences.push(format!("{name}:\n  recorded {want}\n  now      {answer}"));
        }
    }
    assert!(
        differences.is_empty(),
        "{} answers changed:\n{}",
        differences.len(),
        differences.join("\n")
    );
}
