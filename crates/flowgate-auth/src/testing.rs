//! A local stand-in for an OAuth authorization server, for end-to-end tests: RFC 8414
//! metadata at `/.well-known/oauth-authorization-server` naming a `jwks_uri`, the JWKS with
//! one freshly generated ES256 key, and a signer for access tokens (RFC 9068 claims).
//!
//! Shortcuts (it is a key publisher, not a full OAuth server): no token endpoint, so tests
//! sign tokens directly with [`FakeIssuer::token`]; no `Cache-Control` on the JWKS; one key,
//! never rotated (crates/flowgate-auth/tests/auth.rs covers rotation against its own fake).

use std::net::SocketAddr;
use std::time::{SystemTime, UNIX_EPOCH};

use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
use axum::Router;
use axum::routing::get;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
use serde_json::{Value, json};

const KID: &str = "fake-es256";

/// A running fake issuer; stopped on drop.
pub struct FakeIssuer {
    /// The issuer identifier (`http://127.0.0.1:port`).
    pub issuer: String,
    encoding: EncodingKey,
    task: tokio::task::JoinHandle<()>,
}

impl FakeIssuer {
    /// Starts the issuer on an ephemeral loopback port.
    ///
    /// # Panics
    /// When it cannot bind or generate its key (a broken test environment).
    pub async fn start() -> Self {
        let pkcs8 =
            EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &SystemRandom::new())
                .expect("generate P-256 key");
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref())
            .expect("parse P-256 key");
        let point = pair.public_key().as_ref().to_vec();
        let jwks = json!({"keys": [{
            "kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256", "kid": KID,
            "x": B64.encode(&point[1..33]), "y": B64.encode(&point[33..]),
        }]});
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1");
        let addr: SocketAddr = listener.local_addr().expect("local addr");
        let issuer = format!("http://{addr}");
        let meta = json!({
            "issuer": issuer,
            "jwks_uri": format!("{issuer}/jwks"),
            "token_endpoint": format!("{issuer}/token"),
            "response_types_supported": ["code"],
            "grant_types_supported": ["authorization_code", "client_credentials"],
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
                get(move || {
                    let jwks = jwks.clone();
                    async move { axum::Json(jwks) }
                }),
            );
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeIssuer {
            issuer,
            encoding: EncodingKey::from_ec_der(pkcs8.as_ref()),
            task,
        }
    }

    /// An access token for `subject`, audience `resource`, granting `scope` (space separated),
    /// valid for five minutes.
    ///
    /// # Panics
    /// When signing fails (it does not with a generated key).
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

    /// Signs arbitrary claims with the issuer's key (for tokens that must fail a check).
    ///
    /// # Panics
    /// When signing fails.
    pub fn sign(&self, claims: &Value) -> String {
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some(KID.to_owned());
        header.typ = Some("at+jwt".to_owned());
        encode(&header, claims, &self.encoding).expect("sign")
    }
}

impl std::fmt::Debug for FakeIssuer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeIssuer")
            .field("issuer", &self.issuer)
            .finish_non_exhaustive()
    }
}

impl Drop for FakeIssuer {
    fn drop(&mut self) {
        self.task.abort();
    }
}
