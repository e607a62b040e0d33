//! Traces and metrics end to end: `flowgate serve` exporting real OTLP (HTTP/protobuf and gRPC)
//! to the receiver scripts/test starts (tests/fakes/otlp, which decodes it with the
//! opentelemetry-proto messages), and a real Prometheus server scraping its metrics listener.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{KEY, Server, bin, free_port};

/// The receiver's HTTP address (OTLP/HTTP at `/v1/traces`, the spans at `/spans`).
pub(crate) fn otlp_http() -> String {
    std::env::var("FLOWGATE_TEST_OTLP_URL").unwrap_or_else(|_| {
        panic!(
            "FLOWGATE_TEST_OTLP_URL is not set: these tests need the OTLP receiver scripts/test \
             starts (.venv-otlp/bin/python tests/fakes/otlp/otlp_receiver.py --port 0 \
             --grpc-port 0, after pip install opentelemetry-proto grpcio); run them through \
             scripts/test, or start it and export FLOWGATE_TEST_OTLP_URL=http://127.0.0.1:PORT \
             and FLOWGATE_TEST_OTLP_GRPC=127.0.0.1:GRPC_PORT"
        )
    })
}

/// The receiver's OTLP/gRPC address.
fn otlp_grpc() -> String {
    let grpc = std::env::var("FLOWGATE_TEST_OTLP_GRPC")
        .unwrap_or_else(|_| panic!("FLOWGATE_TEST_OTLP_GRPC is not set (see otlp_http)"));
    format!("http://{grpc}")
}

/// A name no other test (or earlier run) uses: each server exports under its own service name.
pub(crate) fn unique(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    format!("{name}-{}-{nanos:08x}", std::process::id())
}

/// A random W3C trace id and span id, as a client would start a trace.
fn client_trace() -> (String, String) {
    let bytes: [u8; 24] = std::array::from_fn(|i| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or_default();
        (nanos.rotate_left(i as u32 * 5) as u8) ^ (i as u8).wrapping_mul(37) ^ 0x5a
    });
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    (hex(&bytes[..16]), hex(&bytes[16..]))
}

/// Every span the receiver holds for `service`.
pub(crate) async fn spans(service: &str) -> Vec<Value> {
    let url = format!("{}/spans?service={service}", otlp_http());
    reqwest::get(&url)
        .await
        .expect("the receiver answers")
        .json()
        .await
        .expect("spans as JSON")
}

/// Waits up to 20 s for the receiver to hold spans of `service` that `done` accepts.
async fn spans_until(service: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let got = spans(service).await;
        if done(&got) {
            return got;
        }
        assert!(
            Instant::now() < deadline,
            "the receiver did not get the spans within 20 s; it has {got:#?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A manifest with one local tool that runs for `seconds` and prints a JSON object.
fn manifest(dir: &Path, seconds: f32) -> std::path::PathBuf {
    let path = dir.join("tools.yaml");
    std::fs::write(
        &path,
        format!(
            "tools:\n  - name: nap\n    description: sleeps, then answers\n    task: optional\n    \
             poll_interval_ms: 200\n    target:\n      engine: local\n      command: [\"/bin/sh\", \
             \"-c\", \"sleep {seconds}; echo '{{\\\"rested\\\": true}}'\"]\n"
        ),
    )
    .expect("manifest");
    path
}

/// One 2026-07-28 JSON-RPC request with the task extension, and extra headers; the answer.
pub(crate) async fn rpc(
    url: &str,
    method: &str,
    params: Value,
    headers: &[(&str, String)],
) -> Value {
    let mut params = params;
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "telemetry-e2e", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
    });
    let name = params["name"]
        .as_str()
        .or(params["taskId"].as_str())
        .map(str::to_owned);
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params});
    let mut request = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method)
        .body(body.to_string());
    if let Some(name) = name {
        request = request.header("mcp-name", name);
    }
    for (k, v) in headers {
        request = request.header(*k, v);
    }
    let response = request.send().await.expect("http");
    response.json().await.expect("a JSON answer")
}

