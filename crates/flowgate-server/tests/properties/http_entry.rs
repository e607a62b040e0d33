//! The HTTP/JSON-RPC entry: the axum router `flowgate_server::http::router` builds, driven in
//! process with tower's `oneshot`, with arbitrary and mutated-valid requests of both task
//! dialects (2026-07-28 with its `Mcp-*` headers, 2025-11-25 with `initialize` and `tasks/*`),
//! with and without OAuth in front.
//!
//! What must hold for every request: an answer within a deadline (never a hang), never a
//! panic, never a 5xx; an error answer says what is wrong (a JSON-RPC error with a code and a
//! message, or a non-empty body); a JSON answer is JSON; the tools' engine starts nothing for a
//! request it refused.

use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use flowgate_auth::testing::FakeIssuer;
use flowgate_auth::{JwksSource, KeySet, OAuthIdentity, TokenValidator, ValidatorConfig};
use flowgate_core::Registry;
use flowgate_core::handle::{HandleKey, Keyring};
use flowgate_core::testing::{FakeEngine, register};
use flowgate_server::http::{HttpOptions, router};
use flowgate_server::{FlowgateServer, ServerOptions, ToolSet};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::cases;

const RESOURCE: &str = "https://flowgate.test/mcp";
/// The largest answer read back (rmcp's own body limit is far below).
const READ_LIMIT: usize = 16 << 20;

const MANIFEST: &str = r#"
default_scopes: [jobs.run]
tools:
  - name: quick
    input_schema:
      type: object
      properties: { n: { type: integer }, s: { type: string } }
      additionalProperties: false
    target: { engine: fake }
  - name: tasked
    task: required
    input_schema: { type: object, properties: { n: { type: integer } }, additionalProperties: false }
    target: { engine: fake }
  - name: plain
    task: forbidden
    scopes: []
    input_schema: { type: object, properties: { n: { type: integer } }, additionalProperties: false }
    elicit:
      - argument: n
        message: Which n?
    target: { engine: fake }
"#;

/// Everything a case needs, built once per test binary: the runtime the router runs on, the
/// router without and with OAuth, a token for the latter, and a real task id.
pub(crate) struct Fixture {
    runtime: tokio::runtime::Runtime,
    open: Router,
    protected: Router,
    pub(crate) token: String,
    pub(crate) task_id: String,
    _issuer: FakeIssuer,
}

pub(crate) fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let (open, protected, token, issuer) = runtime.block_on(async {
            let manifest =
                flowgate_manifest::parse_str(MANIFEST, Path::new("m.yaml")).expect("manifest");
            let mut registry = Registry::new();
            register(&mut registry, FakeEngine::new());
            let tools = ToolSet::build(&manifest, &registry).expect("tools");
            let keys = Keyring::new(HandleKey::new("k1", &[7; 32]).expect("key"), vec![]);
            let server = FlowgateServer::new(
                tools,
                keys,
                ServerOptions {
                    sync_wait: Duration::from_secs(2),
                    ..ServerOptions::default()
                },
            );
            let issuer = FakeIssuer::start().await;
            let validator = TokenValidator::new(
                ValidatorConfig::new(&issuer.issuer, RESOURCE),
                KeySet::new(
                    JwksSource::Url(issuer.jwks_url()),
                    Duration::from_secs(30),
                    Duration::from_secs(3600),
                )
                .expect("keys"),
            );
            let auth = Arc::new(OAuthIdentity::new(validator, vec!["jobs.run".to_owned()]));
            let open = router(server.clone(), HttpOptions::default());
            let protected = router(
                server,
                HttpOptions {
                    identity: Some(auth),
                    ..HttpOptions::default()
                },
            );
            let token = issuer.token("alice", RESOURCE, "jobs.run");
            (open, protected, token, issuer)
        });
        let mut fixture = Fixture {
            runtime,
            open,
            protected,
            token,
            task_id: String::new(),
            _issuer: issuer,
        };
        let created = fixture.send(
            false,
            &modern(
                "tools/call",
                Some("tasked"),
                json!({"name": "tasked", "arguments": {"n": 1}}),
            ),
        );
        fixture.task_id = created.json["result"]["taskId"]
            .as_str()
            .unwrap_or_else(|| panic!("a task: {}", created.json))
            .to_owned();
        fixture
    })
}

