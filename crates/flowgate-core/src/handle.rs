//! Task handles: the task ids clients hold, sealed so that only this deployment can open them.
//!
//! A handle carries everything `tasks/get` needs to find the execution again (engine, tool,
//! execution reference, creation time), so no server keeps a task table. It is sealed with
//! XChaCha20-Poly1305 under a deployment key:
//!
//! - integrity: a changed, truncated or made-up handle does not open;
//! - privacy: account ids, ARNs and paths inside the reference are hidden from the client;
//! - binding: the caller's principal is authenticated data, so a handle opens only for the
//!   principal it was created for, and failing that looks exactly like an unknown handle;
//! - rotation: the key id travels in the clear, and a [`Keyring`] opens handles sealed under
//!   any key it holds while sealing new ones under its current key;
//! - stable ids: the nonce of a task handle is synthetic, a keyed hash (HMAC-SHA-256 under a
//!   key derived from the sealing key) of everything sealed and bound, so the same task sealed
//!   for the same principal under the same key is the same id every time (`tools/call` and
//!   `tasks/list` hand out one id per task). Equal ids reveal only that they are the same task
//!   of the same principal; different tasks never share a nonce (a 192-bit hash of different
//!   inputs), and an attacker without the key can neither predict nor forge one. Other sealed
//!   tokens (request state, question ids) keep fresh random nonces;
//! - entropy: 192-bit nonces and a 128-bit tag;
//! - header safety: `fg1.<key id>.<base64url>` uses only `[A-Za-z0-9._-]`.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chacha20poly1305::aead::{Aead, AeadCore, KeyInit, OsRng, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

use crate::ExecutionRef;

mod opened;
use opened::Opened;

/// The prefix and version of every handle this code seals.
const VERSION: &str = "fg1";
const NONCE_LEN: usize = 24;

/// What a handle holds once opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskHandle {
    /// The engine kind that runs the execution.
    pub engine: String,
    /// The manifest tool that started it.
    pub tool: String,
    /// The engine's reference.
    pub execution: ExecutionRef,
    /// When the engine created it.
    pub created_at: DateTime<Utc>,
}

#[derive(Serialize, Deserialize)]
struct Sealed {
    e: String,
    t: String,
    x: String,
    c: i64,
}

/// Why a handle did not open. Deliberately uninformative: every case must look the same to the
/// client ("task not found"); the variants exist for logs and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    /// Not of the `fg1.<kid>.<data>` shape, or not base64.
    #[error("malformed task handle")]
    Malformed,
    /// Sealed under a key this keyring does not hold.
    #[error("task handle sealed under an unknown key")]
    UnknownKey,
    /// The seal did not verify: tampered, or bound to another principal.
    #[error("task handle does not verify")]
    Rejected,
}

/// A bad key specification.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid handle key: {0}")]
pub struct KeyError(String);

/// One sealing key with its id.
#[derive(Clone)]
pub struct HandleKey {
    id: String,
    cipher: XChaCha20Poly1305,
    /// The key synthetic nonces are derived under (see the module docs), itself derived from
    /// the secret so that the cipher key is never used for anything else.
    nonce_key: [u8; 32],
}

impl std::fmt::Debug for HandleKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HandleKey")
            .field("id", &self.id)
            .field("secret", &"***")
            .finish()
    }
}

impl HandleKey {
    /// A key from 32 secret bytes. The id must be 1 to 16 characters of `[a-z0-9]`.
    ///
    /// # Errors
    /// A [`KeyError`] naming what is wrong with the id or the length.
    pub fn new(id: &str, secret: &[u8]) -> Result<Self, KeyError> {
        if id.is_empty()
            || id.len() > 16
            || !id
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        {
            return Err(KeyError(format!(
                "key id {id:?} must be 1-16 characters of [a-z0-9]"
            )));
        }
        if secret.len() != 32 {
            return Err(KeyError(format!(
                "key {id:?} has {} bytes; it needs exactly 32",
                secret.len()
            )));
        }
        let cipher = XChaCha20Poly1305::new_from_slice(secret)
            .map_err(|_| KeyError("key of the wrong length".into()))?;
        Ok(HandleKey {
            id: id.to_owned(),
            cipher,
            nonce_key: hmac_sha256(secret, &[b"flowgate handle nonce key v1"]),
        })
    }