/// Starts a task of `nap` and polls it to its end; returns the task id.
async fn one_task(url: &str, headers: &[(&str, String)]) -> String {
    let created = rpc(
        url,
        "tools/call",
        json!({"name": "nap", "arguments": {}}),
        headers,
    )
    .await;
    let task = created["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("no task: {created}"))
        .to_owned();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let got = rpc(url, "tasks/get", json!({"taskId": task}), headers).await;
        if got["result"]["status"] == "completed" {
            return task;
        }
        assert!(Instant::now() < deadline, "the task did not end: {got}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn attr<'a>(span: &'a Value, key: &str) -> &'a Value {
    &span["attributes"][key]
}

/// Checks the span tree of one task's calls: each request a SERVER span whose parent is the
/// client's span, each engine call a CLIENT span under its request.
fn check_tree(spans: &[Value], trace: &str, client_span: &str) {
    let requests: Vec<&Value> = spans
        .iter()
        .filter(|s| s["kind"] == "SERVER" && s["trace_id"] == trace)
        .collect();
    let call = requests
        .iter()
        .find(|s| s["name"] == "tools/call nap")
        .unwrap_or_else(|| panic!("no tools/call span in {spans:#?}"));
    assert_eq!(call["parent_span_id"], client_span, "{call:#}");
    assert_eq!(attr(call, "mcp.method.name"), "tools/call");
    assert_eq!(attr(call, "gen_ai.tool.name"), "nap");
    assert_eq!(attr(call, "flowgate.outcome"), "ok");
    let gets: Vec<&&Value> = requests
        .iter()
        .filter(|s| s["name"] == "tasks/get")
        .collect();
    assert!(!gets.is_empty(), "no tasks/get span in {spans:#?}");
    for get in &gets {
        assert_eq!(get["parent_span_id"], client_span);
        assert_eq!(attr(get, "flowgate.tool"), "nap", "{get:#}");
    }
    // Engine calls: the start under the call, a read under each poll.
    let start = spans
        .iter()
        .find(|s| s["name"] == "local start")
        .unwrap_or_else(|| panic!("no engine start span in {spans:#?}"));
    assert_eq!(start["kind"], "CLIENT");
    assert_eq!(start["trace_id"], trace);
    assert_eq!(start["parent_span_id"], call["span_id"]);
    assert_eq!(attr(start, "flowgate.engine"), "local");
    assert_eq!(attr(start, "flowgate.operation"), "start");
    assert_eq!(attr(start, "flowgate.status"), "ok");
    assert_eq!(attr(start, "flowgate.retry"), false);
    for get in &gets {
        let read = spans
            .iter()
            .find(|s| s["name"] == "local get" && s["parent_span_id"] == get["span_id"])
            .unwrap_or_else(|| panic!("no engine read under {get:#} in {spans:#?}"));
        assert_eq!(attr(read, "flowgate.status"), "ok");
    }
    assert!(
        spans
            .iter()
            .any(|s| s["name"] == "local get" && attr(s, "flowgate.task.state") == "completed"),
        "no read saw the task completed: {spans:#?}"
    );
}

#[tokio::test]
async fn one_tasks_calls_are_one_trace_over_otlp_http() {
    let state = tempfile::tempdir().expect("tempdir");
    let manifest = manifest(state.path(), 0.5);
    let service = unique("flowgate-http");
    let endpoint = otlp_http();
    let server = Server::start_with(
        state.path(),
        Some(&manifest),
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_SERVICE_NAME", &service),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
        None,
    );
    let (trace, client_span) = client_trace();
    let traceparent = format!("00-{trace}-{client_span}-01");
    one_task(&server.url, &[("traceparent", traceparent)]).await;
    let spans = spans_until(&service, |spans| {
        spans
            .iter()
            .any(|s| s["name"] == "local get" && attr(s, "flowgate.task.state") == "completed")
            && spans.iter().any(|s| s["name"] == "tools/call nap")
    })
    .await;
    check_tree(&spans, &trace, &client_span);
    assert!(spans.iter().all(|s| s["transport"] == "http"));
    assert_eq!(spans[0]["resource"]["service.name"], service.as_str());
}

#[tokio::test]
async fn one_tasks_calls_are_one_trace_over_otlp_grpc_with_the_configured_headers() {
    let state = tempfile::tempdir().expect("tempdir");
    let manifest = manifest(state.path(), 0.5);
    let service = unique("flowgate-grpc");
    let endpoint = otlp_grpc();
    let server = Server::start_with(
        state.path(),
        Some(&manifest),
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "x-team=ops,x-tenant=blue"),
            ("OTEL_SERVICE_NAME", &service),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
        None,
    );
    // The client's trace context in the request's _meta (SEP-414) instead of a header.
    let (trace, client_span) = client_trace();
    let traceparent = format!("00-{trace}-{client_span}-01");
    let created = rpc_with_meta_trace(&server.url, &traceparent).await;
    assert!(created["result"]["taskId"].is_string(), "{created}");
    let spans = spans_until(&service, |spans| {
        spans.iter().any(|s| s["name"] == "local start")
            && spans.iter().any(|s| s["name"] == "tools/call nap")
    })
    .await;
    let call = spans
        .iter()
        .find(|s| s["name"] == "tools/call nap")
        .expect("the call's span");
    assert_eq!(call["trace_id"], trace.as_str());
    assert_eq!(call["parent_span_id"], client_span.as_str());
    let start = spans
        .iter()
        .find(|s| s["name"] == "local start")
        .expect("the start's span");
    assert_eq!(start["parent_span_id"], call["span_id"]);
    for span in &spans {
        assert_eq!(span["transport"], "grpc");
        assert_eq!(span["headers"]["x-team"], "ops");
        assert_eq!(span["headers"]["x-tenant"], "blue");
    }
}

/// A `tools/call` of `nap` whose `_meta` carries `traceparent`.
async fn rpc_with_meta_trace(url: &str, traceparent: &str) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "nap", "arguments": {},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "telemetry-e2e", "version": "0"},
            "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
            "traceparent": traceparent,
        }
    }});
    reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "nap")
        .body(body.to_string())
        .send()
        .await
        .expect("http")
        .json()
        .await
        .expect("JSON")
}

