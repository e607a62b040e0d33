//! The audit trail of one task's whole life (and of the requests refused around it), read
//! back from the server's JSON log and checked line by line.

use std::process::Command;
use std::time::Duration;

use flowgate_auth::testing::FakeIssuer;
use serde_json::{Value, json};

use crate::oauth::post;
use crate::support::*;

const RESOURCE: &str = "https://flowgate.test/mcp";

/// SHA-256 (hex) of `text`, by coreutils, so the test does not share flowgate's code.
fn sha256(text: &str) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("canonical.json");
    std::fs::write(&file, text).expect("write");
    let out = Command::new("sha256sum")
        .arg(&file)
        .output()
        .expect("sha256sum (coreutils) on PATH");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// A `tools/call` from a client that did not declare the tasks extension: (status, body).
async fn untasked(url: &str, token: &str, tool: &str, arguments: Value) -> (u16, Value) {
    let params = json!({"name": tool, "arguments": arguments});
    let answer = Post::rpc_as(url, "tools/call", params, false)
        .name(Some(tool))
        .bearer(Some(token))
        .send()
        .await;
    (answer.status, answer.body)
}

/// Polls `tasks/get` as `token` until the status is one of `until`.
async fn poll(url: &str, token: &str, id: &str, until: &[&str]) -> Value {
    eventually(Duration::from_secs(30), || async {
        let (_, _, got) = post(
            url,
            Some(token),
            "tasks/get",
            Some(id),
            json!({"taskId": id}),
        )
        .await;
        let status = got["result"]["status"].as_str().unwrap_or_default();
        if until.contains(&status) {
            Ok(got)
        } else {
            Err(format!("still {status}: {got}"))
        }
    })
    .await
}