/// A request as sent: method, path, headers, body.
#[derive(Debug, Clone)]
pub(crate) struct Sent {
    pub(crate) method: String,
    pub(crate) path: String,
    pub(crate) headers: Vec<(String, Vec<u8>)>,
    pub(crate) body: Vec<u8>,
}

/// What came back.
pub(crate) struct Answer {
    pub(crate) status: StatusCode,
    pub(crate) content_type: String,
    pub(crate) body: Vec<u8>,
    pub(crate) json: Value,
    /// The request was a `HEAD`, whose answers have no body.
    pub(crate) head: bool,
}

impl Fixture {
    pub(crate) fn send(&self, protected: bool, sent: &Sent) -> Answer {
        self.try_send(protected, sent)
            .unwrap_or_else(|e| panic!("{e}: {sent:?}"))
    }

    fn try_send(&self, protected: bool, sent: &Sent) -> Result<Answer, String> {
        let mut request = Request::builder()
            .method(sent.method.as_bytes())
            .uri(&sent.path);
        if !sent
            .headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case("host"))
        {
            request = request.header("host", "127.0.0.1");
        }
        for (name, value) in &sent.headers {
            request = request.header(name.as_str(), value.as_slice());
        }
        // A request the `http` crate itself cannot build never reaches a server.
        let Ok(request) = request.body(Body::from(sent.body.clone())) else {
            return Ok(Answer {
                status: StatusCode::BAD_REQUEST,
                content_type: String::new(),
                body: b"unbuildable".to_vec(),
                json: Value::Null,
                head: false,
            });
        };
        let app = if protected {
            &self.protected
        } else {
            &self.open
        };
        let app = app.clone();
        let head = sent.method.eq_ignore_ascii_case("HEAD");
        self.runtime.block_on(async move {
            let response = tokio::time::timeout(Duration::from_secs(20), app.oneshot(request))
                .await
                .map_err(|_| "no answer within 20 s".to_owned())?
                .map_err(|e| format!("the router failed: {e:?}"))?;
            let status = response.status();
            let content_type = response
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_owned();
            let body = tokio::time::timeout(
                Duration::from_secs(20),
                axum::body::to_bytes(response.into_body(), READ_LIMIT),
            )
            .await
            .map_err(|_| "the body did not end within 20 s".to_owned())?
            .map_err(|e| format!("the body failed: {e}"))?
            .to_vec();
            let json = serde_json::from_slice(&body).unwrap_or(Value::Null);
            Ok(Answer {
                status,
                content_type,
                body,
                json,
                head,
            })
        })
    }
}

/// The JSON-RPC messages of an answer: its JSON body, or the `data:` lines of its event stream
/// (none for a `HEAD`, whose answer has the headers a `GET` would get and no body).
fn messages(answer: &Answer) -> Result<Vec<Value>, String> {
    if answer.head {
        return Ok(Vec::new());
    }
    if answer.content_type.starts_with("application/json") {
        return serde_json::from_slice(&answer.body)
            .map(|v| vec![v])
            .map_err(|e| format!("a JSON answer that is not JSON ({e})"));
    }
    if answer.content_type.starts_with("text/event-stream") {
        let text = String::from_utf8_lossy(&answer.body);
        return text
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter(|d| !d.trim().is_empty())
            .map(|d| {
                serde_json::from_str(d.trim())
                    .map_err(|e| format!("an event that is not JSON ({e}): {d}"))
            })
            .collect();
    }
    Ok(Vec::new())
}

