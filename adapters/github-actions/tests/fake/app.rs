//! A GitHub App installation as flowgate's credentials: tokens minted and reused, and the
//! approvals an App can give (its own custom deployment protection rule) and cannot (a required
//! reviewer's).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use flowgate_core::{
    Action, Engine, EngineError, IdempotencyKey, InputResponse, StartRequest, TaskState,
};
use flowgate_github_actions::GitHubActionsEngine;
use flowgate_github_actions::testing::Fake;
use serde_json::{Value, json};

use crate::support::{start, wait_for};

const APP_ID: u64 = 424242;

/// An RSA key pair made with the openssl CLI: (PKCS#1 private PEM, public key file).
fn app_key_pair(dir: &Path, name: &str) -> (String, PathBuf) {
    let private = dir.join(format!("{name}.pem"));
    let public = dir.join(format!("{name}.pub.pem"));
    let ok = std::process::Command::new("openssl")
        .args(["genrsa", "-traditional", "-out"])
        .arg(&private)
        .arg("2048")
        .stderr(std::process::Stdio::null())
        .status()
        .expect("openssl genrsa (the openssl CLI is needed)")
        .success()
        && std::process::Command::new("openssl")
            .args(["rsa", "-pubout", "-in"])
            .arg(&private)
            .arg("-out")
            .arg(&public)
            .stderr(std::process::Stdio::null())
            .status()
            .expect("openssl rsa")
            .success();
    assert!(ok, "openssl could not make a key pair");
    (std::fs::read_to_string(&private).expect("read key"), public)
}

struct AppFake {
    fake: Fake,
    pem: String,
    dir: PathBuf,
}