#[tokio::test]
async fn every_task_event_is_one_audit_line_without_values_or_tokens() {
    let issuer = FakeIssuer::start().await;
    let state = tempfile::tempdir().expect("tempdir");
    let log = state.path().join("serve.log");
    let manifest = state.path().join("tools.yaml");
    let bundled = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/flowgate.yaml"),
    )
    .expect("the bundled manifest");
    std::fs::write(
        &manifest,
        format!(
            "{bundled}\n  - name: guarded\n    scopes: [deploy]\n    target: {{ engine: local, command: [/bin/true] }}\n  - name: ask_now\n    task: optional\n    target: {{ engine: local, command: [/bin/sh, -c, 'flowgate ask --confirm --message Sure?'] }}\n"
        ),
    )
    .expect("manifest");
    let server = Server::start_with(
        state.path(),
        Some(&manifest),
        &[
            ("FLOWGATE_AUTH_ISSUER", issuer.issuer.as_str()),
            ("FLOWGATE_AUTH_RESOURCE", RESOURCE),
            ("FLOWGATE_LOG", "warn,flowgate::audit=info"),
            ("FLOWGATE_LOG_FORMAT", "json"),
        ],
        Some(&log),
    );
    let url = server.url.as_str();
    let alice = issuer.token("alice", RESOURCE, "");
    let bob = issuer.token("bob", RESOURCE, "");
    let deploy =
        json!({"name": "approve_deploy", "arguments": {"service": "billing", "version": "v42"}});

    // 1. No token.
    let (status, _, _) = post(
        url,
        None,
        "tools/call",
        Some("approve_deploy"),
        deploy.clone(),
    )
    .await;
    assert_eq!(status, 401);
    // 2. A scope Alice lacks.
    let (status, _, _) = post(
        url,
        Some(&alice),
        "tools/call",
        Some("guarded"),
        json!({"name": "guarded", "arguments": {}}),
    )
    .await;
    assert_eq!(status, 403);
    // 3. Arguments that do not match the schema.
    let bad =
        json!({"name": "approve_deploy", "arguments": {"service": "Not Valid!", "version": "v42"}});
    let (_, _, refused) = post(url, Some(&alice), "tools/call", Some("approve_deploy"), bad).await;
    assert_eq!(refused["result"]["isError"], true, "{refused}");
    // 4. The task: started, asks, Bob pokes at it, Alice answers, it finishes.
    let (_, _, created) = post(
        url,
        Some(&alice),
        "tools/call",
        Some("approve_deploy"),
        deploy,
    )
    .await;
    let id = created["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("{created}"))
        .to_owned();
    let waiting = poll(url, &alice, &id, &["input_required"]).await;
    let key = first_input_key(&waiting["result"]);
    let (_, _, theirs) = post(
        url,
        Some(&bob),
        "tasks/get",
        Some(&id),
        json!({"taskId": id}),
    )
    .await;
    assert_eq!(theirs["error"]["code"], -32602);
    let answer = json!({"action": "accept", "content": {"approve": true, "reason": "ship-it-now"}});
    let (_, _, updated) = post(
        url,
        Some(&alice),
        "tasks/update",
        Some(&id),
        json!({"taskId": id, "inputResponses": {key.clone(): answer.clone()}}),
    )
    .await;
    assert!(updated.get("result").is_some(), "{updated}");
    poll(url, &alice, &id, &["completed"]).await;
    // Seen finished again: still one `finished` line.
    poll(url, &alice, &id, &["completed"]).await;
    // 5. Another task, cancelled.
    let (_, _, long) = post(
        url,
        Some(&alice),
        "tools/call",
        Some("long_job"),
        json!({"name": "long_job", "arguments": {"steps": 30}}),
    )
    .await;
    let long_id = long["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("{long}"))
        .to_owned();
    let (_, _, cancelled) = post(
        url,
        Some(&alice),
        "tasks/cancel",
        Some(&long_id),
        json!({"taskId": long_id}),
    )
    .await;
    assert!(cancelled.get("result").is_some(), "{cancelled}");
    poll(url, &alice, &long_id, &["cancelled"]).await;
    // 6. A client without the tasks extension: a task-only tool is refused; a tool that asks
    // a question is stopped by flowgate, since only a task could answer it.
    let (_, no_tasks) = untasked(
        url,
        &alice,
        "approve_deploy",
        json!({"service": "web", "version": "1"}),
    )
    .await;
    assert!(no_tasks.get("error").is_some(), "{no_tasks}");
    let (_, stopped) = untasked(url, &alice, "ask_now", json!({})).await;
    assert_eq!(stopped["result"]["isError"], true, "{stopped}");
    drop(server);

    let text = std::fs::read_to_string(&log).expect("log");
    let lines: Vec<Value> = text
        .lines()
        .filter(|l| l.contains("flowgate::audit"))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let events: Vec<(&str, &str)> = lines
        .iter()
        .map(|l| {
            (
                l["event"].as_str().unwrap_or("?"),
                l["reason"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        events,
        [
            ("refused", "unauthenticated"),
            ("refused", "insufficient_scope"),
            ("refused", "invalid_arguments"),
            ("started", ""),
            ("refused", "task_not_found"),
            ("answered", ""),
            ("finished", ""),
            ("started", ""),
            ("cancelled", ""),
            ("finished", ""),
            ("refused", "tasks_required"),
            ("started", ""),
            ("cancelled", "sync_wait"),
        ],
        "{text}"
    );
    let allowed: &[&str] = &[
        "timestamp",
        "severity",
        "level",
        "target",
        "message",
        "requestId",
        "mcpMethod",
        "event",
        "principalIssuer",
        "principalSubject",
        "tool",
        "execution",
        "argumentsSha256",
        "answers",
        "status",
        "reason",
    ];
    let mut request_ids = std::collections::BTreeSet::new();
    for line in &lines {
        assert_eq!(line["target"], "flowgate::audit", "{line}");
        assert_eq!(line["message"], "audit", "{line}");
        for key in line.as_object().into_iter().flatten().map(|(k, _)| k) {
            assert!(
                allowed.contains(&key.as_str()),
                "undocumented field {key}: {line}"
            );
        }
        let rid = line["requestId"].as_str().unwrap_or_default();
        assert!(!rid.is_empty(), "{line}");
        request_ids.insert(rid.to_owned());
        let event = line["event"].as_str().unwrap_or_default();
        if line["reason"] == "unauthenticated" {
            assert!(line.get("principalIssuer").is_none(), "{line}");
            assert_eq!(line["principalSubject"], "anonymous", "{line}");
            continue;
        }
        assert_eq!(line["principalIssuer"], issuer.issuer.as_str(), "{line}");
        let who = if line["reason"] == "task_not_found" {
            "bob"
        } else {
            "alice"
        };
        assert_eq!(line["principalSubject"], who, "{line}");
        if matches!(event, "started" | "answered" | "cancelled" | "finished") {
            assert!(
                line["execution"].as_str().is_some_and(|e| !e.is_empty()),
                "{line}"
            );
            assert!(line["tool"].is_string(), "{line}");
        }
    }
    // One request, one id: the synchronous call's start and stop are one request.
    assert_eq!(
        request_ids.len(),
        lines.len() - 1,
        "one request, one id: {request_ids:?}"
    );
    assert_eq!(lines[11]["requestId"], lines[12]["requestId"]);

    let started = &lines[3];
    assert_eq!(started["tool"], "approve_deploy");
    assert_eq!(
        started["argumentsSha256"],
        sha256(r#"{"service":"billing","version":"v42"}"#),
        "the digest is of the canonical arguments"
    );
    assert_eq!(lines[2]["tool"], "approve_deploy");
    assert_eq!(
        lines[2]["argumentsSha256"],
        sha256(r#"{"service":"Not Valid!","version":"v42"}"#)
    );
    assert_eq!(lines[1]["tool"], "guarded");
    let answered = &lines[5];
    assert_eq!(answered["answers"], 1);
    assert_eq!(answered["execution"], started["execution"]);
    assert_eq!(
        answered["argumentsSha256"],
        sha256(&format!(
            r#"{{"{key}":{{"action":"accept","content":{{"approve":true,"reason":"ship-it-now"}}}}}}"#
        ))
    );
    assert_eq!(lines[6]["status"], "completed");
    assert_eq!(lines[6]["execution"], started["execution"]);
    assert_eq!(lines[7]["tool"], "long_job");
    assert_eq!(lines[8]["execution"], lines[7]["execution"]);
    assert_eq!(lines[9]["status"], "cancelled");

    assert_eq!(lines[10]["tool"], "approve_deploy");
    assert_eq!(lines[11]["tool"], "ask_now");
    assert_eq!(lines[12]["execution"], lines[11]["execution"]);

    // Values and tokens appear nowhere in the log.
    for secret in [
        "billing",
        "Not Valid!",
        "ship-it-now",
        alice.as_str(),
        bob.as_str(),
    ] {
        assert!(!text.contains(secret), "{secret:?} is in the log:\n{text}");
    }
}
