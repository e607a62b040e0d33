//! Inbound OAuth end to end: `flowgate serve --auth-*` against a local fake issuer
//! (`flowgate_auth::testing`), with raw HTTP so the status codes and headers are visible.

use flowgate_auth::testing::FakeIssuer;
use serde_json::{Value, json};

use crate::support::*;

const RESOURCE: &str = "https://flowgate.test/mcp";
const METADATA: &str = "https://flowgate.test/.well-known/oauth-protected-resource/mcp";

/// A 2026-07-28 JSON-RPC POST with an optional bearer token: status, `WWW-Authenticate`, body.
pub(crate) async fn post(
    url: &str,
    token: Option<&str>,
    method: &str,
    name: Option<&str>,
    params: Value,
) -> (u16, Option<String>, Value) {
    let answer = Post::rpc(url, method, params)
        .name(name)
        .bearer(token)
        .send()
        .await;
    let challenge = answer.header("www-authenticate").map(str::to_owned);
    (answer.status, challenge, answer.body)
}

fn start(state: &std::path::Path, issuer: &FakeIssuer, log: &std::path::Path) -> Server {
    Server::start_with(
        state,
        None,
        &[
            ("FLOWGATE_AUTH_ISSUER", issuer.issuer.as_str()),
            ("FLOWGATE_AUTH_RESOURCE", RESOURCE),
            ("FLOWGATE_LOG", "info"),
        ],
        Some(log),
    )
}

#[tokio::test]
async fn without_a_valid_token_mcp_answers_401_with_the_metadata_challenge() {
    let issuer = FakeIssuer::start().await;
    let state = tempfile::tempdir().expect("tempdir");
    let log = state.path().join("serve.log");
    let server = start(state.path(), &issuer, &log);

    let base = server.url.trim_end_matches("/mcp");
    for path in [
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource",
    ] {
        let meta: Value = reqwest::get(format!("{base}{path}"))
            .await
            .expect("metadata")
            .json()
            .await
            .expect("metadata json");
        assert_eq!(meta["resource"], RESOURCE, "{path}: {meta}");
        assert_eq!(
            meta["authorization_servers"],
            json!([issuer.issuer]),
            "{meta}"
        );
        assert_eq!(
            meta["bearer_methods_supported"],
            json!(["header"]),
            "{meta}"
        );
    }

    let (status, challenge, _) = post(&server.url, None, "tools/list", None, json!({})).await;
    assert_eq!(status, 401);
    assert_eq!(
        challenge.as_deref(),
        Some(format!("Bearer resource_metadata=\"{METADATA}\"").as_str())
    );

    let other = FakeIssuer::start().await;
    let now = chrono::Utc::now().timestamp();
    let forged = other.sign(&json!({
        "iss": issuer.issuer, "sub": "mallory", "aud": RESOURCE, "iat": now, "exp": now + 300,
    }));
    let expired = issuer.sign(&json!({
        "iss": issuer.issuer, "sub": "alice", "aud": RESOURCE, "iat": now - 900, "exp": now - 600,
    }));
    let early = issuer.sign(&json!({
        "iss": issuer.issuer, "sub": "alice", "aud": RESOURCE, "iat": now, "nbf": now + 600,
        "exp": now + 900,
    }));
    let good_claims = json!({
        "iss": issuer.issuer, "sub": "alice", "aud": RESOURCE, "iat": now, "exp": now + 300,
    });
    let mut wrong_issuer = good_claims.clone();
    wrong_issuer["iss"] = json!("https://evil.example");
    let bad_tokens = [
        ("garbage", "not-a-jwt".to_owned()),
        ("not yet valid", early),
        ("another issuer", issuer.sign(&wrong_issuer)),
        ("alg none", FakeIssuer::forge_unsigned(&good_claims)),
        ("HMAC with the public key", issuer.forge_hmac(&good_claims)),
        (
            "another resource",
            issuer.token("alice", "https://elsewhere.test/mcp", ""),
        ),
        ("another issuer's key", forged),
        ("expired", expired),
    ];
    for (what, token) in &bad_tokens {
        let (status, challenge, body) =
            post(&server.url, Some(token), "tools/list", None, json!({})).await;
        assert_eq!(status, 401, "{what}: {body}");
        let challenge = challenge.unwrap_or_default();
        assert!(
            challenge.starts_with(&format!("Bearer resource_metadata=\"{METADATA}\""))
                && challenge.contains("error=\"invalid_token\""),
            "{what}: {challenge}"
        );
        assert!(!body.to_string().contains(token.as_str()), "{what}: echoed");
    }

    let good = issuer.token("alice", RESOURCE, "");
    let (status, _, body) = post(&server.url, Some(&good), "tools/list", None, json!({})).await;
    assert_eq!(status, 200, "{body}");
    assert!(body["result"]["tools"].is_array(), "{body}");

    drop(server);
    let logs = std::fs::read_to_string(&log).expect("log");
    for (what, token) in bad_tokens.iter().chain([&("good", good)]) {
        if token.len() > 20 {
            assert!(!logs.contains(token.as_str()), "{what} token logged");
        }
    }
}