/// The invariants every answer keeps.
fn check(answer: &Answer) -> Result<(), TestCaseError> {
    let status = answer.status.as_u16();
    let body = String::from_utf8_lossy(&answer.body);
    prop_assert!(status < 500, "{status}: {body}");
    let messages = messages(answer).map_err(TestCaseError::fail)?;
    if status >= 400 && status != 404 && status != 405 && !answer.head {
        prop_assert!(!answer.body.is_empty(), "{status} with an empty body");
    }
    for message in &messages {
        match message.get("error") {
            // An OAuth refusal (RFC 6750): a code and a description.
            Some(Value::String(code)) => {
                prop_assert!(!code.is_empty(), "{message}");
                let text = message["error_description"].as_str().unwrap_or("");
                prop_assert!(
                    !text.trim().is_empty(),
                    "a refusal that says nothing: {message}"
                );
            }
            // A JSON-RPC error.
            Some(error) => {
                prop_assert_eq!(&message["jsonrpc"], "2.0", "{}", message);
                prop_assert!(error["code"].is_i64(), "{message}");
                let text = error["message"].as_str().unwrap_or("");
                prop_assert!(
                    !text.trim().is_empty(),
                    "an error that says nothing: {message}"
                );
                // The fake engine never fails: an internal error can only be a request the
                // server did not understand and did not say why.
                prop_assert_ne!(&error["code"], -32603, "an internal error: {}", message);
            }
            None => {}
        }
    }
    Ok(())
}

/// A 2026-07-28 request with its headers.
pub(crate) fn modern(method: &str, name: Option<&str>, mut params: Value) -> Sent {
    if let Some(p) = params.as_object_mut() {
        p.insert(
            "_meta".to_owned(),
            json!({
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": {"name": "props", "version": "0"},
                "io.modelcontextprotocol/clientCapabilities": {
                    "extensions": {"io.modelcontextprotocol/tasks": {}}
                },
            }),
        );
    }
    let mut headers = vec![
        ("content-type".to_owned(), b"application/json".to_vec()),
        (
            "accept".to_owned(),
            b"application/json, text/event-stream".to_vec(),
        ),
        ("mcp-protocol-version".to_owned(), b"2026-07-28".to_vec()),
        ("mcp-method".to_owned(), method.as_bytes().to_vec()),
    ];
    if let Some(n) = name {
        headers.push(("mcp-name".to_owned(), n.as_bytes().to_vec()));
    }
    Sent {
        method: "POST".to_owned(),
        path: "/mcp".to_owned(),
        headers,
        body: json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
            .to_string()
            .into_bytes(),
    }
}

/// A 2025-11-25 request (no `Mcp-Method`; the version header except on `initialize`).
pub(crate) fn legacy(method: &str, params: Value) -> Sent {
    let mut headers = vec![
        ("content-type".to_owned(), b"application/json".to_vec()),
        (
            "accept".to_owned(),
            b"application/json, text/event-stream".to_vec(),
        ),
    ];
    if method != "initialize" {
        headers.push(("mcp-protocol-version".to_owned(), b"2025-11-25".to_vec()));
    }
    Sent {
        method: "POST".to_owned(),
        path: "/mcp".to_owned(),
        headers,
        body: json!({"jsonrpc": "2.0", "id": "a-1", "method": method, "params": params})
            .to_string()
            .into_bytes(),
    }
}

/// Valid requests of both dialects, to mutate.
fn seeds(task_id: &str) -> Vec<Sent> {
    vec![
        modern("tools/list", None, json!({})),
        modern("tools/call", Some("quick"), json!({"name": "quick", "arguments": {"n": 3, "s": "x"}})),
        modern("tools/call", Some("tasked"), json!({"name": "tasked", "arguments": {"n": 1}})),
        modern("tools/call", Some("plain"), json!({"name": "plain", "arguments": {}})),
        modern("tasks/get", Some(task_id), json!({"taskId": task_id})),
        modern("tasks/update", Some(task_id), json!({"taskId": task_id, "inputResponses": {"k": {"action": "accept", "content": {"a": 1}}}})),
        modern("tasks/cancel", Some(task_id), json!({"taskId": task_id})),
        legacy("initialize", json!({"protocolVersion": "2025-11-25", "capabilities": {"tasks": {}}, "clientInfo": {"name": "p", "version": "1"}})),
        legacy("tools/list", json!({})),
        legacy("tools/call", json!({"name": "quick", "arguments": {"n": 1}, "task": {"ttl": 60000}})),
        legacy("tools/call", json!({"name": "tasked", "arguments": {"n": 1}})),
        legacy("tasks/get", json!({"taskId": task_id})),
        legacy("tasks/result", json!({"taskId": task_id})),
        legacy("tasks/cancel", json!({"taskId": task_id})),
        legacy("tasks/list", json!({"cursor": "x"})),
        Sent {
            // A client's answer to an elicitation/create, with an id it made up.
            body: json!({"jsonrpc": "2.0", "id": "fge.k1.AAAA", "result": {"action": "accept", "content": {"x": 1}}})
                .to_string()
                .into_bytes(),
            ..legacy("tools/list", json!({}))
        },
    ]
}

