//! Cloud Run / IAP identities: `--auth-mode google-id-token` and `google-iap`, with a locally
//! generated key set (flowgate_auth::testing) standing in for Google's published keys.

use flowgate_auth::testing::FakeIssuer;
use serde_json::{Value, json};

use crate::support::*;

const SERVICE: &str = "https://flowgate-abc123-ew.a.run.app";
const IAP_AUDIENCE: &str = "/projects/123456789012/global/backendServices/987654321";

fn claims(iss: &str, aud: &str, email: &str) -> Value {
    let now = chrono::Utc::now().timestamp();
    json!({
        "iss": iss, "aud": aud, "sub": format!("1000{}", email.len()), "email": email,
        "email_verified": true, "iat": now, "exp": now + 600,
    })
}

/// A POST on the 2026-07-28 wire with extra headers (`Mcp-Name` from the params): (status,
/// body).
async fn post(url: &str, headers: &[(&str, &str)], method: &str, params: Value) -> (u16, Value) {
    let name = params
        .get("taskId")
        .or_else(|| params.get("name"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let mut post = Post::rpc(url, method, params).name(name.as_deref());
    for (k, v) in headers {
        post = post.header(k, *v);
    }
    let answer = post.send().await;
    (answer.status, answer.body)
}

async fn start_job(url: &str, headers: &[(&str, &str)]) -> String {
    let (status, created) = post(
        url,
        headers,
        "tools/call",
        json!({"name": "long_job", "arguments": {"steps": 20}}),
    )
    .await;
    assert_eq!(status, 200, "{created}");
    created["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("a task: {created}"))
        .to_owned()
}

#[tokio::test]
async fn google_id_tokens_for_the_service_url_name_the_caller() {
    let google = FakeIssuer::start().await;
    let state = tempfile::tempdir().expect("tempdir");
    let jwks = google.jwks_url();
    let server = Server::start_with(
        state.path(),
        None,
        &[
            ("FLOWGATE_AUTH_MODE", "google-id-token"),
            ("FLOWGATE_AUTH_AUDIENCE", SERVICE),
            ("FLOWGATE_AUTH_JWKS_URL", &jwks),
            (
                "FLOWGATE_AUTH_ALLOWED",
                "alice@p.iam.gserviceaccount.com,*@example.com",
            ),
        ],
        None,
    );
    let alice = google.sign_rs256(&claims(
        "https://accounts.google.com",
        SERVICE,
        "alice@p.iam.gserviceaccount.com",
    ));
    // Google also spells its issuer without the scheme: the same caller, the same principal.
    let alice_again = google.sign_rs256(&claims(
        "accounts.google.com",
        SERVICE,
        "alice@p.iam.gserviceaccount.com",
    ));
    // `*@example.com` admits Bob by his Workspace domain (`hd`).
    let mut bob = claims("https://accounts.google.com", SERVICE, "bob@example.com");
    bob["hd"] = json!("example.com");
    let bob = google.sign_rs256(&bob);
    let bearer = |t: &str| format!("Bearer {t}");

    let (status, body) = post(&server.url, &[], "tools/list", json!({})).await;
    assert_eq!(status, 401, "{body}");
    let bad = [
        (
            "another audience",
            google.sign_rs256(&claims(
                "https://accounts.google.com",
                "https://other.a.run.app",
                "a@b.c",
            )),
        ),
        (
            "another issuer",
            google.sign_rs256(&claims("https://evil.example", SERVICE, "a@b.c")),
        ),
        // IAP signs with ES256; an ID token must be RS256.
        (
            "ES256",
            google.sign_es256(&claims("https://accounts.google.com", SERVICE, "a@b.c")),
        ),
    ];
    for (what, token) in &bad {
        let (status, body) = post(
            &server.url,
            &[("authorization", &bearer(token))],
            "tools/list",
            json!({}),
        )
        .await;
        assert_eq!(status, 401, "{what}: {body}");
    }

    // A valid token of a caller nobody allowed: authenticated, not admitted.
    let stranger = google.sign_rs256(&claims(
        "https://accounts.google.com",
        SERVICE,
        "someone@elsewhere.test",
    ));
    let (status, body) = post(
        &server.url,
        &[("authorization", &bearer(&stranger))],
        "tools/list",
        json!({}),
    )
    .await;
    assert_eq!(status, 403, "{body}");
    // What Cloud Run forwards when its own IAM check consumed the token is not a token.
    let stripped = format!(
        "{}.SIGNATURE_REMOVED_BY_GOOGLE",
        alice
            .rsplit_once('.')
            .map(|(head, _)| head)
            .unwrap_or_default()
    );
    let (status, _) = post(
        &server.url,
        &[("authorization", &bearer(&stripped))],
        "tools/list",
        json!({}),
    )
    .await;
    assert_eq!(status, 401);

    let id = start_job(&server.url, &[("authorization", &bearer(&alice))]).await;
    let (_, theirs) = post(
        &server.url,
        &[("authorization", &bearer(&bob))],
        "tasks/get",
        json!({"taskId": id}),
    )
    .await;
    assert_eq!(theirs["error"]["code"], -32602, "{theirs}");
    let (_, mine) = post(
        &server.url,
        &[("authorization", &bearer(&alice_again))],
        "tasks/get",
        json!({"taskId": id}),
    )
    .await;
    assert_eq!(mine["result"]["status"], "working", "{mine}");
    // An IAP header is not what this mode reads.
    let (status, _) = post(
        &server.url,
        &[("x-goog-iap-jwt-assertion", &alice)],
        "tools/list",
        json!({}),
    )
    .await;
    assert_eq!(status, 401);
    let (_, cancelled) = post(
        &server.url,
        &[("authorization", &bearer(&alice))],
        "tasks/cancel",
        json!({"taskId": id}),
    )
    .await;
    assert!(cancelled.get("result").is_some(), "{cancelled}");
}

#[tokio::test]
async fn iap_assertions_name_the_caller_and_are_ignored_unless_configured() {
    let google = FakeIssuer::start().await;
    let state = tempfile::tempdir().expect("tempdir");
    let jwks = google.jwks_url();
    let server = Server::start_with(
        state.path(),
        None,
        &[
            ("FLOWGATE_AUTH_MODE", "google-iap"),
            ("FLOWGATE_AUTH_AUDIENCE", IAP_AUDIENCE),
            ("FLOWGATE_AUTH_JWKS_URL", &jwks),
        ],
        None,
    );
    let iap = "https://cloud.google.com/iap";
    let alice = google.sign_es256(&claims(iap, IAP_AUDIENCE, "alice@example.com"));
    let bob = google.sign_es256(&claims(iap, IAP_AUDIENCE, "bob@example.com"));
    let header = "x-goog-iap-jwt-assertion";

    let (status, _) = post(&server.url, &[], "tools/list", json!({})).await;
    assert_eq!(status, 401);
    // A Bearer token, even a valid assertion, is not IAP's header.
    let (status, _) = post(
        &server.url,
        &[("authorization", &format!("Bearer {alice}"))],
        "tools/list",
        json!({}),
    )
    .await;
    assert_eq!(status, 401);
    let wrong_aud = google.sign_es256(&claims(iap, "/projects/1/apps/other", "alice@example.com"));
    let (status, _) = post(
        &server.url,
        &[(header, &wrong_aud)],
        "tools/list",
        json!({}),
    )
    .await;
    assert_eq!(status, 401);

    let id = start_job(&server.url, &[(header, &alice)]).await;
    let (_, theirs) = post(
        &server.url,
        &[(header, &bob)],
        "tasks/cancel",
        json!({"taskId": id}),
    )
    .await;
    assert_eq!(theirs["error"]["code"], -32602, "{theirs}");
    let (_, mine) = post(
        &server.url,
        &[(header, &alice)],
        "tasks/cancel",
        json!({"taskId": id}),
    )
    .await;
    assert!(mine.get("result").is_some(), "{mine}");
    drop(server);

    // Without the mode, the header is not read: Bob's assertion does not make Alice's task
    // his, and does not keep anyone out (the loopback server is unauthenticated).
    let open = Server::start(state.path(), None);
    let id = start_job(&open.url, &[(header, &alice)]).await;
    let (_, any) = post(&open.url, &[], "tasks/cancel", json!({"taskId": id})).await;
    assert!(any.get("result").is_some(), "{any}");
}

/// OpenID Connect Core 5.1: an email names a caller only when `email_verified` is true; and a
/// domain is Google's word only through `hd` (a consumer account may carry any address).
#[tokio::test]
async fn only_verified_emails_and_hosted_domains_are_admitted() {
    let google = FakeIssuer::start().await;
    let state = tempfile::tempdir().expect("tempdir");
    let jwks = google.jwks_url();
    let server = Server::start_with(
        state.path(),
        None,
        &[
            ("FLOWGATE_AUTH_MODE", "google-id-token"),
            ("FLOWGATE_AUTH_AUDIENCE", SERVICE),
            ("FLOWGATE_AUTH_JWKS_URL", &jwks),
            (
                "FLOWGATE_AUTH_ALLOWED",
                "alice@p.iam.gserviceaccount.com,*@example.com,*@p.iam.gserviceaccount.com",
            ),
        ],
        None,
    );
    let token = |email: &str, extra: Value| {
        let mut c = claims("https://accounts.google.com", SERVICE, email);
        for (k, v) in extra.as_object().into_iter().flatten() {
            c[k] = v.clone();
        }
        format!("Bearer {}", google.sign_rs256(&c))
    };
    let status_of = async |auth: &str| {
        post(
            &server.url,
            &[("authorization", auth)],
            "tools/list",
            json!({}),
        )
        .await
        .0
    };
    for (what, auth, expected) in [
        (
            "a verified service account",
            token("alice@p.iam.gserviceaccount.com", json!({})),
            200,
        ),
        (
            "the same address, unverified",
            token(
                "alice@p.iam.gserviceaccount.com",
                json!({"email_verified": false}),
            ),
            403,
        ),
        (
            "the same address, verification not said",
            token(
                "alice@p.iam.gserviceaccount.com",
                json!({"email_verified": null}),
            ),
            403,
        ),
        (
            "a Workspace account of the domain",
            token("dave@example.com", json!({"hd": "example.com"})),
            200,
        ),
        (
            "a consumer account with an address at the domain",
            token("mallory@example.com", json!({})),
            403,
        ),
        (
            "an account of another Workspace with an address at the domain",
            token("mallory@example.com", json!({"hd": "evil.example"})),
            403,
        ),
        (
            "a service account of the allowed project, no hd",
            token("ci@p.iam.gserviceaccount.com", json!({})),
            200,
        ),
    ] {
        assert_eq!(status_of(&auth).await, expected, "{what}");
    }

    // An unverified email never becomes the principal: a token claiming Alice's address
    // without verification does not open the task the verified Alice started.
    let alice = token("alice@p.iam.gserviceaccount.com", json!({"sub": "1"}));
    let id = start_job(&server.url, &[("authorization", &alice)]).await;
    let mut impostor = claims(
        "https://accounts.google.com",
        SERVICE,
        "alice@p.iam.gserviceaccount.com",
    );
    impostor["email_verified"] = json!(false);
    impostor["hd"] = json!("example.com");
    let impostor = format!("Bearer {}", google.sign_rs256(&impostor));
    let (status, theirs) = post(
        &server.url,
        &[("authorization", &impostor)],
        "tasks/get",
        json!({"taskId": id}),
    )
    .await;
    assert_eq!(status, 200, "admitted by its hd: {theirs}");
    assert_eq!(theirs["error"]["code"], -32602, "{theirs}");
    let (_, cancelled) = post(
        &server.url,
        &[("authorization", &alice)],
        "tasks/cancel",
        json!({"taskId": id}),
    )
    .await;
    assert!(cancelled.get("result").is_some(), "{cancelled}");
}

/// IAP: its email names the caller unless the assertion marks it unverified (external
/// identities carry Identity Platform's `gcip` claims); `*@domain` goes by `hd`.
#[tokio::test]
async fn iap_domains_go_by_hd_and_unverified_external_emails_do_not_name_callers() {
    let google = FakeIssuer::start().await;
    let state = tempfile::tempdir().expect("tempdir");
    let jwks = google.jwks_url();
    let server = Server::start_with(
        state.path(),
        None,
        &[
            ("FLOWGATE_AUTH_MODE", "google-iap"),
            ("FLOWGATE_AUTH_AUDIENCE", IAP_AUDIENCE),
            ("FLOWGATE_AUTH_JWKS_URL", &jwks),
            ("FLOWGATE_AUTH_ALLOWED", "*@example.com"),
        ],
        None,
    );
    let header = "x-goog-iap-jwt-assertion";
    // IAP's documented payload: no email_verified.
    let assertion = |email: &str, sub: &str, extra: Value| {
        let now = chrono::Utc::now().timestamp();
        let mut c = json!({"iss": "https://cloud.google.com/iap", "aud": IAP_AUDIENCE,
            "sub": sub, "email": email, "iat": now, "exp": now + 600});
        for (k, v) in extra.as_object().into_iter().flatten() {
            c[k] = v.clone();
        }
        google.sign_es256(&c)
    };
    let alice = assertion(
        "alice@example.com",
        "accounts.google.com:1",
        json!({"hd": "example.com"}),
    );
    let outsider = assertion("mallory@example.com", "accounts.google.com:2", json!({}));
    let (status, _) = post(&server.url, &[(header, &outsider)], "tools/list", json!({})).await;
    assert_eq!(status, 403, "no hd: not the domain's account");
    let id = start_job(&server.url, &[(header, &alice)]).await;
    // Same address, marked unverified by Identity Platform: admitted by hd, but not Alice.
    let unverified = assertion(
        "alice@example.com",
        "securetoken.google.com/p/t:9",
        json!({"hd": "example.com", "gcip": {"email_verified": false}}),
    );
    let (status, theirs) = post(
        &server.url,
        &[(header, &unverified)],
        "tasks/get",
        json!({"taskId": id}),
    )
    .await;
    assert_eq!(status, 200, "{theirs}");
    assert_eq!(theirs["error"]["code"], -32602, "{theirs}");
    let (_, mine) = post(
        &server.url,
        &[(header, &alice)],
        "tasks/cancel",
        json!({"taskId": id}),
    )
    .await;
    assert!(mine.get("result").is_some(), "{mine}");
}

/// A stand-in for the metadata server's identity endpoint: each GET mints an ID token for the
/// `audience` it asks, signed by `google`, living `lifetime` seconds; it counts its answers and
/// refuses a request without `Metadata-Flavor: Google` as the real one does.
async fn fake_metadata(
    google: std::sync::Arc<FakeIssuer>,
    lifetime: i64,
) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address").to_string();
    let minted = std::sync::Arc::new(AtomicUsize::new(0));
    let count = minted.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let mut request = Vec::new();
            let mut buf = [0u8; 4096];
            while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                match socket.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => request.extend_from_slice(&buf[..n]),
                }
            }
            let text = String::from_utf8_lossy(&request).into_owned();
            let target = text
                .split_whitespace()
                .nth(1)
                .unwrap_or_default()
                .to_owned();
            let flavored = text
                .lines()
                .any(|l| l.eq_ignore_ascii_case("metadata-flavor: google"));
            let audience = target
                .split_once("audience=")
                .map(|(_, rest)| rest.split('&').next().unwrap_or_default())
                .map(|a| a.replace("%3A", ":").replace("%2F", "/"))
                .unwrap_or_default();
            let (status, body) = if !flavored
                || !target
                    .starts_with("/computeMetadata/v1/instance/service-accounts/default/identity?")
            {
                ("403 Forbidden", String::new())
            } else {
                count.fetch_add(1, Ordering::SeqCst);
                let mut c = claims(
                    "https://accounts.google.com",
                    &audience,
                    "runner@p.iam.gserviceaccount.com",
                );
                c["exp"] = json!(chrono::Utc::now().timestamp() + lifetime);
                ("200 OK", google.sign_rs256(&c))
            };
            let answer = format!(
                "HTTP/1.1 {status}\r\ncontent-type: application/text\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = socket.write_all(answer.as_bytes()).await;
        }
    });
    (address, minted)
}

