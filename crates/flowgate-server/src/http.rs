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
//!    `flowgate_auth`) vouches for the caller or the request is refused; the request's [`Caller`] goes in its extensions. Nothing reads the
//!    body of a request before this.
//! 3. `parse`: the body is parsed once into the JSON-RPC message, which goes in the
//!    extensions; a body that is no message gets its JSON-RPC error; a `tasks/*` request
//!    without `Mcp-Name` gets the header from its `taskId`.
//! 4. `observe`: the MCP request span (traces) and the request's count (metrics), from the
//!    parsed message and the caller; the span is the parent of everything below, and the
//!    caller carries it.
//! 5. `scopes`: a `tools/call` of a tool the caller's scopes do not allow gets 403 with the
//!    identity's challenge (only when an identity is configured).
//! 6. `dialect`: 2025-11-25 task requests are answered by `crate::dialect_2025`, after the
//!    same `Host` and `Origin` checks as rmcp's (`origins::Guard`); a `GET` resuming a
//!    `tasks/result` stream (`resume`) is one of them. So is a 2026-07-28 `tasks/get` that
//!    passes every check rmcp makes (`poll`: the most frequent request, spared rmcp's
//!    per-request service and its second decoding of the body), inside `observe` like the
//!    rest: its span, its count and its outcome are recorded as for rmcp's answers.
//! 7. rmcp's `StreamableHttpService` (its `Host` and `Origin` checks, module `origins`, then
//!    the JSON-RPC decoding and the protocol's header checks), which calls `crate::mcp`, the
//!    `ServerHandler`, with the caller from the extensions.
//!
//! `GET /healthz` answers load balancers; with OAuth, the RFC 9728 metadata is served beside.

mod authenticate;
mod dialect;
mod names;
mod observe;
mod origins;
mod parse;
mod poll;
mod request_id;
mod resume;
mod scopes;

pub use origins::allowed_origin;

use std::sync::Arc;

use axum::Router;
use axum::http::request::Parts;
use axum::routing::get;
use flowgate_auth::Identity;
use rmcp::RoleServer;
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use crate::mcp::McpService;
use crate::{Caller, FlowgateServer};

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
}

/// When the platform ends a request (the AWS Lambda invocation's deadline, say). An outer
/// layer that knows it puts it in the request's extensions; the request's [`Caller`] carries
/// it, and every wait of the request ends before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadline(pub tokio::time::Instant);

/// The axum router: `POST /mcp` for MCP, `GET /healthz` for load balancers.
pub fn router(server: FlowgateServer, options: HttpOptions) -> Router {
    let mut config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None)
        .with_cancellation_token(options.shutdown.child_token());
    if options.allowed_hosts.iter().any(|h| h == "*") {
        config = config.disable_allowed_hosts();
    } else if !options.allowed_hosts.is_empty() {
        let mut hosts = options.allowed_hosts.clone();
        hosts.extend(["localhost", "127.0.0.1", "::1"].map(String::from));
        config = config.with_allowed_hosts(hosts);
    }
    if let Some(origins) = origins::allowlist(&options.allowed_origins) {
        config = config
            .with_allowed_origins(origins)
            .enforce_origin_validation();
    }
    let body_limit = config.max_request_body_bytes;
    // The same checks for the requests answered before rmcp.
    let guard = origins::Guard::new(
        &config.allowed_hosts,
        origins::allowlist(&options.allowed_origins),
    );
    let service = McpService::new(server.clone(), Arc::new(caller_of));
    let service = Shared(Arc::new(StreamableHttpService::new(
        move || Ok(service.clone()),
        Arc::new(NeverSessionManager::default()),
        config,
    )));
    // Layers run outermost last-added: see the module's list for the order a request meets.
    let dialect = dialect::Dialect {
        server: server.clone(),
        guard: Arc::new(guard),
        buffered: options.buffered_responses,
    };
    // One stack of layers on `/mcp` (the first listed meets the request first), laid on the
    // route once: each `route_layer` of its own boxed the route again, so a request cloned
    // and boxed one more service and future per layer.
    let scopes = options.identity.as_ref().map(|identity| {
        axum::middleware::from_fn_with_state(
            scopes::ScopeCheck {
                identity: Arc::clone(identity),
                server,
            },
            scopes::require_scopes,
        )
    });
    let layers = tower::ServiceBuilder::new()
        .layer(axum::middleware::from_fn_with_state(
            options.identity.clone(),
            authenticate::authenticate,
        ))
        .layer(axum::middleware::from_fn_with_state(
            body_limit,
            parse::parse,
        ))
        .layer(axum::middleware::from_fn(observe::observe))
        .option_layer(scopes)
        .layer(axum::middleware::from_fn_with_state(
            dialect,
            dialect::serve_2025,
        ));
    // `route_layer`: the layers serve `/mcp` alone; any other path is the plain 404 of the
    // HTTP stack (what the benchmark's floor measures), never an MCP answer.
    let mut app = Router::new()
        .nest_service("/mcp", service)
        .route_layer(layers);
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

