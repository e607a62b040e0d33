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
/// The most tools of one file read again one by one after the reader's first error.
const MAX_TOOLS_READ_ONE_BY_ONE: usize = 200;

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

/// Loads a manifest file, or every `*.yaml` / `*.yml` file directly in a folder (sorted by
/// name; subfolders are not read, so pipeline and workflow files can live in one).
///
/// # Errors
/// Every problem found, each with its file, line and column.
pub fn load_path(path: &Path) -> Result<Manifest, Vec<ManifestError>> {
    let (manifest, errors) = load_path_all(path);
    if errors.is_empty() {
        Ok(manifest)
    } else {
        Err(errors)
    }
}

/// [`load_path`] for checking: the tools that loaded, and every problem found. A checker binds
/// the tools that loaded to their engines too, so one run reports the engines' complaints
/// beside the manifest's own.
pub fn load_path_all(path: &Path) -> (Manifest, Vec<ManifestError>) {
    let files = match manifest_files(path) {
        Ok(files) => files,
        Err(errors) => return (Manifest::default(), errors),
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
        if !is_manifest(&text) {
            let why = if path.is_dir() {
                "every *.yaml and *.yml file directly in a manifest folder is read as a manifest: \
                 keep pipeline and workflow files in a subfolder (subfolders are not read)"
            } else {
                "a manifest is a mapping with a `tools` list"
            };
            errors.push(ManifestError {
                file,
                line: 1,
                column: 1,
                message: format!("not a flowgate manifest (no top-level `tools` key); {why}"),
            });
            continue;
        }
        let (m, e) = parse_with_env_all(&text, &file, |name| std::env::var(name).ok());
        manifest.tools.extend(m.tools);
        errors.extend(e);
    }
    let mut duplicates = Vec::new();
    check_unique(&manifest, &mut duplicates);
    for e in duplicates {
        if !errors.contains(&e) {
            errors.push(e);
        }
    }
    (manifest, errors)
}

/// The environment variables a manifest (a file or folder, read as [`load_path`] reads it)
/// references as `${NAME}`, each with the first file that does: what a deployment must set
/// (a template's parameters, a service's environment). The variables flowgate sets for its
/// commands are left out.
///
/// # Errors
/// A file or folder that cannot be read, a refused reference (`${FLOWGATE_HANDLE_KEYS}`).
pub fn variables(
    path: &Path,
) -> Result<std::collections::BTreeMap<String, PathBuf>, Vec<ManifestError>> {
    let files = manifest_files(path)?;
    let mut names = std::collections::BTreeMap::new();
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
        let seen = std::cell::RefCell::new(Vec::new());
        let found = env_refs::prepare(
            &text,
            |name| {
                seen.borrow_mut().push(name.to_owned());
                Some(String::new())
            },
            &file,
        );
        if let Err(e) = found {
            errors.extend(e);
        }
        for name in seen.into_inner() {
            names.entry(name).or_insert_with(|| file.clone());
        }
    }
    if errors.is_empty() {
        Ok(names)
    } else {
        Err(errors)
    }
}

/// The files a manifest path stands for: the file itself, or every `*.yaml` / `*.yml` file
/// directly in the folder, sorted by name.
fn manifest_files(path: &Path) -> Result<Vec<PathBuf>, Vec<ManifestError>> {
    let at_top = |message: String| {
        vec![ManifestError {
            file: path.to_owned(),
            line: 1,
            column: 1,
            message,
        }]
    };
    if !path.is_dir() {
        return Ok(vec![path.to_owned()]);
    }
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
    Ok(files)
}

/// Whether `text` reads as a mapping with a `tools` key (or does not read as YAML at all,
/// which the strict read then reports at its place): a GitLab pipeline or a GitHub workflow
/// beside a manifest is not one.
fn is_manifest(text: &str) -> bool {
    #[derive(Deserialize)]
    struct Top {
        #[serde(default)]
        tools: Option<serde::de::IgnoredAny>,
    }
    serde_saphyr::from_str::<Top>(text).map_or(true, |top| top.tools.is_some())
}

/// Parses one manifest text; `file` names it in errors and locations.
///
/// # Errors
/// Every problem found, each with its file, line and column.
pub fn parse_str(text: &str, file: &Path) -> Result<Manifest, Vec<ManifestError>> {
    parse_with_env(text, file, |name| std::env::var(name).ok())
}

/// [`parse_str`] for checking, as [`load_path_all`]: the tools that loaded, and every problem.
pub fn parse_str_all(text: &str, file: &Path) -> (Manifest, Vec<ManifestError>) {
    parse_with_env_all(text, file, |name| std::env::var(name).ok())
}

