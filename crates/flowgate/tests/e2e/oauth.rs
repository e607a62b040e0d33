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
    let unknown = format!("{}x", &id[..id.len() - 1]);
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
        let bundled = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/flowgate.yaml"),
        )
        .expect("the bundled manifest");
        let manifest = state.join("tools.yaml");
        std::fs::write(&manifest, format!("default_scopes: [jobs.run]\n{bundled}"))
            .expect("manifest");
        Server::start_with(
            state,
            Some(&manifest),
            &[
                ("FLOWGATE_AUTH_ISSUER", issuer),
                ("FLOWGATE_AUTH_RESOURCE", RESOURCE),
            ],
            None,
        )
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
