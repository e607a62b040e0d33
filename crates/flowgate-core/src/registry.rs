//! Engine kinds by name, so manifests can say `engine: local` and the binary decides which
//! adapters exist (each behind its own cargo feature).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::Engine;

/// Builds an engine bound to one tool's target.
pub type Factory =
    Box<dyn Fn(TargetSpec<'_>) -> Result<Arc<dyn Engine>, TargetError> + Send + Sync>;

/// What an engine factory checks and binds: one tool's `target` block, with what the block
/// alone cannot say.
#[derive(Debug, Clone, Copy)]
pub struct TargetSpec<'a> {
    /// The target's keys, without `engine`.
    pub config: &'a Map<String, Value>,
    /// The folder of the manifest that declared the tool (relative paths start there).
    pub base_dir: &'a Path,
    /// The tool's `input_schema`: templates are checked against it (see [`crate::template`]).
    pub input_schema: &'a Map<String, Value>,
}

impl TargetSpec<'_> {
    /// Parses and binds the template at `key` (a dotted path inside the target), naming that
    /// key in any error.
    ///
    /// # Errors
    /// A [`TargetError`] at `key`: broken syntax, or a placeholder the schema does not declare.
    pub fn template(
        &self,
        engine: &str,
        key: &str,
        source: &str,
    ) -> Result<crate::template::Template, TargetError> {
        crate::template::Template::parse(source)
            .and_then(|t| t.bind(self.input_schema))
            .map_err(|e| TargetError::at(key, format!("{engine} target: {key}: {e}")))
    }

    /// Binds an already parsed template (one a target deserialized) to the tool's schema.
    ///
    /// # Errors
    /// A [`TargetError`] at `key` for a placeholder the schema does not declare.
    pub fn bind(
        &self,
        engine: &str,
        key: &str,
        template: crate::template::Template,
    ) -> Result<crate::template::Template, TargetError> {
        template
            .bind(self.input_schema)
            .map_err(|e| TargetError::at(key, format!("{engine} target: {key}: {e}")))
    }
}

/// Why an engine refused a tool's `target` block, with the key it is about, so the manifest
/// can point at that key's own line and column rather than at the block.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct TargetError {
    /// The dotted path of the offending key inside the target (`inputs.approve.message`),
    /// `None` when the problem is the block as a whole.
    pub key: Option<String>,
    /// What is wrong, naming the engine and the key.
    pub message: String,
}

impl TargetError {
    /// A problem with the key at `key` (a dotted path inside the target).
    pub fn at(key: impl Into<String>, message: impl Into<String>) -> Self {
        TargetError {
            key: Some(key.into()),
            message: message.into(),
        }
    }

    /// A problem with the target as a whole.
    pub fn whole(message: impl Into<String>) -> Self {
        TargetError {
            key: None,
            message: message.into(),
        }
    }
}

/// Reads a target block into an adapter's typed target, naming the key any error is about.
///
/// `engine` prefixes the message (`stepfunctions target: ...`). An unknown key is reported at
/// that key; a wrongly typed value at its own path; a missing key at the block.
///
/// # Errors
/// A [`TargetError`] with the offending key's path.
pub fn parse_target<T: DeserializeOwned>(
    engine: &str,
    target: &Map<String, Value>,
) -> Result<T, TargetError> {
    let value = Value::Object(target.clone());
    serde_path_to_error::deserialize(value).map_err(|e| {
        let mut path = e.path().to_string();
        let inner = e.into_inner().to_string();
        // Point at an unknown key itself, whichever level reported it.
        if let Some(unknown) =
            backticked(&inner).filter(|u| inner.starts_with("unknown field") && !path.ends_with(u))
        {
            path = if path == "." || path.is_empty() {
                unknown.to_owned()
            } else {
                format!("{path}.{unknown}")
            };
        }
        let message = format!("{engine} target: {inner}");
        if path == "." || path.is_empty() {
            TargetError::whole(message)
        } else {
            TargetError::at(path, message)
        }
    })
}

/// The first `name` in a serde message such as ``unknown field `name`, expected ...``.
fn backticked(message: &str) -> Option<&str> {
    let start = message.find('`')? + 1;
    let len = message[start..].find('`')?;
    Some(&message[start..start + len])
}

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
    /// A whole-target error naming the known kinds when `kind` is unknown, or the factory's
    /// own error (which names the offending key) when the target is invalid.
    pub fn build(&self, kind: &str, spec: TargetSpec<'_>) -> Result<Arc<dyn Engine>, TargetError> {
        let factory = self.factories.get(kind).ok_or_else(|| {
            TargetError::at(
                "engine",
                format!(
                    "unknown engine {kind:?}; this build knows: {}",
                    self.kinds().join(", ")
                ),
            )
        })?;
        factory(spec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct T {
        arn: String,
        #[serde(default)]
        inputs: BTreeMap<String, Inner>,
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Inner {
        message: String,
    }

    fn parse(v: Value) -> Result<T, TargetError> {
        parse_target("x", v.as_object().expect("object"))
    }

    #[test]
    fn errors_name_the_offending_key() {
        let e = parse(json!({"arn": "a", "regoin": 1})).expect_err("typo");
        assert_eq!(e.key.as_deref(), Some("regoin"));
        assert!(
            e.message.starts_with("x target: unknown field `regoin`"),
            "{e}"
        );
        let e = parse(json!({"arn": "a", "inputs": {"go": {"mesage": "m"}}})).expect_err("deep");
        assert_eq!(e.key.as_deref(), Some("inputs.go.mesage"));
        let e = parse(json!({"arn": 3})).expect_err("type");
        assert_eq!(e.key.as_deref(), Some("arn"));
        let e = parse(json!({})).expect_err("missing");
        assert_eq!(e.key, None);
        assert!(e.message.contains("arn"), "{e}");
    }
}
