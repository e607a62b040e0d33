//! Token validation against a local stand-in for an OAuth authorization server
//! (`flowgate_auth::testing`), with real RS256 and ES256 signatures, and the attacks a resource
//! server must refuse.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use flowgate_auth::challenge::Refusal;
use flowgate_auth::testing::{FakeIssuer, SigningKey};
use flowgate_auth::{
    AuthError, JwksSource, KeySet, ProtectedResourceMetadata, TokenValidator, ValidatorConfig,
    www_authenticate,
};
use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
use serde_json::{Value, json};

const RESOURCE: &str = "https://flowgate.example/mcp";

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs() as i64
}

fn claims(issuer: &str, sub: &str) -> Value {
    json!({
        "iss": issuer, "sub": sub, "aud": RESOURCE, "scope": "tools deploy",
        "iat": now(), "exp": now() + 300, "client_id": sub,
    })
}

fn sign(alg: Algorithm, key: &SigningKey, claims: &Value) -> String {
    assert_eq!(alg, key.alg, "a test signs with the key's own algorithm");
    key.sign(claims)
}

fn validator(issuer: &str, min_refresh: Duration) -> TokenValidator {
    let keys = KeySet::new(
        JwksSource::Discover {
            issuer: issuer.to_owned(),
        },
        min_refresh,
        Duration::from_secs(3600),
    )
    .expect("key set");
    TokenValidator::new(ValidatorConfig::new(issuer, RESOURCE), keys)
}

