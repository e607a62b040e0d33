//! Token validation against a local stand-in for an OAuth authorization server, with real
//! RS256 and ES256 signatures, and the attacks a resource server must refuse.

mod fake_issuer {
    //! A minimal authorization server on 127.0.0.1: RFC 8414 metadata at
    //! `/.well-known/oauth-authorization-server` naming a `jwks_uri`, and the JWKS itself.
    //!
    //! Shortcuts (it is a key publisher, not a full OAuth server): no token endpoint — tests
    //! sign tokens with the private keys directly; no `Cache-Control` on the JWKS; the key set
    //! can be replaced at runtime to stand for rotation, and counts how often it is fetched so
    //! the refresh bound can be checked.

    use std::net::SocketAddr;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};

    use axum::Router;
    use axum::extract::State;
    use axum::routing::get;
    use serde_json::{Value, json};

    #[derive(Default)]
    pub(crate) struct Shared {
        pub(crate) jwks: Mutex<Value>,
        pub(crate) fetches: AtomicUsize,
    }

    pub(crate) struct FakeIssuer {
        pub(crate) issuer: String,
        pub(crate) shared: Arc<Shared>,
        task: tokio::task::JoinHandle<()>,
    }

    impl FakeIssuer {
        pub(crate) async fn start(keys: Vec<Value>) -> Self {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind 127.0.0.1");
            let addr: SocketAddr = listener.local_addr().expect("local addr");
            let issuer = format!("http://{addr}");
            let shared = Arc::new(Shared::default());
            *shared.jwks.lock().expect("lock") = json!({ "keys": keys });
            let meta = json!({
                "issuer": issuer,
                "jwks_uri": format!("{issuer}/jwks"),
                "token_endpoint": format!("{issuer}/token"),
                "grant_types_supported": ["client_credentials"],
            });
            let app = Router::new()
                .route(
                    "/.well-known/oauth-authorization-server",
                    get(move || {
                        let meta = meta.clone();
                        async move { axum::Json(meta) }
                    }),
                )
                .route(
                    "/jwks",
                    get(|State(s): State<Arc<Shared>>| async move {
                        s.fetches.fetch_add(1, Ordering::SeqCst);
                        let body = s.jwks.lock().expect("lock").clone();
                        axum::Json(body)
                    }),
                )
                .with_state(shared.clone());
            let task = tokio::spawn(async move {
                axum::serve(listener, app).await.expect("serve");
            });
            FakeIssuer {
                issuer,
                shared,
                task,
            }
        }

        pub(crate) fn set_keys(&self, keys: Vec<Value>) {
            *self.shared.jwks.lock().expect("lock") = json!({ "keys": keys });
        }

        pub(crate) fn fetches(&self) -> usize {
            self.shared.fetches.load(Ordering::SeqCst)
        }
    }

    impl Drop for FakeIssuer {
        fn drop(&mut self) {
            self.task.abort();
        }
    }
}

mod keys {
    //! Freshly generated signing keys and their public JWKs.

    use aws_lc_rs::rand::SystemRandom;
    use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
    use base64::Engine;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
    use jsonwebtoken::EncodingKey;
    use serde_json::{Value, json};

    pub(crate) struct Key {
        pub(crate) kid: String,
        pub(crate) encoding: EncodingKey,
        pub(crate) jwk: Value,
        /// The public key material, as an attacker would have it (for HMAC confusion).
        pub(crate) public_bytes: Vec<u8>,
    }

    pub(crate) fn es256(kid: &str) -> Key {
        let pkcs8 =
            EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &SystemRandom::new())
                .expect("generate P-256 key");
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref())
            .expect("parse P-256 key");
        let point = pair.public_key().as_ref().to_vec();
        assert_eq!(point.len(), 65, "uncompressed point");
        Key {
            kid: kid.to_owned(),
            encoding: EncodingKey::from_ec_der(pkcs8.as_ref()),
            jwk: json!({
                "kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256", "kid": kid,
                "x": B64.encode(&point[1..33]), "y": B64.encode(&point[33..]),
            }),
            public_bytes: point,
        }
    }

    /// RSA-2048 from the `openssl` CLI (aws-lc-rs generates RSA keys only as PKCS#8, while
    /// the signer wants PKCS#1).
    pub(crate) fn rs256(kid: &str) -> Key {
        let dir = std::env::temp_dir().join(format!("flowgate-auth-{}-{kid}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let pem = dir.join("key.pem");
        let der = dir.join("key.der");
        let run = |args: &[&str]| {
            let out = std::process::Command::new("openssl")
                .args(args)
                .output()
                .expect("these tests need the `openssl` CLI on PATH (apt-get install openssl)");
            assert!(
                out.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        let pem_s = pem.to_str().expect("utf8 path");
        let der_s = der.to_str().expect("utf8 path");
        run(&["genrsa", "-traditional", "-out", pem_s, "2048"]);
        run(&[
            "rsa",
            "-in",
            pem_s,
            "-traditional",
            "-outform",
            "DER",
            "-out",
            der_s,
        ]);
        let modulus = run(&["rsa", "-in", pem_s, "-noout", "-modulus"]);
        let hex = modulus.trim().trim_start_matches("Modulus=");
        let n: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
            .collect();
        let der_bytes = std::fs::read(&der).expect("read der");
        let _ = std::fs::remove_dir_all(&dir);
        Key {
            kid: kid.to_owned(),
            encoding: EncodingKey::from_rsa_der(&der_bytes),
            jwk: json!({
                "kty": "RSA", "use": "sig", "alg": "RS256", "kid": kid,
                "n": B64.encode(&n), "e": "AQAB",
            }),
            public_bytes: n,
        }
    }
}

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use flowgate_auth::challenge::Refusal;
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

fn sign(alg: Algorithm, key: &keys::Key, claims: &Value) -> String {
    let mut header = Header::new(alg);
    header.kid = Some(key.kid.clone());
    encode(&header, claims, &key.encoding).expect("sign")
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
    let rsa = keys::rs256("rsa-1");
    let ec = keys::es256("ec-1");
    let fake = fake_issuer::FakeIssuer::start(vec![rsa.jwk.clone(), ec.jwk.clone()]).await;
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
    assert_ne!(a.principal.digest(), b.principal.digest());
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
    let t = encode(&header, &claims(&iss, "client-a"), &rsa.encoding).expect("sign");
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
    let stranger = keys::es256(&ec.kid);
    let t = sign(Algorithm::ES256, &stranger, &claims(&iss, "client-a"));
    assert_eq!(refused(v.validate(&t).await), AuthError::Signature);
    assert_eq!(refused(v.validate("not a jwt").await), AuthError::Algorithm);

    // Errors never echo the token.
    let msg = refused(v.validate(&forged).await).to_string();
    assert!(!msg.contains(parts[0]) && !msg.contains(parts[2]));
}

#[tokio::test]
async fn rotation_refreshes_on_unknown_kid_but_boundedly() {
    let old = keys::es256("2026-old");
    let fake = fake_issuer::FakeIssuer::start(vec![old.jwk.clone()]).await;
    let iss = fake.issuer.clone();

    // A validator that may refresh at once picks up a rotated key.
    let eager = validator(&iss, Duration::ZERO);
    eager
        .validate(&sign(Algorithm::ES256, &old, &claims(&iss, "a")))
        .await
        .expect("old key");
    let new = keys::es256("2026-new");
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
        let ghost = keys::es256(&format!("ghost-{i}"));
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
