//! A tool's target: which workflow of which repository, and how a call becomes a dispatch.

use std::collections::BTreeMap;

use flowgate_core::TargetError;
use flowgate_http::Secret;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::template;

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
    /// The git ref to run on, a template over the arguments (`main`, `{branch}`).
    #[serde(rename = "ref")]
    pub git_ref: String,
    /// Workflow input -> template over the call's arguments. Absent: every argument is an input
    /// of its own name.
    #[serde(default)]
    pub inputs: Option<BTreeMap<String, String>>,
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
    /// Reads and checks a manifest target block, and reads the token from `token_env` (the
    /// engine refuses a target without one; `flowgate policy` does not need it).
    ///
    /// # Errors
    /// A [`TargetError`] at the offending key.
    pub fn from_manifest(target: &Map<String, Value>) -> Result<Self, TargetError> {
        let mut t: GhTarget = flowgate_core::parse_target(crate::KIND, target)?;
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
        template::check(&t.git_ref)
            .map_err(|e| TargetError::at("ref", format!("github-actions target: ref: {e}")))?;
        if !valid_name(&t.key_input) {
            return Err(TargetError::at(
                "key_input",
                "github-actions target: key_input must be an input name",
            ));
        }
        if let Some(inputs) = &t.inputs {
            if inputs.len() + 1 > MAX_INPUTS {
                return Err(TargetError::at(
                    "inputs",
                    format!(
                        "github-actions target: {} inputs and the key input exceed GitHub's {MAX_INPUTS}",
                        inputs.len()
                    ),
                ));
            }
            for (name, tmpl) in inputs {
                let at = format!("inputs.{name}");
                if !valid_name(name) || *name == t.key_input {
                    return Err(TargetError::at(
                        at,
                        format!("github-actions target: {name:?} cannot be an input name here"),
                    ));
                }
                template::check(tmpl).map_err(|e| {
                    TargetError::at(at.clone(), format!("github-actions target: {at}: {e}"))
                })?;
            }
        }
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
    ///
    /// # Errors
    /// A message for the caller when an argument is missing or there are too many inputs.
    pub(crate) fn dispatch_inputs(
        &self,
        arguments: &Value,
        call: &str,
    ) -> Result<Map<String, Value>, String> {
        let mut out = Map::new();
        match &self.inputs {
            Some(map) => {
                for (name, tmpl) in map {
                    out.insert(
                        name.clone(),
                        Value::String(template::render(tmpl, arguments)?),
                    );
                }
            }
            None => {
                if let Some(args) = arguments.as_object() {
                    for (name, value) in args {
                        out.insert(name.clone(), Value::String(template::as_text(value)));
                    }
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

    /// The ref to run on for one call.
    pub(crate) fn git_ref_for(&self, arguments: &Value) -> Result<String, String> {
        let r = template::render(&self.git_ref, arguments)?;
        if r.is_empty() || r.contains("..") || r.chars().any(|c| c.is_whitespace() || c == '~') {
            return Err(format!("{r:?} is not a git ref"));
        }
        Ok(r)
    }

    /// Whether the ref comes from the call's arguments (a template with placeholders), so a
    /// ref GitHub does not know is the caller's to fix rather than the tool's.
    pub(crate) fn ref_from_arguments(&self) -> bool {
        template::render(&self.git_ref, &Value::Object(Map::new())).is_err()
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

    fn parse(v: Value) -> Result<GhTarget, TargetError> {
        GhTarget::from_manifest(v.as_object().expect("object"))
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
            .dispatch_inputs(&json!({"version": "1.2", "dry": true}), "fg-1")
            .expect("inputs");
        assert_eq!(
            Value::Object(got),
            json!({"version": "1.2", "dry": "true", "flowgate_call": "fg-1"})
        );
    }

    #[test]
    fn refs_and_inputs_are_templated() {
        let mut v = base();
        v["ref"] = json!("release/{version}");
        v["inputs"] = json!({"tag": "v{version}"});
        let t = parse(v).expect("target");
        let args = json!({"version": "1.2"});
        assert_eq!(t.git_ref_for(&args).expect("ref"), "release/1.2");
        assert_eq!(
            t.dispatch_inputs(&args, "k").expect("inputs")["tag"],
            json!("v1.2")
        );
        assert!(t.git_ref_for(&json!({})).is_err());
        assert!(t.git_ref_for(&json!({"version": "a b"})).is_err());
    }
}
