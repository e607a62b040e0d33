//! Bad input gets a clear error and loses nothing.

use std::process::Command;

use flowgate_core::handle::{Keyring, ToolTag};
use rmcp::model::CallToolResponse;
use serde_json::json;

use crate::support::*;

fn assert_not_found((status, body): (u16, serde_json::Value), what: &str) {
    assert_eq!(
        body["error"]["code"], -32602,
        "{what}: HTTP {status} {body}"
    );
    assert_eq!(
        body["error"]["message"], "Failed to retrieve task: Task not found",
        "{what}"
    );
}

#[tokio::test]
async fn forged_handles_are_all_the_same_task_not_found() {
    let state = tempfile::tempdir().expect("tempdir");
    let server = Server::start(state.path(), None);
    let client = http_client(&server.url, true).await;
    let id = start_task(&client, "long_job", json!({"steps": 1})).await;

    let mut tampered = id.clone().into_bytes();
    let i = tampered.len() - 10;
    tampered[i] = if tampered[i] == b'x' { b'y' } else { b'x' };
    let tampered = String::from_utf8(tampered).expect("ascii");
    let truncated = id[..id.len() - 4].to_owned();
    let random = format!("fg2.{}", "Q".repeat(120));
    let random_v1 = format!("fg1.k1.{}", "Q".repeat(140));
    // The same tool and run, sealed by another deployment's key (same key id): the tool's tag
    // is the one this server computes, so only the key differs.
    let run = runs(state.path())
        .first()
        .and_then(|p| p.file_name()?.to_str().map(str::to_owned))
        .expect("a run folder");
    let tag = ToolTag::of("local", "long_job", &state.path().display().to_string());
    let other_key = Keyring::parse("k1:ZZECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8")
        .expect("key")
        .seal(tag, chrono_now(), &run, "anonymous")
        .expect("fits");
    // And by this deployment's key for another principal.
    let foreign = Keyring::parse(KEY)
        .expect("key")
        .seal(tag, chrono_now(), &run, "someone-else")
        .expect("fits");
    for (what, bad) in [
        ("tampered", &tampered),
        ("truncated", &truncated),
        ("random", &random),
        ("random fg1", &random_v1),
        ("other deployment", &other_key),
        ("another principal's", &foreign),
    ] {
        for method in ["tasks/get", "tasks/cancel"] {
            assert_not_found(
                raw(&server.url, method, Some(bad), json!({"taskId": bad})).await,
                what,
            );
        }
        let update = json!({"taskId": bad, "inputResponses": {}});
        assert_not_found(
            raw(&server.url, "tasks/update", Some(bad), update).await,
            what,
        );
    }
    // The real handle still works after all that.
    let (_, body) = raw(&server.url, "tasks/get", Some(&id), json!({"taskId": id})).await;
    assert_eq!(body["result"]["taskId"], id.as_str(), "{body}");
}

fn chrono_now() -> chrono::DateTime<chrono::Utc> {
    chrono::Utc::now()
}

#[test]
fn a_handle_sealed_for_another_principal_does_not_open() {
    let keys = Keyring::parse(KEY).expect("key");
    let tag = ToolTag::of("local", "long_job", "/state");
    let run = "0123456789abcdef0123456789abcdef";
    let seal = |principal: &str| keys.seal(tag, chrono_now(), run, principal).expect("fits");
    let for_alice = seal("alice");
    assert!(keys.open(&for_alice, "alice").is_ok());
    assert!(keys.open(&for_alice, flowgate_server::ANONYMOUS).is_err());
    assert!(
        keys.open(&seal(flowgate_server::ANONYMOUS), "alice")
            .is_err()
    );
}