fn arbitrary_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        ".{0,24}".prop_map(Value::from),
        Just(json!(
            "fg1.k1.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
        )),
        Just(json!("tasks/get")),
        Just(json!("2025-11-25")),
    ];
    leaf.prop_recursive(3, 20, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::btree_map("[a-zA-Z_/]{0,10}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// One change to a valid request.
#[derive(Debug, Clone)]
enum Mutation {
    /// Replace the value at a path (indices into the JSON tree) with another.
    Replace(Vec<usize>, Value),
    /// Remove the entry at a path.
    Remove(Vec<usize>),
    /// Add a key to the object at a path.
    Add(Vec<usize>, String, Value),
    /// Cut the body at a byte.
    Truncate(usize),
    /// Change one byte of the body.
    Byte(usize, u8),
    /// Set (or add) a header.
    Header(String, Vec<u8>),
    /// Remove a header.
    DropHeader(usize),
    /// Another HTTP method.
    Method(String),
}

fn header_name() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("mcp-method".to_owned()),
        Just("mcp-name".to_owned()),
        Just("mcp-protocol-version".to_owned()),
        Just("content-type".to_owned()),
        Just("accept".to_owned()),
        Just("origin".to_owned()),
        Just("host".to_owned()),
        Just("authorization".to_owned()),
        Just("x-request-id".to_owned()),
        Just("content-length".to_owned()),
        Just("mcp-session-id".to_owned()),
        "[a-z-]{1,12}",
    ]
}

fn header_value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(b"2025-11-25".to_vec()),
        Just(b"2026-07-28".to_vec()),
        Just(b"application/json".to_vec()),
        Just(b"text/event-stream".to_vec()),
        Just(b"tasks/get".to_vec()),
        Just(b"tools/call".to_vec()),
        Just(b"=?base64?Zm9v?=".to_vec()),
        Just(b"http://evil.example".to_vec()),
        Just(b"Bearer x.y.z".to_vec()),
        Just(b"18446744073709551616".to_vec()),
        "[ -~]{0,40}".prop_map(String::into_bytes),
        proptest::collection::vec(any::<u8>(), 0..40),
    ]
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let path = proptest::collection::vec(any::<usize>(), 0..4);
    prop_oneof![
        3 => (path.clone(), arbitrary_json()).prop_map(|(p, v)| Mutation::Replace(p, v)),
        1 => path.clone().prop_map(Mutation::Remove),
        1 => (path, "[a-zA-Z_]{1,10}", arbitrary_json()).prop_map(|(p, k, v)| Mutation::Add(p, k, v)),
        1 => any::<usize>().prop_map(Mutation::Truncate),
        1 => (any::<usize>(), any::<u8>()).prop_map(|(at, b)| Mutation::Byte(at, b)),
        2 => (header_name(), header_value()).prop_map(|(n, v)| Mutation::Header(n, v)),
        1 => any::<usize>().prop_map(Mutation::DropHeader),
        1 => prop_oneof![Just("GET"), Just("DELETE"), Just("PUT"), Just("OPTIONS"), Just("HEAD")]
            .prop_map(|m| Mutation::Method(m.to_owned())),
    ]
}

/// The value at `path` (each index taken modulo the container's size), if it is a container
/// or has a parent.
fn at_path<'a>(value: &'a mut Value, path: &[usize]) -> &'a mut Value {
    let mut here = value;
    for i in path {
        let len = match &*here {
            Value::Object(m) => m.len(),
            Value::Array(a) => a.len(),
            _ => 0,
        };
        if len == 0 {
            break;
        }
        here = match here {
            Value::Object(m) => m.values_mut().nth(i % len).expect("in range"),
            Value::Array(a) => &mut a[i % len],
            _ => unreachable!("a container"),
        };
    }
    here
}