#[tokio::test]
async fn a_collector_that_never_answers_slows_no_request() {
    // A collector that accepts connections and never answers.
    let hole = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = hole.local_addr().expect("address");
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in hole.incoming().flatten() {
            held.push(stream);
        }
    });
    let state = tempfile::tempdir().expect("tempdir");
    let manifest = manifest(state.path(), 30.0);
    let endpoint = format!("http://{address}");
    let server = Server::start_with(
        state.path(),
        Some(&manifest),
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "60000"),
            ("OTEL_BSP_SCHEDULE_DELAY", "10"),
            ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "1"),
        ],
        None,
    );
    let created = rpc(
        &server.url,
        "tools/call",
        json!({"name": "nap", "arguments": {}}),
        &[],
    )
    .await;
    let task = created["result"]["taskId"]
        .as_str()
        .expect("a task")
        .to_owned();
    // Every export now hangs for a minute; every poll still answers at once.
    let began = Instant::now();
    for _ in 0..30 {
        let one = Instant::now();
        let got = rpc(&server.url, "tasks/get", json!({"taskId": task}), &[]).await;
        assert_eq!(got["result"]["status"], "working", "{got}");
        assert!(
            one.elapsed() < Duration::from_secs(2),
            "a poll waited {:?} for the collector",
            one.elapsed()
        );
    }
    assert!(began.elapsed() < Duration::from_secs(20));
}

