//! A tool's target: which workflow of which repository, and how a call becomes a dispatch.

use std::collections::{BTreeMap, BTreeSet};

use flowgate_core::template::Template;
use flowgate_core::{TargetError, TargetSpec};
use flowgate_http::Secret;
use serde::Deserialize;
use serde_json::{Map, Value};

/// GitHub's limit on the inputs of one `workflow_dispatch`.
pub const MAX_INPUTS: usize = 25;
/// The public API; GitHub Enterprise Server targets set `api_url`.
const DEFAULT_API: &str = "https://api.github.com";
/// The input that carries the call's idempotency key, unless the target names another.
const DEFAULT_KEY_INPUT: &str = "flowgate_call";

/// The JSON file a run leaves in an artifact, read as the tool's structured result.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResultArtifact {
    /// The artifact's name (`actions/upload-artifact`'s `name`).
    pub name: String,
    /// The file's path inside the artifact.
    pub path: String,
}

/// A GitHub App installation to authenticate as.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AppConfig {
    /// The App's id (or client id), the JWT issuer.
    pub app_id: AppId,
    /// The installation on the repository's owner.
    pub installation_id: u64,
    /// The environment variable holding the App's PEM private key.
    #[serde(default = "default_key_env")]
    pub private_key_env: String,
}

/// An App id, written as a number or a string.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum AppId {
    /// The numeric App id.
    Number(u64),
    /// A client id (`Iv23...`) or the id as text.
    Text(String),
}

impl std::fmt::Display for AppId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AppId::Number(n) => write!(f, "{n}"),
            AppId::Text(t) => f.write_str(t),
        }
    }
}

fn default_key_env() -> String {
    "GITHUB_APP_PRIVATE_KEY".to_owned()
}

/// How a run that concluded in failure is reported.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnFailure {
    /// Failed, with the failing job, step and log tail (a tool result with `isError`).
    #[default]
    Failed,
    /// Completed with the conclusion in the output, for tools whose callers judge it.
    Completed,
}

/// One tool's GitHub Actions target, as the manifest writes it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GhTarget {
    /// The repository's owner (user or organisation).
    pub owner: String,
    /// The repository.
    pub repo: String,
    /// The workflow: its file name (`release.yml`) or numeric id.
    pub workflow: String,
    /// The git ref to run on, a template over the arguments (`main`, `{branch}`); a ref whose
    /// argument the call leaves out (with no schema default) is the repository's default branch.
    #[serde(rename = "ref")]
    pub git_ref: Template,
    /// Workflow input -> template over the call's arguments (an input whose argument the call
    /// leaves out is not sent, so the workflow's default applies). Absent: every argument is an
    /// input of its own name.
    #[serde(default)]
    pub inputs: Option<BTreeMap<String, Template>>,
    /// The input that carries the call's key; the workflow should put it in its `run-name`
    /// (`run-name: "release ${{ inputs.flowgate_call }}"`) so a retried start finds the run.
    #[serde(default = "default_key_input")]
    pub key_input: String,
    /// The REST API root (GitHub Enterprise Server: `https://HOST/api/v3`).
    #[serde(default = "default_api")]
    pub api_url: String,
    /// The environment variable holding the token (default `GITHUB_TOKEN`), when no `app`.
    #[serde(default = "default_token_env")]
    pub token_env: String,
    /// Authenticate as a GitHub App installation instead of with a token.
    #[serde(default)]
    pub app: Option<AppConfig>,
    /// The artifact whose JSON file is the run's result.
    #[serde(default)]
    pub result_artifact: Option<ResultArtifact>,
    /// How a failed run is reported.
    #[serde(default)]
    pub on_failure: OnFailure,
    /// How long a cancelled run may take to stop before it is force-cancelled.
    #[serde(default = "default_grace")]
    pub cancel_grace_ms: u64,
    /// How many log lines of the failing job a failure carries.
    #[serde(default = "default_tail")]
    pub log_tail_lines: usize,
    /// The token itself, resolved from `token_env` at load (never from the manifest text).
    #[serde(skip)]
    pub token: Option<Secret>,
    /// The App's private key, resolved from `app.private_key_env` at load.
    #[serde(skip)]
    pub app_key: Option<Secret>,
    /// The arguments the tool's `input_schema` declares (to tell, when the workflow refuses an
    /// input, whether the tool offers it or the caller made it up).
    #[serde(skip)]
    pub declared_arguments: BTreeSet<String>,
    /// The schema's `default` of each argument that has one (sent for a left-out argument when
    /// every argument is an input of its name).
    #[serde(skip)]
    pub argument_defaults: BTreeMap<String, Value>,
}

