//! The handles a keyring has opened, so that a client polling its task every second does not
//! have its handle decrypted every second.
//!
//! Opening a handle is a function of three things only: the token's bytes, the principal that
//! presents it and the keyring's keys. The same three always open to the same task. So once a
//! token has opened for a principal, the same bytes presented by the same principal are
//! answered from here, without the base64 and the decryption of the full opening (a sizeable
//! share of a poll's work: docs/benchmarks.md has the measurement).
//!
//! What opens and what is refused is exactly as before: only a token that opened is kept, so
//! a forged, tampered or foreign one never enters and is always refused the full way; a token
//! kept for one principal is not found for another (the principal is part of the entry), and
//! goes the full way too. The set belongs to one [`Keyring`](super::Keyring) and its keys: new
//! keys make a new keyring with an empty set. It holds at most [`CAPACITY`] tokens; when full,
//! a new one takes the place of an arbitrary other (which simply opens the full way next time).

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::Mutex;

use super::OpenedTask;

/// How many opened tokens are kept: more than the tasks a deployment's clients poll at once
/// from one instance, at a few hundred bytes each.
pub(super) const CAPACITY: usize = 4096;

/// Opened tokens, by a keyed hash of token and principal (so a client cannot aim tokens at
/// one slot); an entry keeps both in full, and only an exact match answers.
pub(super) struct Opened {
    hasher: RandomState,
    entries: Mutex<HashMap<u64, Entry>>,
}

struct Entry {
    token: Box<str>,
    principal: Box<str>,
    handle: OpenedTask,
}

impl Opened {
    pub(super) fn new() -> Self {
        Opened {
            hasher: RandomState::new(),
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// The task `token` opened to when `principal` presented it before, if it is kept.
    pub(super) fn get(&self, token: &str, principal: &str) -> Option<OpenedTask> {
        let slot = self.hasher.hash_one((token, principal));
        let entries = self.entries.lock().ok()?;
        let entry = entries.get(&slot)?;
        (*entry.token == *token && *entry.principal == *principal).then(|| entry.handle.clone())
    }

    /// Keeps what `token` opened to for `principal`.
    pub(super) fn keep(&self, token: &str, principal: &str, task: &OpenedTask) {
        let slot = self.hasher.hash_one((token, principal));
        let Ok(mut entries) = self.entries.lock() else {
            return;
        };
        if entries.len() >= CAPACITY
            && !entries.contains_key(&slot)
            && let Some(&other) = entries.keys().next()
        {
            entries.remove(&other);
        }
        entries.insert(
            slot,
            Entry {
                token: token.into(),
                principal: principal.into(),
                handle: task.clone(),
            },
        );
    }

    /// How many tokens are kept (tests).
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.entries.lock().map_or(0, |e| e.len())
    }
}

impl std::fmt::Debug for Opened {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Tokens are the clients' bearer-like ids: never printed.
        let kept = self.entries.lock().map_or(0, |e| e.len());
        f.debug_struct("Opened").field("kept", &kept).finish()
    }
}