fn mutate(mut sent: Sent, mutation: &Mutation) -> Sent {
    let json_edit = |sent: &mut Sent, edit: &dyn Fn(&mut Value)| {
        if let Ok(mut value) = serde_json::from_slice::<Value>(&sent.body) {
            edit(&mut value);
            sent.body = value.to_string().into_bytes();
        }
    };
    match mutation {
        Mutation::Replace(path, new) => json_edit(&mut sent, &|v| *at_path(v, path) = new.clone()),
        Mutation::Remove(path) => json_edit(&mut sent, &|v| {
            if let Some((last, parent)) = path.split_last() {
                match at_path(v, parent) {
                    Value::Object(m) if !m.is_empty() => {
                        let key = m.keys().nth(last % m.len()).cloned().unwrap_or_default();
                        m.remove(&key);
                    }
                    Value::Array(a) if !a.is_empty() => {
                        let i = last % a.len();
                        a.remove(i);
                    }
                    _ => {}
                }
            }
        }),
        Mutation::Add(path, key, new) => json_edit(&mut sent, &|v| {
            if let Value::Object(m) = at_path(v, path) {
                m.insert(key.clone(), new.clone());
            }
        }),
        Mutation::Truncate(at) => {
            let len = sent.body.len();
            sent.body.truncate(if len == 0 { 0 } else { at % len });
        }
        Mutation::Byte(at, b) => {
            let len = sent.body.len();
            if len > 0 {
                sent.body[at % len] = *b;
            }
        }
        Mutation::Header(name, value) => {
            sent.headers.retain(|(n, _)| n != name);
            sent.headers.push((name.clone(), value.clone()));
        }
        Mutation::DropHeader(i) => {
            if !sent.headers.is_empty() {
                let i = i % sent.headers.len();
                sent.headers.remove(i);
            }
        }
        Mutation::Method(m) => sent.method = m.clone(),
    }
    sent
}

proptest! {
    #![proptest_config(cases(250))]

    /// Arbitrary bytes as the body of an otherwise proper request of either dialect.
    #[test]
    fn arbitrary_bodies_get_clear_answers(
        body in prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..300),
            ".{0,200}".prop_map(String::into_bytes),
            arbitrary_json().prop_map(|v| v.to_string().into_bytes()),
        ],
        dialect in any::<bool>(),
        protected in any::<bool>(),
    ) {
        let f = fixture();
        let mut sent = if dialect {
            modern("tools/list", None, json!({}))
        } else {
            legacy("tools/list", json!({}))
        };
        sent.body = body;
        if protected {
            sent.headers.push(("authorization".to_owned(), format!("Bearer {}", f.token).into_bytes()));
        }
        check(&f.try_send(protected, &sent).map_err(TestCaseError::fail)?)?;
    }

    /// Valid requests of both dialects after a few mutations of their JSON, bytes, headers or
    /// method.
    #[test]
    fn mutated_requests_get_clear_answers(
        seed in any::<usize>(),
        mutations in proptest::collection::vec(mutation(), 1..4),
        protected in any::<bool>(),
    ) {
        let f = fixture();
        let seeds = seeds(&f.task_id);
        let mut sent = seeds[seed % seeds.len()].clone();
        if protected {
            sent.headers.push(("authorization".to_owned(), format!("Bearer {}", f.token).into_bytes()));
        }
        for m in &mutations {
            sent = mutate(sent, m);
        }
        check(&f.try_send(protected, &sent).map_err(TestCaseError::fail)?)?;
    }

    /// Any `Authorization` value in front of OAuth, including JWT-shaped ones whose header and
    /// claims are any JSON: refused with 401 and the challenge (or, for a valid token, served).
    #[test]
    fn arbitrary_credentials_are_refused_with_the_challenge(
        value in prop_oneof![
            header_value(),
            (arbitrary_json(), arbitrary_json(), "[A-Za-z0-9_-]{0,40}").prop_map(|(h, c, s)| {
                use base64::Engine as _;
                let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
                format!("Bearer {}.{}.{s}", b64.encode(h.to_string()), b64.encode(c.to_string())).into_bytes()
            }),
        ],
    ) {
        let f = fixture();
        let mut sent = modern("tools/list", None, json!({}));
        sent.headers.push(("authorization".to_owned(), value));
        let answer = f.try_send(true, &sent).map_err(TestCaseError::fail)?;
        check(&answer)?;
        prop_assert!(
            answer.status == StatusCode::UNAUTHORIZED || answer.status == StatusCode::BAD_REQUEST,
            "{}: {}", answer.status, String::from_utf8_lossy(&answer.body)
        );
    }
}

