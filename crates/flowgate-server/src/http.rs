//! Stateless Streamable HTTP at `/mcp`.
//!
//! 2026-07-28 requests carry their version and capabilities in every request and are served
//! without sessions; older clients that `initialize` are served too, also without a session id
//! (and get synchronous results). No request depends on an earlier one reaching this instance.
//!
//! One request passes these layers, outermost first (each a module):
//!
//! 1. `request_id`: a span with the request's id (the platform's, or a fresh one).
//! 2. `authenticate`: the one authentication middleware. The configured [`Identity`] (OAuth,
//!    a Google credential, the AWS Lambda request context: each implemented in
//!    `flowgate_auth`) vouches for the caller or the request is refused; the request's
//!    [`Caller`] goes in its extensions. Nothing reads the body of a request before this.
//! 3. `entry`: the one handler of `/mcp`. What only HTTP knows is decided there (`Host` and
//!    `Origin` with `origins`, the HTTP method, `Accept`, `Content-Type`, the body parsed once,
//!    the MCP headers against it with `headers`, the request's span and count); the message
//!    goes to the dispatcher (`crate::dispatch`), which decides every method of every
//!    revision, and its reply is written once: JSON, or a resumable SSE stream for a
//!    2025-11-25 `tasks/result` (`resume`).
//!
//! `GET /healthz` answers load balancers; with OAuth, the RFC 9728 metadata is served beside.

mod authenticate;
mod entry;
mod headers;
mod names;
mod origins;
mod request_id;
mod resume;

pub use origins::allowed_origin;

use std::sync::Arc;

use axum::Router;
use axum::routing::{any, get};
use flowgate_auth::Identity;
use tokio_util::sync::CancellationToken;

#[cfg(doc)]
use crate::Caller;
use crate::FlowgateServer;

/// The largest request body read (rmcp's limit, which clients have been held to).
const BODY_LIMIT: usize = 4 * 1024 * 1024;

/// Settings of the HTTP transport.
#[derive(Debug, Clone, Default)]
pub struct HttpOptions {
    /// Host names (with or without port) the `Host` header may carry. Empty: loopback only.
    /// `*` alone turns the check off (for use behind a gateway that checks it).
    pub allowed_hosts: Vec<String>,
    /// Browser origins allowed besides loopback ones, in any form [`allowed_origin`] accepts.
    /// `*` turns the check off. Requests without `Origin` always pass.
    pub allowed_origins: Vec<String>,
    /// Cancelled to stop in-flight request handling on shutdown.
    pub shutdown: CancellationToken,
    /// Who vouches for callers: when set, `/mcp` requires it to identify each caller (and an
    /// identity that publishes resource metadata, OAuth's, has it served). `None`: callers are
    /// anonymous.
    pub identity: Option<Arc<dyn Identity>>,
    /// The platform delivers a response body only when the request ends (an AWS Lambda
    /// function answering buffered: API Gateway, an ALB, a Function URL in `BUFFERED` mode).
    /// A 2025-11-25 `tasks/result` stream then ends as soon as it has sent a question, so the
    /// client sees it, answers and resumes the stream.
    pub buffered_responses: bool,
    /// How much of an answer the platform carries; `None`: no limit but the body's own.
    pub answer_limit: Option<AnswerLimit>,
}

/// When the platform ends a request (the AWS Lambda invocation's deadline, say). An outer
/// layer that knows it puts it in the request's extensions; the request's [`Caller`] carries
/// it, and every wait of the request ends before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadline(pub tokio::time::Instant);

/// How much of an answer the platform carries (AWS Lambda's payload limits): an answer over
/// the limit is replaced, where it is written, by the error `too_large` makes, so the client
/// hears why instead of getting the platform's own failure.
#[derive(Debug, Clone, Copy)]
pub struct AnswerLimit {
    /// The bytes the platform counts for a body sent with these headers.
    pub measure: fn(&axum::http::HeaderMap, &[u8]) -> usize,
    /// The most it carries.
    pub limit: usize,
    /// Whether an event stream counts (a platform that sends the body only when the request
    /// ends carries a stream whole; one that streams passes it as it is written).
    pub streams: bool,
    /// The error for an answer of this many bytes.
    pub too_large: fn(usize) -> flowgate_core::wire::RpcError,
}