    /// A fresh random key, for a development server that was given none.
    pub fn random(id: &str) -> Result<Self, KeyError> {
        let secret = XChaCha20Poly1305::generate_key(&mut OsRng);
        Self::new(id, secret.as_slice())
    }

    /// The key id.
    pub fn id(&self) -> &str {
        &self.id
    }
}

/// The keys a deployment seals and opens handles with.
#[derive(Debug, Clone)]
pub struct Keyring {
    current: HandleKey,
    previous: Vec<HandleKey>,
    /// Task handles these keys opened (module `opened`), shared by the keyring's clones.
    opened: Arc<Opened>,
}

impl Keyring {
    /// A keyring that seals with `current` and also opens handles sealed under `previous`.
    pub fn new(current: HandleKey, previous: Vec<HandleKey>) -> Self {
        Keyring {
            current,
            previous,
            opened: Arc::new(Opened::new()),
        }
    }

    /// Parses `kid:base64key[,kid:base64key...]`; the first key seals, all of them open.
    /// The base64 may be standard or URL-safe, padded or not, and must decode to 32 bytes.
    ///
    /// # Errors
    /// A [`KeyError`] that names the bad entry by its id (never its secret).
    pub fn parse(spec: &str) -> Result<Self, KeyError> {
        let mut keys = Vec::new();
        for (n, entry) in spec
            .split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .enumerate()
        {
            let (id, b64) = entry.split_once(':').ok_or_else(|| {
                KeyError(format!("entry {} is not of the form kid:base64", n + 1))
            })?;
            let secret = decode_any_base64(b64.trim())
                .ok_or_else(|| KeyError(format!("key {id:?} is not valid base64")))?;
            keys.push(HandleKey::new(id.trim(), &secret)?);
        }
        let mut keys = keys.into_iter();
        let current = keys.next().ok_or_else(|| KeyError("no key given".into()))?;
        Ok(Keyring::new(current, keys.collect()))
    }

    /// The id of the key new handles are sealed with.
    pub fn current_id(&self) -> &str {
        self.current.id()
    }

    /// Seals `handle` for `principal`: the same handle, principal and key always give the
    /// same id (a synthetic nonce; see the module docs).
    pub fn seal(&self, handle: &TaskHandle, principal: &str) -> String {
        let body = Sealed {
            e: handle.engine.clone(),
            t: handle.tool.clone(),
            x: handle.execution.0.clone(),
            c: handle.created_at.timestamp_millis(),
        };
        let plaintext = serde_json::to_vec(&body).unwrap_or_default();
        let aad = associated_data(VERSION, &self.current.id, principal);
        let digest = hmac_sha256(&self.current.nonce_key, &[&aad, b"\0", &plaintext]);
        let nonce = XNonce::clone_from_slice(&digest[..NONCE_LEN]);
        self.seal_with(VERSION, &nonce, &plaintext, &aad)
    }

    /// Opens a handle that `principal` presents.
    ///
    /// # Errors
    /// [`OpenError`]; callers must answer every variant the same way ("task not found").
    pub fn open(&self, token: &str, principal: &str) -> Result<TaskHandle, OpenError> {
        if let Some(handle) = self.opened.get(token, principal) {
            return Ok(handle);
        }
        let handle = self.open_sealed(token, principal)?;
        self.opened.keep(token, principal, &handle);
        Ok(handle)
    }