#[tokio::test]
async fn a_task_belongs_to_the_principal_that_started_it() {
    let issuer = FakeIssuer::start().await;
    let state = tempfile::tempdir().expect("tempdir");
    let log = state.path().join("serve.log");
    let server = start(state.path(), &issuer, &log);
    let alice = issuer.token("alice", RESOURCE, "");
    let bob = issuer.token("bob", RESOURCE, "");

    let (status, _, created) = post(
        &server.url,
        Some(&alice),
        "tools/call",
        Some("long_job"),
        json!({"name": "long_job", "arguments": {"steps": 30}}),
    )
    .await;
    assert_eq!(status, 200, "{created}");
    assert_eq!(created["result"]["resultType"], "task", "{created}");
    let id = created["result"]["taskId"]
        .as_str()
        .expect("taskId")
        .to_owned();

    let (_, _, mine) = post(
        &server.url,
        Some(&alice),
        "tasks/get",
        Some(&id),
        json!({"taskId": id}),
    )
    .await;
    assert_eq!(mine["result"]["taskId"], id.as_str(), "{mine}");

    // Bob's view of Alice's task is exactly the view of a task that never existed.
    let unknown = flowgate_core::testing::forged(&id);
    for (method, params) in [
        ("tasks/get", json!({"taskId": "ID"})),
        (
            "tasks/update",
            json!({"taskId": "ID", "inputResponses": {}}),
        ),
        ("tasks/cancel", json!({"taskId": "ID"})),
    ] {
        let with = |task: &str| {
            let mut p = params.clone();
            p["taskId"] = json!(task);
            p
        };
        let (_, _, theirs) = post(&server.url, Some(&bob), method, Some(&id), with(&id)).await;
        let (_, _, none) = post(
            &server.url,
            Some(&bob),
            method,
            Some(&unknown),
            with(&unknown),
        )
        .await;
        assert_eq!(theirs["error"]["code"], -32602, "{method}: {theirs}");
        assert_eq!(theirs["error"], none["error"], "{method}");
        assert!(theirs.get("result").is_none(), "{method}: {theirs}");
    }

    // Bob's cancel did nothing: the task still runs, and Alice can still end it.
    let (_, _, still) = post(
        &server.url,
        Some(&alice),
        "tasks/get",
        Some(&id),
        json!({"taskId": id}),
    )
    .await;
    assert_eq!(still["result"]["status"], "working", "{still}");
    let (_, _, cancelled) = post(
        &server.url,
        Some(&alice),
        "tasks/cancel",
        Some(&id),
        json!({"taskId": id}),
    )
    .await;
    assert!(cancelled.get("result").is_some(), "{cancelled}");
}

