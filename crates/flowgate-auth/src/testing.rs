//! A local stand-in for an OAuth authorization server, for end-to-end tests: RFC 8414
//! metadata at `/.well-known/oauth-authorization-server` naming a `jwks_uri`, the JWKS with
//! freshly generated keys (one ES256, one RS256), and a signer for access tokens (RFC 9068
//! claims). Its key set also stands in for Google's published keys (ID tokens are RS256, IAP
//! assertions ES256): tests sign claims with Google's issuer and point flowgate at
//! [`FakeIssuer::jwks_url`].
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
const RSA_KID: &str = "fake-rs256";

/// A running fake issuer; stopped on drop.
pub struct FakeIssuer {
    /// The issuer identifier (`http://127.0.0.1:port`).
    pub issuer: String,
    encoding: EncodingKey,
    rsa: EncodingKey,
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
        let (rsa, modulus) = rsa_key();
        let jwks = json!({"keys": [{
            "kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256", "kid": KID,
            "x": B64.encode(&point[1..33]), "y": B64.encode(&point[33..]),
        }, {
            "kty": "RSA", "use": "sig", "alg": "RS256", "kid": RSA_KID,
            "n": B64.encode(&modulus), "e": "AQAB",
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
            rsa,
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

    /// Signs `claims` as a plain JWT (`typ: JWT`) with the RS256 key, as Google signs ID
    /// tokens.
    ///
    /// # Panics
    /// When signing fails.
    pub fn sign_rs256(&self, claims: &Value) -> String {
        let mut header = Header::new(Algorithm::RS256);
        header.kid = Some(RSA_KID.to_owned());
        encode(&header, claims, &self.rsa).expect("sign")
    }

    /// Signs `claims` as a plain JWT with the ES256 key, as IAP signs its assertions.
    ///
    /// # Panics
    /// When signing fails.
    pub fn sign_es256(&self, claims: &Value) -> String {
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some(KID.to_owned());
        encode(&header, claims, &self.encoding).expect("sign")
    }

    /// Where the key set is served.
    pub fn jwks_url(&self) -> String {
        format!("{}/jwks", self.issuer)
    }
}

/// A fresh RSA-2048 key: the signer's PKCS#1 DER and the public modulus.
fn rsa_key() -> (EncodingKey, Vec<u8>) {
    use aws_lc_rs::encoding::AsDer;
    let pair = aws_lc_rs::rsa::KeyPair::generate(aws_lc_rs::rsa::KeySize::Rsa2048)
        .expect("generate RSA key");
    let modulus = pair
        .public_key()
        .modulus()
        .big_endian_without_leading_zero()
        .to_vec();
    let pkcs8 = pair.as_der().expect("RSA key as PKCS#8");
    let pkcs1 = pkcs1_of(pkcs8.as_ref()).expect("PKCS#8 holds an RSAPrivateKey");
    (EncodingKey::from_rsa_der(pkcs1), modulus)
}

/// The `RSAPrivateKey` (PKCS#1) inside a PKCS#8 `PrivateKeyInfo`: SEQUENCE { INTEGER version,
/// SEQUENCE algorithm, OCTET STRING privateKey }, which is what the signer wants.
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