    /// [`Keyring::open`] the full way: base64, AEAD, JSON.
    fn open_sealed(&self, token: &str, principal: &str) -> Result<TaskHandle, OpenError> {
        let plaintext = self.open_bytes(VERSION, token, principal)?;
        let body: Sealed = serde_json::from_slice(&plaintext).map_err(|_| OpenError::Rejected)?;
        let created_at = DateTime::from_timestamp_millis(body.c).ok_or(OpenError::Rejected)?;
        Ok(TaskHandle {
            engine: body.e,
            tool: body.t,
            execution: ExecutionRef(body.x),
            created_at,
        })
    }

    /// Seals any bytes as `<purpose>.<key id>.<base64url>` for `principal`. The purpose (for
    /// example `fg1` for task handles) is authenticated, so a token made for one purpose never
    /// opens as another.
    pub fn seal_bytes(&self, purpose: &str, plaintext: &[u8], principal: &str) -> String {
        let nonce = XChaCha20Poly1305::generate_nonce(&mut OsRng);
        let aad = associated_data(purpose, &self.current.id, principal);
        self.seal_with(purpose, &nonce, plaintext, &aad)
    }

    fn seal_with(&self, purpose: &str, nonce: &XNonce, plaintext: &[u8], aad: &[u8]) -> String {
        // Encryption with a valid key and nonce cannot fail for inputs of this size.
        let ciphertext = self
            .current
            .cipher
            .encrypt(
                nonce,
                Payload {
                    msg: plaintext,
                    aad,
                },
            )
            .unwrap_or_default();
        let mut data = Vec::with_capacity(NONCE_LEN + ciphertext.len());
        data.extend_from_slice(nonce.as_slice());
        data.extend_from_slice(&ciphertext);
        format!(
            "{purpose}.{}.{}",
            self.current.id,
            URL_SAFE_NO_PAD.encode(data)
        )
    }

    /// Opens what [`Keyring::seal_bytes`] sealed for the same purpose and principal.
    ///
    /// # Errors
    /// [`OpenError`], deliberately uninformative.
    pub fn open_bytes(
        &self,
        purpose: &str,
        token: &str,
        principal: &str,
    ) -> Result<Vec<u8>, OpenError> {
        let mut parts = token.splitn(3, '.');
        let (Some(p), Some(kid), Some(data)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(OpenError::Malformed);
        };
        if p != purpose {
            return Err(OpenError::Malformed);
        }
        let key = std::iter::once(&self.current)
            .chain(&self.previous)
            .find(|k| k.id == kid)
            .ok_or(OpenError::UnknownKey)?;
        let data = URL_SAFE_NO_PAD
            .decode(data)
            .map_err(|_| OpenError::Malformed)?;
        if data.len() <= NONCE_LEN {
            return Err(OpenError::Malformed);
        }
        let (nonce, ciphertext) = data.split_at(NONCE_LEN);
        let aad = associated_data(purpose, kid, principal);
        key.cipher
            .decrypt(
                XNonce::from_slice(nonce),
                Payload {
                    msg: ciphertext,
                    aad: &aad,
                },
            )
            .map_err(|_| OpenError::Rejected)
    }
}

fn associated_data(purpose: &str, kid: &str, principal: &str) -> Vec<u8> {
    format!("{purpose}\n{kid}\n{principal}").into_bytes()
}

/// HMAC-SHA-256 (RFC 2104) of the concatenated `parts` under `key` (at most one block long).
fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    const BLOCK: usize = 64;
    let mut block = [0u8; BLOCK];
    if key.len() > BLOCK {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let mut inner = Sha256::new();
    inner.update(block.map(|b| b ^ 0x36));
    for part in parts {
        inner.update(part);
    }
    let mut outer = Sha256::new();
    outer.update(block.map(|b| b ^ 0x5c));
    outer.update(inner.finalize());
    outer.finalize().into()
}

