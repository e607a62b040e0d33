//! Engine kinds by name, so manifests can say `engine: local` and the binary decides which
//! adapters exist (each behind its own cargo feature).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::Engine;

/// Builds an engine bound to one tool's target: the target's keys (without `engine`), and the
/// folder of the manifest that declared it (for relative paths).
pub type Factory =
    Box<dyn Fn(&Map<String, Value>, &Path) -> Result<Arc<dyn Engine>, String> + Send + Sync>;

/// The engine kinds this build knows.
#[derive(Default)]
pub struct Registry {
    factories: BTreeMap<&'static str, Factory>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("kinds", &self.kinds())
            .finish()
    }
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) the factory for `kind`.
    pub fn register(&mut self, kind: &'static str, factory: Factory) {
        self.factories.insert(kind, factory);
    }

    /// The known kinds, sorted.
    pub fn kinds(&self) -> Vec<&'static str> {
        self.factories.keys().copied().collect()
    }

    /// Builds the engine for a target.
    ///
    /// # Errors
    /// A message naming the known kinds when `kind` is unknown, or the factory's own message
    /// (which names the offending key) when the target is invalid.
    pub fn build(
        &self,
        kind: &str,
        target: &Map<String, Value>,
        base_dir: &Path,
    ) -> Result<Arc<dyn Engine>, String> {
        let factory = self.factories.get(kind).ok_or_else(|| {
            format!(
                "unknown engine {kind:?}; this build knows: {}",
                self.kinds().join(", ")
            )
        })?;
        factory(target, base_dir)
    }
}