impl Drop for AppFake {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn app_fake() -> AppFake {
    let dir = std::env::temp_dir().join(format!("flowgate-gh-app-{}", IdempotencyKey::new()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let (pem, public) = app_key_pair(&dir, "app");
    let public = public.to_string_lossy().into_owned();
    let fake = Fake::start_with(&["--app-id", &APP_ID.to_string(), "--app-public-key", &public]);
    AppFake { fake, pem, dir }
}

fn as_app(fake: &Fake, key: &str, workflow: &str, extra: Value) -> Arc<GitHubActionsEngine> {
    let mut v = json!({"app": {"app_id": APP_ID, "installation_id": 77, "private_key_env": "FLOWGATE_UNUSED_KEY_VAR"}});
    if let (Some(m), Value::Object(e)) = (v.as_object_mut(), extra) {
        m.extend(e);
    }
    let mut t = fake.target(workflow, v);
    t.token = None;
    t.app_key = Some(flowgate_http::Secret::new(key));
    Arc::new(GitHubActionsEngine::new(t).expect("engine"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_github_app_mints_one_installation_token_and_reuses_it() {
    let app = app_fake();
    let fake = &app.fake;
    let e = as_app(
        fake,
        &app.pem,
        "greet.yml",
        json!({"result_artifact": {"name": "result", "path": "result.json"}}),
    );
    let x = start(&e, json!({"name": "App", "seconds": 0})).await;
    let done = wait_for(&e, &x, |r| r.state.is_terminal()).await;
    assert_eq!(done.output, Some(json!({"greeting": "hello App"})));
    let stats = fake.hook("stats", Value::Null);
    assert_eq!(
        stats["app_tokens"], 1,
        "one installation token, reused: {stats}"
    );
    assert!(stats["requests"].as_u64().unwrap_or(0) > 3, "{stats}");

    let (other_pem, _) = app_key_pair(&app.dir, "other");
    let forged = as_app(fake, &other_pem, "greet.yml", json!({}))
        .start(StartRequest::new("t", json!({"name": "x"}), "tests"))
        .await;
    assert!(
        matches!(forged, Err(EngineError::Denied { .. })),
        "{forged:?}"
    );
}

/// The App path: an environment protected by the App's own custom deployment protection rule
/// is a question flowgate answers through `.../deployment_protection_rule`; GitHub records the
/// review as the App's bot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_github_app_approves_and_rejects_through_its_own_protection_rule() {
    let app = app_fake();
    let e = as_app(&app.fake, &app.pem, "deploy.yml", json!({}));
    let x = start(&e, json!({"target": "gated"})).await;
    let r = wait_for(&e, &x, |r| r.state == TaskState::InputRequired).await;
    let q = &r.input_requests[0];
    assert!(
        q.message.contains("gated") && !q.message.contains("cannot answer"),
        "{q:?}"
    );
    e.respond(
        &x,
        &q.key,
        InputResponse {
            action: Action::Accept,
            content: Some(json!({"decision": "approve", "comment": "checks passed"})),
        },
    )
    .await
    .expect("the App approves its own rule");
    let done = wait_for(&e, &x, |r| r.state.is_terminal()).await;
    assert_eq!(done.state, TaskState::Completed, "{done:?}");
    let out = done.output.expect("output");
    assert_eq!(out["reviews"][0]["user"], "flowgate-app[bot]", "{out}");
    assert_eq!(out["jobs"]["deploy"], "success", "{out}");

    let y = start(&e, json!({"target": "gated"})).await;
    let r = wait_for(&e, &y, |r| r.state == TaskState::InputRequired).await;
    e.respond(
        &y,
        &r.input_requests[0].key,
        InputResponse {
            action: Action::Decline,
            content: Some(json!({"comment": "error budget spent"})),
        },
    )
    .await
    .expect("the App rejects");
    let done = wait_for(&e, &y, |r| r.state.is_terminal()).await;
    let f = done.failure.expect("a rejection");
    assert!(f.error.contains("rejected by @flowgate-app[bot]"), "{f:?}");
    assert!(f.cause.is_some_and(|c| c.contains("error budget spent")));
}

/// GitHub takes no App as a required reviewer: an environment with reviewers is a question that
/// says so and who can answer it, flowgate refuses an answer to it, and the fake (as GitHub)
/// refuses an installation token's review outright.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_github_app_is_never_a_required_reviewer() {
    let app = app_fake();
    let fake = &app.fake;
    let e = as_app(fake, &app.pem, "deploy.yml", json!({}));
    let x = start(&e, json!({"target": "production"})).await;
    let r = wait_for(&e, &x, |r| r.state == TaskState::InputRequired).await;
    let q = &r.input_requests[0];
    assert!(
        q.message
            .contains("GitHub takes no App as a required reviewer")
            && q.message.contains("@flowgate-tests"),
        "{q:?}"
    );
    let got = e
        .respond(
            &x,
            &q.key,
            InputResponse {
                action: Action::Accept,
                content: Some(json!({"decision": "approve"})),
            },
        )
        .await;
    assert!(matches!(got, Err(EngineError::Denied { .. })), "{got:?}");

    // An installation token asking GitHub itself: 403, as the endpoint is not for Apps.
    let jwt = {
        let now = chrono::Utc::now().timestamp();
        let claims = json!({"iat": now - 60, "exp": now + 500, "iss": APP_ID.to_string()});
        use base64::Engine as _;
        let body: String = app
            .pem
            .lines()
            .filter(|l| !l.starts_with("-----"))
            .collect();
        let der = base64::engine::general_purpose::STANDARD
            .decode(body)
            .expect("PEM body");
        let key = jsonwebtoken::EncodingKey::from_rsa_der(&der);
        jsonwebtoken::encode(
            &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256),
            &claims,
            &key,
        )
        .expect("jwt")
    };
    let (status, minted) = fake.request(
        "POST",
        "/app/installations/77/access_tokens",
        Some(&jwt),
        json!({}),
    );
    assert_eq!(status, 201, "{minted}");
    let token = minted["token"].as_str().expect("token").to_owned();
    let (_, pending) = fake.request(
        "GET",
        &format!("/repos/acme/app/actions/runs/{}/pending_deployments", x.0),
        Some(&token),
        Value::Null,
    );
    assert_eq!(pending[0]["current_user_can_approve"], false, "{pending}");
    let env_id = pending[0]["environment"]["id"].clone();
    let (status, body) = fake.request(
        "POST",
        &format!("/repos/acme/app/actions/runs/{}/pending_deployments", x.0),
        Some(&token),
        json!({"environment_ids": [env_id], "state": "approved", "comment": "as an App"}),
    );
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["message"], "Resource not accessible by integration");
    e.cancel(&x).await.expect("cancel");
}