/// [`parse_str`] with `${NAME}` looked up in `env` rather than the process environment.
fn parse_with_env(
    text: &str,
    file: &Path,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Manifest, Vec<ManifestError>> {
    let (manifest, errors) = parse_with_env_all(text, file, env);
    if errors.is_empty() {
        Ok(manifest)
    } else {
        Err(errors)
    }
}

/// [`parse_with_env`]'s tools that loaded, and every problem found.
fn parse_with_env_all(
    text: &str,
    file: &Path,
    env: impl Fn(&str) -> Option<String>,
) -> (Manifest, Vec<ManifestError>) {
    let prepared = match env_refs::prepare(text, env, file) {
        Ok(prepared) => prepared,
        Err(errors) => return (Manifest::default(), errors),
    };
    let mut options = serde_saphyr::Options::default().with_properties(prepared.vars);
    options.property_syntax = serde_saphyr::PropertySyntax::DockerCompose;
    let text = prepared.text.as_str();
    let mut manifest = Manifest::default();
    let mut errors = Vec::new();
    match read_document(text, &options, file) {
        Ok(document) => check_document(document, file, &mut manifest, &mut errors),
        // The reader stops at its first error; each tool is read again on its own so that
        // every tool's errors are found in one run (`flowgate check` lists them all).
        Err(first) => match tools_one_by_one(text) {
            Some(documents) => {
                for document in documents {
                    match read_document(&document, &options, file) {
                        Ok(document) => check_document(document, file, &mut manifest, &mut errors),
                        Err(e) => errors.push(e),
                    }
                }
                errors.push(first);
                dedup(&mut errors);
            }
            None => errors.push(first),
        },
    }
    check_unique(&manifest, &mut errors);
    errors.sort_by_key(|e| (e.line, e.column));
    (manifest, errors)
}

/// The strict read of one document, and the places of its targets' keys.
fn read_document(
    text: &str,
    options: &serde_saphyr::Options,
    file: &Path,
) -> Result<(RawManifest, Vec<keys::KeyPlaces>), ManifestError> {
    let raw =
        serde_saphyr::from_str_with_options::<RawManifest>(text, options.clone()).map_err(|e| {
            let (line, column) = e.location().map_or((1, 1), |l| (l.line(), l.column()));
            ManifestError {
                file: file.to_owned(),
                line,
                column,
                message: first_line(&e.without_snippet().to_string()),
            }
        })?;
    // The strict read succeeded, so this lenient one can only lack places, never fail the load.
    let places = serde_saphyr::from_str_with_options::<keys::TargetPlaces>(text, options.clone())
        .map(|p| p.tools)
        .unwrap_or_default()
        .into_iter()
        .map(|t| t.target.unwrap_or_default())
        .collect();
    Ok((raw, places))
}

/// Validates every tool of a document that read well, collecting each tool's errors.
fn check_document(
    (raw, places): (RawManifest, Vec<keys::KeyPlaces>),
    file: &Path,
    manifest: &mut Manifest,
    errors: &mut Vec<ManifestError>,
) {
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
    let mut places = places.into_iter();
    for tool in raw.tools {
        let keys = places.next().unwrap_or_default();
        match validate(tool, keys, file, &default_scopes) {
            Ok(t) => manifest.tools.push(t),
            Err(e) => errors.extend(e),
        }
    }
}

/// Removes repeated errors (a top-level problem every per-tool document shares), keeping the
/// first of each.
fn dedup(errors: &mut Vec<ManifestError>) {
    let mut seen = Vec::with_capacity(errors.len());
    errors.retain(|e| {
        if seen.contains(e) {
            false
        } else {
            seen.push(e.clone());
            true
        }
    });
}

/// The tool items' start lines, for the per-tool second read; every item is a block-sequence
/// entry on lines of its own.
#[derive(Deserialize)]
struct ItemPlaces {
    #[serde(default)]
    tools: Option<Vec<Spanned<serde::de::IgnoredAny>>>,
}

/// One document per tool of `text`: the tool's own lines, every line outside all tools (the
/// top-level keys, `tools:` itself, comments), and the other tools' lines left blank, so that
/// each reads on its own with the lines and columns of the original. `None` when the tools
/// cannot be told apart by lines (flow style, a document the lenient read refuses too).
fn tools_one_by_one(text: &str) -> Option<Vec<String>> {
    let items = serde_saphyr::from_str::<ItemPlaces>(text).ok()?.tools?;
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    // 0-based first line of each item (the line of its `-`).
    let mut starts = Vec::with_capacity(items.len());
    for item in &items {
        let mut line = usize::try_from(item.referenced.line())
            .ok()?
            .checked_sub(1)?;
        if line > 0 && lines.get(line - 1).is_some_and(|l| l.trim() == "-") {
            line -= 1;
        }
        if starts.last().is_some_and(|&last| last >= line) || line >= lines.len() {
            return None;
        }
        starts.push(line);
    }
    // Each tool's document is as long as the file: past this many tools the second read
    // would cost too much for an error path, and the reader's first error stands alone.
    if starts.len() < 2 || starts.len() > MAX_TOOLS_READ_ONE_BY_ONE {
        return None;
    }
    let last = *starts.last()?;
    // The last item ends where a top-level key (or a document marker) begins.
    let end = (last + 1..lines.len())
        .find(|&i| {
            let l = lines[i];
            l.starts_with("---")
                || l.starts_with("...")
                || l.chars()
                    .next()
                    .is_some_and(|c| !matches!(c, ' ' | '\t' | '#' | '-' | '\r' | '\n'))
        })
        .unwrap_or(lines.len());
    let ranges: Vec<std::ops::Range<usize>> = starts
        .iter()
        .enumerate()
        .map(|(i, &start)| start..starts.get(i + 1).copied().unwrap_or(end))
        .collect();
    let documents = ranges
        .iter()
        .map(|own| {
            lines
                .iter()
                .enumerate()
                .map(|(i, line)| {
                    if own.contains(&i) || !ranges.iter().any(|r| r.contains(&i)) {
                        (*line).to_owned()
                    } else if line.ends_with('\n') {
                        "\n".to_owned()
                    } else {
                        String::new()
                    }
                })
                .collect()
        })
        .collect();
    Some(documents)
}

/// serde-saphyr's message carries a source snippet after the first line; flowgate prints its
/// own `file:line:column:` prefix, so keep the sentence and drop the drawing.
fn first_line(message: &str) -> String {
    let line = message.lines().next().unwrap_or(message).trim();
    let line = line.strip_prefix("error: ").unwrap_or(line);
    // The place is in flowgate's own prefix already.
    match line.rfind(" at line ") {
        Some(at)
            if line[at + 9..]
                .split(", column ")
                .all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())) =>
        {
            line[..at].to_owned()
        }
        _ => line.to_owned(),
    }
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