fn decode_any_base64(s: &str) -> Option<Vec<u8>> {
    use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE};
    [STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD]
        .iter()
        .find_map(|e| e.decode(s).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring(id: &str, byte: u8) -> Keyring {
        Keyring::new(HandleKey::new(id, &[byte; 32]).expect("key"), vec![])
    }

    fn sample() -> TaskHandle {
        TaskHandle {
            engine: "stepfunctions".into(),
            tool: "deploy".into(),
            execution: ExecutionRef(
                "arn:aws:states:eu-west-1:123456789012:execution:m:run-1".into(),
            ),
            created_at: DateTime::from_timestamp_millis(1_764_670_000_123).expect("time"),
        }
    }

    #[test]
    fn seal_then_open_round_trips_and_hides_the_reference() {
        let k = ring("k1", 7);
        let token = k.seal(&sample(), "alice");
        assert!(token.starts_with("fg1.k1."));
        assert!(
            !token.contains("123456789012"),
            "account id leaked: {token}"
        );
        assert!(
            token
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        );
        assert_eq!(k.open(&token, "alice"), Ok(sample()));
    }

    #[test]
    fn a_task_has_one_id_per_principal_and_key() {
        let k = ring("k1", 7);
        assert_eq!(k.seal(&sample(), "a"), k.seal(&sample(), "a"), "stable");
        assert_ne!(k.seal(&sample(), "a"), k.seal(&sample(), "b"));
        assert_ne!(k.seal(&sample(), "a"), ring("k1", 8).seal(&sample(), "a"));
        let mut other = sample();
        other.execution = ExecutionRef(format!("{}2", other.execution.0));
        let (one, two) = (k.seal(&sample(), "a"), k.seal(&other, "a"));
        assert_ne!(one, two);
        // Different tasks never share a nonce (the first 24 bytes after the key id).
        let nonce = |t: &str| {
            URL_SAFE_NO_PAD
                .decode(t.rsplit('.').next().unwrap_or(""))
                .map(|d| d[..NONCE_LEN].to_vec())
        };
        assert_ne!(nonce(&one), nonce(&two));
        // Other sealed tokens keep random nonces.
        assert_ne!(
            k.seal_bytes("fs1", b"{}", "a"),
            k.seal_bytes("fs1", b"{}", "a")
        );
    }

    #[test]
    fn hmac_matches_the_rfc_4231_vectors() {
        // RFC 4231 test case 2.
        let mac = hmac_sha256(b"Jefe", &[b"what do ya want ", b"for nothing?"]);
        let hex: String = mac.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        // Test case 6: a key longer than the block.
        let mac = hmac_sha256(
            &[0xaa; 131],
            &[b"Test Using Larger Than Block-Size Key - Hash Key First"],
        );
        let hex: String = mac.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
    }

    #[test]
    fn another_principal_cannot_open() {
        let k = ring("k1", 7);
        let token = k.seal(&sample(), "alice");
        assert_eq!(k.open(&token, "bob"), Err(OpenError::Rejected));
        assert_eq!(k.open(&token, "anonymous"), Err(OpenError::Rejected));
    }

    #[test]
    fn tampered_truncated_and_random_handles_do_not_open() {
        let k = ring("k1", 7);
        let token = k.seal(&sample(), "p");
        let mut bytes = token.clone().into_bytes();
        let last = bytes.len() - 3;
        bytes[last] = if bytes[last] == b'A' { b'B' } else { b'A' };
        let tampered = String::from_utf8(bytes).expect("ascii");
        assert!(k.open(&tampered, "p").is_err());
        assert!(k.open(&token[..token.len() - 5], "p").is_err());
        assert!(k.open(&token[..10], "p").is_err());
        assert!(k.open("", "p").is_err());
        assert!(k.open("fg1.k1.", "p").is_err());
        assert!(k.open("fg1.k1.!!!!", "p").is_err());
        assert!(k.open("not-a-handle", "p").is_err());
        assert!(k.open(&format!("fg1.k1.{}", "A".repeat(120)), "p").is_err());
        assert!(k.open(&token.replacen("fg1", "fg2", 1), "p").is_err());
    }

    /// A handle opened once opens from the set of opened handles to the same task; nothing a
    /// refused handle presents enters it, a kept handle is refused to another principal as
    /// before, and the set stays within its bound while every handle still opens.
    #[test]
    fn opened_handles_open_again_the_same_and_refusals_stay_refusals() {
        let k = ring("k1", 7);
        let token = k.seal(&sample(), "alice");
        assert_eq!(k.open(&token, "alice"), Ok(sample()));
        assert_eq!(k.opened.len(), 1);
        assert_eq!(k.open(&token, "alice"), Ok(sample()));
        assert_eq!(
            k.clone().open(&token, "alice"),
            Ok(sample()),
            "clones share it"
        );
        assert_eq!(k.open(&token, "bob"), Err(OpenError::Rejected));
        let mut bytes = token.clone().into_bytes();
        let last = bytes.len() - 3;
        bytes[last] = if bytes[last] == b'A' { b'B' } else { b'A' };
        let tampered = String::from_utf8(bytes).expect("ascii");
        assert!(k.open(&tampered, "alice").is_err());
        assert!(k.open(&tampered, "alice").is_err(), "refused twice");
        assert_eq!(k.opened.len(), 1, "only the opened handle is kept");
        assert_eq!(
            ring("k1", 8).open(&token, "alice"),
            Err(OpenError::Rejected)
        );

        let tokens: Vec<(String, TaskHandle)> = (0..opened::CAPACITY + 500)
            .map(|n| {
                let mut h = sample();
                h.execution = ExecutionRef(format!("run-{n}"));
                (k.seal(&h, "alice"), h)
            })
            .collect();
        for _ in 0..2 {
            for (token, handle) in &tokens {
                assert_eq!(k.open(token, "alice").as_ref(), Ok(handle));
            }
            assert!(k.opened.len() <= opened::CAPACITY, "{}", k.opened.len());
        }
    }

    #[test]
    fn another_deployment_cannot_open_and_rotation_keeps_old_handles() {
        let old = ring("k1", 1);
        let token = old.seal(&sample(), "p");
        assert_eq!(ring("k1", 2).open(&token, "p"), Err(OpenError::Rejected));
        assert_eq!(ring("k2", 2).open(&token, "p"), Err(OpenError::UnknownKey));
        let rotated = Keyring::new(
            HandleKey::new("k2", &[2; 32]).expect("key"),
            vec![HandleKey::new("k1", &[1; 32]).expect("key")],
        );
        assert_eq!(rotated.open(&token, "p"), Ok(sample()));
        assert!(rotated.seal(&sample(), "p").starts_with("fg1.k2."));
    }

    #[test]
    fn a_token_sealed_for_one_purpose_does_not_open_as_another() {
        let k = ring("k1", 7);
        let state = k.seal_bytes("fs1", b"{}", "p");
        assert_eq!(k.open_bytes("fs1", &state, "p"), Ok(b"{}".to_vec()));
        assert!(k.open(&state, "p").is_err());
        let forged = state.replacen("fs1", "fg1", 1);
        assert_eq!(k.open(&forged, "p"), Err(OpenError::Rejected));
    }

    #[test]
    fn parse_accepts_lists_and_names_bad_entries_without_secrets() {
        let b64 = URL_SAFE_NO_PAD.encode([9u8; 32]);
        let k = Keyring::parse(&format!("new:{b64}, old:{b64}")).expect("parse");
        assert_eq!(k.current_id(), "new");
        let err = Keyring::parse("k1:c2hvcnQ=").expect_err("short key");
        assert!(err.to_string().contains("32"), "{err}");
        assert!(!err.to_string().contains("c2hvcnQ"));
        assert!(Keyring::parse("").is_err());
        assert!(Keyring::parse("UPPER:abc").is_err());
        assert!(format!("{k:?}").contains("***"));
    }
}