const SCOPED: &str = r#"
default_scopes: [jobs.run]
tools:
  - name: report
    target: { engine: local, command: [/bin/sh, -c, "echo '{}'"] }
  - name: deploy
    scopes: [jobs.run, deploy]
    target: { engine: local, command: [/bin/sh, -c, "touch \"$FLOWGATE_ARG_MARK\""] }
  - name: ping
    scopes: []
    target: { engine: local, command: [/bin/sh, -c, "echo '{}'"] }
"#;

#[tokio::test]
async fn tools_need_their_scopes_to_be_listed_and_called() {
    let issuer = FakeIssuer::start().await;
    let state = tempfile::tempdir().expect("tempdir");
    let manifest = state.path().join("scoped.yaml");
    std::fs::write(&manifest, SCOPED).expect("manifest");
    let log = state.path().join("serve.log");
    let server = Server::start_with(
        state.path(),
        Some(&manifest),
        &[
            ("FLOWGATE_AUTH_ISSUER", issuer.issuer.as_str()),
            ("FLOWGATE_AUTH_RESOURCE", RESOURCE),
        ],
        Some(&log),
    );
    let base = server.url.trim_end_matches("/mcp");
    let meta: Value = reqwest::get(format!("{base}/.well-known/oauth-protected-resource/mcp"))
        .await
        .expect("metadata")
        .json()
        .await
        .expect("json");
    assert_eq!(
        meta["scopes_supported"],
        json!(["deploy", "jobs.run"]),
        "{meta}"
    );

    let names = |body: &Value| -> Vec<String> {
        body["result"]["tools"]
            .as_array()
            .map(|tools| {
                tools
                    .iter()
                    .filter_map(|t| t["name"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    let nobody = issuer.token("nobody", RESOURCE, "");
    let runner = issuer.token("runner", RESOURCE, "jobs.run");
    let deployer = issuer.token("deployer", RESOURCE, "jobs.run deploy");
    for (token, expected) in [
        (&nobody, vec!["ping"]),
        (&runner, vec!["report", "ping"]),
        (&deployer, vec!["report", "deploy", "ping"]),
    ] {
        let (status, _, body) = post(&server.url, Some(token), "tools/list", None, json!({})).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(names(&body), expected);
    }

    let mark = state.path().join("deployed");
    let deploy = json!({"name": "deploy", "arguments": {"mark": mark}});
    let (status, challenge, body) = post(
        &server.url,
        Some(&runner),
        "tools/call",
        Some("deploy"),
        deploy.clone(),
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(
        challenge.as_deref(),
        Some(
            format!(
                "Bearer resource_metadata=\"{METADATA}\", scope=\"jobs.run deploy\", error=\"insufficient_scope\""
            )
            .as_str()
        )
    );
    assert!(
        runs(state.path()).is_empty(),
        "a refused call started a run"
    );

    let (status, _, body) = post(
        &server.url,
        Some(&deployer),
        "tools/call",
        Some("deploy"),
        deploy,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(body.get("result").is_some(), "{body}");
    assert_eq!(runs(state.path()).len(), 1);
}

/// A real OpenID provider (`oidc-provider`, tests/fakes/oidc/provider.mjs) that scripts/test
/// starts and names in `FLOWGATE_TEST_OIDC_URL`.
mod real_provider {
    use serde_json::{Value, json};

    use super::{RESOURCE, post};
    use crate::support::*;

    /// A second resource the provider knows (scripts/test passes both to it).
    const OTHER_RESOURCE: &str = "https://other.flowgate.test/mcp";

    fn provider() -> String {
        std::env::var("FLOWGATE_TEST_OIDC_URL").unwrap_or_else(|_| {
            panic!(
                "FLOWGATE_TEST_OIDC_URL is not set: these tests need the OpenID provider that \
                 scripts/test starts (node tests/fakes/oidc/provider.mjs --modules \
                 .tools/oidc/node_modules --port 0 --resource {RESOURCE},{OTHER_RESOURCE}); \
                 run them through \
                 scripts/test, or start it and export FLOWGATE_TEST_OIDC_URL=http://127.0.0.1:PORT"
            )
        })
    }

    /// The provider's token endpoint, from its RFC 8414 metadata.
    async fn token_endpoint(issuer: &str) -> String {
        let meta: Value = reqwest::get(format!("{issuer}/.well-known/oauth-authorization-server"))
            .await
            .expect("provider metadata")
            .json()
            .await
            .expect("metadata JSON");
        assert_eq!(meta["issuer"], issuer, "{meta}");
        meta["token_endpoint"]
            .as_str()
            .unwrap_or_else(|| panic!("no token_endpoint: {meta}"))
            .to_owned()
    }

    /// A client-credentials access token for `resource` (RFC 8707), as `client`.
    async fn token(issuer: &str, client: &str, resource: &str, scope: Option<&str>) -> String {
        let secret = format!("{client}-secret");
        let mut form = vec![
            ("grant_type", "client_credentials"),
            ("client_id", client),
            ("client_secret", secret.as_str()),
            ("resource", resource),
        ];
        if let Some(s) = scope {
            form.push(("scope", s));
        }
        let resp: Value = reqwest::Client::new()
            .post(token_endpoint(issuer).await)
            .form(&form)
            .send()
            .await
            .expect("token request")
            .json()
            .await
            .expect("token JSON");
        resp["access_token"]
            .as_str()
            .unwrap_or_else(|| panic!("no access token for {client}: {resp}"))
            .to_owned()
    }

    fn serve(state: &std::path::Path, issuer: &str) -> Server {
        serve_with(state, issuer, &[])
    }

    fn serve_with(state: &std::path::Path, issuer: &str, env: &[(&str, &str)]) -> Server {
        let bundled = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/flowgate.yaml"),
        )
        .expect("the bundled manifest");
        let manifest = state.join("tools.yaml");
        std::fs::write(&manifest, format!("default_scopes: [jobs.run]\n{bundled}"))
            .expect("manifest");
        let mut vars = vec![
            ("FLOWGATE_AUTH_ISSUER", issuer),
            ("FLOWGATE_AUTH_RESOURCE", RESOURCE),
        ];
        vars.extend_from_slice(env);
        Server::start_with(state, Some(&manifest), &vars, None)
    }

    /// An ID token from the provider for the web client whose client id is `RESOURCE`, so its
    /// `aud` is this server's resource: the authorization code flow through the provider's
    /// development login and consent pages, cookies carried by hand.
    async fn id_token(issuer: &str, nonce: Option<&str>) -> String {
        let meta: Value = reqwest::get(format!("{issuer}/.well-known/openid-configuration"))
            .await
            .expect("discovery")
            .json()
            .await
            .expect("discovery JSON");
        let field = |name: &str| {
            meta[name]
                .as_str()
                .unwrap_or_else(|| panic!("no {name}: {meta}"))
                .to_owned()
        };
        let callback = "https://flowgate.test/callback";
        let mut query = vec![
            ("client_id", RESOURCE),
            ("response_type", "code"),
            ("scope", "openid"),
            ("redirect_uri", callback),
            ("state", "e2e"),
        ];
        if let Some(n) = nonce {
            query.push(("nonce", n));
        }
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("client");
        let mut cookies: std::collections::BTreeMap<String, String> = Default::default();
        let mut url = reqwest::Url::parse_with_params(&field("authorization_endpoint"), &query)
            .expect("authorization URL");
        let mut form: Option<Vec<(&str, &str)>> = None;
        let code = 'flow: {
            for _ in 0..12 {
                let jar = cookies
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join("; ");
                let request = match form.take() {
                    Some(fields) => http.post(url.clone()).form(&fields),
                    None => http.get(url.clone()),
                };
                let resp = request
                    .header("cookie", jar)
                    .send()
                    .await
                    .expect("authorization step");
                for set in resp.headers().get_all("set-cookie") {
                    let pair = set.to_str().unwrap_or("").split(';').next().unwrap_or("");
                    if let Some((k, v)) = pair.split_once('=') {
                        cookies.insert(k.to_owned(), v.to_owned());
                    }
                }
                let status = resp.status();
                if status.is_redirection() {
                    let location = resp
                        .headers()
                        .get("location")
                        .and_then(|v| v.to_str().ok())
                        .expect("location")
                        .to_owned();
                    if location.starts_with(callback) {
                        let back = reqwest::Url::parse(&location).expect("callback URL");
                        let code = back.query_pairs().find(|(k, _)| k == "code");
                        break 'flow code.map(|(_, v)| v.into_owned()).expect("a code");
                    }
                    url = url.join(&location).expect("redirect");
                } else {
                    let page = resp.text().await.expect("page");
                    assert!(status.is_success(), "{status}: {page}");
                    form = Some(if page.contains(r#"name="prompt" value="login""#) {
                        vec![("prompt", "login"), ("login", "dave"), ("password", "any")]
                    } else {
                        assert!(page.contains(r#"value="consent""#), "{page}");
                        vec![("prompt", "consent")]
                    });
                }
            }
            panic!("the authorization flow did not reach the callback");
        };
        let secret = format!("{RESOURCE}-secret");
        let answer: Value = http
            .post(field("token_endpoint"))
            .form(&[
                ("grant_type", "authorization_code"),
                ("code", code.as_str()),
                ("redirect_uri", callback),
                ("client_id", RESOURCE),
                ("client_secret", secret.as_str()),
            ])
            .send()
            .await
            .expect("token request")
            .json()
            .await
            .expect("token JSON");
        answer["id_token"]
            .as_str()
            .unwrap_or_else(|| panic!("no id_token: {answer}"))
            .to_owned()
    }

    /// The claims of a JWT, unverified (to show what a test token is).
    fn claims_of(jwt: &str) -> Value {
        use base64::Engine;
        let payload = jwt.split('.').nth(1).expect("a JWT");
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(payload)
            .expect("base64url");
        serde_json::from_slice(&bytes).expect("JSON claims")
    }

    /// RFC 9068 §4: an ID token the same provider signed, with `aud` = this resource, is not an
    /// access token; with untyped access tokens allowed, its `nonce` still gives it away.
    #[tokio::test]
    async fn an_id_token_of_the_same_provider_is_not_an_access_token() {
        let issuer = provider();
        let id_token = id_token(&issuer, Some("n-0S6_WzA2Mj")).await;
        let claims = claims_of(&id_token);
        assert_eq!(claims["aud"], RESOURCE, "{claims}");
        assert_eq!(claims["iss"], issuer.as_str(), "{claims}");
        let access = token(&issuer, "alice", RESOURCE, Some("jobs.run")).await;

        let state = tempfile::tempdir().expect("tempdir");
        for untyped in [false, true] {
            let server = if untyped {
                serve_with(
                    state.path(),
                    &issuer,
                    &[("FLOWGATE_AUTH_UNTYPED_ACCESS_TOKENS", "true")],
                )
            } else {
                serve(state.path(), &issuer)
            };
            let (status, _, listed) =
                post(&server.url, Some(&access), "tools/list", None, json!({})).await;
            assert_eq!(status, 200, "untyped {untyped}: {listed}");
            let (status, challenge, body) =
                post(&server.url, Some(&id_token), "tools/list", None, json!({})).await;
            assert_eq!(status, 401, "untyped {untyped}: {body}");
            assert!(
                challenge
                    .unwrap_or_default()
                    .contains("error=\"invalid_token\""),
                "untyped {untyped}"
            );
            assert_eq!(
                body["error_description"], "the token is not an access token",
                "untyped {untyped}: {body}"
            );
        }
    }

    /// While the provider's key set cannot be fetched: one attempt per interval (doubling),
    /// not one per request; once keys are cached, an unknown `kid` is a 401, not a 503.
    #[tokio::test]
    async fn a_key_set_outage_is_asked_once_per_interval_and_unknown_kids_stay_401() {
        let issuer = provider();
        let meta: Value = reqwest::get(format!("{issuer}/.well-known/oauth-authorization-server"))
            .await
            .expect("metadata")
            .json()
            .await
            .expect("metadata JSON");
        let jwks = meta["jwks_uri"].as_str().expect("jwks_uri");
        let relay = flowgate_auth::testing::JwksRelay::start(jwks).await;
        let access = token(&issuer, "alice", RESOURCE, Some("jobs.run")).await;
        let state = tempfile::tempdir().expect("tempdir");
        relay.set_failing(true);
        let server = serve_with(
            state.path(),
            &issuer,
            &[
                ("FLOWGATE_AUTH_JWKS_URL", relay.url.as_str()),
                ("FLOWGATE_AUTH_KEYS_REFRESH_SECS", "1"),
            ],
        );

        // Down from the start: 503s, and attempts at 0, 1, 3, 7 s... at most.
        // With a 1 s interval doubling while fetches fail, attempts are due at 0, 1, 3, 7 s...
        let allowed_within = |started: std::time::Instant| {
            let elapsed = started.elapsed().as_secs_f64();
            [0.0, 1.0, 3.0, 7.0, 15.0, 31.0]
                .iter()
                .filter(|at| **at <= elapsed)
                .count()
        };
        let started = std::time::Instant::now();
        for _ in 0..15 {
            let (status, _, body) =
                post(&server.url, Some(&access), "tools/list", None, json!({})).await;
            assert_eq!(status, 503, "{body}");
            tokio::time::sleep(std::time::Duration::from_millis(30)).await;
        }
        let (attempts, allowed) = (relay.requests(), allowed_within(started));
        assert!(
            (1..=allowed).contains(&attempts),
            "{attempts} fetches for 15 requests ({allowed} allowed)"
        );

        // Back up: served once the next attempt is due.
        relay.set_failing(false);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let (status, _, body) =
                post(&server.url, Some(&access), "tools/list", None, json!({})).await;
            if status == 200 {
                break;
            }
            assert_eq!(status, 503, "{body}");
            assert!(std::time::Instant::now() < deadline, "never recovered");
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }

        // Down again, keys cached: a kid the provider never published is refused as a bad
        // token (401) even when a refresh is due and fails, and known kids keep working.
        relay.set_failing(true);
        tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
        let (before, started) = (relay.requests(), std::time::Instant::now());
        let stranger = flowgate_auth::testing::SigningKey::es256("not-the-providers");
        let now = chrono::Utc::now().timestamp();
        let forged = stranger.sign_access_token(&json!({
            "iss": issuer, "sub": "alice", "aud": RESOURCE, "scope": "jobs.run",
            "iat": now, "exp": now + 300, "client_id": "alice",
        }));
        for _ in 0..5 {
            let (status, challenge, body) =
                post(&server.url, Some(&forged), "tools/list", None, json!({})).await;
            assert_eq!(status, 401, "{body}");
            assert!(challenge.unwrap_or_default().contains("invalid_token"));
            let (status, _, body) =
                post(&server.url, Some(&access), "tools/list", None, json!({})).await;
            assert_eq!(status, 200, "{body}");
        }
        let (attempts, allowed) = (relay.requests() - before, allowed_within(started));
        assert!(
            (1..=allowed).contains(&attempts),
            "{attempts} refresh attempts for five unknown kids ({allowed} allowed)"
        );
    }

    /// What a client does from nothing: 401 -> the challenge's metadata -> the provider named
    /// there -> a token for the resource and its scopes -> served.
    #[tokio::test]
    async fn the_challenge_leads_a_client_to_the_provider_and_its_token_is_accepted() {
        let issuer = provider();
        let state = tempfile::tempdir().expect("tempdir");
        let server = serve(state.path(), &issuer);
        let (status, challenge, _) = post(&server.url, None, "tools/list", None, json!({})).await;
        assert_eq!(status, 401);
        let challenge = challenge.expect("WWW-Authenticate");
        let metadata_url = challenge
            .split("resource_metadata=\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .unwrap_or_else(|| panic!("no resource_metadata in {challenge}"));
        // The metadata URL names the public host; the test reaches the same path locally.
        let path = metadata_url
            .strip_prefix("https://flowgate.test")
            .unwrap_or_else(|| panic!("{metadata_url}"));
        let base = server.url.trim_end_matches("/mcp");
        let meta: Value = reqwest::get(format!("{base}{path}"))
            .await
            .expect("metadata")
            .json()
            .await
            .expect("metadata JSON");
        assert_eq!(meta["resource"], RESOURCE, "{meta}");
        assert_eq!(meta["authorization_servers"], json!([issuer]), "{meta}");
        assert_eq!(meta["scopes_supported"], json!(["jobs.run"]), "{meta}");
        let resource = meta["resource"].as_str().expect("resource");
        let scope = meta["scopes_supported"][0].as_str().expect("a scope");
        let alice = token(&issuer, "alice", resource, Some(scope)).await;
        let (status, _, listed) =
            post(&server.url, Some(&alice), "tools/list", None, json!({})).await;
        assert_eq!(status, 200, "{listed}");
        assert_eq!(
            listed["result"]["tools"].as_array().map(Vec::len),
            Some(3),
            "{listed}"
        );
        // A token the provider issued for another resource is not for this server.
        let other = token(&issuer, "alice", OTHER_RESOURCE, Some(scope)).await;
        let (status, challenge, _) =
            post(&server.url, Some(&other), "tools/list", None, json!({})).await;
        assert_eq!(status, 401);
        assert!(challenge.unwrap_or_default().contains("invalid_token"));
    }

    #[tokio::test]
    async fn another_clients_task_is_not_found_and_a_missing_scope_is_403() {
        let issuer = provider();
        let state = tempfile::tempdir().expect("tempdir");
        let server = serve(state.path(), &issuer);
        let alice = token(&issuer, "alice", RESOURCE, Some("jobs.run")).await;
        let bob = token(&issuer, "bob", RESOURCE, Some("jobs.run")).await;
        let carol = token(&issuer, "carol", RESOURCE, None).await;

        let (status, _, created) = post(
            &server.url,
            Some(&alice),
            "tools/call",
            Some("approve_deploy"),
            json!({"name": "approve_deploy", "arguments": {"service": "web", "version": "1.2.3"}}),
        )
        .await;
        assert_eq!(status, 200, "{created}");
        let id = created["result"]["taskId"]
            .as_str()
            .unwrap_or_else(|| panic!("{created}"))
            .to_owned();
        // Wait for the question, so that an update by Bob would have something to answer.
        let key = eventually(std::time::Duration::from_secs(20), || async {
            let (_, _, got) = post(
                &server.url,
                Some(&alice),
                "tasks/get",
                Some(&id),
                json!({"taskId": id}),
            )
            .await;
            if got["result"]["status"] == "input_required" {
                Ok(first_input_key(&got["result"]))
            } else {
                Err(format!("no question yet: {got}"))
            }
        })
        .await;
        let approve = json!({(key.clone()): {"action": "accept", "content": {"approve": true}}});
        for (method, params) in [
            ("tasks/get", json!({"taskId": id})),
            (
                "tasks/update",
                json!({"taskId": id, "inputResponses": approve}),
            ),
            ("tasks/cancel", json!({"taskId": id})),
        ] {
            let (status, _, theirs) =
                post(&server.url, Some(&bob), method, Some(&id), params).await;
            assert_eq!(status, 200, "{theirs}");
            assert_eq!(theirs["error"]["code"], -32602, "{method}: {theirs}");
        }
        // Alice still sees it, still waiting: Bob's answer and cancel reached nothing.
        let (_, _, mine) = post(
            &server.url,
            Some(&alice),
            "tasks/get",
            Some(&id),
            json!({"taskId": id}),
        )
        .await;
        assert_eq!(mine["result"]["status"], "input_required", "{mine}");

        // Carol's token lacks jobs.run: she sees no tool, and a call is 403 naming the scope.
        let (_, _, listed) = post(&server.url, Some(&carol), "tools/list", None, json!({})).await;
        assert_eq!(listed["result"]["tools"], json!([]), "{listed}");
        let (status, challenge, body) = post(
            &server.url,
            Some(&carol),
            "tools/call",
            Some("long_job"),
            json!({"name": "long_job", "arguments": {"steps": 1}}),
        )
        .await;
        assert_eq!(status, 403, "{body}");
        let challenge = challenge.unwrap_or_default();
        assert!(
            challenge.contains("scope=\"jobs.run\"")
                && challenge.contains("error=\"insufficient_scope\""),
            "{challenge}"
        );
        let (_, _, cancelled) = post(
            &server.url,
            Some(&alice),
            "tasks/cancel",
            Some(&id),
            json!({"taskId": id}),
        )
        .await;
        assert!(cancelled.get("result").is_some(), "{cancelled}");
    }
}

/// `flowgate serve` with `env`, expected to refuse to start: its stderr.
fn refused_to_start(env: &[(&str, &str)]) -> String {
    use std::process::{Command, Stdio};
    let state = tempfile::tempdir().expect("tempdir");
    let mut child = Command::new(bin())
        .args(["serve", "--listen", &format!("127.0.0.1:{}", free_port())])
        .env("FLOWGATE_STATE_DIR", state.path())
        .env("FLOWGATE_HANDLE_KEYS", KEY)
        .env("FLOWGATE_LOG_FORMAT", "text")
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn flowgate serve");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while child.try_wait().expect("wait").is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "flowgate served with {env:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let out = child.wait_with_output().expect("output");
    assert!(!out.status.success());
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The issuer is parsed as a URL (RFC 3986): the host checked for "http only to loopback" is
/// the one the client would connect to, userinfo is refused, and an issuer identifier has no
/// query or fragment (RFC 8414).
#[test]
fn issuer_urls_that_disguise_their_host_are_refused_at_start() {
    for (issuer, why) in [
        // A text check sees 127.0.0.1; a request goes to flowgate-evil.test.
        ("http://127.0.0.1:80@flowgate-evil.test", "userinfo"),
        ("http://localhost@flowgate-evil.test/realms/x", "userinfo"),
        ("https://ops:hunter2@login.example.com", "userinfo"),
        ("http://127.0.0.1:80#@flowgate-evil.test", "fragment"),
        ("https://login.example.com/?realm=ops", "query"),
        ("http://flowgate-evil.test\\@127.0.0.1", "RFC 3986"),
        ("http://127.0.0.1.flowgate-evil.test", "loopback"),
    ] {
        let stderr = refused_to_start(&[
            ("FLOWGATE_AUTH_ISSUER", issuer),
            ("FLOWGATE_AUTH_RESOURCE", RESOURCE),
        ]);
        assert!(
            stderr.contains("--auth-issuer") && stderr.contains(why),
            "{issuer}: {stderr}"
        );
        assert!(!stderr.contains("hunter2"), "{stderr}");
    }
    let stderr = refused_to_start(&[
        ("FLOWGATE_AUTH_ISSUER", "https://login.example.com"),
        ("FLOWGATE_AUTH_RESOURCE", RESOURCE),
        (
            "FLOWGATE_AUTH_JWKS_URL",
            "http://127.0.0.1:80@flowgate-evil.test/jwks",
        ),
    ]);
    assert!(
        stderr.contains("--auth-jwks-url") && stderr.contains("userinfo"),
        "{stderr}"
    );
}
