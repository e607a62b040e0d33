//! Token validation against a local stand-in for an OAuth authorization server
//! (`flowgate_auth::testing`), with real RS256 and ES256 signatures, and the attacks a resource
//! server must refuse.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use flowgate_auth::challenge::Refusal;
use flowgate_auth::testing::{FakeIssuer, SigningKey};
use flowgate_auth::{
    AuthError, JwksSource, KeySet, ProtectedResourceMetadata, TokenKind, TokenValidator,
    ValidatorConfig, www_authenticate,
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

/// An RFC 9068 access token (`typ: at+jwt`).
fn sign(alg: Algorithm, key: &SigningKey, claims: &Value) -> String {
    assert_eq!(alg, key.alg, "a test signs with the key's own algorithm");
    key.sign_access_token(claims)
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
    header.typ = Some("at+jwt".to_owned());
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

/// Google ID tokens: either spelling of Google's issuer is one issuer; the verified email names
/// the caller; RS256 only.
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
            c["email_verified"] = json!(true);
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

    // OpenID Connect Core 5.1: an email names the caller only when it is verified.
    let base = json!({"iss": google::ID_TOKEN_ISSUER, "aud": service, "sub": "77",
        "iat": now(), "exp": now() + 300, "email": "alice@example.com", "hd": "example.com"});
    for (verified, names) in [
        (json!(true), "alice@example.com"),
        (json!("true"), "alice@example.com"),
        (json!(false), "77"),
        (json!("false"), "77"),
        (Value::Null, "77"),
        (json!(1), "77"),
    ] {
        let mut c = base.clone();
        if !verified.is_null() {
            c["email_verified"] = verified.clone();
        }
        let who = v
            .validate_identity(&rsa.sign(&c))
            .await
            .expect("valid token");
        assert_eq!(
            who.caller.principal.subject, names,
            "email_verified {verified}"
        );
        assert_eq!(
            who.verified_email.is_some(),
            names.contains('@'),
            "{verified}"
        );
        assert_eq!(who.hosted_domain.as_deref(), Some("example.com"));
    }

    let aud = "/projects/1/global/backendServices/2";
    let iap = TokenValidator::new(google::iap_config(aud), keys());
    // IAP's payload has no email_verified: its email is the identity IAP signed in.
    let assertion = |extra: Value| {
        let mut c = json!({"iss": google::IAP_ISSUER, "aud": aud, "sub": "accounts.google.com:9",
            "iat": now(), "exp": now() + 300, "email": "person@example.com"});
        for (k, v) in extra.as_object().into_iter().flatten() {
            c[k] = v.clone();
        }
        ec.sign(&c)
    };
    let who = iap.validate(&assertion(json!({}))).await.expect("IAP");
    assert_eq!(who.principal.issuer, google::IAP_ISSUER);
    assert_eq!(who.principal.subject, "person@example.com");
    // ...unless it says otherwise (external identities carry Identity Platform's claims).
    for unverified in [
        json!({"email_verified": false}),
        json!({"gcip": {"email_verified": false}}),
    ] {
        let who = iap
            .validate(&assertion(unverified.clone()))
            .await
            .expect("IAP");
        assert_eq!(
            who.principal.subject, "accounts.google.com:9",
            "{unverified}"
        );
    }
    let id_token_as_iap = token(&rsa, google::ID_TOKEN_ISSUER, aud, Some("a@b.c"));
    assert!(iap.validate(&id_token_as_iap).await.is_err());
}

fn validator_of(config: ValidatorConfig, min_refresh: Duration) -> TokenValidator {
    let keys = KeySet::new(
        JwksSource::Discover {
            issuer: config.issuer.clone(),
        },
        min_refresh,
        Duration::from_secs(3600),
    )
    .expect("key set");
    TokenValidator::new(config, keys)
}

/// RFC 9068 §4: only a JWT typed `at+jwt` is an access token; an issuer that does not type its
/// access tokens can be accepted explicitly, and even then its ID and logout tokens are not.
#[tokio::test]
async fn only_access_tokens_are_access_tokens() {
    let ec = SigningKey::es256("ec-typ");
    let fake = FakeIssuer::publishing(vec![ec.jwk.clone()]).await;
    let iss = fake.issuer.clone();
    let strict = validator(&iss, Duration::from_secs(30));
    let mut untyped_config = ValidatorConfig::new(&iss, RESOURCE);
    untyped_config.token_kind = TokenKind::UntypedAccessToken;
    let untyped = validator_of(untyped_config, Duration::from_secs(30));
    let untyped_header = |typ: Option<&str>, c: &Value| {
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some(ec.kid.clone());
        header.typ = typ.map(str::to_owned);
        ec.sign_with(header, c)
    };
    let access = claims(&iss, "client-a");
    let with = |extra: Value| {
        let mut c = claims(&iss, "client-a");
        for (k, v) in extra.as_object().into_iter().flatten() {
            c[k] = v.clone();
        }
        c
    };

    for typ in [
        "at+jwt",
        "application/at+jwt",
        "AT+JWT",
        "Application/At+Jwt",
    ] {
        strict
            .validate(&ec.sign_typed(typ, &access))
            .await
            .unwrap_or_else(|e| panic!("{typ}: {e}"));
    }
    // The same issuer, the same key, the right audience: still not access tokens.
    let id_token = with(json!({"nonce": "n-0S6_WzA2Mj", "at_hash": "77QmUPtjPfzWtF2AnpK9RQ"}));
    let logout =
        with(json!({"events": {"http://schemas.openid.net/event/backchannel-logout": {}}}));
    for (what, token) in [
        ("typ JWT", ec.sign(&access)),
        ("no typ", untyped_header(None, &access)),
        ("an ID token", ec.sign(&id_token)),
        ("a logout token", ec.sign_typed("logout+jwt", &logout)),
        ("a JWT-typed logout token", ec.sign(&logout)),
        (
            "at+jwt in a parameter",
            ec.sign_typed("at+jwt; x=y", &access),
        ),
    ] {
        assert_eq!(
            strict.validate(&token).await.expect_err(what),
            AuthError::NotAnAccessToken,
            "{what}"
        );
    }

    // Untyped mode (Entra ID, Cognito, Keycloak): JWT or no typ passes...
    for token in [
        ec.sign(&access),
        untyped_header(None, &access),
        ec.sign_access_token(&access),
        ec.sign(&with(json!({"token_use": "access"}))),
        ec.sign(&with(json!({"typ": "Bearer"}))),
    ] {
        untyped
            .validate(&token)
            .await
            .expect("an untyped access token");
    }
    // ...with Entra ID's `scp`, a space-separated string.
    let entra = untyped
        .validate(&ec.sign(&with(json!({"scope": null, "scp": "jobs.run deploy"}))))
        .await
        .expect("Entra ID scp");
    assert!(entra.has_all(&["jobs.run".to_owned(), "deploy".to_owned()]));
    // ...but what is recognisably another token is refused.
    for (what, token) in [
        (
            "an ID token's nonce",
            ec.sign(&with(json!({"nonce": "abc"}))),
        ),
        (
            "an ID token's at_hash",
            ec.sign(&with(json!({"at_hash": "x"}))),
        ),
        (
            "an ID token's c_hash",
            ec.sign(&with(json!({"c_hash": "x"}))),
        ),
        (
            "Cognito's ID token",
            ec.sign(&with(json!({"token_use": "id"}))),
        ),
        ("Keycloak's ID token", ec.sign(&with(json!({"typ": "ID"})))),
        (
            "Keycloak's refresh token",
            ec.sign(&with(json!({"typ": "Refresh"}))),
        ),
        ("a logout token", ec.sign(&logout)),
        ("logout+jwt", ec.sign_typed("logout+jwt", &access)),
        (
            "secevent+jwt",
            ec.sign_typed("application/secevent+jwt", &access),
        ),
    ] {
        assert_eq!(
            untyped.validate(&token).await.expect_err(what),
            AuthError::NotAnAccessToken,
            "{what}"
        );
    }
    assert_eq!(
        AuthError::NotAnAccessToken.to_string(),
        "the token is not an access token"
    );
}

/// Wait for `check` to hold, up to 20 s.
async fn eventually(what: &str, mut check: impl AsyncFnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !check().await {
        assert!(std::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// While the issuer is down: one attempt per interval (doubling), not one per request; cached
/// keys keep serving, and an unknown kid is a 401 (UnknownKey), not a 503.
#[tokio::test]
async fn an_issuer_in_an_outage_is_asked_once_per_interval() {
    let ec = SigningKey::es256("ec-outage");
    let fake = FakeIssuer::publishing(vec![ec.jwk.clone()]).await;
    let iss = fake.issuer.clone();
    let good = sign(Algorithm::ES256, &ec, &claims(&iss, "a"));
    let ghost = |i: usize| {
        sign(
            Algorithm::ES256,
            &SigningKey::es256(&format!("ghost-{i}")),
            &claims(&iss, "a"),
        )
    };

    // Down from the start: the first request tries, the next ones within the interval do not.
    fake.set_failing(true);
    let patient = validator(&iss, Duration::from_secs(3600));
    for _ in 0..30 {
        assert_eq!(
            patient.validate(&good).await.expect_err("down"),
            AuthError::KeysUnavailable
        );
    }
    assert_eq!(fake.discoveries(), 1, "one attempt for 30 requests");
    assert_eq!(fake.fetches(), 0);
    // A refused client is told to come back when the next attempt is due, not sooner.
    let refused =
        flowgate_auth::Refused::from_validator(&patient, &AuthError::KeysUnavailable).await;
    let wait = refused.retry_after.expect("a wait");
    assert!(
        wait > Duration::from_secs(3590) && wait <= Duration::from_secs(3600),
        "{wait:?}"
    );

    // With a short interval, attempts are spaced by it and then by its doubles.
    let interval = Duration::from_millis(200);
    let quick = validator(&iss, interval);
    let before = fake.discoveries();
    let started = std::time::Instant::now();
    let mut requests = 0;
    while started.elapsed() < Duration::from_millis(1500) {
        assert_eq!(
            quick.validate(&good).await.expect_err("down"),
            AuthError::KeysUnavailable
        );
        requests += 1;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let attempts = fake.discoveries() - before;
    // 0, 0.2, 0.6, 1.4 s: at most 4 attempts in 1.5 s (one per interval would be 8).
    assert!(
        (1..=4).contains(&attempts),
        "{attempts} attempts for {requests} requests"
    );
    // Back up: served again once the next attempt is due.
    fake.set_failing(false);
    eventually("the issuer's recovery is noticed", async || {
        quick.validate(&good).await.is_ok()
    })
    .await;

    // Keys cached, issuer down again: known kids validate, unknown ones are refused as
    // unknown, and the attempts to refresh stay one per interval.
    fake.set_failing(true);
    let fetches = fake.fetches() + fake.discoveries();
    tokio::time::sleep(interval * 2).await;
    for i in 0..20 {
        quick.validate(&good).await.expect("a cached key");
        assert_eq!(
            quick.validate(&ghost(i)).await.expect_err("unknown kid"),
            AuthError::UnknownKey
        );
    }
    let attempts = fake.fetches() + fake.discoveries() - fetches;
    assert!(
        (1..=2).contains(&attempts),
        "{attempts} requests to the issuer for 20 unknown kids"
    );

    // Keys past their age while the issuer is down: still in service.
    fake.set_failing(false);
    let aging = TokenValidator::new(
        ValidatorConfig::new(&iss, RESOURCE),
        KeySet::new(
            JwksSource::Url(fake.jwks_url()),
            Duration::from_millis(50),
            Duration::from_millis(100),
        )
        .expect("keys"),
    );
    aging.validate(&good).await.expect("fresh keys");
    fake.set_failing(true);
    tokio::time::sleep(Duration::from_millis(150)).await;
    aging.validate(&good).await.expect("stale keys still serve");
}

/// The issuer is a URL (RFC 3986), its metadata is where RFC 8414 puts it, and a metadata
/// document for another issuer is not taken.
#[tokio::test]
async fn issuer_urls_are_parsed_and_their_metadata_must_name_them() {
    for bad in [
        "http://127.0.0.1:80@evil.example",
        "https://user:pw@issuer.example",
        "http://issuer.example",
        "https://issuer.example?x=1",
        "http://evil.example\\@127.0.0.1",
    ] {
        let err = KeySet::new(
            JwksSource::Discover {
                issuer: bad.to_owned(),
            },
            Duration::from_secs(30),
            Duration::from_secs(3600),
        )
        .expect_err(bad);
        assert!(!err.to_string().contains("pw@"), "{err}");
    }
    assert!(
        KeySet::new(
            JwksSource::Url("http://127.0.0.1:1@evil.example/jwks".into()),
            Duration::from_secs(30),
            Duration::from_secs(3600),
        )
        .is_err()
    );

    // An issuer with a path: RFC 8414 §3.1 inserts the well-known segment before the path.
    let ec = SigningKey::es256("ec-tenant");
    let tenant = FakeIssuer::publishing_at("/tenant/a", vec![ec.jwk.clone()]).await;
    assert!(tenant.issuer.ends_with("/tenant/a"), "{}", tenant.issuer);
    let v = validator(&tenant.issuer, Duration::from_secs(30));
    v.validate(&sign(Algorithm::ES256, &ec, &claims(&tenant.issuer, "a")))
        .await
        .expect("discovered under the path");
    assert_eq!(tenant.discoveries(), 1);

    // A metadata document that names another issuer is refused.
    let liar = FakeIssuer::publishing(vec![ec.jwk.clone()]).await;
    liar.set_metadata_issuer("https://someone-else.example");
    let v = validator(&liar.issuer, Duration::from_secs(30));
    assert_eq!(
        v.validate(&sign(Algorithm::ES256, &ec, &claims(&liar.issuer, "a")))
            .await
            .expect_err("a document for another issuer"),
        AuthError::KeysUnavailable
    );
    assert_eq!(liar.fetches(), 0, "its jwks_uri was not followed");
}
