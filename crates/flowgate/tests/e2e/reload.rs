//! Reloading the manifest without a restart: `--watch` and SIGHUP, an atomic swap of the tool
//! set, a broken manifest that keeps the tools being served, and tasks of a removed tool.

use std::path::Path;
use std::time::{Duration, Instant};

use rmcp::model::TaskStatus;
use serde_json::{Value, json};

use crate::support::{
    Server, answer, first_input_key, free_port, http_client, poll_until, start_task,
};
use crate::telemetry::rpc;

/// A tool on the local engine: `name`, running `script` in `/bin/sh -c`.
fn tool(name: &str, script: &str) -> String {
    format!(
        "  - name: {name}\n    description: {name}\n    task: optional\n    poll_interval_ms: 200\n    \
         target:\n      engine: local\n      command: [\"/bin/sh\", \"-c\", {script:?}]\n"
    )
}

/// A tool that asks a yes/no question, then answers what it was told.
fn asking(name: &str) -> String {
    tool(
        name,
        "a=$(flowgate ask --message 'Go on?' --confirm --field confirm); echo \"{\\\"go\\\": $a}\"",
    )
}

fn write(path: &Path, text: &str) {
    // Written beside and renamed over, as editors save.
    let temporary = path.with_extension("tmp");
    std::fs::write(&temporary, text).expect("write the manifest");
    std::fs::rename(&temporary, path).expect("replace the manifest");
}

async fn tool_names(url: &str) -> Vec<String> {
    let client = http_client(url, true).await;
    let mut names: Vec<String> = client
        .list_all_tools()
        .await
        .expect("tools/list")
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    names.sort();
    names
}