/// rmcp's service, shared rather than copied: axum clones a route's service for every request,
/// and a clone of rmcp's copies its whole configuration (the allowed hosts and origins).
#[derive(Clone)]
struct Shared(Arc<StreamableHttpService<McpService, NeverSessionManager>>);

impl tower::Service<axum::extract::Request> for Shared {
    type Response = axum::response::Response;
    type Error = std::convert::Infallible;
    type Future = futures::future::BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: axum::extract::Request) -> Self::Future {
        let rmcp = Arc::clone(&self.0);
        Box::pin(async move {
            Ok(axum::response::IntoResponse::into_response(
                rmcp.handle(request).await,
            ))
        })
    }
}

/// The caller of a request rmcp routes: the one `authenticate` put in the HTTP request's
/// extensions, gone when rmcp cancels the request (its client disconnected).
fn caller_of(ctx: &RequestContext<RoleServer>) -> Caller {
    ctx.extensions
        .get::<Parts>()
        .and_then(|parts| parts.extensions.get::<Caller>())
        .cloned()
        .unwrap_or_else(|| Caller::anonymous(""))
        .with_gone(ctx.ct.clone())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::Path;
    use std::time::Duration;

    use axum::body::Body;
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

    /// A poll answered before rmcp (module `poll`) gets exactly rmcp's answer: the same
    /// status, type and body, for a task, a forged id, an id that is no handle, another
    /// caller's task, a client that did not declare the tasks extension (which rmcp answers
    /// itself), a string JSON-RPC id, a poll without `Mcp-Name` (taken from `taskId`, for both)
    /// and a caller without credentials (refused before either). An `Accept` with weights is
    /// one the fast path leaves to rmcp, so the two can be compared; the fast path's own count
    /// shows it answered the polls it should.
    #[tokio::test]
    async fn a_poll_answered_before_rmcp_is_answered_as_rmcp_answers_it() {
        let app = app(Some(Arc::new(HeaderIdentity)));
        let carol = [("x-test-caller", "carol")];
        let task_id = started(&app, json!({"script": [{"work": 600_000}]}), &carol).await;
        let forged = format!("{}x", &task_id[..task_id.len() - 1]);
        /// One poll: its task id, caller, whether it declares tasks, its JSON-RPC id, whether
        /// it sends `Mcp-Name`, and whether the fast path answers it.
        struct Case<'a>(&'a str, Option<&'a str>, bool, Value, bool, bool);
        let cases = [
            Case(&task_id, Some("carol"), true, json!(1), true, true),
            Case(&forged, Some("carol"), true, json!(1), true, true),
            Case("nope", Some("carol"), true, json!(1), true, true),
            Case(&task_id, Some("mallory"), true, json!(1), true, true),
            Case(&task_id, Some("carol"), false, json!(1), true, false),
            Case(&task_id, Some("carol"), true, json!("req-7"), true, true),
            Case(&task_id, Some("carol"), true, json!(2), false, true),
            Case(&task_id, None, true, json!(1), true, false),
        ];
        for Case(id, who, tasks, rpc_id, named, taken) in cases {
            let poll = |accept: &str| {
                let meta = json!({
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "0"},
                    "io.modelcontextprotocol/clientCapabilities": if tasks {
                        json!({"extensions": {"io.modelcontextprotocol/tasks": {}}})
                    } else {
                        json!({})
                    },
                });
                let body = json!({"jsonrpc": "2.0", "id": rpc_id, "method": "tasks/get",
                    "params": {"taskId": id, "_meta": meta}});
                let mut builder = Request::post("/mcp")
                    .header("host", "127.0.0.1")
                    .header("content-type", "application/json")
                    .header("accept", accept)
                    .header("mcp-protocol-version", "2026-07-28")
                    .header("mcp-method", "tasks/get");
                if named {
                    builder = builder.header("mcp-name", id);
                }
                if let Some(who) = who {
                    builder = builder.header("x-test-caller", who);
                }
                builder.body(Body::from(body.to_string())).expect("request")
            };
            let before = poll::taken_here();
            let fast = answer(&app, poll("application/json, text/event-stream")).await;
            assert_eq!(
                poll::taken_here() - before,
                usize::from(taken),
                "{id} {who:?}"
            );
            let rmcp = answer(&app, poll("application/json;q=1, text/event-stream")).await;
            assert_eq!(
                poll::taken_here() - before,
                usize::from(taken),
                "{id} {who:?}"
            );
            assert_eq!(
                fast.0, rmcp.0,
                "{id} {who:?} {tasks}: {} vs {}",
                fast.2, rmcp.2
            );
            assert_eq!(fast.1.get("content-type"), rmcp.1.get("content-type"));
            assert_eq!(fast.2, rmcp.2, "{id} {who:?} {tasks}");
            assert_ne!(fast.2, Value::Null);
            if taken && who == Some("carol") && id == task_id {
                assert_eq!(fast.2["id"], rpc_id, "{}", fast.2);
                assert_eq!(fast.2["result"]["status"], "working", "{}", fast.2);
            }
        }
    }

    /// A poll's engine read ends by the caller's deadline on the fast path as on rmcp's: a
    /// transient fault that a retry would get past (100 ms later) is reported instead, since
    /// the request must answer 50 ms from now. Time is paused, so both see the same bound.
    #[tokio::test(start_paused = true)]
    async fn a_poll_answered_before_rmcp_keeps_the_callers_deadline() {
        let (app, engine) = app_with(ServerOptions::default(), HttpOptions::default());
        let task_id = started(&app, json!({"script": [{"work": 600_000}]}), &[]).await;
        let poll = |accept: &str, deadline: bool| {
            let mut r = request("tasks/get", json!({"taskId": task_id}), true, &[]);
            r.headers_mut()
                .insert("mcp-name", task_id.parse().expect("value"));
            r.headers_mut()
                .insert("accept", accept.parse().expect("value"));
            if deadline {
                let at = tokio::time::Instant::now()
                    + crate::caller::DEADLINE_MARGIN
                    + Duration::from_millis(50);
                r.extensions_mut().insert(Deadline(at));
            }
            r
        };
        let mut answers = Vec::new();
        for accept in [
            "application/json, text/event-stream",
            "application/json;q=1, text/event-stream",
        ] {
            let before = poll::taken_here();
            engine.arm_read_fault(Some(0));
            let (_, _, bounded) = answer(&app, poll(accept, true)).await;
            engine.arm_read_fault(Some(0));
            let (_, _, unbounded) = answer(&app, poll(accept, false)).await;
            let fast = poll::taken_here() - before;
            assert_eq!(fast, if accept.contains(';') { 0 } else { 2 }, "{accept}");
            let message = bounded["result"]["statusMessage"].as_str().unwrap_or("");
            assert!(
                message.contains("did not answer within"),
                "{accept}: {bounded}"
            );
            assert_eq!(unbounded["result"]["status"], "working", "{unbounded}");
            assert!(
                unbounded["result"].get("statusMessage").is_none(),
                "{accept}: {unbounded}"
            );
            answers.push(bounded);
        }
        assert_eq!(answers[0], answers[1]);
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
}