/// Found by `mutated_requests_get_clear_answers` (its shrunk input): a `HEAD` with a malformed
/// `Authorization` is refused with the headers a `GET` would get, JSON's content type among
/// them, and no body, as HTTP has it; the check read that empty body as JSON.
#[test]
fn a_refused_head_has_no_body_to_read() {
    let f = fixture();
    let mut sent = seeds(&f.task_id)[0].clone();
    sent.headers.push((
        "authorization".to_owned(),
        format!("Bearer {}", f.token).into_bytes(),
    ));
    for m in [
        Mutation::Header("authorization".to_owned(), b"2025-11-25".to_vec()),
        Mutation::Method("HEAD".to_owned()),
    ] {
        sent = mutate(sent, &m);
    }
    let answer = f.send(true, &sent);
    assert_eq!(answer.status, StatusCode::UNAUTHORIZED);
    assert!(answer.body.is_empty(), "{:?}", answer.body);
    assert!(check(&answer).is_ok(), "{:?}", check(&answer));
}

/// Found by `mutated_requests_get_clear_answers`: a 2025-11-25 `tasks/*` request with a foreign
/// `Origin`, or accepting only JSON, got -32603 "unreadable answer" (a layer in front of the
/// transport could not read its refusal). Every revision now gets the transport's own refusal,
/// which says what was refused; a 2025-11-25 request accepting only JSON is served. Likewise
/// a task-augmented call with invalid arguments.
#[test]
fn the_2025_dialect_says_why_the_transport_refused() {
    let f = fixture();
    let mut foreign = legacy("tasks/get", json!({"taskId": f.task_id}));
    foreign
        .headers
        .push(("origin".to_owned(), b"https://evil.example".to_vec()));
    let answer = f.send(false, &foreign);
    assert_eq!(answer.status, StatusCode::FORBIDDEN);
    let text = String::from_utf8_lossy(&answer.body);
    assert!(text.contains("Origin"), "{text}");

    // Found by `mutated_requests_get_clear_answers`: a task-augmented call with invalid
    // arguments got -32603 "tool quick did not start a task".
    let invalid = legacy(
        "tools/call",
        json!({"name": "quick", "arguments": {"n": "not a number"}, "task": {}}),
    );
    let answer = f.send(false, &invalid);
    assert_eq!(answer.json["error"]["code"], -32602, "{}", answer.json);
    let text = answer.json["error"]["message"].as_str().unwrap_or("");
    assert!(
        text.contains("invalid arguments") && text.contains("/n"),
        "{text}"
    );

    let mut json_only = legacy("tasks/get", json!({"taskId": f.task_id}));
    json_only.headers.retain(|(n, _)| n != "accept");
    json_only
        .headers
        .push(("accept".to_owned(), b"application/json".to_vec()));
    let answer = f.send(false, &json_only);
    assert_eq!(
        answer.json["result"]["taskId"],
        f.task_id.as_str(),
        "{}",
        answer.json
    );
}

/// Bodies over the limit are refused as such, without reading them into memory first when the
/// request says its size.
#[test]
fn oversized_bodies_are_refused() {
    let f = fixture();
    for dialect in [true, false] {
        let mut sent = if dialect {
            modern("tools/list", None, json!({}))
        } else {
            legacy("tools/list", json!({}))
        };
        sent.body = vec![b' '; 8 << 20];
        let answer = f.send(false, &sent);
        assert_eq!(
            answer.status,
            StatusCode::PAYLOAD_TOO_LARGE,
            "dialect {dialect}"
        );
        assert!(!answer.body.is_empty());
    }
}