fn default_key_input() -> String {
    DEFAULT_KEY_INPUT.to_owned()
}
fn default_api() -> String {
    DEFAULT_API.to_owned()
}
fn default_token_env() -> String {
    "GITHUB_TOKEN".to_owned()
}
fn default_grace() -> u64 {
    10_000
}
fn default_tail() -> usize {
    30
}

fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 100
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

impl GhTarget {
    /// Reads and checks a tool's target block, binding its templates to the tool's input
    /// schema, and reads the token from `token_env` (the engine refuses a target without one;
    /// `flowgate policy` does not need it).
    ///
    /// # Errors
    /// A [`TargetError`] at the offending key.
    pub fn from_manifest(spec: TargetSpec<'_>) -> Result<Self, TargetError> {
        Self::from_config(spec.config, spec.input_schema)
    }

    /// [`GhTarget::from_manifest`] from the block and the schema alone.
    ///
    /// # Errors
    /// A [`TargetError`] at the offending key.
    pub fn from_config(
        target: &Map<String, Value>,
        input_schema: &Map<String, Value>,
    ) -> Result<Self, TargetError> {
        let mut t: GhTarget = flowgate_core::parse_target(crate::KIND, target)?;
        let bind = |key: &str, template: Template| {
            template
                .bind(input_schema)
                .map_err(|e| TargetError::at(key, format!("github-actions target: {key}: {e}")))
        };
        for (key, value) in [
            ("owner", &t.owner),
            ("repo", &t.repo),
            ("workflow", &t.workflow),
        ] {
            if !valid_name(value) {
                return Err(TargetError::at(
                    key,
                    format!("github-actions target: {key} {value:?} is not a GitHub name"),
                ));
            }
        }
        t.git_ref = bind("ref", t.git_ref.clone())?;
        if !valid_name(&t.key_input) {
            return Err(TargetError::at(
                "key_input",
                "github-actions target: key_input must be an input name",
            ));
        }
        if let Some(inputs) = t.inputs.take() {
            if inputs.len() + 1 > MAX_INPUTS {
                return Err(TargetError::at(
                    "inputs",
                    format!(
                        "github-actions target: {} inputs and the key input exceed GitHub's {MAX_INPUTS}",
                        inputs.len()
                    ),
                ));
            }
            let mut bound = BTreeMap::new();
            for (name, tmpl) in inputs {
                let at = format!("inputs.{name}");
                if !valid_name(&name) || name == t.key_input {
                    return Err(TargetError::at(
                        at,
                        format!("github-actions target: {name:?} cannot be an input name here"),
                    ));
                }
                let tmpl = bind(&at, tmpl)?;
                bound.insert(name, tmpl);
            }
            t.inputs = Some(bound);
        }
        let properties = input_schema.get("properties").and_then(Value::as_object);
        t.declared_arguments = properties
            .map(|p| p.keys().cloned().collect())
            .unwrap_or_default();
        t.argument_defaults = properties
            .into_iter()
            .flatten()
            .filter_map(|(name, p)| {
                let default = p.get("default").filter(|d| !d.is_null())?;
                Some((name.clone(), default.clone()))
            })
            .collect();
        let api = t.api_url.trim_end_matches('/').to_owned();
        if !(api.starts_with("https://") || api.starts_with("http://")) {
            return Err(TargetError::at(
                "api_url",
                "github-actions target: api_url must be an http(s) URL",
            ));
        }
        t.api_url = api;
        if let Some(a) = &t.result_artifact
            && (a.name.is_empty() || a.path.is_empty())
        {
            return Err(TargetError::at(
                "result_artifact",
                "github-actions target: result_artifact needs a name and a path",
            ));
        }
        let secret = |var: &str| {
            std::env::var(var)
                .ok()
                .filter(|v| !v.trim().is_empty())
                .map(|v| Secret::new(v.trim()))
        };
        t.token = secret(&t.token_env);
        t.app_key = t.app.as_ref().and_then(|a| secret(&a.private_key_env));
        Ok(t)
    }