/// Checks one tool, reporting every problem it can find (not only the first): a tool with a
/// bad name and a bad schema gets both errors in one run.
fn validate(
    raw: Spanned<RawTool>,
    keys: keys::KeyPlaces,
    file: &Path,
    default_scopes: &[String],
) -> Result<ToolSpec, Vec<ManifestError>> {
    let location = loc(file, &raw.referenced);
    let raw = raw.value;
    let mut errors = Vec::new();
    let name_at = loc(file, &raw.name.referenced);
    let name = raw.name.value;
    if name.is_empty()
        || name.len() > 128
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
    {
        errors.push(name_at.error(format!(
            "tool name {name:?} must be 1-128 characters of letters, digits, '_', '-' or '.'"
        )));
    }
    let (input_schema, input_at) = match raw.input_schema {
        Some(s) => (s.value, loc(file, &s.referenced)),
        None => (serde_json::json!({"type": "object"}), location.clone()),
    };
    let input = object_schema(input_schema, &input_at, "input_schema", true).and_then(|schema| {
        let validator = jsonschema::validator_for(&Value::Object(schema.clone()))
            .map_err(|e| input_at.error(format!("input_schema is not a valid JSON Schema: {e}")))?;
        Ok((schema, validator))
    });
    let output_schema = match raw.output_schema {
        Some(s) => {
            let at = loc(file, &s.referenced);
            match object_schema(s.value, &at, "output_schema", false).and_then(|schema| {
                jsonschema::validator_for(&Value::Object(schema.clone())).map_err(|e| {
                    at.error(format!("output_schema is not a valid JSON Schema: {e}"))
                })?;
                Ok(schema)
            }) {
                Ok(schema) => Some(schema),
                Err(e) => {
                    errors.push(e);
                    None
                }
            }
        }
        None => None,
    };
    let poll_interval_ms = match raw.poll_interval_ms {
        Some(p) if p.value < MIN_POLL_INTERVAL_MS => {
            errors.push(loc(file, &p.referenced).error(format!(
                "poll_interval_ms must be at least {MIN_POLL_INTERVAL_MS}"
            )));
            DEFAULT_POLL_INTERVAL_MS
        }
        Some(p) => p.value,
        None => DEFAULT_POLL_INTERVAL_MS,
    };
    let mut elicit = Vec::new();
    if let Ok((input_schema, _)) = &input {
        for e in raw.elicit {
            let at = loc(file, &e.referenced);
            let e = e.value;
            let Some(schema) = input_schema
                .get("properties")
                .and_then(|p| p.get(&e.argument))
                .cloned()
            else {
                errors.push(at.error(format!(
                    "elicit: argument {:?} is not a property of input_schema",
                    e.argument
                )));
                continue;
            };
            let field = e.field.unwrap_or_else(|| e.argument.clone());
            elicit.push(crate::Elicit {
                argument: e.argument,
                message: e.message,
                field,
                schema,
            });
        }
    }
    let scopes = match raw.scopes {
        Some(s) => scopes(s, file, "scopes").unwrap_or_else(|e| {
            errors.push(e);
            Vec::new()
        }),
        None => default_scopes.to_vec(),
    };
    let target_at = loc(file, &raw.target.referenced);
    let mut config = raw.target.value;
    let engine = match config.remove("engine") {
        Some(Value::String(e)) if !e.is_empty() => Some(e),
        Some(_) => {
            errors.push(target_at.error("target.engine must be a string"));
            None
        }
        None => {
            errors.push(target_at.error("target needs an `engine` key"));
            None
        }
    };
    let (input_schema, validator) = match input {
        Ok(input) => input,
        Err(e) => {
            errors.push(e);
            return Err(errors);
        }
    };
    let Some(engine) = engine else {
        return Err(errors);
    };
    if !errors.is_empty() {
        return Err(errors);
    }
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
