//! A local stand-in for an OAuth authorization server, for tests of this crate and of the
//! crates that put flowgate-auth in front of something: RFC 8414 metadata at
//! `/.well-known/oauth-authorization-server` naming a `jwks_uri`, the JWKS of freshly generated
//! keys ([`SigningKey`], ES256 and RS256), and signers for access tokens (RFC 9068 claims). Its
//! key set also stands in for Google's published keys (ID tokens are RS256, IAP assertions
//! ES256): tests sign claims with Google's issuer and point flowgate at
//! [`FakeIssuer::jwks_url`].
//!
//! Shortcuts (it is a key publisher, not a full OAuth server; tests/fakes/oidc runs a real one):
//! no token endpoint, so tests sign tokens directly; no `Cache-Control` on the JWKS; only the
//! RFC 8414 metadata location (no OpenID discovery document). The key set can be replaced
//! while it runs ([`FakeIssuer::set_keys`], for rotation), it can fail like an issuer in an
//! outage ([`FakeIssuer::set_failing`]: 503 on the metadata and the JWKS), its metadata can
//! name another issuer ([`FakeIssuer::set_metadata_issuer`]), it can live under a path
//! ([`FakeIssuer::publishing_at`]), and it counts requests ([`FakeIssuer::fetches`],
//! [`FakeIssuer::discoveries`]) so refresh bounds can be checked.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use aws_lc_rs::encoding::AsDer;
use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
use axum::Router;
use axum::extract::State;
use axum::routing::get;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
use serde_json::{Value, json};

/// A freshly generated signing key and its public JWK.
pub struct SigningKey {
    /// Its key id.
    pub kid: String,
    /// ES256 or RS256.
    pub alg: Algorithm,
    /// The public JWK (with `kid`, `alg`, `use: sig`).
    pub jwk: Value,
    /// The public key material as an attacker would have it (the EC point, or the RSA
    /// modulus), for HMAC key-confusion tests.
    pub public_bytes: Vec<u8>,
    encoding: EncodingKey,
}

impl SigningKey {
    /// A P-256 key for ES256.
    ///
    /// # Panics
    /// When key generation fails (a broken crypto library).
    pub fn es256(kid: &str) -> Self {
        let pkcs8 =
            EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &SystemRandom::new())
                .expect("generate P-256 key");
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref())
            .expect("parse P-256 key");
        let point = pair.public_key().as_ref().to_vec();
        SigningKey {
            kid: kid.to_owned(),
            alg: Algorithm::ES256,
            jwk: json!({
                "kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256", "kid": kid,
                "x": B64.encode(&point[1..33]), "y": B64.encode(&point[33..]),
            }),
            public_bytes: point,
            encoding: EncodingKey::from_ec_der(pkcs8.as_ref()),
        }
    }

    /// An RSA-2048 key for RS256.
    ///
    /// # Panics
    /// When key generation fails.
    pub fn rs256(kid: &str) -> Self {
        let pair = aws_lc_rs::rsa::KeyPair::generate(aws_lc_rs::rsa::KeySize::Rsa2048)
            .expect("generate RSA key");
        let modulus = pair
            .public_key()
            .modulus()
            .big_endian_without_leading_zero()
            .to_vec();
        let pkcs8 = pair.as_der().expect("RSA key as PKCS#8");
        // The signer wants PKCS#1, which PKCS#8 wraps.
        let pkcs1 = pkcs1_of(pkcs8.as_ref()).expect("PKCS#8 holds an RSAPrivateKey");
        SigningKey {
            kid: kid.to_owned(),
            alg: Algorithm::RS256,
            jwk: json!({
                "kty": "RSA", "use": "sig", "alg": "RS256", "kid": kid,
                "n": B64.encode(&modulus), "e": "AQAB",
            }),
            public_bytes: modulus,
            encoding: EncodingKey::from_rsa_der(pkcs1),
        }
    }

    /// `claims` as a JWT signed with this key (header `alg` and `kid` set, `typ` JWT): what
    /// an ID token or an untyped access token looks like.
    ///
    /// # Panics
    /// When signing fails.
    pub fn sign(&self, claims: &Value) -> String {
        self.sign_typed("JWT", claims)
    }

    /// `claims` as an RFC 9068 access token signed with this key (`typ: at+jwt`).
    ///
    /// # Panics
    /// When signing fails.
    pub fn sign_access_token(&self, claims: &Value) -> String {
        self.sign_typed("at+jwt", claims)
    }

    /// `claims` signed with this key under header `typ` (`logout+jwt`, `application/at+jwt`...).
    ///
    /// # Panics
    /// When signing fails.
    pub fn sign_typed(&self, typ: &str, claims: &Value) -> String {
        let mut header = Header::new(self.alg);
        header.kid = Some(self.kid.clone());
        header.typ = Some(typ.to_owned());
        self.sign_with(header, claims)
    }

    /// `claims` signed with this key under any `header` (for tokens whose header lies).
    ///
    /// # Panics
    /// When signing fails.
    pub fn sign_with(&self, header: Header, claims: &Value) -> String {
        encode(&header, claims, &self.encoding).expect("sign")
    }
}

