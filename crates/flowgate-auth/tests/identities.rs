//! The identities through the one [`Identity`] interface the server's middleware calls: what
//! each reads from a request, who it names, how it refuses and challenges, and which headers it
//! takes away. (The validation underneath is in `auth.rs`; the Lambda identity's own tests are
//! beside it, in `lambda.rs`.)

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use flowgate_auth::google::{AllowList, IAP_HEADER};
use flowgate_auth::testing::{FakeIssuer, SigningKey};
use flowgate_auth::{
    GoogleCredential, GoogleIdentity, Identity, JwksSource, KeySet, Mode, OAuthIdentity,
    RefusalKind, TokenValidator, ValidatorConfig,
};
use http::request::Parts;
use serde_json::json;

const RESOURCE: &str = "https://flowgate.example/mcp";

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs()
}

fn request(headers: &[(&str, &str)]) -> Parts {
    let mut builder = http::Request::builder().uri("/mcp");
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    builder.body(()).expect("a request").into_parts().0
}

fn keys(url: String) -> KeySet {
    KeySet::new(
        JwksSource::Url(url),
        Duration::from_secs(30),
        Duration::from_secs(3600),
    )
    .expect("key set")
}

#[tokio::test]
async fn oauth_names_the_tokens_subject_and_points_refusals_at_its_metadata() {
    let fake = FakeIssuer::start().await;
    let validator = TokenValidator::new(
        ValidatorConfig::new(&fake.issuer, RESOURCE),
        keys(fake.jwks_url()),
    );
    let oauth = OAuthIdentity::new(validator, vec!["deploy".to_owned()]);
    assert_eq!(oauth.mode(), Mode::Oauth);
    assert_eq!(oauth.credential_headers(), ["authorization"]);
    let metadata = oauth
        .resource_metadata()
        .expect("OAuth publishes its metadata");
    assert_eq!(metadata.resource, RESOURCE);
    assert!(
        oauth
            .metadata_url()
            .contains("/.well-known/oauth-protected-resource")
    );

    let token = fake.token("client-1", RESOURCE, "deploy");
    let who = oauth
        .identify(&request(&[("authorization", &format!("Bearer {token}"))]))
        .await
        .expect("a valid token");
    assert_eq!(who.principal.issuer, fake.issuer);
    assert_eq!(who.principal.subject, "client-1");
    assert!(who.scopes.contains("deploy"));

    let missing = oauth.identify(&request(&[])).await.expect_err("no token");
    assert_eq!(missing.kind, RefusalKind::Missing);
    let challenge = oauth.challenge(&missing).expect("a challenge");
    assert!(challenge.contains(oauth.metadata_url()), "{challenge}");
    let other = fake.token("client-1", "https://other.example/mcp", "");
    let invalid = oauth
        .identify(&request(&[("authorization", &format!("Bearer {other}"))]))
        .await
        .expect_err("another resource's token");
    assert_eq!(invalid.kind, RefusalKind::InvalidToken);
    assert!(
        oauth
            .challenge(&invalid)
            .is_some_and(|c| c.contains("invalid_token"))
    );
}

#[tokio::test]
async fn google_reads_its_credential_and_admits_only_the_allowed() {
    let rsa = SigningKey::rs256("g-rsa");
    let ec = SigningKey::es256("g-ec");
    let fake = FakeIssuer::publishing(vec![rsa.jwk.clone(), ec.jwk.clone()]).await;
    let allowed = AllowList::parse(&["ci@p.iam.gserviceaccount.com".to_owned()]).expect("list");
    let claims = |iss: &str, aud: &str, email: &str| {
        json!({"iss": iss, "aud": aud, "sub": "1122", "email": email, "email_verified": true,
               "iat": now(), "exp": now() + 300})
    };

    // An ID token in Authorization: Bearer.
    let service = "https://svc-abc.a.run.app";
    let credential = GoogleCredential::for_mode(Mode::GoogleIdToken).expect("a Google mode");
    let id = GoogleIdentity::new(
        credential,
        TokenValidator::new(credential.config(service), keys(fake.jwks_url())),
        allowed.clone(),
    );
    assert_eq!(id.mode(), Mode::GoogleIdToken);
    assert_eq!(id.credential_headers(), ["authorization"]);
    assert!(id.resource_metadata().is_none());
    let iss = flowgate_auth::google::ID_TOKEN_ISSUER;
    let bearer = |token: String| format!("Bearer {token}");
    let who = id
        .identify(&request(&[(
            "authorization",
            &bearer(rsa.sign(&claims(iss, service, "ci@p.iam.gserviceaccount.com"))),
        )]))
        .await
        .expect("an allowed caller");
    assert_eq!(who.principal.subject, "ci@p.iam.gserviceaccount.com");
    let stranger = id
        .identify(&request(&[(
            "authorization",
            &bearer(rsa.sign(&claims(iss, service, "eve@gmail.com"))),
        )]))
        .await
        .expect_err("valid, but not allowed");
    assert_eq!(stranger.kind, RefusalKind::NotAllowed);
    assert_eq!(id.challenge(&stranger), None);
    // IAP's header is not this mode's credential.
    let iap_token = ec.sign(&claims(
        flowgate_auth::google::IAP_ISSUER,
        "/projects/1/apps/p",
        "ci@p.iam.gserviceaccount.com",
    ));
    let missing = id
        .identify(&request(&[(IAP_HEADER, &iap_token)]))
        .await
        .expect_err("no bearer token");
    assert_eq!(missing.kind, RefusalKind::Missing);

    // IAP's assertion, with no allow-list (IAP applied its own policy).
    let credential = GoogleCredential::for_mode(Mode::GoogleIap).expect("a Google mode");
    let iap = GoogleIdentity::new(
        credential,
        TokenValidator::new(
            credential.config("/projects/1/apps/p"),
            keys(fake.jwks_url()),
        ),
        AllowList::default(),
    );
    assert_eq!(iap.mode(), Mode::GoogleIap);
    assert_eq!(iap.credential_headers(), [IAP_HEADER]);
    let who = iap
        .identify(&request(&[(IAP_HEADER, &iap_token)]))
        .await
        .expect("IAP's caller");
    assert_eq!(who.principal.issuer, flowgate_auth::google::IAP_ISSUER);
    let missing = iap
        .identify(&request(&[("authorization", "Bearer x")]))
        .await
        .expect_err("no assertion");
    assert_eq!(missing.kind, RefusalKind::Missing);
    let invalid = iap
        .identify(&request(&[(IAP_HEADER, "not-a-jwt")]))
        .await
        .expect_err("a broken assertion");
    assert_eq!(invalid.kind, RefusalKind::InvalidToken);
    assert_eq!(GoogleCredential::for_mode(Mode::Oauth), None);
}