#[test]
fn a_protocol_flowgate_cannot_speak_stops_the_start_naming_the_variable() {
    let state = tempfile::tempdir().expect("tempdir");
    let out = std::process::Command::new(bin())
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env("FLOWGATE_STATE_DIR", state.path())
        .env("FLOWGATE_HANDLE_KEYS", KEY)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
        .output()
        .expect("run");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("OTEL_EXPORTER_OTLP_PROTOCOL"), "{stderr}");
    assert!(stderr.contains("http/protobuf or grpc"), "{stderr}");
}

/// A real Prometheus server, and the folder of its scrape targets (file_sd).
fn prometheus() -> (String, std::path::PathBuf) {
    let missing = |name: &str| {
        panic!(
            "{name} is not set: this test needs the Prometheus server scripts/test starts \
             (Debian package prometheus, scraping file_sd targets in \
             FLOWGATE_TEST_PROMETHEUS_TARGETS every second); run it through scripts/test"
        )
    };
    let url = std::env::var("FLOWGATE_TEST_PROMETHEUS_URL")
        .unwrap_or_else(|_| missing("FLOWGATE_TEST_PROMETHEUS_URL"));
    let targets = std::env::var("FLOWGATE_TEST_PROMETHEUS_TARGETS")
        .unwrap_or_else(|_| missing("FLOWGATE_TEST_PROMETHEUS_TARGETS"));
    (url, targets.into())
}

/// A scrape target listed for Prometheus while it lives.
struct Target(std::path::PathBuf);