/// The `RSAPrivateKey` (PKCS#1) inside a PKCS#8 `PrivateKeyInfo`: SEQUENCE { INTEGER version,
/// SEQUENCE algorithm, OCTET STRING privateKey }.
fn pkcs1_of(pkcs8: &[u8]) -> Option<&[u8]> {
    let (tag, body, _) = der(pkcs8)?;
    if tag != 0x30 {
        return None;
    }
    let (_, _, rest) = der(body)?; // version
    let (_, _, rest) = der(rest)?; // algorithm
    let (tag, key, _) = der(rest)?;
    (tag == 0x04).then_some(key)
}

/// One DER element: (tag, contents, what follows).
fn der(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
        (len, &rest[n..])
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

#[derive(Default)]
struct Shared {
    jwks: Mutex<Value>,
    metadata: Mutex<Value>,
    failing: AtomicBool,
    fetches: AtomicUsize,
    discoveries: AtomicUsize,
}

/// 503, as an issuer in an outage answers.
fn outage() -> axum::response::Response {
    use axum::response::IntoResponse;
    (
        axum::http::StatusCode::SERVICE_UNAVAILABLE,
        "temporarily unavailable",
    )
        .into_response()
}

/// A running fake issuer; stopped on drop.
pub struct FakeIssuer {
    /// The issuer identifier (`http://127.0.0.1:port`).
    pub issuer: String,
    keys: Vec<SigningKey>,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl FakeIssuer {
    /// Starts an issuer publishing one fresh ES256 and one fresh RS256 key.
    ///
    /// # Panics
    /// When it cannot bind or generate its keys (a broken test environment).
    pub async fn start() -> Self {
        let keys = vec![
            SigningKey::es256("fake-es256"),
            SigningKey::rs256("fake-rs256"),
        ];
        let jwks = keys.iter().map(|k| k.jwk.clone()).collect();
        FakeIssuer::serve("", jwks, keys).await
    }

    /// Starts an issuer that only publishes `jwks` (the caller keeps the [`SigningKey`]s and
    /// signs with them; the issuer's own signers then have no key).
    ///
    /// # Panics
    /// When it cannot bind.
    pub async fn publishing(jwks: Vec<Value>) -> Self {
        FakeIssuer::serve("", jwks, Vec::new()).await
    }

    /// As [`FakeIssuer::publishing`], for an issuer identifier with a path (`/tenant/a`):
    /// its RFC 8414 metadata is at `/.well-known/oauth-authorization-server/tenant/a`.
    ///
    /// # Panics
    /// When it cannot bind.
    pub async fn publishing_at(path: &str, jwks: Vec<Value>) -> Self {
        FakeIssuer::serve(path, jwks, Vec::new()).await
    }

    async fn serve(path: &str, jwks: Vec<Value>, keys: Vec<SigningKey>) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1");
        let addr: SocketAddr = listener.local_addr().expect("local addr");
        let origin = format!("http://{addr}");
        let issuer = format!("{origin}{path}");
        let shared = Arc::new(Shared::default());
        *shared.jwks.lock().unwrap_or_else(|p| p.into_inner()) = json!({ "keys": jwks });
        *shared.metadata.lock().unwrap_or_else(|p| p.into_inner()) = json!({
            "issuer": issuer,
            "jwks_uri": format!("{origin}/jwks"),
            "token_endpoint": format!("{origin}/token"),
            "response_types_supported": ["code"],
            "grant_types_supported": ["authorization_code", "client_credentials"],
        });
        let app = Router::new()
            .route(
                &format!("/.well-known/oauth-authorization-server{path}"),
                get(|State(s): State<Arc<Shared>>| async move {
                    s.discoveries.fetch_add(1, Ordering::SeqCst);
                    if s.failing.load(Ordering::SeqCst) {
                        return outage();
                    }
                    let meta = s.metadata.lock().unwrap_or_else(|p| p.into_inner()).clone();
                    axum::response::IntoResponse::into_response(axum::Json(meta))
                }),
            )
            .route(
                "/jwks",
                get(|State(s): State<Arc<Shared>>| async move {
                    s.fetches.fetch_add(1, Ordering::SeqCst);
                    if s.failing.load(Ordering::SeqCst) {
                        return outage();
                    }
                    let body = s.jwks.lock().unwrap_or_else(|p| p.into_inner()).clone();
                    axum::response::IntoResponse::into_response(axum::Json(body))
                }),
            )
            .with_state(shared.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeIssuer {
            issuer,
            keys,
            shared,
            task,
        }
    }

    /// Replaces the published key set (rotation).
    pub fn set_keys(&self, jwks: Vec<Value>) {
        *self.shared.jwks.lock().unwrap_or_else(|p| p.into_inner()) = json!({ "keys": jwks });
    }

    /// Makes the metadata and the JWKS answer 503 (`true`) or serve again (`false`).
    pub fn set_failing(&self, failing: bool) {
        self.shared.failing.store(failing, Ordering::SeqCst);
    }

    /// Makes the metadata document name `issuer` (a document for another issuer).
    pub fn set_metadata_issuer(&self, issuer: &str) {
        self.shared
            .metadata
            .lock()
            .unwrap_or_else(|p| p.into_inner())["issuer"] = json!(issuer);
    }

    /// How often the JWKS has been asked for (served or failed).
    pub fn fetches(&self) -> usize {
        self.shared.fetches.load(Ordering::SeqCst)
    }

    /// How often the metadata document has been asked for (served or failed).
    pub fn discoveries(&self) -> usize {
        self.shared.discoveries.load(Ordering::SeqCst)
    }

    /// Where the key set is served.
    pub fn jwks_url(&self) -> String {
        format!("{}/jwks", self.issuer)
    }

    /// An access token for `subject`, audience `resource`, granting `scope` (space separated),
    /// valid for five minutes.
    ///
    /// # Panics
    /// When the issuer has no ES256 key.
    pub fn token(&self, subject: &str, resource: &str, scope: &str) -> String {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or_default();
        let claims = json!({
            "iss": self.issuer, "sub": subject, "aud": resource, "scope": scope,
            "iat": now, "exp": now + 300, "client_id": "e2e", "jti": format!("{subject}-{now}"),
        });
        self.sign(&claims)
    }

    /// Signs arbitrary claims as an access token (`typ: at+jwt`) with the ES256 key (for
    /// tokens that must fail a check).
    ///
    /// # Panics
    /// When the issuer has no ES256 key.
    pub fn sign(&self, claims: &Value) -> String {
        let key = self.key(Algorithm::ES256);
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some(key.kid.clone());
        header.typ = Some("at+jwt".to_owned());
        key.sign_with(header, claims)
    }

    /// Signs `claims` as a plain JWT with the RS256 key, as Google signs ID tokens.
    ///
    /// # Panics
    /// When the issuer has no RS256 key.
    pub fn sign_rs256(&self, claims: &Value) -> String {
        self.key(Algorithm::RS256).sign(claims)
    }

    /// Signs `claims` as a plain JWT with the ES256 key, as IAP signs its assertions.
    ///
    /// # Panics
    /// When the issuer has no ES256 key.
    pub fn sign_es256(&self, claims: &Value) -> String {
        self.key(Algorithm::ES256).sign(claims)
    }

    /// An attacker's token: `claims` signed HS256 with the issuer's public ES256 key material
    /// as the shared secret (the algorithm-confusion attack), under that key's `kid`.
    ///
    /// # Panics
    /// When the issuer has no ES256 key.
    pub fn forge_hmac(&self, claims: &Value) -> String {
        let key = self.key(Algorithm::ES256);
        let mut header = Header::new(Algorithm::HS256);
        header.kid = Some(key.kid.clone());
        encode(
            &header,
            claims,
            &EncodingKey::from_secret(&key.public_bytes),
        )
        .expect("sign")
    }

    /// An attacker's token: `claims` unsigned, `alg: none`.
    pub fn forge_unsigned(claims: &Value) -> String {
        format!(
            "{}.{}.",
            B64.encode(br#"{"alg":"none","typ":"at+jwt"}"#),
            B64.encode(claims.to_string())
        )
    }

    fn key(&self, alg: Algorithm) -> &SigningKey {
        self.keys
            .iter()
            .find(|k| k.alg == alg)
            .unwrap_or_else(|| panic!("the fake issuer has no {alg:?} key"))
    }
}

/// A relay in front of a real issuer's JWKS (`/jwks` answers what the upstream URL serves),
/// that can fail like an issuer in an outage ([`JwksRelay::set_failing`]: 503) and counts the
/// requests it gets: for end-to-end tests of key-set outages against a real provider.
pub struct JwksRelay {
    /// Where the relayed key set is served (`http://127.0.0.1:port/jwks`).
    pub url: String,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl JwksRelay {
    /// Relays `upstream` (a JWKS URL).
    ///
    /// # Panics
    /// When it cannot bind or build its HTTP client.
    pub async fn start(upstream: &str) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1");
        let addr: SocketAddr = listener.local_addr().expect("local addr");
        let shared = Arc::new(Shared::default());
        let http = flowgate_http::HttpClient::new("relay", &flowgate_http::HttpConfig::default())
            .expect("HTTP client");
        let upstream = upstream.to_owned();
        let app = Router::new()
            .route(
                "/jwks",
                get(move |State(s): State<Arc<Shared>>| {
                    let (http, upstream) = (http.clone(), upstream.clone());
                    async move {
                        s.fetches.fetch_add(1, Ordering::SeqCst);
                        if s.failing.load(Ordering::SeqCst) {
                            return outage();
                        }
                        let request = http.request(flowgate_http::Method::GET, &upstream);
                        match http.json::<Value>(request, "relay JWKS").await {
                            Ok(body) => {
                                axum::response::IntoResponse::into_response(axum::Json(body))
                            }
                            Err(_) => outage(),
                        }
                    }
                }),
            )
            .with_state(shared.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        JwksRelay {
            url: format!("http://{addr}/jwks"),
            shared,
            task,
        }
    }

    /// Makes the relay answer 503 (`true`) or relay again (`false`).
    pub fn set_failing(&self, failing: bool) {
        self.shared.failing.store(failing, Ordering::SeqCst);
    }

    /// How many requests it has had (relayed or failed).
    pub fn requests(&self) -> usize {
        self.shared.fetches.load(Ordering::SeqCst)
    }
}

impl std::fmt::Debug for JwksRelay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwksRelay")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl Drop for JwksRelay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl std::fmt::Debug for FakeIssuer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeIssuer")
            .field("issuer", &self.issuer)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey")
            .field("kid", &self.kid)
            .field("alg", &self.alg)
            .finish_non_exhaustive()
    }
}

impl Drop for FakeIssuer {
    fn drop(&mut self) {
        self.task.abort();
    }
}