/// deploy/cloudrun/id-token-header, the header helper docs/remote-clients.md gives MCP clients:
/// it mints an ID token for the service URL from the metadata server, the header it prints gets
/// a client into a google-id-token flowgate, a second run reuses the cached token, and a cached
/// token about to expire is replaced by a fresh one. (Two worker threads: the helper runs as a
/// blocking child process while the fake metadata server answers it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_id_token_header_helper_mints_caches_and_refreshes() {
    use std::sync::atomic::Ordering;
    let google = std::sync::Arc::new(FakeIssuer::start().await);
    let (metadata, minted) = fake_metadata(google.clone(), 3600).await;
    let state = tempfile::tempdir().expect("tempdir");
    let jwks = google.jwks_url();
    let server = Server::start_with(
        state.path(),
        None,
        &[
            ("FLOWGATE_AUTH_MODE", "google-id-token"),
            ("FLOWGATE_AUTH_AUDIENCE", SERVICE),
            ("FLOWGATE_AUTH_JWKS_URL", &jwks),
            ("FLOWGATE_AUTH_ALLOWED", "runner@p.iam.gserviceaccount.com"),
        ],
        None,
    );
    let cache = tempfile::tempdir().expect("tempdir");
    let helper = |format: &str| {
        let out = std::process::Command::new("python3")
            .arg(
                std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("../../deploy/cloudrun/id-token-header"),
            )
            .args([
                "--audience",
                SERVICE,
                "--source",
                "metadata",
                "--format",
                format,
            ])
            .env("GCE_METADATA_HOST", &metadata)
            .env("XDG_CACHE_HOME", cache.path())
            .output()
            .expect("run id-token-header");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    let headers: Value = serde_json::from_str(&helper("json")).expect("a JSON object of headers");
    let authorization = headers["Authorization"]
        .as_str()
        .expect("Authorization")
        .to_owned();
    assert!(authorization.starts_with("Bearer "), "{headers}");
    assert_eq!(minted.load(Ordering::SeqCst), 1);
    let (status, body) = post(
        &server.url,
        &[("authorization", &authorization)],
        "tools/list",
        json!({}),
    )
    .await;
    assert_eq!(status, 200, "the helper's header gets in: {body}");

    // A second run (the client connecting again) reuses the token: no second mint.
    assert_eq!(helper("header"), format!("Authorization: {authorization}"));
    assert_eq!(
        minted.load(Ordering::SeqCst),
        1,
        "the cached token is reused"
    );
    let cached: Vec<std::path::PathBuf> = std::fs::read_dir(cache.path().join("flowgate"))
        .expect("the cache folder")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    assert_eq!(cached.len(), 1, "{cached:?}");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&cached[0])
        .expect("metadata")
        .permissions()
        .mode();
    assert_eq!(mode & 0o077, 0, "the cached token is private: {mode:o}");

    // A cached token with four minutes left is not handed out: a fresh one is minted.
    let mut soon = claims(
        "https://accounts.google.com",
        SERVICE,
        "runner@p.iam.gserviceaccount.com",
    );
    soon["exp"] = json!(chrono::Utc::now().timestamp() + 240);
    std::fs::write(&cached[0], google.sign_rs256(&soon)).expect("age the cache");
    let fresh = helper("token");
    assert_eq!(
        minted.load(Ordering::SeqCst),
        2,
        "refreshed before it expires"
    );
    let (status, body) = post(
        &server.url,
        &[("authorization", &format!("Bearer {fresh}"))],
        "tools/list",
        json!({}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
}
