//! Task handles: the task ids clients hold, sealed so that only this deployment can open them.
//!
//! A task id carries what `tasks/get` needs to find the execution again, so no server keeps a
//! task table: the tool (by a tag), the creation time, and the execution's *locator*, the part of
//! its reference the tool does not already fix ([`Engine::locator`](crate::Engine::locator): an
//! execution name under the tool's state machine, a run number in the tool's repository).
//!
//! # Layout and budget
//!
//! Clients bound task ids: Claude Code refuses one longer than 128 characters or outside
//! printable ASCII, and a task it refuses is a call that failed. So the layout is sized to
//! [`ID_MAX`] = 128 by construction:
//!
//! ```text
//! fg2.<base64url of: key byte (1) | SIV tag (16) | encrypted: tool tag (8) | created ms (6) | packed locator>
//! ```
//!
//! - `fg2.`, 4 characters, leaves 124 for base64url: 93 bytes.
//! - The key byte names the sealing key by a hash of its id (the id itself, up to 16
//!   characters, would not fit); opening tries the keys whose id hashes to it.
//! - AES-SIV (RFC 5297, AES-256) seals: a deterministic authenticated encryption whose 16-byte
//!   synthetic IV is also its tag, where an AEAD with a nonce would spend a nonce beside a tag.
//! - That leaves [`PLAINTEXT_MAX`] = 76 bytes: the tool tag, the creation time in milliseconds
//!   (48 bits: until the year 10889), and [`LOCATOR_MAX`] = 62 bytes for the packed locator
//!   (module `locator`). Each engine's longest locator packs into at most that, and each engine
//!   has a unit test that seals its worst case ([`task_id_fits`]): the longest Step Functions
//!   name (80 characters of `[A-Za-z0-9_-]`) packs into 61.
//!
//! What the seal gives:
//!
//! - integrity: a changed, truncated or made-up id does not open;
//! - privacy: account ids, ARNs, paths and tool names are inside the ciphertext;
//! - binding: the caller's principal and the key's id are authenticated data, so an id opens
//!   only for the principal it was made for, and failing that looks exactly like an unknown id;
//! - rotation: a [`Keyring`] opens ids sealed under any key it holds and seals new ones under
//!   its current key;
//! - stable ids: SIV is deterministic, so the same task sealed for the same principal under the
//!   same key is the same id every time (`tools/call` and `tasks/list` hand out one id per task).
//!   Equal ids reveal only that they are the same task of the same principal;
//! - entropy: a 128-bit tag an attacker without the key can neither predict nor forge;
//! - header safety: `[A-Za-z0-9._-]` only.
//!
//! The tool tag is a digest of the tool's engine, name and *scope* (what the locator is
//! relative to: [`Engine::reference_scope`](crate::Engine::reference_scope)), so a tool that a
//! reload points at another state machine or repository is another tool to its old ids, which
//! then get a clear "no longer served" instead of a lookup in the wrong place.
//!
//! Ids sealed before this layout (`fg1.<key id>.<data>`, XChaCha20-Poly1305 over the whole
//! reference) still open, so tasks in flight across an upgrade keep answering; new ids are
//! always `fg2`. Other sealed tokens (request state, question ids) keep the `fg1`-style
//! [`Keyring::seal_bytes`] with fresh random nonces.

