//! The validated form of a manifest.

use std::path::PathBuf;
use std::sync::Arc;

use flowgate_core::wire::{FailureMode, Presentation};
use serde_json::{Map, Value};

use crate::ManifestError;

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
        let errors: Vec<String> = self
            .validator
            .iter_errors(arguments)
            .map(|e| {
                let path = e.instance_path().to_string();
                let at = if path.is_empty() {
                    "arguments".to_owned()
                } else {
                    format!("argument {path}")
                };
                format!("{at}: {e}")
            })
            .collect();
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
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