    /// The workflow inputs of one call: the mapped (or every) argument, and the key input.
    /// GitHub's inputs are strings: a string argument goes as it is, byte for byte, any other
    /// value as its JSON text (`3`, `true`). An input whose argument the call leaves out is not
    /// sent (its schema default, if any, is), so the workflow's own default applies.
    ///
    /// # Errors
    /// A message for the caller when there are too many inputs.
    pub(crate) fn dispatch_inputs(
        &self,
        arguments: &Value,
        call: &str,
    ) -> Result<Map<String, Value>, String> {
        let mut out = Map::new();
        match &self.inputs {
            Some(map) => {
                for (name, tmpl) in map {
                    if let Some(text) = tmpl.render(arguments) {
                        out.insert(name.clone(), Value::String(text));
                    }
                }
            }
            None => {
                let given = arguments.as_object().into_iter().flatten();
                let defaults = self
                    .argument_defaults
                    .iter()
                    .filter(|(name, _)| arguments.get(name.as_str()).is_none_or(Value::is_null));
                for (name, value) in given.chain(defaults) {
                    let text = match value {
                        Value::Null => continue,
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    out.insert(name.clone(), Value::String(text));
                }
            }
        }
        out.insert(self.key_input.clone(), Value::String(call.to_owned()));
        if out.len() > MAX_INPUTS {
            return Err(format!(
                "{} workflow inputs (with {}) exceed GitHub's limit of {MAX_INPUTS}",
                out.len(),
                self.key_input
            ));
        }
        Ok(out)
    }

    /// The ref to run on for one call; `None` when its argument is left out (and has no
    /// default): the repository's default branch.
    ///
    /// # Errors
    /// A message for the caller when the ref is not one git could name.
    pub(crate) fn git_ref_for(&self, arguments: &Value) -> Result<Option<String>, String> {
        let Some(r) = self.git_ref.render(arguments) else {
            return Ok(None);
        };
        if r.is_empty() || r.contains("..") || r.chars().any(|c| c.is_whitespace() || c == '~') {
            return Err(format!("{r:?} is not a git ref"));
        }
        Ok(Some(r))
    }

    /// Whether the ref comes from the call's arguments, so a ref GitHub does not know is the
    /// caller's to fix rather than the tool's.
    pub(crate) fn ref_from_arguments(&self) -> bool {
        !self.git_ref.is_fixed()
    }

    /// Where the credentials come from, when they are missing: the key to report and why.
    pub fn missing_credentials(&self) -> Option<(&'static str, String)> {
        match &self.app {
            Some(app) if self.app_key.is_none() => Some((
                "app.private_key_env",
                format!(
                    "github-actions target: the environment variable {} holds no App private key",
                    app.private_key_env
                ),
            )),
            None if self.token.is_none() => Some((
                "token_env",
                format!(
                    "github-actions target: the environment variable {} holds no token",
                    self.token_env
                ),
            )),
            _ => None,
        }
    }

    /// `https://api.github.com/repos/OWNER/REPO/actions`.
    pub(crate) fn actions_url(&self) -> String {
        format!(
            "{}/repos/{}/{}/actions",
            self.api_url, self.owner, self.repo
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "version": {"type": "string"},
            "branch": {"type": "string"},
            "dry": {"type": "boolean"},
            "note": {"type": "string"},
            "level": {"type": "string", "default": "info"}
        }, "required": ["version"]})
    }

    fn parse(v: Value) -> Result<GhTarget, TargetError> {
        GhTarget::from_config(
            v.as_object().expect("object"),
            schema().as_object().expect("object"),
        )
    }

    fn base() -> Value {
        json!({"owner": "acme", "repo": "app", "workflow": "release.yml", "ref": "main", "token_env": "PATH"})
    }

    #[test]
    fn defaults_and_errors_point_at_their_key() {
        let t = parse(base()).expect("target");
        assert_eq!(t.api_url, "https://api.github.com");
        assert_eq!(t.key_input, "flowgate_call");
        assert_eq!(
            t.actions_url(),
            "https://api.github.com/repos/acme/app/actions"
        );
        assert!(t.declared_arguments.contains("version"));
        let mut v = base();
        v["owner"] = json!("a b");
        assert_eq!(
            parse(v).expect_err("bad owner").key.as_deref(),
            Some("owner")
        );
        let mut v = base();
        v["token_env"] = json!("FLOWGATE_SURELY_UNSET_TOKEN_VAR");
        assert!(parse(v).expect("parsed without a token").token.is_none());
        let mut v = base();
        v["colour"] = json!(1);
        assert_eq!(
            parse(v).expect_err("unknown").key.as_deref(),
            Some("colour")
        );
    }

    #[test]
    fn at_most_25_inputs_are_accepted_at_load_and_per_call() {
        let mut v = base();
        let many: Map<String, Value> = (0..25).map(|i| (format!("i{i}"), json!("x"))).collect();
        v["inputs"] = Value::Object(many);
        let e = parse(v).expect_err("too many");
        assert_eq!(e.key.as_deref(), Some("inputs"));
        let t = parse(base()).expect("target");
        let args: Map<String, Value> = (0..25).map(|i| (format!("a{i}"), json!(i))).collect();
        assert!(t.dispatch_inputs(&Value::Object(args), "k").is_err());
        let got = t
            .dispatch_inputs(
                &json!({"version": "1.2", "dry": true, "note": null}),
                "fg-1",
            )
            .expect("inputs");
        assert_eq!(
            Value::Object(got),
            json!({"version": "1.2", "dry": "true", "level": "info", "flowgate_call": "fg-1"}),
            "a left-out argument with a schema default sends it; one without is not sent"
        );
    }

    #[test]
    fn refs_and_inputs_are_templates_bound_to_the_schema() {
        let mut v = base();
        v["ref"] = json!("release/{version}");
        v["inputs"] = json!({"tag": "v{version}", "dry_run": "{dry}"});
        let t = parse(v).expect("target");
        let args = json!({"version": "1.2", "dry": false});
        assert_eq!(
            t.git_ref_for(&args).expect("ref").as_deref(),
            Some("release/1.2")
        );
        let inputs = t.dispatch_inputs(&args, "k").expect("inputs");
        assert_eq!(inputs["tag"], json!("v1.2"));
        assert_eq!(inputs["dry_run"], json!("false"), "inputs are strings");
        assert!(t.ref_from_arguments());
        assert!(t.git_ref_for(&json!({"version": "a b"})).is_err());
        let mut v = base();
        v["inputs"] = json!({"tag": "v{verison}"});
        let e = parse(v).expect_err("a placeholder the schema does not declare");
        assert_eq!(e.key.as_deref(), Some("inputs.tag"));
        assert!(e.message.contains("names no argument"), "{e}");
        let mut v = base();
        v["ref"] = json!("{{branch}}");
        let e = parse(v).expect_err("the old spelling");
        assert_eq!(e.key.as_deref(), Some("ref"));
    }

    /// An argument the schema does not require, left out: its input is not sent (the
    /// workflow's default applies) or takes the schema's default; a ref that names it is the
    /// repository's default branch.
    #[test]
    fn optional_arguments_left_out_leave_inputs_unset_or_take_the_schema_default() {
        let mut v = base();
        v["ref"] = json!("{branch}");
        v["inputs"] = json!({"version": "{version}", "note": "{note}", "level": "{level}"});
        let t = parse(v).expect("target");
        let inputs = t
            .dispatch_inputs(&json!({"version": "1.0"}), "k")
            .expect("a call without its optional arguments is not refused");
        assert_eq!(
            Value::Object(inputs),
            json!({"version": "1.0", "level": "info", "flowgate_call": "k"})
        );
        assert_eq!(t.git_ref_for(&json!({"version": "1.0"})), Ok(None));
        let odd = "$HOME $$ ${X} \\ \"q\" 'q'\nline ünï €";
        let inputs = t
            .dispatch_inputs(&json!({"version": "1", "note": odd}), "k")
            .expect("inputs");
        assert_eq!(inputs["note"], json!(odd), "byte for byte");
    }
}