use aes_siv::siv::Aes256Siv;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chacha20poly1305::aead::{Aead, AeadCore, KeyInit, OsRng, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

use crate::ExecutionRef;

mod locator;
mod opened;
pub use locator::packed_len;
use opened::Opened;

/// The prefix and version of the task ids this code seals.
const VERSION: &str = "fg2";
/// The prefix of task ids sealed before the compact layout (still opened, never sealed).
const VERSION_V1: &str = "fg1";
const NONCE_LEN: usize = 24;

/// The longest task id this code makes: the most characters Claude Code takes.
pub const ID_MAX: usize = 128;
/// The bytes base64url fits in what [`ID_MAX`] leaves after `fg2.`.
const SEALED_MAX: usize = (ID_MAX - VERSION.len() - 1) * 6 / 8;
/// The SIV tag.
const TAG_LEN: usize = 16;
/// The key byte.
const KEY_BYTE_LEN: usize = 1;
/// The plaintext a task id holds at most.
pub const PLAINTEXT_MAX: usize = SEALED_MAX - KEY_BYTE_LEN - TAG_LEN;
/// The tool tag's bytes.
const TOOL_TAG_LEN: usize = 8;
/// The creation time's bytes (milliseconds since the Unix epoch, big-endian).
const TIME_LEN: usize = 6;
/// The bytes a packed locator may take.
pub const LOCATOR_MAX: usize = PLAINTEXT_MAX - TOOL_TAG_LEN - TIME_LEN;

/// Which tool a task belongs to, as its id says: a digest of the tool's engine, name and
/// reference scope (see the module docs). Equal tags in one deployment are refused at load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ToolTag([u8; TOOL_TAG_LEN]);

impl ToolTag {
    /// The tag of the tool `name` on engine `kind` whose executions are found under `scope`.
    pub fn of(kind: &str, name: &str, scope: &str) -> Self {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        for part in [
            b"flowgate tool v2".as_slice(),
            kind.as_bytes(),
            name.as_bytes(),
        ] {
            h.update(part);
            h.update([0]);
        }
        h.update(scope.as_bytes());
        let digest = h.finalize();
        let mut tag = [0; TOOL_TAG_LEN];
        tag.copy_from_slice(&digest[..TOOL_TAG_LEN]);
        ToolTag(tag)
    }
}

/// What a task id names once opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpenedTask {
    /// A compact (`fg2`) id: the tool by its tag, and the execution by its locator, which the
    /// tool's engine turns back into a reference ([`Engine::reference_at`](crate::Engine::reference_at)).
    Compact {
        /// The tool's tag.
        tool: ToolTag,
        /// When the engine created the execution.
        created_at: DateTime<Utc>,
        /// The execution's locator.
        locator: String,
    },
    /// An id sealed before ids were compact (`fg1`), whole.
    Legacy(TaskHandle),
}

/// A task too large for a task id: its locator packs into more than [`LOCATOR_MAX`] bytes.
/// Every engine's locators fit by design (each has a test of its longest); this says which
/// did not rather than hand a client an id it would refuse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the execution's locator packs into {packed} bytes; a task id holds {LOCATOR_MAX}")]
pub struct TooLong {
    /// The packed locator's size.
    pub packed: usize,
}

/// A task as the server works with it: what an `fg1` id held whole, and what the server resolves
/// a compact id to through its tool.
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