/// The hosts a request may name when none are configured: loopback ones.
const LOOPBACK_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// The axum router: `/mcp` for MCP, `GET /healthz` for load balancers.
pub fn router(server: FlowgateServer, options: HttpOptions) -> Router {
    let hosts: Vec<String> = if options.allowed_hosts.iter().any(|h| h == "*") {
        Vec::new()
    } else {
        let mut hosts = options.allowed_hosts.clone();
        hosts.extend(LOOPBACK_HOSTS.map(String::from));
        hosts
    };
    let entry = Arc::new(entry::Entry {
        server,
        guard: origins::Guard::new(&hosts, origins::allowlist(&options.allowed_origins)),
        identity: options.identity.clone(),
        buffered: options.buffered_responses,
        body_limit: BODY_LIMIT,
        answer_limit: options.answer_limit,
        shutdown: options.shutdown.child_token(),
    });
    // `route_layer`: authentication guards `/mcp` alone; any other path is the plain 404 of
    // the HTTP stack (what the benchmark's floor measures), never an MCP answer.
    let mut app = Router::new()
        .route("/mcp", any(entry::serve).with_state(entry))
        .route_layer(axum::middleware::from_fn_with_state(
            options.identity.clone(),
            authenticate::authenticate,
        ));
    if let Some(metadata) = options
        .identity
        .as_ref()
        .and_then(authenticate::metadata_routes)
    {
        app = app.merge(metadata);
    }
    app.route("/healthz", get(|| async { "ok\n" }))
        .layer(axum::middleware::from_fn(request_id::request_span))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::Path;
    use std::time::Duration;

    use axum::body::Body;
    use axum::http::request::Parts;
    use axum::http::{Request, StatusCode};
    use flowgate_auth::{Authenticated, Identified, Mode, Principal, Refused};
    use flowgate_core::handle::{HandleKey, Keyring};
    use flowgate_core::testing::{FakeEngine, register};
    use serde_json::{Value, json};
    use tower::ServiceExt as _;

    use super::*;
    use crate::{ServerOptions, ToolSet};

    /// An identity that takes the caller from `x-test-caller` (and its scopes from
    /// `x-test-scopes`): `bad` is an invalid credential, `down` keys that cannot be fetched.
    #[derive(Debug)]
    struct HeaderIdentity;

    impl Identity for HeaderIdentity {
        fn mode(&self) -> Mode {
            Mode::ApigwAuthorizer
        }

        fn identify<'a>(&'a self, request: &'a Parts) -> Identified<'a> {
            let header = |name: &str| {
                request
                    .headers
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned)
            };
            let caller = header("x-test-caller");
            let scopes = header("x-test-scopes").unwrap_or_default();
            Box::pin(async move {
                match caller.as_deref() {
                    None => Err(Refused::missing("no caller")),
                    Some("bad") => Err(Refused::invalid("a bad credential")),
                    Some("down") => Err(Refused::unavailable("no keys")),
                    Some("down-for-a-while") => {
                        Err(Refused::unavailable("no keys")
                            .retry_after(Duration::from_millis(119_200)))
                    }
                    Some(who) => Ok(Authenticated {
                        principal: Principal {
                            issuer: "test".into(),
                            subject: who.into(),
                        },
                        scopes: scopes
                            .split_whitespace()
                            .map(str::to_owned)
                            .collect::<BTreeSet<_>>(),
                    }),
                }
            })
        }

        fn credential_headers(&self) -> &'static [&'static str] {
            &["x-test-caller"]
        }
    }

    fn app(identity: Option<Arc<dyn Identity>>) -> Router {
        app_with(
            ServerOptions::default(),
            HttpOptions {
                identity,
                ..HttpOptions::default()
            },
        )
        .0
    }

    /// The router with `options`, and its engine.
    fn app_with(options: ServerOptions, http: HttpOptions) -> (Router, FakeEngine) {
        let engine = FakeEngine::new();
        let mut registry = flowgate_core::Registry::new();
        register(&mut registry, engine.clone());
        let manifest = flowgate_manifest::parse_str(
            "tools:\n  - name: open\n    target: { engine: fake }\n  - name: deploy\n    scopes: [deploy]\n    target: { engine: fake }\n",
            Path::new("m.yaml"),
        )
        .expect("manifest");
        let tools = ToolSet::build(&manifest, &registry).expect("tools");
        let keys = Keyring::new(HandleKey::random("k").expect("key"), vec![]);
        let server = FlowgateServer::new(tools, keys, options);
        (router(server, http), engine)
    }

    /// A 2026-07-28 request to `/mcp` (`tasks`: whether the client declares the extension).
    fn request(
        method: &str,
        params: Value,
        tasks: bool,
        headers: &[(&str, &str)],
    ) -> Request<Body> {
        let mut params = params;
        let capabilities = if tasks {
            json!({"extensions": {"io.modelcontextprotocol/tasks": {}}})
        } else {
            json!({})
        };
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "0"},
            "io.modelcontextprotocol/clientCapabilities": capabilities,
        });
        let name = params["name"].as_str().map(str::to_owned);
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let mut builder = Request::post("/mcp")
            .header("host", "127.0.0.1")
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", method);
        if let Some(name) = name {
            builder = builder.header("mcp-name", name);
        }
        for (k, v) in headers {
            builder = builder.header(*k, *v);
        }
        builder.body(Body::from(body.to_string())).expect("request")
    }

    async fn answer(
        app: &Router,
        request: Request<Body>,
    ) -> (StatusCode, axum::http::HeaderMap, Value) {
        let response = app.clone().oneshot(request).await.expect("answer");
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .expect("body");
        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        (status, headers, body)
    }

    /// Starts a task of the `open` tool with `arguments` as the caller `headers` name, and
    /// returns its id.
    async fn started(app: &Router, arguments: Value, headers: &[(&str, &str)]) -> String {
        let call = request(
            "tools/call",
            json!({"name": "open", "arguments": arguments}),
            true,
            headers,
        );
        let (_, _, body) = answer(app, call).await;
        body["result"]["taskId"]
            .as_str()
            .unwrap_or_else(|| panic!("a task: {body}"))
            .to_owned()
    }

    fn challenge(headers: &axum::http::HeaderMap) -> Option<&str> {
        headers
            .get("www-authenticate")
            .and_then(|v| v.to_str().ok())
    }

    #[tokio::test]
    async fn one_middleware_authenticates_for_any_identity_and_checks_scopes() {
        let app = app(Some(Arc::new(HeaderIdentity)));
        let list = || request("tools/list", json!({}), true, &[]);
        let (status, headers, body) = answer(&app, list()).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
        assert_eq!(challenge(&headers), Some("Bearer"));
        assert_eq!(body["error"], "unauthorized");

        let bad = request("tools/list", json!({}), true, &[("x-test-caller", "bad")]);
        let (status, headers, _) = answer(&app, bad).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        assert_eq!(challenge(&headers), Some("Bearer error=\"invalid_token\""));

        let down = request("tools/list", json!({}), true, &[("x-test-caller", "down")]);
        let (status, headers, body) = answer(&app, down).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            headers.get("retry-after").map(|v| v.as_bytes()),
            Some(&b"5"[..])
        );
        assert_eq!(body["error"], "temporarily_unavailable");
        // When the identity knows when it tries again, the client is told (rounded up).
        let later = [("x-test-caller", "down-for-a-while")];
        let (status, headers, _) =
            answer(&app, request("tools/list", json!({}), true, &later)).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            headers.get("retry-after").map(|v| v.as_bytes()),
            Some(&b"120"[..])
        );

        // Carol lacks `deploy`: the tool is not listed, and a call is 403 with the challenge.
        let carol = [("x-test-caller", "carol")];
        let listed = request("tools/list", json!({}), true, &carol);
        let (status, _, body) = answer(&app, listed).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let names: Vec<&str> = body["result"]["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t["name"].as_str())
            .collect();
        assert_eq!(names, ["open"]);
        let call = json!({"name": "deploy", "arguments": {}});
        let (status, headers, _) =
            answer(&app, request("tools/call", call.clone(), true, &carol)).await;
        assert_eq!(status, StatusCode::FORBIDDEN);
        assert_eq!(
            challenge(&headers),
            Some("Bearer scope=\"deploy\", error=\"insufficient_scope\"")
        );
        // With the scope, the call starts a task.
        let dave = [("x-test-caller", "dave"), ("x-test-scopes", "deploy")];
        let (status, _, body) = answer(&app, request("tools/call", call, true, &dave)).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["result"]["resultType"], "task", "{body}");

        // This identity publishes no resource metadata: none is served (OAuth's is, see the
        // e2e tests).
        let metadata = Request::get("/.well-known/oauth-protected-resource")
            .header("x-test-caller", "dave")
            .body(Body::empty())
            .expect("request");
        let (status, _, _) = answer(&app, metadata).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
    }

    /// Only `/mcp` speaks MCP: the same poll, on either wire, to another path is the HTTP
    /// stack's empty 404 (and no identity is asked: nothing there needs a caller).
    #[tokio::test]
    async fn other_paths_answer_404_without_reading_the_request() {
        let app = app(Some(Arc::new(HeaderIdentity)));
        let carol = [("x-test-caller", "carol")];
        let task_id = started(&app, json!({}), &carol).await;
        let get = request("tasks/get", json!({"taskId": task_id}), true, &carol);
        let (status, _, body) = answer(&app, get).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        for revision in ["2026-07-28", "2025-11-25"] {
            let mut get = request("tasks/get", json!({"taskId": task_id}), true, &[]);
            *get.uri_mut() = "/elsewhere".parse().expect("uri");
            get.headers_mut()
                .insert("mcp-protocol-version", revision.parse().expect("value"));
            get.headers_mut()
                .insert("mcp-name", task_id.parse().expect("value"));
            let response = app.clone().oneshot(get).await.expect("answer");
            assert_eq!(response.status(), StatusCode::NOT_FOUND, "{revision}");
            let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
                .await
                .expect("body");
            assert!(bytes.is_empty(), "{revision}: {bytes:?}");
        }
    }

    /// A poll's engine read ends by the caller's deadline: a transient fault that a retry
    /// would get past (100 ms later) is reported instead, since the request must answer 50 ms
    /// from now. Time is paused, so the bound is exact.
    #[tokio::test(start_paused = true)]
    async fn a_poll_keeps_the_callers_deadline() {
        let (app, engine) = app_with(ServerOptions::default(), HttpOptions::default());
        let task_id = started(&app, json!({"script": [{"work": 600_000}]}), &[]).await;
        let poll = |deadline: bool| {
            let mut r = request("tasks/get", json!({"taskId": task_id}), true, &[]);
            r.headers_mut()
                .insert("mcp-name", task_id.parse().expect("value"));
            if deadline {
                let at = tokio::time::Instant::now()
                    + crate::caller::DEADLINE_MARGIN
                    + Duration::from_millis(50);
                r.extensions_mut().insert(Deadline(at));
            }
            r
        };
        engine.arm_read_fault(Some(0));
        let (_, _, bounded) = answer(&app, poll(true)).await;
        engine.arm_read_fault(Some(0));
        let (_, _, unbounded) = answer(&app, poll(false)).await;
        let message = bounded["result"]["statusMessage"].as_str().unwrap_or("");
        assert!(message.contains("did not answer within"), "{bounded}");
        assert_eq!(unbounded["result"]["status"], "working", "{unbounded}");
        assert!(
            unbounded["result"].get("statusMessage").is_none(),
            "{unbounded}"
        );
    }

    #[tokio::test]
    async fn a_request_deadline_bounds_a_synchronous_call() {
        let app = app(None);
        let call = json!({"name": "open", "arguments": {"script": [{"work": 600_000}]}});
        let mut request = request("tools/call", call, false, &[]);
        let deadline = tokio::time::Instant::now() + Duration::from_millis(2500);
        request.extensions_mut().insert(Deadline(deadline));
        let (status, _, body) = answer(&app, request).await;
        assert!(
            tokio::time::Instant::now() < deadline,
            "answered after the request's deadline"
        );
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["result"]["isError"], true, "{body}");
        let text = body["result"]["content"][0]["text"].as_str().unwrap_or("");
        assert!(text.contains("before this request's deadline"), "{text}");
    }

    /// A 2025-11-25 request to `/mcp`.
    fn request_2025(method: &str, id: u32, params: Value) -> Request<Body> {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        Request::post("/mcp")
            .header("host", "127.0.0.1")
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25")
            .body(Body::from(body.to_string()))
            .expect("request")
    }

    /// A 2025-11-25 task of `script` on the `open` tool; its id.
    async fn task_2025(app: &Router, script: Value) -> String {
        let call = json!({"name": "open", "arguments": {"script": script}, "task": {}});
        let (_, _, body) = answer(app, request_2025("tools/call", 1, call)).await;
        body["result"]["task"]["taskId"]
            .as_str()
            .unwrap_or_else(|| panic!("a task: {body}"))
            .to_owned()
    }

    /// Reads `body` until it ends (or `within` passes: then panics); the text.
    async fn to_end(response: axum::response::Response, within: Duration) -> String {
        let bytes =
            tokio::time::timeout(within, axum::body::to_bytes(response.into_body(), 1 << 20))
                .await
                .expect("the stream ended in time")
                .expect("body");
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// How many engine reads happen in `span`, waited out.
    async fn reads_during(engine: &FakeEngine, span: Duration) -> usize {
        let before = engine.read_count();
        tokio::time::sleep(span).await;
        engine.read_count() - before
    }

    #[tokio::test]
    async fn a_tasks_result_stream_ends_before_the_deadline_and_a_get_resumes_it() {
        let (app, _) = app_with(ServerOptions::default(), HttpOptions::default());
        let task = task_2025(&app, json!([{"work": 2_500}, {"succeed": 7}])).await;
        let mut held = request_2025("tasks/result", 41, json!({"taskId": task}));
        let deadline = tokio::time::Instant::now() + Duration::from_millis(2_800);
        held.extensions_mut().insert(Deadline(deadline));
        let response = app.clone().oneshot(held).await.expect("answer");
        let first = to_end(response, Duration::from_secs(10)).await;
        assert!(
            tokio::time::Instant::now() < deadline,
            "ended before the deadline"
        );
        assert!(
            first.starts_with("id: fgr1."),
            "a priming event first: {first}"
        );
        assert!(first.contains("retry: 500"), "{first}");
        assert!(!first.contains("\"result\""), "no answer yet: {first}");
        let id = first
            .lines()
            .find_map(|l| l.strip_prefix("id: "))
            .expect("an event id")
            .to_owned();
        let resume = Request::get("/mcp")
            .header("host", "127.0.0.1")
            .header("accept", "text/event-stream")
            .header("mcp-protocol-version", "2025-11-25")
            .header("last-event-id", &id)
            .body(Body::empty())
            .expect("request");
        let response = app.clone().oneshot(resume).await.expect("answer");
        let rest = to_end(response, Duration::from_secs(10)).await;
        let answer: Value = rest
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .filter_map(|d| serde_json::from_str(d).ok())
            .next_back()
            .unwrap_or(Value::Null);
        assert_eq!(answer["id"], 41, "the original request id: {rest}");
        assert_eq!(answer["result"]["content"][0]["text"], "7", "{rest}");
        assert!(rest.contains(&format!("id: {id}")), "{rest}");
    }

    /// An answer the platform cannot carry is replaced where it is written: a JSON answer, and
    /// the answer at the end of a stream the platform carries whole (its questions stay).
    #[tokio::test]
    async fn an_answer_over_the_platforms_limit_is_an_error_naming_its_size() {
        let http = HttpOptions {
            buffered_responses: true,
            answer_limit: Some(AnswerLimit {
                measure: |_, body| body.len(),
                limit: 2_000,
                streams: true,
                too_large: |size| {
                    flowgate_core::wire::RpcError::new(-32603, format!("too large: {size}"))
                },
            }),
            ..HttpOptions::default()
        };
        let (app, _) = app_with(ServerOptions::default(), http);
        let big = "x".repeat(3_000);
        // A 2025-11-25 `tasks/result` stream whose answer is the big result.
        let task = task_2025(&app, json!([{"succeed": big}])).await;
        let held = request_2025("tasks/result", 5, json!({"taskId": task}));
        let response = app.clone().oneshot(held).await.expect("answer");
        let streamed = to_end(response, Duration::from_secs(10)).await;
        assert!(streamed.starts_with("id: fgr1."), "{streamed}");
        assert!(streamed.contains("too large: "), "{streamed}");
        assert!(!streamed.contains(&big), "{streamed}");
        // A synchronous call whose result is over the limit.
        let call = json!({"name": "open", "arguments": {"script": [{"succeed": big}]}});
        let (status, _, body) = answer(&app, request("tools/call", call, false, &[])).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(body["error"]["code"], -32603, "{body}");
        let message = body["error"]["message"].as_str().unwrap_or("");
        assert!(message.starts_with("too large: "), "{message}");
    }

    #[tokio::test]
    async fn a_buffered_platforms_tasks_result_ends_at_the_question() {
        let http = HttpOptions {
            buffered_responses: true,
            ..HttpOptions::default()
        };
        let (app, _) = app_with(ServerOptions::default(), http);
        let task = task_2025(&app, json!([{"ask": "Go?"}, {"succeed": 1}])).await;
        let held = request_2025("tasks/result", 5, json!({"taskId": task}));
        let response = app.clone().oneshot(held).await.expect("answer");
        let body = to_end(response, Duration::from_secs(10)).await;
        assert!(
            body.contains("elicitation/create") && body.contains("Go?"),
            "{body}"
        );
        assert!(!body.contains("\"result\""), "{body}");
    }

    #[tokio::test]
    async fn a_hold_whose_client_hung_up_reads_the_engine_no_more() {
        let (app, engine) = app_with(ServerOptions::default(), HttpOptions::default());
        // A tasks/result stream, dropped after its first event.
        let task = task_2025(&app, json!([{"work": 600_000}])).await;
        let held = request_2025("tasks/result", 2, json!({"taskId": task}));
        let response = app.clone().oneshot(held).await.expect("answer");
        let mut body = response.into_body().into_data_stream();
        futures::StreamExt::next(&mut body).await;
        assert!(
            reads_during(&engine, Duration::from_millis(700)).await > 0,
            "it polls while held"
        );
        drop(body);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(
            reads_during(&engine, Duration::from_millis(900)).await,
            0,
            "tasks/result"
        );

        // A synchronous call (a client without tasks), whose request is dropped mid-wait.
        let call = json!({"name": "open", "arguments": {"script": [{"work": 600_000}]}});
        let waiting = tokio::spawn(app.clone().oneshot(request("tools/call", call, false, &[])));
        assert!(
            reads_during(&engine, Duration::from_millis(700)).await > 0,
            "it polls while held"
        );
        waiting.abort();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(
            reads_during(&engine, Duration::from_millis(900)).await,
            0,
            "synchronous call"
        );
    }

    #[tokio::test]
    async fn a_principal_holds_at_most_its_cap_and_is_told_what_to_do() {
        let options = ServerOptions {
            max_holds_per_caller: 1,
            ..ServerOptions::default()
        };
        let (app, engine) = app_with(options, HttpOptions::default());
        let task = task_2025(&app, json!([{"work": 600_000}])).await;
        let held = app
            .clone()
            .oneshot(request_2025("tasks/result", 2, json!({"taskId": task})))
            .await
            .expect("answer");
        let mut stream = held.into_body().into_data_stream();
        futures::StreamExt::next(&mut stream).await;
        // Its hold has begun once it reads the engine.
        let before = engine.read_count();
        while engine.read_count() == before {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }

        let mut again = request_2025("tasks/result", 3, json!({"taskId": task}));
        again
            .headers_mut()
            .insert("accept", "application/json".parse().expect("value"));
        let (_, _, refused) = answer(&app, again).await;
        assert_eq!(refused["error"]["code"], -32000, "{refused}");
        assert_eq!(refused["error"]["data"]["limit"], 1, "{refused}");
        let message = refused["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("tasks/get"), "says what to do: {message}");

        let runs = engine.execution_count();
        let call = json!({"name": "open", "arguments": {"script": [{"succeed": 1}]}});
        let (_, _, body) = answer(&app, request("tools/call", call.clone(), false, &[])).await;
        assert_eq!(body["result"]["isError"], true, "{body}");
        let text = body["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default();
        assert!(text.contains("nothing was started"), "{text}");
        assert_eq!(engine.execution_count(), runs, "nothing was started");

        // The held stream ends: its slot comes back.
        drop(stream);
        tokio::time::sleep(Duration::from_millis(100)).await;
        let (_, _, body) = answer(&app, request("tools/call", call, false, &[])).await;
        assert_eq!(body["result"]["content"][0]["text"], "1", "{body}");
    }

    /// The `subscriptions/listen` tests' server: one tool `open` polled every 100 ms, behind
    /// the header identity; the server too, to reload it.
    fn listening(options: ServerOptions) -> (Router, FakeEngine, FlowgateServer) {
        listening_on(options, false)
    }

    /// [`listening`], on a platform that delivers a body only when the request ends
    /// (`buffered`) or not.
    fn listening_on(
        options: ServerOptions,
        buffered: bool,
    ) -> (Router, FakeEngine, FlowgateServer) {
        let engine = FakeEngine::new();
        let mut registry = flowgate_core::Registry::new();
        register(&mut registry, engine.clone());
        let manifest = flowgate_manifest::parse_str(
            "tools:\n  - name: open\n    poll_interval_ms: 100\n    target: { engine: fake }\n",
            Path::new("m.yaml"),
        )
        .expect("manifest");
        let tools = ToolSet::build(&manifest, &registry).expect("tools");
        let keys = Keyring::new(HandleKey::random("k").expect("key"), vec![]);
        let server = FlowgateServer::new(tools, keys, options);
        let http = HttpOptions {
            identity: Some(Arc::new(HeaderIdentity)),
            buffered_responses: buffered,
            ..HttpOptions::default()
        };
        (router(server.clone(), http), engine, server)
    }

    fn listen(notifications: Value, tasks: bool, who: &str) -> Request<Body> {
        let mut r = request(
            "subscriptions/listen",
            json!({"notifications": notifications}),
            tasks,
            &[("x-test-caller", who)],
        );
        *r.body_mut() = Body::from(
            String::from_utf8(
                serde_json::to_vec(&json!({
                    "jsonrpc": "2.0", "id": "listen-1", "method": "subscriptions/listen",
                    "params": {"notifications": notifications, "_meta": {
                        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "0"},
                        "io.modelcontextprotocol/clientCapabilities": if tasks {
                            json!({"extensions": {"io.modelcontextprotocol/tasks": {}}})
                        } else {
                            json!({})
                        },
                    }},
                }))
                .expect("json"),
            )
            .expect("utf-8"),
        );
        r
    }

    /// An SSE body, read event by event.
    struct Events {
        body: axum::body::BodyDataStream,
        buffer: String,
    }

    impl Events {
        fn of(response: axum::response::Response) -> Events {
            assert_eq!(response.status(), StatusCode::OK);
            let content_type = response.headers().get("content-type").cloned();
            assert_eq!(
                content_type.as_ref().and_then(|v| v.to_str().ok()),
                Some("text/event-stream")
            );
            Events {
                body: response.into_body().into_data_stream(),
                buffer: String::new(),
            }
        }

        /// The next message; `None` when the stream ends.
        async fn next(&mut self) -> Option<Value> {
            loop {
                if let Some(at) = self.buffer.find("\n\n") {
                    let event: String = self.buffer.drain(..at + 2).collect();
                    let data: String = event
                        .lines()
                        .filter_map(|l| l.strip_prefix("data:"))
                        .map(str::trim)
                        .collect();
                    if data.is_empty() {
                        continue;
                    }
                    return Some(serde_json::from_str(&data).expect("an event of JSON"));
                }
                let chunk = futures::StreamExt::next(&mut self.body)
                    .await?
                    .expect("chunk");
                self.buffer.push_str(&String::from_utf8_lossy(&chunk));
            }
        }

        /// Every message to the end of the stream (which must end within a minute).
        async fn rest(&mut self) -> Vec<Value> {
            let mut all = Vec::new();
            let reading = async {
                while let Some(message) = self.next().await {
                    all.push(message);
                }
            };
            tokio::time::timeout(Duration::from_secs(60), reading)
                .await
                .expect("the stream ended");
            all
        }
    }

    /// A client that listens for its task sees each status to the end, then the listen's
    /// result; the ids it may not see (forged, another principal's) are left out of the
    /// acknowledgement and never pushed.
    #[tokio::test]
    async fn a_listener_sees_its_task_to_the_end_and_nothing_else() {
        let (app, engine, _) = listening(ServerOptions::default());
        let alice = [("x-test-caller", "alice")];
        let bob = [("x-test-caller", "bob")];
        let mine = started(
            &app,
            json!({"script": [{"work": 400}, {"succeed": {"n": 7}}]}),
            &alice,
        )
        .await;
        let theirs = started(&app, json!({"script": [{"succeed": 1}]}), &bob).await;
        let forged = flowgate_core::testing::forged(&mine);
        let asked = json!({"taskIds": [mine, theirs, forged, "nope"]});
        let response = app
            .clone()
            .oneshot(listen(asked, true, "alice"))
            .await
            .expect("answer");
        let reads_before = engine.read_count();
        let messages = Events::of(response).rest().await;
        let methods: Vec<&str> = messages
            .iter()
            .map(|m| m["method"].as_str().unwrap_or("(result)"))
            .collect();
        assert_eq!(
            methods.first(),
            Some(&"notifications/subscriptions/acknowledged"),
            "{messages:?}"
        );
        assert_eq!(
            messages[0]["params"]["notifications"],
            json!({"taskIds": [mine]}),
            "only the caller's own id is acknowledged"
        );
        let subscription = json!({"io.modelcontextprotocol/subscriptionId": "listen-1"});
        assert_eq!(messages[0]["params"]["_meta"], subscription);
        let pushed: Vec<&Value> = messages
            .iter()
            .filter(|m| m["method"] == "notifications/tasks")
            .collect();
        let statuses: Vec<&str> = pushed
            .iter()
            .map(|m| m["params"]["status"].as_str().unwrap_or(""))
            .collect();
        assert_eq!(statuses, ["working", "completed"], "{messages:?}");
        for push in &pushed {
            assert_eq!(push["params"]["taskId"], mine.as_str());
            assert_eq!(push["params"]["_meta"], subscription);
        }
        assert_eq!(
            pushed[1]["params"]["result"]["content"][0]["text"], r#"{"n":7}"#,
            "the final push carries what tasks/get would: {:?}",
            pushed[1]
        );
        let last = messages.last().expect("a last message");
        assert_eq!(last["id"], "listen-1");
        assert_eq!(
            last["result"],
            json!({"resultType": "complete", "_meta": subscription})
        );
        assert_eq!(messages.len(), 4, "{messages:?}");
        assert!(
            engine.read_count() > reads_before,
            "the listener read the engine itself"
        );
    }

    #[tokio::test]
    async fn listening_for_tasks_needs_the_tasks_extension() {
        let (app, _, _) = listening(ServerOptions::default());
        let mine = started(&app, json!({}), &[("x-test-caller", "alice")]).await;
        let (status, _, body) =
            answer(&app, listen(json!({"taskIds": [mine]}), false, "alice")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(body["error"]["code"], -32021, "{body}");
        assert_eq!(body["id"], "listen-1");
        // Without task ids, the tool list needs no extension.
        let response = app
            .clone()
            .oneshot(listen(json!({"toolsListChanged": true}), false, "alice"))
            .await
            .expect("answer");
        let mut events = Events::of(response);
        let ack = events.next().await.expect("an acknowledgement");
        assert_eq!(
            ack["params"]["notifications"],
            json!({"toolsListChanged": true})
        );
    }

    /// A reload is pushed to the listeners that asked for the tool list, and to no other.
    #[tokio::test]
    async fn a_reload_is_pushed_to_listeners_of_the_tool_list() {
        let (app, _, server) = listening(ServerOptions::default());
        let open = |notifications: Value| {
            let app = app.clone();
            async move {
                let response = app
                    .oneshot(listen(notifications, true, "alice"))
                    .await
                    .expect("answer");
                let mut events = Events::of(response);
                events.next().await.expect("an acknowledgement");
                events
            }
        };
        let mut tools = open(json!({"toolsListChanged": true})).await;
        let long = started(
            &app,
            json!({"script": [{"work": 600_000}]}),
            &[("x-test-caller", "alice")],
        )
        .await;
        let mut tasks = open(json!({"taskIds": [long]})).await;
        let first = tasks.next().await.expect("the task's state");
        assert_eq!(first["params"]["status"], "working");
        server.replace_tools(server.tools().as_ref().clone());
        let pushed = tools.next().await.expect("a push");
        assert_eq!(pushed["method"], "notifications/tools/list_changed");
        assert_eq!(
            pushed["params"],
            json!({"_meta": {"io.modelcontextprotocol/subscriptionId": "listen-1"}})
        );
        // The task's listener is told nothing of it: it reads on, and its stream stays open.
        let waited = tokio::time::timeout(Duration::from_millis(500), tasks.next()).await;
        assert!(
            waited.is_err(),
            "pushed what it was not asked for: {waited:?}"
        );
    }

    #[tokio::test]
    async fn listeners_count_against_the_hold_cap_and_stop_reading_when_dropped() {
        let options = ServerOptions {
            max_holds_per_caller: 1,
            ..ServerOptions::default()
        };
        let (app, engine, _) = listening(options);
        let alice = [("x-test-caller", "alice")];
        let long = started(&app, json!({"script": [{"work": 600_000}]}), &alice).await;
        let asked = json!({"taskIds": [long]});
        let response = app
            .clone()
            .oneshot(listen(asked.clone(), true, "alice"))
            .await
            .expect("answer");
        let mut events = Events::of(response);
        events.next().await.expect("an acknowledgement");
        events.next().await.expect("the task's state");
        let (status, _, body) = answer(&app, listen(asked.clone(), true, "alice")).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(body["error"]["code"], -32000, "{body}");
        // Another principal has slots of its own.
        let bobs = app
            .clone()
            .oneshot(listen(json!({"toolsListChanged": true}), true, "bob"))
            .await
            .expect("answer");
        Events::of(bobs)
            .next()
            .await
            .expect("bob's acknowledgement");
        assert!(
            reads_during(&engine, Duration::from_millis(400)).await > 0,
            "it reads while open"
        );
        drop(events);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(
            reads_during(&engine, Duration::from_millis(500)).await,
            0,
            "a listener whose client went away reads the engine no more"
        );
        // Its slot came back.
        let again = app
            .clone()
            .oneshot(listen(asked, true, "alice"))
            .await
            .expect("answer");
        let ack = Events::of(again).next().await.expect("an acknowledgement");
        assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    }

    /// A listener ends gracefully before the request's deadline (the platform's), so the
    /// client opens it again; on a platform that delivers a body only at the end, it ends
    /// after the first change it pushes.
    #[tokio::test]
    async fn a_listener_ends_before_the_deadline_and_at_the_first_change_when_buffered() {
        let (app, _, _) = listening(ServerOptions::default());
        let alice = [("x-test-caller", "alice")];
        let long = started(&app, json!({"script": [{"work": 600_000}]}), &alice).await;
        let mut held = listen(json!({"taskIds": [long]}), true, "alice");
        let deadline = tokio::time::Instant::now()
            + crate::caller::DEADLINE_MARGIN
            + Duration::from_millis(600);
        held.extensions_mut().insert(Deadline(deadline));
        let response = app.clone().oneshot(held).await.expect("answer");
        let messages = Events::of(response).rest().await;
        assert!(tokio::time::Instant::now() < deadline, "ended too late");
        let last = messages.last().expect("messages");
        assert_eq!(last["result"]["resultType"], "complete", "{messages:?}");

        let (app, _, _) = listening_on(ServerOptions::default(), true);
        let script = json!([{"work": 300}, {"ask": "Go?"}, {"succeed": 1}]);
        let asking = started(&app, json!({"script": script}), &alice).await;
        let response = app
            .clone()
            .oneshot(listen(json!({"taskIds": [asking]}), true, "alice"))
            .await
            .expect("answer");
        let messages = Events::of(response).rest().await;
        let seen: Vec<&str> = messages
            .iter()
            .map(|m| {
                m["params"]["status"]
                    .as_str()
                    .or(m["method"].as_str())
                    .unwrap_or("(result)")
            })
            .collect();
        // The state it found, then the first change, then the end: the client opens it again.
        assert_eq!(
            seen,
            [
                "notifications/subscriptions/acknowledged",
                "working",
                "input_required",
                "(result)"
            ]
        );
    }
}