impl Target {
    fn list(folder: &Path, address: &str, label: &str) -> Target {
        let path = folder.join(format!("{label}.json"));
        let temporary = folder.join(format!(".{label}.tmp"));
        let targets = json!([{"targets": [address], "labels": {"flowgate_test": label}}]);
        std::fs::write(&temporary, targets.to_string()).expect("target file");
        std::fs::rename(&temporary, &path).expect("target file");
        Target(path)
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Asks Prometheus `query` until its answer holds a series with `value` (20 s at most).
async fn prometheus_value(prometheus: &str, query: &str, value: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let answer: Value = reqwest::Client::new()
            .get(format!("{prometheus}/api/v1/query"))
            .query(&[("query", query)])
            .send()
            .await
            .expect("Prometheus answers")
            .json()
            .await
            .expect("JSON");
        assert_eq!(answer["status"], "success", "{answer}");
        let result = &answer["data"]["result"];
        if result
            .as_array()
            .is_some_and(|r| r.iter().any(|s| s["value"][1] == value))
        {
            return result.clone();
        }
        assert!(
            Instant::now() < deadline,
            "Prometheus did not answer {query} with {value} within 20 s: {answer}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test]
async fn prometheus_scrapes_flowgate_and_answers_for_the_series_of_one_call() {
    let (prometheus, folder) = prometheus();
    let state = tempfile::tempdir().expect("tempdir");
    let manifest = manifest(state.path(), 0.3);
    let port = free_port();
    let address = format!("127.0.0.1:{port}");
    let server = Server::start_with(
        state.path(),
        Some(&manifest),
        &[("FLOWGATE_METRICS_LISTEN", &address)],
        None,
    );
    crate::support::wait_for_port(port);
    let label = unique("metrics");
    let _target = Target::list(&folder, &address, &label);
    let task = one_task(&server.url, &[]).await;
    assert!(!task.is_empty());
    let by = format!("flowgate_test=\"{label}\"");
    // Prometheus reads the exposition without error...
    prometheus_value(&prometheus, &format!("up{{{by}}}"), "1").await;
    // ...and answers for the one call's series.
    let start = prometheus_value(
        &prometheus,
        &format!(
            "flowgate_engine_calls_total{{{by},tool=\"nap\",engine=\"local\",operation=\"start\",outcome=\"ok\"}}"
        ),
        "1",
    )
    .await;
    assert_eq!(start.as_array().map(Vec::len), Some(1), "{start}");
    prometheus_value(
        &prometheus,
        &format!(
            "flowgate_engine_call_duration_seconds_count{{{by},tool=\"nap\",operation=\"start\"}}"
        ),
        "1",
    )
    .await;
    prometheus_value(
        &prometheus,
        &format!(
            "flowgate_build_info{{{by},version=\"{}\"}}",
            env!("CARGO_PKG_VERSION")
        ),
        "1",
    )
    .await;
    prometheus_value(&prometheus, &format!("flowgate_tools{{{by}}}"), "1").await;
}

/// The value of the series `series` (name and labels exactly as exposed) in `text`.
fn series_value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

#[tokio::test]
async fn metrics_count_tasks_requests_and_refusals_by_reason_and_spans_name_only_the_issuer() {
    use flowgate_auth::testing::FakeIssuer;

    const AUDIENCE: &str = "https://flowgate-metrics.a.run.app";
    let google = FakeIssuer::start().await;
    let token = |email: &str, audience: &str| {
        let now = chrono::Utc::now().timestamp();
        google.sign_rs256(&json!({
            "iss": "https://accounts.google.com", "aud": audience, "sub": "1000",
            "email": email, "email_verified": true, "iat": now, "exp": now + 600,
        }))
    };
    let state = tempfile::tempdir().expect("tempdir");
    let manifest = state.path().join("tools.yaml");
    let tool = |name: &str, interval: u32, seconds: f32| {
        format!(
            "  - name: {name}\n    description: {name}\n    task: optional\n    \
             poll_interval_ms: {interval}\n    target:\n      engine: local\n      command: \
             [\"/bin/sh\", \"-c\", \"sleep {seconds}; echo '{{}}'\"]\n"
        )
    };
    std::fs::write(
        &manifest,
        format!(
            "tools:\n{}{}",
            tool("nap", 200, 0.3),
            tool("long", 1500, 60.0)
        ),
    )
    .expect("manifest");
    let metrics_at = format!("127.0.0.1:{}", free_port());
    let service = unique("flowgate-metrics");
    let jwks = google.jwks_url();
    let endpoint = otlp_http();
    let server = Server::start_with(
        state.path(),
        Some(&manifest),
        &[
            ("FLOWGATE_AUTH_MODE", "google-id-token"),
            ("FLOWGATE_AUTH_AUDIENCE", AUDIENCE),
            ("FLOWGATE_AUTH_JWKS_URL", &jwks),
            ("FLOWGATE_AUTH_ALLOWED", "alice@p.iam.gserviceaccount.com"),
            ("FLOWGATE_METRICS_LISTEN", &metrics_at),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_SERVICE_NAME", &service),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
        None,
    );
    let alice = token("alice@p.iam.gserviceaccount.com", AUDIENCE);
    let as_alice = [("authorization", format!("Bearer {alice}"))];

    // Refusals, one of each reason an ID token can have.
    let list = |headers: Vec<(&'static str, String)>| {
        let url = server.url.clone();
        async move {
            let mut post = reqwest::Client::new()
                .post(&url)
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .body(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}"#);
            for (k, v) in headers {
                post = post.header(k, v);
            }
            post.send().await.expect("http").status().as_u16()
        }
    };
    assert_eq!(list(vec![]).await, 401);
    let elsewhere = token("alice@p.iam.gserviceaccount.com", "https://other.a.run.app");
    assert_eq!(
        list(vec![("authorization", format!("Bearer {elsewhere}"))]).await,
        401
    );
    let stranger = token("someone@elsewhere.test", AUDIENCE);
    assert_eq!(
        list(vec![("authorization", format!("Bearer {stranger}"))]).await,
        403
    );

    // One task to its end, one cancelled, one forged id.
    one_task(&server.url, &as_alice).await;
    let created = rpc(
        &server.url,
        "tools/call",
        json!({"name": "long", "arguments": {}}),
        &as_alice,
    )
    .await;
    let long = created["result"]["taskId"].as_str().expect("a task");
    let cancelled = rpc(
        &server.url,
        "tasks/cancel",
        json!({"taskId": long}),
        &as_alice,
    )
    .await;
    assert!(cancelled.get("result").is_some(), "{cancelled}");
    let forged = rpc(
        &server.url,
        "tasks/get",
        json!({"taskId": "fg1.k1.forged"}),
        &as_alice,
    )
    .await;
    assert_eq!(forged["error"]["code"], -32602, "{forged}");

    let text = reqwest::get(format!("http://{metrics_at}/metrics"))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    let value = |series: &str| {
        series_value(&text, series).unwrap_or_else(|| panic!("no {series} in\n{text}"))
    };
    for reason in ["unauthenticated", "invalid_token", "not_allowed"] {
        assert_eq!(
            value(&format!(
                "flowgate_auth_refusals_total{{reason=\"{reason}\"}}"
            )),
            1.0
        );
    }
    assert_eq!(
        value("flowgate_tasks_started_total{tool=\"nap\",engine=\"local\"}"),
        1.0
    );
    assert_eq!(
        value("flowgate_tasks_finished_total{tool=\"nap\",engine=\"local\",state=\"completed\"}"),
        1.0
    );
    assert_eq!(
        value("flowgate_tasks_cancelled_total{tool=\"long\",engine=\"local\",reason=\"client\"}"),
        1.0
    );
    assert!(value("flowgate_tasks_get_total{tool=\"nap\"}") >= 1.0);
    // The interval advertised last: the tool's, for a task created and for each poll.
    assert_eq!(value("flowgate_poll_interval_seconds{tool=\"nap\"}"), 0.2);
    assert_eq!(value("flowgate_poll_interval_seconds{tool=\"long\"}"), 1.5);
    assert_eq!(
        value(
            "flowgate_engine_call_duration_seconds_count{tool=\"nap\",engine=\"local\",operation=\"start\"}"
        ),
        1.0
    );
    assert_eq!(
        value(
            "flowgate_engine_calls_total{tool=\"long\",engine=\"local\",operation=\"cancel\",outcome=\"ok\"}"
        ),
        1.0
    );
    assert_eq!(
        value("flowgate_mcp_requests_total{method=\"tools/call\",outcome=\"ok\",code=\"\"}"),
        2.0
    );
    assert_eq!(
        value(
            "flowgate_mcp_requests_total{method=\"tasks/get\",outcome=\"error\",code=\"-32602\"}"
        ),
        1.0
    );
    assert_eq!(
        value(&format!(
            "flowgate_build_info{{version=\"{}\"}}",
            env!("CARGO_PKG_VERSION")
        )),
        1.0
    );

    // The request spans name who vouched for the caller, never the caller or its token.
    let spans = spans_until(&service, |spans| {
        spans.iter().any(|s| s["name"] == "tools/call long")
            && spans.iter().any(|s| s["name"] == "tasks/cancel")
            // The forged poll came last; its span may leave in a later batch.
            && spans
                .iter()
                .any(|s| s["name"] == "tasks/get" && attr(s, "flowgate.outcome") == "error")
    })
    .await;
    let call = spans
        .iter()
        .find(|s| s["name"] == "tools/call long")
        .expect("the call's span");
    assert_eq!(
        attr(call, "flowgate.principal.issuer"),
        "https://accounts.google.com"
    );
    let cancel = spans
        .iter()
        .find(|s| s["name"] == "tasks/cancel")
        .expect("the cancel's span");
    assert_eq!(attr(cancel, "flowgate.tool"), "long");
    let forged = spans
        .iter()
        .find(|s| s["name"] == "tasks/get" && attr(s, "flowgate.outcome") == "error")
        .unwrap_or_else(|| panic!("no span of the forged tasks/get in {spans:#?}"));
    assert_eq!(attr(forged, "error.type"), "-32602");
    assert_eq!(attr(forged, "rpc.response.status_code"), "-32602");
    let all = serde_json::to_string(&spans).expect("json");
    assert!(!all.contains("alice@"), "{all}");
    assert!(!all.contains(&alice), "a token in the spans");
}

#[test]
fn stdio_requests_are_spans_too_for_rmcp_and_the_2025_11_25_dialect() {
    use std::io::{BufRead as _, Write as _};

    let state = tempfile::tempdir().expect("tempdir");
    let manifest = manifest(state.path(), 0.3);
    let service = unique("flowgate-stdio");
    let mut child = std::process::Command::new(bin())
        .args(["serve", "--stdio", "--manifest"])
        .arg(&manifest)
        .env("FLOWGATE_STATE_DIR", state.path())
        .env("FLOWGATE_HANDLE_KEYS", KEY)
        .env("FLOWGATE_LOG", "warn")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", otlp_http())
        .env("OTEL_SERVICE_NAME", &service)
        .env("OTEL_BSP_SCHEDULE_DELAY", "100")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("flowgate serve --stdio");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = std::io::BufReader::new(child.stdout.take().expect("stdout"));
    let mut ask = |message: Value| -> Value {
        writeln!(stdin, "{message}").expect("write");
        if message.get("id").is_none() {
            return Value::Null;
        }
        let mut line = String::new();
        stdout.read_line(&mut line).expect("read");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"))
    };
    let (trace, client_span) = client_trace();
    let meta = json!({"traceparent": format!("00-{trace}-{client_span}-01")});
    let init = ask(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "telemetry-e2e", "version": "0"}}}),
    );
    assert!(init.get("result").is_some(), "{init}");
    ask(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    // A synchronous call (rmcp's), then a task (the 2025-11-25 dialect's), its poll, a forgery.
    let sync = ask(
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "nap", "arguments": {}, "_meta": meta}}),
    );
    assert_eq!(sync["result"]["isError"], false, "{sync}");
    let created = ask(
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": "nap", "arguments": {}, "task": {"ttl": 60000}, "_meta": meta}}),
    );
    let task = created["result"]["task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("no task: {created}"))
        .to_owned();
    let got = ask(
        json!({"jsonrpc": "2.0", "id": 4, "method": "tasks/get", "params": {
        "taskId": task, "_meta": meta}}),
    );
    assert!(got.get("result").is_some(), "{got}");
    let forged = ask(
        json!({"jsonrpc": "2.0", "id": 5, "method": "tasks/get", "params": {
        "taskId": "fg1.k1.forged"}}),
    );
    assert_eq!(forged["error"]["code"], -32602, "{forged}");
    drop(stdin);
    let _ = child.wait();

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let spans = runtime.block_on(spans_until(&service, |spans| {
        spans
            .iter()
            .filter(|s| s["name"] == "tools/call nap")
            .count()
            == 2
            && spans.iter().filter(|s| s["name"] == "tasks/get").count() == 2
    }));
    let calls: Vec<&Value> = spans
        .iter()
        .filter(|s| s["name"] == "tools/call nap")
        .collect();
    for call in &calls {
        assert_eq!(call["trace_id"], trace.as_str(), "{call:#}");
        assert_eq!(call["parent_span_id"], client_span.as_str());
        assert_eq!(attr(call, "network.transport"), "pipe");
        assert_eq!(attr(call, "flowgate.outcome"), "ok");
        // Each call's engine start is its child.
        assert!(
            spans
                .iter()
                .any(|s| s["name"] == "local start" && s["parent_span_id"] == call["span_id"]),
            "no engine start under {call:#} in {spans:#?}"
        );
    }
    let poll = spans
        .iter()
        .find(|s| s["name"] == "tasks/get" && s["trace_id"] == trace.as_str())
        .expect("the poll's span");
    assert_eq!(attr(poll, "flowgate.tool"), "nap");
    assert!(
        spans
            .iter()
            .any(|s| s["name"] == "local get" && s["parent_span_id"] == poll["span_id"])
    );
    let forged = spans
        .iter()
        .find(|s| s["name"] == "tasks/get" && attr(s, "flowgate.outcome") == "error")
        .expect("the forged poll's span");
    assert_eq!(attr(forged, "rpc.response.status_code"), "-32602");
}