/// The plaintext of an `fg1` id.
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
    /// Not of the `fg2.<data>` or `fg1.<kid>.<data>` shape, or not base64.
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
    /// Opens `fg1` ids, and seals and opens other tokens ([`Keyring::seal_bytes`]).
    cipher: XChaCha20Poly1305,
    /// The AES-SIV key task ids are sealed under (MAC half, then encryption half), derived from
    /// the secret so that no key is used for two things.
    siv_key: [u8; 64],
    /// The byte a task id names this key by (see the module docs).
    id_byte: u8,
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
        let mut siv_key = [0; 64];
        siv_key[..32].copy_from_slice(&hmac_sha256(secret, &[b"flowgate task id mac key v2"]));
        siv_key[32..].copy_from_slice(&hmac_sha256(secret, &[b"flowgate task id enc key v2"]));
        Ok(HandleKey {
            id: id.to_owned(),
            cipher,
            siv_key,
            id_byte: id_byte(id),
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

    fn siv(&self) -> Aes256Siv {
        Aes256Siv::new((&self.siv_key).into())
    }
}

/// The byte a task id names a key by: the first of a digest of its id (ids are public).
fn id_byte(id: &str) -> u8 {
    use sha2::{Digest, Sha256};
    Sha256::digest([b"flowgate key id\0".as_slice(), id.as_bytes()].concat())[0]
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

    /// The task id of the execution at `locator` of the tool tagged `tool`, created at
    /// `created_at`, for `principal`: the same four always give the same id under the same key.
    ///
    /// # Errors
    /// [`TooLong`] when the locator packs into more than [`LOCATOR_MAX`] bytes.
    pub fn seal(
        &self,
        tool: ToolTag,
        created_at: DateTime<Utc>,
        locator: &str,
        principal: &str,
    ) -> Result<String, TooLong> {
        let mut plaintext = Vec::with_capacity(PLAINTEXT_MAX);
        plaintext.extend_from_slice(&tool.0);
        let millis = u64::try_from(created_at.timestamp_millis())
            .unwrap_or(0)
            .min((1 << (8 * TIME_LEN)) - 1);
        plaintext.extend_from_slice(&millis.to_be_bytes()[8 - TIME_LEN..]);
        locator::pack(locator, &mut plaintext);
        let packed = plaintext.len() - TOOL_TAG_LEN - TIME_LEN;
        if packed > LOCATOR_MAX {
            return Err(TooLong { packed });
        }
        let key = &self.current;
        // AES-SIV fails only for more than 126 headers; there are three.
        let sealed = key
            .siv()
            .encrypt(task_headers(&key.id, principal), &plaintext)
            .unwrap_or_default();
        let mut data = Vec::with_capacity(KEY_BYTE_LEN + sealed.len());
        data.push(key.id_byte);
        data.extend_from_slice(&sealed);
        let mut id = String::with_capacity(ID_MAX);
        id.push_str(VERSION);
        id.push('.');
        URL_SAFE_NO_PAD.encode_string(data, &mut id);
        Ok(id)
    }

    /// Opens a task id that `principal` presents.
    ///
    /// # Errors
    /// [`OpenError`]; callers must answer every variant the same way ("task not found").
    pub fn open(&self, token: &str, principal: &str) -> Result<OpenedTask, OpenError> {
        if let Some(task) = self.opened.get(token, principal) {
            return Ok(task);
        }
        let task = if token.starts_with("fg1.") {
            OpenedTask::Legacy(self.open_v1(token, principal)?)
        } else {
            self.open_compact(token, principal)?
        };
        self.opened.keep(token, principal, &task);
        Ok(task)
    }

    /// [`Keyring::open`] of an `fg2` id the full way: base64, AES-SIV, the fields.
    fn open_compact(&self, token: &str, principal: &str) -> Result<OpenedTask, OpenError> {
        let data = token
            .strip_prefix(VERSION)
            .and_then(|rest| rest.strip_prefix('.'))
            .filter(|data| data.len() <= ID_MAX)
            .ok_or(OpenError::Malformed)?;
        let data = URL_SAFE_NO_PAD
            .decode(data)
            .map_err(|_| OpenError::Malformed)?;
        let Some((&id_byte, sealed)) = data.split_first() else {
            return Err(OpenError::Malformed);
        };
        if sealed.len() <= TAG_LEN {
            return Err(OpenError::Malformed);
        }
        let mut keys = std::iter::once(&self.current)
            .chain(&self.previous)
            .filter(|k| k.id_byte == id_byte)
            .peekable();
        if keys.peek().is_none() {
            return Err(OpenError::UnknownKey);
        }
        let plaintext = keys
            .find_map(|key| {
                key.siv()
                    .decrypt(task_headers(&key.id, principal), sealed)
                    .ok()
            })
            .ok_or(OpenError::Rejected)?;
        let (tool, rest) = plaintext
            .split_at_checked(TOOL_TAG_LEN)
            .ok_or(OpenError::Rejected)?;
        let (time, packed) = rest.split_at_checked(TIME_LEN).ok_or(OpenError::Rejected)?;
        let mut millis = [0; 8];
        millis[8 - TIME_LEN..].copy_from_slice(time);
        let created_at = i64::try_from(u64::from_be_bytes(millis))
            .ok()
            .and_then(DateTime::from_timestamp_millis)
            .ok_or(OpenError::Rejected)?;
        let locator = locator::unpack(packed).ok_or(OpenError::Rejected)?;
        let mut tag = [0; TOOL_TAG_LEN];
        tag.copy_from_slice(tool);
        Ok(OpenedTask::Compact {
            tool: ToolTag(tag),
            created_at,
            locator,
        })
    }

    /// Opens an `fg1` id (sealed before ids were compact) the full way: base64, AEAD, JSON.
    fn open_v1(&self, token: &str, principal: &str) -> Result<TaskHandle, OpenError> {
        let plaintext = self.open_bytes(VERSION_V1, token, principal)?;
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

/// What an `fg2` id's seal authenticates beside its plaintext: the layout, the key's id and the
/// principal the id was made for.
fn task_headers<'a>(kid: &'a str, principal: &'a str) -> [&'a [u8]; 3] {
    [VERSION.as_bytes(), kid.as_bytes(), principal.as_bytes()]
}

/// Whether a task whose locator is `locator` gets a task id a client takes: the id sealed under
/// the longest key id a keyring takes, for a long principal, is at most [`ID_MAX`] characters of
/// printable ASCII and opens to the same locator. Each engine's worst-case test calls it with
/// the longest locator the engine makes; the answer is the id's length.
///
/// # Errors
/// What is wrong, as text for the test to show.
pub fn task_id_fits(locator: &str) -> Result<usize, String> {
    let key = HandleKey::new(&"k".repeat(16), &[7; 32]).map_err(|e| e.to_string())?;
    let ring = Keyring::new(key, vec![]);
    let principal = format!("https://issuer.example/{}", "p".repeat(200));
    let created = DateTime::from_timestamp_millis(253_402_300_799_999).ok_or("time")?;
    let tool = ToolTag::of("engine", &"t".repeat(128), "scope");
    let id = ring
        .seal(tool, created, locator, &principal)
        .map_err(|e| e.to_string())?;
    if id.len() > ID_MAX || !id.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
        return Err(format!("{} characters: {id}", id.len()));
    }
    match ring.open(&id, &principal) {
        Ok(OpenedTask::Compact {
            tool: t,
            created_at,
            locator: l,
        }) if t == tool && created_at == created && l == locator => Ok(id.len()),
        other => Err(format!("{id} opened as {other:?}")),
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

    fn created() -> DateTime<Utc> {
        DateTime::from_timestamp_millis(1_764_670_000_123).expect("time")
    }

    fn tool() -> ToolTag {
        ToolTag::of(
            "stepfunctions",
            "deploy",
            "arn:aws:states:eu-west-1:123456789012:stateMachine:m",
        )
    }

    const NAME: &str = "p0123456789abcdef-0123456789abcdef0123456789abcdef";

    fn sample() -> OpenedTask {
        OpenedTask::Compact {
            tool: tool(),
            created_at: created(),
            locator: NAME.into(),
        }
    }

    fn seal(k: &Keyring, locator: &str, principal: &str) -> String {
        k.seal(tool(), created(), locator, principal).expect("fits")
    }

    /// An id sealed the way ids were before they were compact.
    fn legacy(k: &Keyring, handle: &TaskHandle, principal: &str) -> String {
        let body = Sealed {
            e: handle.engine.clone(),
            t: handle.tool.clone(),
            x: handle.execution.0.clone(),
            c: handle.created_at.timestamp_millis(),
        };
        k.seal_bytes(
            VERSION_V1,
            &serde_json::to_vec(&body).expect("json"),
            principal,
        )
    }

    #[test]
    fn seal_then_open_round_trips_within_the_budget_and_hides_the_tool() {
        let k = ring("k1", 7);
        let token = seal(&k, NAME, "alice");
        assert!(token.starts_with("fg2."), "{token}");
        assert!(token.len() <= ID_MAX, "{}", token.len());
        assert!(!token.contains("deploy") && !token.contains(NAME));
        assert!(
            token
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        );
        assert_eq!(k.open(&token, "alice"), Ok(sample()));
    }

    #[test]
    fn the_budget_is_what_the_module_docs_say() {
        assert_eq!(SEALED_MAX, 93);
        assert_eq!(PLAINTEXT_MAX, 76);
        assert_eq!(LOCATOR_MAX, 62);
        // The longest Step Functions name, and the longest key id and principal, still fit.
        // 8 + 6 + 61 bytes of plaintext, 17 of key byte and tag: 92 bytes, 123 characters.
        assert_eq!(task_id_fits(&"N".repeat(80)), Ok(4 + 123));
        // A GitHub run id: 8 + 6 + 2, 33 bytes, 44 characters.
        assert_eq!(task_id_fits("1"), Ok(4 + 44));
        // One byte past the budget is refused, never cut.
        let k = ring("k1", 7);
        let raw = "é".repeat(31); // 62 bytes of text, 63 packed
        assert_eq!(
            k.seal(tool(), created(), &raw, "p"),
            Err(TooLong { packed: 63 })
        );
        let fits = format!("{}a", "é".repeat(30));
        assert!(k.seal(tool(), created(), &fits, "p").is_ok());
    }

    #[test]
    fn a_task_has_one_id_per_principal_and_key() {
        let k = ring("k1", 7);
        assert_eq!(seal(&k, NAME, "a"), seal(&k, NAME, "a"), "stable");
        assert_ne!(seal(&k, NAME, "a"), seal(&k, NAME, "b"));
        assert_ne!(seal(&k, NAME, "a"), seal(&ring("k1", 8), NAME, "a"));
        assert_ne!(seal(&k, NAME, "a"), seal(&k, &format!("{NAME}2"), "a"));
        // The same secret under another key id seals other ids (the id is authenticated).
        assert_ne!(seal(&k, NAME, "a"), seal(&ring("k2", 7), NAME, "a"));
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
    fn aes_siv_matches_the_rfc_5297_vector() {
        // RFC 5297 A.1 (AES-128-SIV): the crate's construction is the standard one; the
        // 256-bit variant used for ids is the same code with the larger key.
        use aes_siv::siv::Aes128Siv;
        let key: [u8; 32] = [
            0xff, 0xfe, 0xfd, 0xfc, 0xfb, 0xfa, 0xf9, 0xf8, 0xf7, 0xf6, 0xf5, 0xf4, 0xf3, 0xf2,
            0xf1, 0xf0, 0xf0, 0xf1, 0xf2, 0xf3, 0xf4, 0xf5, 0xf6, 0xf7, 0xf8, 0xf9, 0xfa, 0xfb,
            0xfc, 0xfd, 0xfe, 0xff,
        ];
        let ad: Vec<u8> = (0x10..=0x27).collect();
        let pt: Vec<u8> = (0x11..=0xee).step_by(0x11).collect();
        let out = Aes128Siv::new((&key).into())
            .encrypt([&ad], &pt)
            .expect("seal");
        let hex: String = out.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "85632d07c6e8f37f950acd320a2ecc9340c02b9690c4dc04daef7f6afe5c"
        );
    }

    #[test]
    fn another_principal_cannot_open() {
        let k = ring("k1", 7);
        let token = seal(&k, NAME, "alice");
        assert_eq!(k.open(&token, "bob"), Err(OpenError::Rejected));
        assert_eq!(k.open(&token, "anonymous"), Err(OpenError::Rejected));
    }

    #[test]
    fn tampered_truncated_and_random_handles_do_not_open() {
        let k = ring("k1", 7);
        let token = seal(&k, NAME, "p");
        let mut bytes = token.clone().into_bytes();
        let last = bytes.len() - 3;
        bytes[last] = if bytes[last] == b'A' { b'B' } else { b'A' };
        let tampered = String::from_utf8(bytes).expect("ascii");
        assert!(k.open(&tampered, "p").is_err());
        assert!(k.open(&token[..token.len() - 5], "p").is_err());
        assert!(k.open(&token[..10], "p").is_err());
        assert!(k.open("", "p").is_err());
        assert!(k.open("fg2.", "p").is_err());
        assert!(k.open("fg1.k1.", "p").is_err());
        assert!(k.open("fg2.!!!!", "p").is_err());
        assert!(k.open("not-a-handle", "p").is_err());
        assert!(k.open(&format!("fg2.{}", "A".repeat(120)), "p").is_err());
        assert!(k.open(&token.replacen("fg2", "fg1", 1), "p").is_err());
        assert!(k.open(&token.replacen("fg2", "fg3", 1), "p").is_err());
    }

    /// A handle opened once opens from the set of opened handles to the same task; nothing a
    /// refused handle presents enters it, a kept handle is refused to another principal as
    /// before, and the set stays within its bound while every handle still opens.
    #[test]
    fn opened_handles_open_again_the_same_and_refusals_stay_refusals() {
        let k = ring("k1", 7);
        let token = seal(&k, NAME, "alice");
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

        let tokens: Vec<(String, String)> = (0..opened::CAPACITY + 500)
            .map(|n| {
                let locator = format!("run-{n}");
                (seal(&k, &locator, "alice"), locator)
            })
            .collect();
        for _ in 0..2 {
            for (token, locator) in &tokens {
                let want = OpenedTask::Compact {
                    tool: tool(),
                    created_at: created(),
                    locator: locator.clone(),
                };
                assert_eq!(k.open(token, "alice"), Ok(want));
            }
            assert!(k.opened.len() <= opened::CAPACITY, "{}", k.opened.len());
        }
    }

    #[test]
    fn another_deployment_cannot_open_and_rotation_keeps_old_handles() {
        let old = ring("k1", 1);
        let token = seal(&old, NAME, "p");
        assert_eq!(ring("k1", 2).open(&token, "p"), Err(OpenError::Rejected));
        assert_eq!(ring("k2", 2).open(&token, "p"), Err(OpenError::UnknownKey));
        let rotated = Keyring::new(
            HandleKey::new("k2", &[2; 32]).expect("key"),
            vec![HandleKey::new("k1", &[1; 32]).expect("key")],
        );
        assert_eq!(rotated.open(&token, "p"), Ok(sample()));
        assert_ne!(
            seal(&rotated, NAME, "p"),
            token,
            "new ids under the new key"
        );
        assert_eq!(
            old.open(&seal(&rotated, NAME, "p"), "p"),
            Err(OpenError::UnknownKey)
        );
    }

    /// Two keys whose ids hash to the same byte: each id opens under the key that sealed it.
    #[test]
    fn keys_sharing_a_byte_are_both_tried() {
        let ids: Vec<String> = (0..2000).map(|n| format!("k{n}")).collect();
        let (a, b) = ids
            .iter()
            .enumerate()
            .find_map(|(i, a)| {
                let b = ids[i + 1..].iter().find(|b| id_byte(b) == id_byte(a))?;
                Some((a.clone(), b.clone()))
            })
            .expect("a shared byte among 2,000 ids");
        let ka = HandleKey::new(&a, &[1; 32]).expect("key");
        let kb = HandleKey::new(&b, &[2; 32]).expect("key");
        let by_a = seal(&Keyring::new(ka.clone(), vec![]), NAME, "p");
        let by_b = seal(&Keyring::new(kb.clone(), vec![]), NAME, "p");
        let both = Keyring::new(ka, vec![kb]);
        assert_eq!(both.open(&by_a, "p"), Ok(sample()));
        assert_eq!(both.open(&by_b, "p"), Ok(sample()));
    }

    /// Ids sealed before they were compact still open, to the whole handle they carry, for
    /// their principal only.
    #[test]
    fn legacy_ids_still_open() {
        let k = ring("k1", 7);
        let handle = TaskHandle {
            engine: "stepfunctions".into(),
            tool: "deploy".into(),
            execution: ExecutionRef(
                "arn:aws:states:eu-west-1:123456789012:execution:m:run-1".into(),
            ),
            created_at: created(),
        };
        let token = legacy(&k, &handle, "alice");
        assert!(token.starts_with("fg1.k1."));
        assert_eq!(
            k.open(&token, "alice"),
            Ok(OpenedTask::Legacy(handle.clone()))
        );
        assert_eq!(k.open(&token, "bob"), Err(OpenError::Rejected));
        let garbage = k.seal_bytes(VERSION_V1, b"not json", "alice");
        assert_eq!(k.open(&garbage, "alice"), Err(OpenError::Rejected));
    }

    #[test]
    fn a_token_sealed_for_one_purpose_does_not_open_as_another() {
        let k = ring("k1", 7);
        let state = k.seal_bytes("fs1", b"{}", "p");
        assert_eq!(k.open_bytes("fs1", &state, "p"), Ok(b"{}".to_vec()));
        assert!(k.open(&state, "p").is_err());
        let forged = state.replacen("fs1", "fg1", 1);
        assert_eq!(k.open(&forged, "p"), Err(OpenError::Rejected));
        let task = seal(&k, NAME, "p");
        assert!(k.open_bytes("fg2", &task, "p").is_err());
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
