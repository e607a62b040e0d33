//! Reading manifests from YAML.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use flowgate_core::wire::FailureMode;
use serde::Deserialize;
use serde_json::{Map, Value};
use serde_saphyr::Spanned;

use crate::{Location, Manifest, ManifestError, Target, TaskSupport, ToolSpec, Ttl};

const DEFAULT_POLL_INTERVAL_MS: u64 = 1_000;
const MIN_POLL_INTERVAL_MS: u64 = 100;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawManifest {
    /// Scopes of every tool that does not name its own (`scopes:`); none when absent.
    #[serde(default)]
    default_scopes: Option<Spanned<Vec<String>>>,
    tools: Vec<Spanned<RawTool>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTool {
    name: Spanned<String>,
    #[serde(default)]
    description: String,
    #[serde(default)]
    input_schema: Option<Spanned<Value>>,
    #[serde(default)]
    output_schema: Option<Spanned<Value>>,
    #[serde(default)]
    task: TaskSupport,
    #[serde(default)]
    poll_interval_ms: Option<Spanned<u64>>,
    /// `null` means unlimited; absent means the engine's retention.
    #[serde(default, deserialize_with = "present")]
    ttl_ms: Option<Option<u64>>,
    #[serde(default)]
    failure: RawFailure,
    #[serde(default)]
    elicit: Vec<Spanned<RawElicit>>,
    /// OAuth scopes a caller needs to see and call the tool; `[]` means none even when the
    /// manifest has `default_scopes`.
    #[serde(default)]
    scopes: Option<Spanned<Vec<String>>>,
    target: Spanned<Map<String, Value>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawElicit {
    argument: String,
    message: String,
    #[serde(default)]
    field: Option<String>,
}

/// Tells an explicit `null` (`Some(None)`) from an absent key (`None`, via `default`).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<u64>>, D::Error> {
    Option::<u64>::deserialize(d).map(Some)
}

#[derive(Deserialize, Default, Clone, Copy)]
#[serde(rename_all = "snake_case")]
enum RawFailure {
    #[default]
    ToolError,
    JsonrpcError,
}

/// Loads a manifest file, or every `*.yaml` / `*.yml` file of a folder (sorted by name).
///
/// # Errors
/// Every problem found, each with its file, line and column.
pub fn load_path(path: &Path) -> Result<Manifest, Vec<ManifestError>> {
    let at_top = |message: String| {
        vec![ManifestError {
            file: path.to_owned(),
            line: 1,
            column: 1,
            message,
        }]
    };
    let files: Vec<PathBuf> = if path.is_dir() {
        let entries =
            std::fs::read_dir(path).map_err(|e| at_top(format!("cannot read folder: {e}")))?;
        let mut files: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
            .collect();
        files.sort();
        if files.is_empty() {
            return Err(at_top("folder holds no .yaml or .yml manifest".into()));
        }
        files
    } else {
        vec![path.to_owned()]
    };
    let mut manifest = Manifest::default();
    let mut errors = Vec::new();
    for file in files {
        let text = match std::fs::read_to_string(&file) {
            Ok(t) => t,
            Err(e) => {
                errors.push(ManifestError {
                    file,
                    line: 1,
                    column: 1,
                    message: format!("cannot read: {e}"),
                });
                continue;
            }
        };
        match parse_str(&text, &file) {
            Ok(m) => manifest.tools.extend(m.tools),
            Err(e) => errors.extend(e),
        }
    }
    check_unique(&manifest, &mut errors);
    if errors.is_empty() {
        Ok(manifest)
    } else {
        Err(errors)
    }
}

/// Parses one manifest text; `file` names it in errors and locations.
///
/// # Errors
/// Every problem found, each with its file, line and column.
pub fn parse_str(text: &str, file: &Path) -> Result<Manifest, Vec<ManifestError>> {
    parse_with_env(text, file, |name| std::env::var(name).ok())
}

/// [`parse_str`] with `${NAME}` looked up in `env` rather than the process environment.
fn parse_with_env(
    text: &str,
    file: &Path,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Manifest, Vec<ManifestError>> {
    let prepared = env_refs::prepare(text, env, file)?;
    let mut options = serde_saphyr::Options::default().with_properties(prepared.vars);
    options.property_syntax = serde_saphyr::PropertySyntax::DockerCompose;
    let text = prepared.text.as_str();
    let raw = match serde_saphyr::from_str_with_options::<RawManifest>(text, options.clone()) {
        Ok(raw) => raw,
        Err(e) => {
            let (line, column) = e.location().map_or((1, 1), |l| (l.line(), l.column()));
            return Err(vec![ManifestError {
                file: file.to_owned(),
                line,
                column,
                message: first_line(&e.without_snippet().to_string()),
            }]);
        }
    };
    // The strict read succeeded, so this lenient one can only lack places, never fail the load.
    let mut places = serde_saphyr::from_str_with_options::<keys::TargetPlaces>(text, options)
        .map(|p| p.tools)
        .unwrap_or_default()
        .into_iter()
        .map(|t| t.target.unwrap_or_default());
    let mut manifest = Manifest::default();
    let mut errors = Vec::new();
    let default_scopes = match raw.default_scopes {
        Some(s) => match scopes(s, file, "default_scopes") {
            Ok(s) => s,
            Err(e) => {
                errors.push(e);
                Vec::new()
            }
        },
        None => Vec::new(),
    };
    for tool in raw.tools {
        let keys = places.next().unwrap_or_default();
        match validate(tool, keys, file, &default_scopes) {
            Ok(t) => manifest.tools.push(t),
            Err(e) => errors.push(e),
        }
    }
    check_unique(&manifest, &mut errors);
    if errors.is_empty() {
        Ok(manifest)
    } else {
        Err(errors)
    }
}

/// serde-saphyr's message carries a source snippet after the first line; flowgate prints its
/// own `file:line:column:` prefix, so keep the sentence and drop the drawing.
fn first_line(message: &str) -> String {
    let line = message.lines().next().unwrap_or(message).trim();
    line.strip_prefix("error: ").unwrap_or(line).to_owned()
}

fn loc(file: &Path, l: &serde_saphyr::Location) -> Location {
    Location {
        file: file.to_owned(),
        line: l.line(),
        column: l.column(),
    }
}

/// A scope list: each an RFC 6749 §3.3 scope token (printable ASCII without space, `"`, `\`).
fn scopes(
    raw: Spanned<Vec<String>>,
    file: &Path,
    what: &str,
) -> Result<Vec<String>, ManifestError> {
    let at = loc(file, &raw.referenced);
    let mut out: Vec<String> = Vec::new();
    for scope in raw.value {
        let token = !scope.is_empty()
            && scope
                .bytes()
                .all(|b| (0x21..=0x7e).contains(&b) && b != b'"' && b != b'\\');
        if !token {
            return Err(at.error(format!(
                "{what}: {scope:?} is not a scope (printable ASCII without spaces, quotes or backslashes)"
            )));
        }
        if !out.contains(&scope) {
            out.push(scope);
        }
    }
    Ok(out)
}

fn validate(
    raw: Spanned<RawTool>,
    keys: keys::KeyPlaces,
    file: &Path,
    default_scopes: &[String],
) -> Result<ToolSpec, ManifestError> {
    let location = loc(file, &raw.referenced);
    let raw = raw.value;
    let name_at = loc(file, &raw.name.referenced);
    let name = raw.name.value;
    if name.is_empty()
        || name.len() > 128
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
    {
        return Err(name_at.error(format!(
            "tool name {name:?} must be 1-128 characters of letters, digits, '_', '-' or '.'"
        )));
    }
    let (input_schema, input_at) = match raw.input_schema {
        Some(s) => (s.value, loc(file, &s.referenced)),
        None => (serde_json::json!({"type": "object"}), location.clone()),
    };
    let input_schema = object_schema(input_schema, &input_at, "input_schema", true)?;
    let validator = jsonschema::validator_for(&Value::Object(input_schema.clone()))
        .map_err(|e| input_at.error(format!("input_schema is not a valid JSON Schema: {e}")))?;
    let output_schema = match raw.output_schema {
        Some(s) => {
            let at = loc(file, &s.referenced);
            let schema = object_schema(s.value, &at, "output_schema", false)?;
            jsonschema::validator_for(&Value::Object(schema.clone()))
                .map_err(|e| at.error(format!("output_schema is not a valid JSON Schema: {e}")))?;
            Some(schema)
        }
        None => None,
    };
    let poll_interval_ms = match raw.poll_interval_ms {
        Some(p) if p.value < MIN_POLL_INTERVAL_MS => {
            return Err(loc(file, &p.referenced).error(format!(
                "poll_interval_ms must be at least {MIN_POLL_INTERVAL_MS}"
            )));
        }
        Some(p) => p.value,
        None => DEFAULT_POLL_INTERVAL_MS,
    };
    let mut elicit = Vec::new();
    for e in raw.elicit {
        let at = loc(file, &e.referenced);
        let e = e.value;
        let Some(schema) = input_schema
            .get("properties")
            .and_then(|p| p.get(&e.argument))
            .cloned()
        else {
            return Err(at.error(format!(
                "elicit: argument {:?} is not a property of input_schema",
                e.argument
            )));
        };
        let field = e.field.unwrap_or_else(|| e.argument.clone());
        elicit.push(crate::Elicit {
            argument: e.argument,
            message: e.message,
            field,
            schema,
        });
    }
    let scopes = match raw.scopes {
        Some(s) => scopes(s, file, "scopes")?,
        None => default_scopes.to_vec(),
    };
    let target_at = loc(file, &raw.target.referenced);
    let mut config = raw.target.value;
    let engine = match config.remove("engine") {
        Some(Value::String(e)) if !e.is_empty() => e,
        Some(_) => return Err(target_at.error("target.engine must be a string")),
        None => return Err(target_at.error("target needs an `engine` key")),
    };
    Ok(ToolSpec {
        name,
        description: raw.description,
        input_schema,
        output_schema,
        task: raw.task,
        target: Target {
            engine,
            config,
            location: target_at,
            keys: keys
                .0
                .iter()
                .map(|(k, l)| (k.clone(), loc(file, l)))
                .collect(),
        },
        poll_interval_ms,
        ttl: match raw.ttl_ms {
            None => Ttl::EngineDefault,
            Some(None) => Ttl::Unlimited,
            Some(Some(ms)) => Ttl::Ms(ms),
        },
        failure: match raw.failure {
            RawFailure::ToolError => FailureMode::ToolError,
            RawFailure::JsonrpcError => FailureMode::JsonRpcError,
        },
        elicit,
        scopes,
        location,
        validator: Arc::new(validator),
    })
}

fn object_schema(
    schema: Value,
    at: &Location,
    what: &str,
    must_be_object_type: bool,
) -> Result<Map<String, Value>, ManifestError> {
    let Value::Object(map) = schema else {
        return Err(at.error(format!("{what} must be a mapping (a JSON Schema object)")));
    };
    if must_be_object_type && map.get("type").and_then(Value::as_str) != Some("object") {
        return Err(at.error(format!(
            "{what} must have `type: object` (MCP tool arguments are an object)"
        )));
    }
    Ok(map)
}

fn check_unique(manifest: &Manifest, errors: &mut Vec<ManifestError>) {
    for (i, tool) in manifest.tools.iter().enumerate() {
        if let Some(first) = manifest.tools[..i].iter().find(|t| t.name == tool.name) {
            let message = format!(
                "tool {:?} is declared twice (first at {}:{})",
                tool.name,
                first.location.file.display(),
                first.location.line
            );
            let duplicate = tool.location.error(message);
            if !errors.contains(&duplicate) {
                errors.push(duplicate);
            }
        }
    }
}

mod env_refs;
mod keys;
#[cfg(test)]
mod properties;
#[cfg(test)]
mod tests;