#[tokio::test]
async fn valid_tokens_and_every_attack() {
    let rsa = SigningKey::rs256("rsa-1");
    let ec = SigningKey::es256("ec-1");
    let fake = FakeIssuer::publishing(vec![rsa.jwk.clone(), ec.jwk.clone()]).await;
    let iss = fake.issuer.clone();
    let v = validator(&iss, Duration::from_secs(30));

    // Real RS256 and ES256 tokens of two clients: two principals.
    let a = v
        .validate(&sign(Algorithm::RS256, &rsa, &claims(&iss, "client-a")))
        .await
        .expect("RS256");
    assert_eq!(a.principal.issuer, iss);
    assert_eq!(a.principal.subject, "client-a");
    assert!(a.has_all(&["deploy".to_owned()]));
    assert_eq!(
        a.missing(&["admin".to_owned(), "tools".to_owned()]),
        vec!["admin".to_owned()]
    );
    let b = v
        .validate(&sign(Algorithm::ES256, &ec, &claims(&iss, "client-b")))
        .await
        .expect("ES256");
    assert_ne!(a.principal.key(), b.principal.key());
    assert_ne!(
        flowgate_auth::principal::digest(&a.principal.key()),
        flowgate_auth::principal::digest(&b.principal.key())
    );
    assert_eq!(fake.fetches(), 1, "one JWKS fetch serves both");

    // `scp` as a list is read too.
    let mut c = claims(&iss, "client-c");
    c["scope"] = Value::Null;
    c["scp"] = json!(["read"]);
    let got = v
        .validate(&sign(Algorithm::ES256, &ec, &c))
        .await
        .expect("scp");
    assert!(got.scopes.contains("read") && !got.scopes.contains("deploy"));

    let refused =
        |r: Result<flowgate_auth::Authenticated, AuthError>| r.expect_err("must be refused");

    // alg: none, unsigned.
    let none = format!(
        "{}.{}.",
        B64.encode(br#"{"alg":"none","typ":"JWT"}"#),
        B64.encode(claims(&iss, "client-a").to_string())
    );
    assert_eq!(refused(v.validate(&none).await), AuthError::Algorithm);

    // HS256 signed with the public key as the shared secret (key confusion), with and without kid.
    for kid in [Some(rsa.kid.clone()), None] {
        for secret in [&rsa.public_bytes, &ec.public_bytes] {
            let mut header = Header::new(Algorithm::HS256);
            header.kid = kid.clone();
            let t = encode(
                &header,
                &claims(&iss, "client-a"),
                &EncodingKey::from_secret(secret),
            )
            .expect("sign HS256");
            assert_eq!(refused(v.validate(&t).await), AuthError::Algorithm);
        }
    }
    // An allow-list that names HS256 still refuses it.
    let mut cfg = ValidatorConfig::new(&iss, RESOURCE);
    cfg.algorithms.push(Algorithm::HS256);
    let lax = TokenValidator::new(
        cfg,
        KeySet::new(
            JwksSource::Discover {
                issuer: iss.clone(),
            },
            Duration::ZERO,
            Duration::from_secs(60),
        )
        .expect("keys"),
    );
    assert!(!lax.config().algorithms.contains(&Algorithm::HS256));

    // RS256 header on the EC key's kid: the JWK's own `alg` disagrees.
    let mut header = Header::new(Algorithm::RS256);
    header.kid = Some(ec.kid.clone());
    let t = rsa.sign_with(header, &claims(&iss, "client-a"));
    assert_eq!(refused(v.validate(&t).await), AuthError::Algorithm);

    // Claims.
    let mut c = claims(&iss, "client-a");
    c["aud"] = json!("https://other.example/mcp");
    assert_eq!(
        refused(v.validate(&sign(Algorithm::RS256, &rsa, &c)).await),
        AuthError::Audience
    );
    let mut c = claims(&iss, "client-a");
    c["iss"] = json!("https://evil.example");
    assert_eq!(
        refused(v.validate(&sign(Algorithm::RS256, &rsa, &c)).await),
        AuthError::Issuer
    );
    let mut c = claims(&iss, "client-a");
    c["exp"] = json!(now() - 120);
    assert_eq!(
        refused(v.validate(&sign(Algorithm::ES256, &ec, &c)).await),
        AuthError::Expired
    );
    let mut c = claims(&iss, "client-a");
    c["exp"] = json!(now() - 10);
    v.validate(&sign(Algorithm::ES256, &ec, &c))
        .await
        .expect("within the skew");
    let mut c = claims(&iss, "client-a");
    c["nbf"] = json!(now() + 600);
    assert_eq!(
        refused(v.validate(&sign(Algorithm::ES256, &ec, &c)).await),
        AuthError::NotYetValid
    );
    let mut c = claims(&iss, "client-a");
    c.as_object_mut().expect("object").remove("sub");
    assert!(
        v.validate(&sign(Algorithm::ES256, &ec, &c)).await.is_err(),
        "no sub"
    );
    let mut c = claims(&iss, "client-a");
    c.as_object_mut().expect("object").remove("exp");
    assert_eq!(
        refused(v.validate(&sign(Algorithm::ES256, &ec, &c)).await),
        AuthError::MissingClaim
    );

    // Bad signature: claims swapped under a valid signature, and a key of another issuer under our kid.
    let good = sign(Algorithm::RS256, &rsa, &claims(&iss, "client-a"));
    let parts: Vec<&str> = good.split('.').collect();
    let forged = format!(
        "{}.{}.{}",
        parts[0],
        B64.encode(claims(&iss, "admin").to_string()),
        parts[2]
    );
    assert_eq!(refused(v.validate(&forged).await), AuthError::Signature);
    let stranger = SigningKey::es256(&ec.kid);
    let t = sign(Algorithm::ES256, &stranger, &claims(&iss, "client-a"));
    assert_eq!(refused(v.validate(&t).await), AuthError::Signature);
    assert_eq!(refused(v.validate("not a jwt").await), AuthError::Algorithm);

    // Errors never echo the token.
    let msg = refused(v.validate(&forged).await).to_string();
    assert!(!msg.contains(parts[0]) && !msg.contains(parts[2]));
}

#[tokio::test]
async fn rotation_refreshes_on_unknown_kid_but_boundedly() {
    let old = SigningKey::es256("2026-old");
    let fake = FakeIssuer::publishing(vec![old.jwk.clone()]).await;
    let iss = fake.issuer.clone();

    // A validator that may refresh at once picks up a rotated key.
    let eager = validator(&iss, Duration::ZERO);
    eager
        .validate(&sign(Algorithm::ES256, &old, &claims(&iss, "a")))
        .await
        .expect("old key");
    let new = SigningKey::es256("2026-new");
    fake.set_keys(vec![old.jwk.clone(), new.jwk.clone()]);
    eager
        .validate(&sign(Algorithm::ES256, &new, &claims(&iss, "a")))
        .await
        .expect("rotated key");
    assert_eq!(fake.fetches(), 2);

    // One that refreshed recently does not fetch for every made-up kid.
    let bounded = validator(&iss, Duration::from_secs(300));
    bounded
        .validate(&sign(Algorithm::ES256, &new, &claims(&iss, "a")))
        .await
        .expect("new key");
    let before = fake.fetches();
    for i in 0..20 {
        let ghost = SigningKey::es256(&format!("ghost-{i}"));
        let r = bounded
            .validate(&sign(Algorithm::ES256, &ghost, &claims(&iss, "a")))
            .await;
        assert_eq!(r.expect_err("unknown kid"), AuthError::UnknownKey);
    }
    assert_eq!(
        fake.fetches(),
        before,
        "unknown kids within min_refresh fetch nothing"
    );

    // An issuer that cannot be reached: keys unavailable, not a crash.
    drop(fake);
    let gone = validator(&iss, Duration::ZERO);
    let r = gone
        .validate(&sign(Algorithm::ES256, &old, &claims(&iss, "a")))
        .await;
    assert_eq!(r.expect_err("issuer down"), AuthError::KeysUnavailable);
}

#[test]
fn challenges_and_resource_metadata() {
    let meta_url = ProtectedResourceMetadata::url_for(RESOURCE);
    assert_eq!(
        meta_url,
        "https://flowgate.example/.well-known/oauth-protected-resource/mcp"
    );
    assert_eq!(
        ProtectedResourceMetadata::url_for("http://127.0.0.1:8080"),
        "http://127.0.0.1:8080/.well-known/oauth-protected-resource"
    );
    assert_eq!(
        www_authenticate(&meta_url, Refusal::Missing, &["tools".to_owned()]),
        format!("Bearer resource_metadata=\"{meta_url}\", scope=\"tools\"")
    );
    assert_eq!(
        www_authenticate(
            &meta_url,
            Refusal::InsufficientScope,
            &["deploy".to_owned(), "tools".to_owned()]
        ),
        format!(
            "Bearer resource_metadata=\"{meta_url}\", scope=\"deploy tools\", error=\"insufficient_scope\""
        )
    );
    assert!(
        www_authenticate(&meta_url, Refusal::InvalidToken, &[])
            .ends_with("error=\"invalid_token\"")
    );
    let doc = serde_json::to_value(ProtectedResourceMetadata::new(
        RESOURCE,
        vec!["https://auth.example".to_owned()],
        vec!["deploy".to_owned()],
    ))
    .expect("json");
    assert_eq!(doc["resource"], RESOURCE);
    assert_eq!(doc["authorization_servers"][0], "https://auth.example");
    assert_eq!(doc["scopes_supported"][0], "deploy");
    assert_eq!(doc["bearer_methods_supported"][0], "header");
}

/// Google ID tokens: either spelling of Google's issuer is one issuer; the email names the
/// caller; RS256 only.
#[tokio::test]
async fn google_id_tokens_and_iap_assertions() {
    use flowgate_auth::google;
    let rsa = SigningKey::rs256("g-rsa");
    let ec = SigningKey::es256("g-ec");
    let fake = FakeIssuer::publishing(vec![rsa.jwk.clone(), ec.jwk.clone()]).await;
    let keys = || {
        KeySet::new(
            JwksSource::Url(fake.jwks_url()),
            Duration::from_secs(30),
            Duration::from_secs(3600),
        )
        .expect("keys")
    };
    let service = "https://svc-abc.a.run.app";
    let v = TokenValidator::new(google::id_token_config(service), keys());
    let token = |key: &SigningKey, iss: &str, aud: &str, email: Option<&str>| {
        let mut c =
            json!({"iss": iss, "aud": aud, "sub": "1122334455", "iat": now(), "exp": now() + 300});
        if let Some(e) = email {
            c["email"] = json!(e);
        }
        key.sign(&c)
    };
    for iss in [google::ID_TOKEN_ISSUER, google::ID_TOKEN_ISSUER_ALIAS] {
        let who = v
            .validate(&token(
                &rsa,
                iss,
                service,
                Some("ci@p.iam.gserviceaccount.com"),
            ))
            .await
            .expect(iss);
        assert_eq!(who.principal.issuer, google::ID_TOKEN_ISSUER);
        assert_eq!(who.principal.subject, "ci@p.iam.gserviceaccount.com");
    }
    let no_email = v
        .validate(&token(&rsa, google::ID_TOKEN_ISSUER, service, None))
        .await
        .expect("sub only");
    assert_eq!(no_email.principal.subject, "1122334455");
    let es = token(&ec, google::ID_TOKEN_ISSUER, service, Some("a@b.c"));
    assert_eq!(
        v.validate(&es).await.expect_err("ES256"),
        AuthError::Algorithm
    );
    let other = token(
        &rsa,
        google::ID_TOKEN_ISSUER,
        "https://other.a.run.app",
        None,
    );
    assert_eq!(
        v.validate(&other).await.expect_err("aud"),
        AuthError::Audience
    );

    let aud = "/projects/1/global/backendServices/2";
    let iap = TokenValidator::new(google::iap_config(aud), keys());
    let who = iap
        .validate(&token(
            &ec,
            google::IAP_ISSUER,
            aud,
            Some("person@example.com"),
        ))
        .await
        .expect("IAP");
    assert_eq!(who.principal.issuer, google::IAP_ISSUER);
    assert_eq!(who.principal.subject, "person@example.com");
    let id_token_as_iap = token(&rsa, google::ID_TOKEN_ISSUER, aud, Some("a@b.c"));
    assert!(iap.validate(&id_token_as_iap).await.is_err());
}
