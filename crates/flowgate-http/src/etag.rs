//! Conditional requests: remember each URL's last `ETag` and body, ask with `If-None-Match`,
//! and answer a 304 with the remembered body.
//!
//! A process-local optimisation, never task state: an instance without the entry simply asks
//! in full, and every answer is still the engine's own.

use std::collections::HashMap;
use std::sync::Mutex;

/// Bodies are not cached above this size (logs, artifacts): they are never polled.
const MAX_BODY: usize = 256 << 10;

/// URL -> (ETag, body) for the last `capacity` URLs asked.
#[derive(Debug)]
pub struct EtagCache {
    capacity: usize,
    inner: Mutex<Entries>,
}

#[derive(Debug, Default)]
struct Entries {
    map: HashMap<String, (String, Vec<u8>, u64)>,
    clock: u64,
}

impl EtagCache {
    /// A cache of at most `capacity` URLs (the least recently stored go first).
    pub fn new(capacity: usize) -> Self {
        EtagCache {
            capacity: capacity.max(1),
            inner: Mutex::new(Entries::default()),
        }
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The ETag to send for `url`, if its body is remembered.
    pub fn etag(&self, url: &str) -> Option<String> {
        self.entries().map.get(url).map(|(etag, _, _)| etag.clone())
    }

    /// The remembered body of `url` (after a 304).
    pub fn body(&self, url: &str) -> Option<Vec<u8>> {
        self.entries().map.get(url).map(|(_, body, _)| body.clone())
    }

    /// Remembers `body` as `url`'s content with `etag`.
    pub fn store(&self, url: &str, etag: &str, body: &[u8]) {
        if body.len() > MAX_BODY {
            return;
        }
        let mut e = self.entries();
        e.clock += 1;
        let stamp = e.clock;
        if e.map.len() >= self.capacity && !e.map.contains_key(url) {
            let oldest = e
                .map
                .iter()
                .min_by_key(|(_, (_, _, at))| *at)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                e.map.remove(&k);
            }
        }
        e.map
            .insert(url.to_owned(), (etag.to_owned(), body.to_vec(), stamp));
    }

    /// Forgets `url` (its resource changed through a write).
    pub fn forget(&self, url: &str) {
        self.entries().map.remove(url);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_and_evicts_the_oldest() {
        let c = EtagCache::new(2);
        c.store("a", "\"1\"", b"A");
        c.store("b", "\"2\"", b"B");
        assert_eq!(c.etag("a").as_deref(), Some("\"1\""));
        c.store("c", "\"3\"", b"C");
        assert_eq!(c.etag("a"), None);
        assert_eq!(c.body("c").as_deref(), Some(&b"C"[..]));
        c.forget("c");
        assert_eq!(c.body("c"), None);
    }
}