/// Waits up to 20 s for the server to list exactly `names`.
async fn listed(url: &str, names: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let now = tool_names(url).await;
        if now == names {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the server lists {now:?}, not {names:?}, after 20 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn metrics(address: &str) -> String {
    reqwest::get(format!("http://{address}/metrics"))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text")
}

/// Waits up to 20 s for a line of the metrics.
async fn metric_line(address: &str, line: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let text = metrics(address).await;
        if text.lines().any(|l| l == line) {
            return;
        }
        assert!(Instant::now() < deadline, "no {line:?} in\n{text}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_watched_manifest_is_served_anew_and_a_broken_one_keeps_the_tools() {
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = dir.path().join("tools.yaml");
    write(
        &manifest,
        &format!("tools:\n{}{}", tool("keep", "echo '{}'"), asking("going")),
    );
    let log = dir.path().join("server.log");
    let metrics_at = format!("127.0.0.1:{}", free_port());
    let server = Server::start_with(
        dir.path(),
        Some(&manifest),
        &[
            ("FLOWGATE_WATCH", "true"),
            ("FLOWGATE_METRICS_LISTEN", &metrics_at),
        ],
        Some(&log),
    );
    let client = http_client(&server.url, true).await;
    // Two tasks of the tool about to go: one waits for its answer, one will be cancelled.
    let answered = start_task(&client, "going", json!({})).await;
    let cancelled = start_task(&client, "going", json!({})).await;
    let mut seen = vec![];
    let waiting = poll_until(&client, &answered, &[TaskStatus::InputRequired], &mut seen).await;
    poll_until(
        &client,
        &cancelled,
        &[TaskStatus::InputRequired],
        &mut vec![],
    )
    .await;

    // The tool goes, another comes: served without a restart.
    write(
        &manifest,
        &format!(
            "tools:\n{}{}",
            tool("keep", "echo '{}'"),
            tool("fresh", "echo '{}'")
        ),
    );
    listed(&server.url, &["fresh", "keep"]).await;
    metric_line(
        &metrics_at,
        "flowgate_manifest_reloads_total{result=\"ok\"} 1",
    )
    .await;
    metric_line(&metrics_at, "flowgate_tools 2").await;

    // The removed tool's tasks still answer tasks/get, tasks/update and tasks/cancel.
    let key = first_input_key(&waiting);
    answer(
        &client,
        &answered,
        &key,
        json!({"action": "accept", "content": {"confirm": true}}),
    )
    .await;
    let done = poll_until(&client, &answered, &[TaskStatus::Completed], &mut vec![]).await;
    assert_eq!(crate::support::result_json(&done), json!({"go": true}));
    let stopped = crate::support::cancel_and_settle(&client, &cancelled).await;
    assert_eq!(stopped["status"], "cancelled", "{stopped}");
    // A call of the removed tool is an unknown tool now.
    let call = rpc(
        &server.url,
        "tools/call",
        json!({"name": "going", "arguments": {}}),
        &[],
    )
    .await;
    assert!(
        call.get("error").is_some() || call["result"]["isError"] == true,
        "{call}"
    );

    // A broken manifest: the tools stay, the error is logged where it is, the metric says so.
    write(
        &manifest,
        "tools:\n  - name: broken\n    target:\n      engine: local\n      comand: [\"true\"]\n",
    );
    metric_line(&metrics_at, "flowgate_manifest_last_reload_successful 0").await;
    metric_line(
        &metrics_at,
        "flowgate_manifest_reloads_total{result=\"error\"} 1",
    )
    .await;
    assert_eq!(tool_names(&server.url).await, ["fresh", "keep"]);
    let logged = std::fs::read_to_string(&log).expect("log");
    assert!(
        logged.contains("tools.yaml:5:7") && logged.contains("comand"),
        "the located error is not in the log:\n{logged}"
    );
    // Fixed: served again, and the metric recovers.
    write(&manifest, &format!("tools:\n{}", tool("keep", "echo '{}'")));
    listed(&server.url, &["keep"]).await;
    metric_line(&metrics_at, "flowgate_manifest_last_reload_successful 1").await;
}

#[tokio::test]
async fn sighup_reloads_the_manifest() {
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = dir.path().join("tools.yaml");
    write(
        &manifest,
        &format!("tools:\n{}", tool("first", "echo '{}'")),
    );
    let server = Server::start(dir.path(), Some(&manifest));
    assert_eq!(tool_names(&server.url).await, ["first"]);
    write(
        &manifest,
        &format!(
            "tools:\n{}{}",
            tool("first", "echo '{}'"),
            tool("second", "echo '{}'")
        ),
    );
    // Not watched: nothing changes until the signal.
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(tool_names(&server.url).await, ["first"]);
    let status = std::process::Command::new("kill")
        .args(["-HUP", &server.child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    listed(&server.url, &["first", "second"]).await;
}

#[tokio::test]
async fn a_task_whose_tool_is_no_longer_served_gets_an_error_saying_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = dir.path().join("tools.yaml");
    write(&manifest, &format!("tools:\n{}", asking("retired")));
    let mut first = Server::start(dir.path(), Some(&manifest));
    let client = http_client(&first.url, true).await;
    let task = start_task(&client, "retired", json!({})).await;
    first.kill();
    // Another instance (same keys, same state), started after the tool was removed.
    write(
        &manifest,
        &format!("tools:\n{}", tool("other", "echo '{}'")),
    );
    let second = Server::start(dir.path(), Some(&manifest));
    for method in ["tasks/get", "tasks/cancel"] {
        let got: Value = rpc(&second.url, method, json!({"taskId": task}), &[]).await;
        assert_eq!(got["error"]["code"], -32602, "{got}");
        let message = got["error"]["message"].as_str().unwrap_or_default();
        // A task id names its tool by a tag (ids are at most 128 characters), so the message
        // says why without the name.
        assert!(
            message.contains("its tool is no longer served") && message.contains("reload"),
            "{message}"
        );
    }
    // An id that never was stays the plain "not found".
    let forged = rpc(
        &second.url,
        "tasks/get",
        json!({"taskId": "fg1.k1.nope"}),
        &[],
    )
    .await;
    assert_eq!(forged["error"]["code"], -32602);
    assert!(
        !forged["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("no longer served")
    );
    // The retired tool's command still waits for its answer: stopped, so it outlives nothing.
    crate::support::stop_runs(dir.path());
}
