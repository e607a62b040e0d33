//! The validated form of a manifest.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use flowgate_core::wire::{FailureMode, Presentation};
use serde_json::{Map, Value};

use crate::ManifestError;
use crate::schema::{Naming, Schema};

/// Where something was declared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// The manifest file.
    pub file: PathBuf,
    /// 1-based line.
    pub line: u64,
    /// 1-based column.
    pub column: u64,
}

impl Location {
    /// An error at this place.
    pub fn error(&self, message: impl Into<String>) -> ManifestError {
        ManifestError {
            file: self.file.clone(),
            line: self.line,
            column: self.column,
            message: message.into(),
        }
    }
}

/// Whether a tool's calls run as tasks (the MCP `taskSupport` values).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskSupport {
    /// Always a task; clients that do not speak tasks get -32021.
    Required,
    /// A task for clients that speak tasks, a bounded synchronous wait for others.
    #[default]
    Optional,
    /// Never a task: always a bounded synchronous wait.
    Forbidden,
}

/// A tool's `ttlMs`: how long a task stays retrievable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ttl {
    /// Not set in the manifest: what the engine says it keeps, else [`Ttl::FALLBACK_MS`].
    EngineDefault,
    /// `ttl_ms: null`: no limit.
    Unlimited,
    /// A number of milliseconds.
    Ms(u64),
}

impl Ttl {
    /// The `ttlMs` of a tool whose engine does not say how long it keeps executions: one day.
    pub const FALLBACK_MS: u64 = 86_400_000;

    /// The advertised `ttlMs` given the engine's retention.
    pub fn resolve(self, engine_retention_ms: Option<u64>) -> Option<u64> {
        match self {
            Ttl::EngineDefault => Some(engine_retention_ms.unwrap_or(Self::FALLBACK_MS)),
            Ttl::Unlimited => None,
            Ttl::Ms(ms) => Some(ms),
        }
    }
}

/// The engine a tool starts, with the engine's own settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    /// The engine kind (`local`, `stepfunctions`, ...).
    pub engine: String,
    /// The remaining keys, for the engine's factory to check.
    pub config: Map<String, Value>,
    /// Where the target block starts.
    pub location: Location,
    /// Where each key inside the block was written, by dotted path (`inputs.go.message`,
    /// `command.0`), so an engine's complaint about one key points at it.
    pub keys: BTreeMap<String, Location>,
}

impl Target {
    /// The place of the key at `path` (a dotted path inside the target), or of the block when
    /// the path is `None` or was not written (a missing key).
    pub fn locate(&self, path: Option<&str>) -> &Location {
        path.and_then(|p| self.keys.get(p))
            .unwrap_or(&self.location)
    }
}

/// An argument to ask the caller for (an MCP elicitation, before the task starts) when a call
/// leaves it out.
#[derive(Debug, Clone, PartialEq)]
pub struct Elicit {
    /// The argument that is missing.
    pub argument: String,
    /// What to ask.
    pub message: String,
    /// The form field the answer arrives in (the argument's name unless the manifest says).
    pub field: String,
    /// The form field's schema: the argument's own schema from `input_schema`.
    pub schema: Value,
}

/// One tool, validated.
#[derive(Debug, Clone)]
pub struct ToolSpec {
    /// The MCP tool name.
    pub name: String,
    /// The description shown to models.
    pub description: String,
    /// JSON Schema of the arguments (an object schema).
    pub input_schema: Map<String, Value>,
    /// JSON Schema of the structured result, if declared.
    pub output_schema: Option<Map<String, Value>>,
    /// Task support.
    pub task: TaskSupport,
    /// The engine and its target.
    pub target: Target,
    /// `pollIntervalMs` the server advertises.
    pub poll_interval_ms: u64,
    /// `ttlMs` the server advertises.
    pub ttl: Ttl,
    /// How workflow failures are reported.
    pub failure: FailureMode,
    /// Arguments to ask for when missing, in order.
    pub elicit: Vec<Elicit>,
    /// OAuth scopes a caller must hold to see and call the tool when the server requires
    /// tokens (the tool's `scopes`, else the manifest's `default_scopes`, else none).
    pub scopes: Vec<String>,
    /// Where the tool is declared.
    pub location: Location,
    pub(crate) validator: Arc<jsonschema::Validator>,
}

impl ToolSpec {
    /// Checks call arguments against the input schema.
    ///
    /// # Errors
    /// One message per problem, each naming the argument (`/path`) it is about.
    pub fn validate_arguments(&self, arguments: &Value) -> Result<(), Vec<String>> {
        crate::schema::check(&self.validator, arguments, Naming::ARGUMENTS)
    }

    /// The compiled output schema, when the tool declares one: what every result must match.
    ///
    /// # Errors
    /// When the schema does not compile (loading a manifest already refuses such a schema).
    pub fn output_check(&self) -> Result<Option<Schema>, String> {
        self.output_schema
            .as_ref()
            .map(|s| Schema::compile(&Value::Object(s.clone())))
            .transpose()
    }

    /// How this tool's results are shaped on the wire, given its engine's retention.
    pub fn presentation(&self, engine_retention_ms: Option<u64>) -> Presentation {
        Presentation {
            failure: self.failure,
            structured: self.output_schema.is_some(),
            ttl_ms: self.ttl.resolve(engine_retention_ms),
            poll_interval_ms: self.poll_interval_ms,
        }
    }
}

/// Every tool of one manifest (a file, or a folder of files), in declaration order.
#[derive(Debug, Clone, Default)]
pub struct Manifest {
    /// The tools.
    pub tools: Vec<ToolSpec>,
}

impl Manifest {
    /// The tool called `name`.
    pub fn tool(&self, name: &str) -> Option<&ToolSpec> {
        self.tools.iter().find(|t| t.name == name)
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use serde_json::json;

    const TOOLS: &str = r#"
tools:
  - name: counted
    input_schema: { type: object, properties: { day: { type: string } } }
    output_schema: { type: object, properties: { rows: { type: integer } }, required: [rows] }
    target: { engine: local, command: [echo] }
  - name: plain
    target: { engine: local, command: [echo] }
"#;

    #[test]
    fn arguments_and_results_are_checked_by_the_same_machinery() {
        let manifest = crate::parse_str(TOOLS, Path::new("m.yaml")).expect("valid manifest");
        let counted = manifest.tool("counted").expect("counted");
        let problems = counted
            .validate_arguments(&json!({"day": 3}))
            .expect_err("day must be a string");
        assert!(problems[0].starts_with("argument /day: "), "{problems:?}");

        let output = counted.output_check().expect("compiles").expect("declared");
        assert_eq!(
            output.check(&json!({"rows": 3}), crate::Naming::RESULT),
            Ok(())
        );
        let problems = output
            .check(&json!({"rows": "3"}), crate::Naming::RESULT)
            .expect_err("rows must be an integer");
        assert!(
            problems[0].starts_with("result field /rows: "),
            "{problems:?}"
        );

        let plain = manifest.tool("plain").expect("plain");
        assert!(plain.output_check().expect("nothing to compile").is_none());
    }
}