/// A task id sealed before ids were compact (`fg1`, the whole reference inside) still answers
/// after the upgrade, as the same task the new id names.
#[tokio::test]
async fn ids_sealed_before_the_upgrade_still_answer() {
    let state = tempfile::tempdir().expect("tempdir");
    let server = Server::start(state.path(), None);
    let client = http_client(&server.url, true).await;
    let id = start_task(&client, "long_job", json!({"steps": 30})).await;
    assert!(id.starts_with("fg2.") && id.len() <= 128, "{id}");
    let run = runs(state.path())
        .first()
        .and_then(|p| p.file_name()?.to_str().map(str::to_owned))
        .expect("a run folder");
    let body =
        json!({"e": "local", "t": "long_job", "x": run, "c": chrono_now().timestamp_millis()});
    let old = Keyring::parse(KEY).expect("key").seal_bytes(
        "fg1",
        &serde_json::to_vec(&body).expect("json"),
        flowgate_server::ANONYMOUS,
    );
    let (_, now) = raw(&server.url, "tasks/get", Some(&id), json!({"taskId": id})).await;
    let (_, then) = raw(&server.url, "tasks/get", Some(&old), json!({"taskId": old})).await;
    assert_eq!(then["result"]["taskId"], old.as_str(), "{then}");
    assert_eq!(then["result"]["status"], "working", "{then}");
    assert_eq!(now["result"]["status"], "working", "{now}");
    // Both name one run: cancelling through the old id ends the task the new id names.
    let (_, cancelled) = raw(
        &server.url,
        "tasks/cancel",
        Some(&old),
        json!({"taskId": old}),
    )
    .await;
    assert!(cancelled.get("error").is_none(), "{cancelled}");
    let mut status = String::new();
    for _ in 0..100 {
        let (_, now) = raw(&server.url, "tasks/get", Some(&id), json!({"taskId": id})).await;
        status = now["result"]["status"].as_str().unwrap_or("").to_owned();
        if status != "working" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(status, "cancelled");
}

#[tokio::test]
async fn bad_arguments_get_a_tool_error_naming_each_field() {
    let state = tempfile::tempdir().expect("tempdir");
    let server = Server::start(state.path(), None);
    let client = http_client(&server.url, true).await;
    let response = client
        .call_tool_once(call(
            "approve_deploy",
            json!({"service": "Bad Name!", "extra": 1}),
        ))
        .await
        .expect("tools/call");
    let CallToolResponse::Complete(result) = response else {
        panic!("expected a tool error")
    };
    assert_eq!(result.is_error, Some(true));
    let text = serde_json::to_value(&result).expect("json")["content"][0]["text"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    assert!(text.contains("argument /service"), "{text}");
    assert!(
        text.contains("\"version\" is a required property"),
        "{text}"
    );
    assert!(text.contains("extra"), "{text}");
    assert!(
        runs(state.path()).is_empty(),
        "nothing may start on bad arguments"
    );
}

#[tokio::test]
async fn malformed_json_rpc_gets_an_error_not_a_crash() {
    let state = tempfile::tempdir().expect("tempdir");
    let server = Server::start(state.path(), None);
    let (status, body) = raw_body(&server.url, "tools/list", None, "{not json").await;
    assert!(status >= 400, "HTTP {status} {body}");
    let (status, _) = raw(
        &server.url,
        "tools/call",
        Some("nope"),
        json!({"name": "nope"}),
    )
    .await;
    assert!(status < 500);
    let (_, body) = raw(&server.url, "tools/list", None, json!({})).await;
    assert_eq!(
        body["result"]["tools"].as_array().map(Vec::len),
        Some(3),
        "still serving: {body}"
    );
}

/// Writes `text` to `path`, runs `flowgate check` on it, and returns (success, stderr).
fn check(path: &std::path::Path, text: &str) -> (bool, String) {
    std::fs::write(path, text).expect("write");
    let out = Command::new(bin())
        .arg("check")
        .arg(path)
        .output()
        .expect("run check");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_broken_manifest_fails_check_with_line_and_column() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("broken.yaml");
    let (ok, stderr) = check(
        &path,
        "tools:\n  - name: a\n    target:\n      engine: local\n      comand: [true]\n",
    );
    assert!(!ok);
    assert!(
        stderr.contains("broken.yaml:5:7: local target: unknown field `comand`"),
        "the typo's own line and column: {stderr}"
    );

    let (ok, stderr) = check(
        &path,
        "tools:\n  - name: a\n    description: ${FLOWGATE_E2E_UNSET_ONE}\n    target:\n      engine: local\n      command:\n        - ${FLOWGATE_E2E_UNSET_TWO}\n",
    );
    assert!(!ok);
    assert!(
        stderr
            .contains("broken.yaml:3:18: environment variable `FLOWGATE_E2E_UNSET_ONE` is not set")
            && stderr.contains(
                "broken.yaml:7:11: environment variable `FLOWGATE_E2E_UNSET_TWO` is not set"
            ),
        "both unset variables in one run: {stderr}"
    );

    let (ok, stderr) = check(
        &path,
        "tools:\n  - name: a\n    tsk: required\n    target: {engine: local, command: [true]}\n",
    );
    assert!(!ok);
    assert!(
        stderr.contains("broken.yaml:3:5:")
            && stderr.contains("tsk")
            && !stderr.contains("line 3 column 5"),
        "located once: {stderr}"
    );

    let (ok, stderr) = check(&path, "tools:\n  - name: a\n    target: {engine: nosuch}\n");
    assert!(!ok);
    assert!(
        stderr.contains("broken.yaml:3:") && stderr.contains("unknown engine \"nosuch\""),
        "{stderr}"
    );

    let (ok, stderr) = check(
        &path,
        "tools:\n  - name: quick\n    target: {engine: stepfunctions, type: express, state_machine_arn: 'arn:aws:states:us-east-1:123456789012:stateMachine:q'}\n",
    );
    assert!(!ok);
    assert!(
        stderr.contains("broken.yaml:2:") && stderr.contains("set `task: forbidden`"),
        "express is never a task: {stderr}"
    );

    let good = Command::new(bin())
        .args([
            "check",
            concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/flowgate.yaml"),
        ])
        .output()
        .expect("run");
    assert!(
        good.status.success(),
        "{}",
        String::from_utf8_lossy(&good.stderr)
    );
}

#[test]
fn a_reader_that_goes_away_ends_a_commands_output_quietly() {
    // `flowgate policy | head -1`: the reader closes the pipe before all is written.
    for args in [
        vec!["env"],
        vec!["policy", "examples/stepfunctions"],
        vec!["tools", "examples/flowgate.yaml"],
    ] {
        let mut child = Command::new(bin())
            .args(&args)
            .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn");
        drop(child.stdout.take());
        let out = child.wait_with_output().expect("wait");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert_ne!(out.status.code(), Some(101), "{args:?}: {stderr}");
    }
}
