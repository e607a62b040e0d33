//! A tool's GitLab target, from its manifest.

use std::collections::BTreeMap;

use flowgate_core::template::Template;
use flowgate_core::{TargetError, TargetSpec, parse_target};
use serde::Deserialize;
use serde_json::{Map, Value};

/// How the token is sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenKind {
    /// `PRIVATE-TOKEN: <token>`: personal, project and group access tokens.
    #[default]
    Private,
    /// `Authorization: Bearer <token>`: OAuth 2 tokens.
    Bearer,
}

/// What a declined question does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnDecline {
    /// Cancel the pipeline (GitLab has no way to refuse a manual job).
    #[default]
    Cancel,
}

/// A blocking manual job shown as a question.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Question {
    /// What to ask.
    pub message: String,
    /// The form's JSON Schema (an object with flat properties); by default a bare go-ahead.
    #[serde(default = "default_schema")]
    pub requested_schema: Value,
    /// Which answer field becomes which job input (the job's `inputs:`, GitLab 18.10+) when
    /// the job is played. Without `inputs` and `variables`, every field is a job input of its
    /// own name.
    #[serde(default)]
    pub inputs: BTreeMap<String, String>,
    /// Which answer field becomes which job variable when the job is played (needs pipeline
    /// variables allowed for the token's role: `ci_pipeline_variables_minimum_override_role`).
    #[serde(default)]
    pub variables: BTreeMap<String, String>,
    /// What declining does.
    #[serde(default)]
    pub on_decline: OnDecline,
}

fn default_schema() -> Value {
    serde_json::json!({"type": "object", "properties": {}})
}

/// A file in a job's artifacts that becomes the tool's result.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResultFile {
    /// The job whose artifacts hold it.
    pub job: String,
    /// Its path inside the artifacts.
    pub path: String,
}

/// The `target` block of a `gitlab-ci` tool.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GitLabTarget {
    /// The GitLab instance (`https://gitlab.com` by default, or a self-managed one).
    #[serde(default = "default_base")]
    pub base_url: String,
    /// The project: its numeric id or its full path (`group/sub/project`).
    pub project: String,
    /// The branch or tag to run (a [template](flowgate_core::template): `release-{version}`).
    #[serde(rename = "ref")]
    pub git_ref: Template,
    /// Pipeline `inputs` (`spec:inputs`, GitLab 17.10+): name -> value template; a template
    /// that is exactly one `{name}` keeps the argument's JSON type (number, boolean, array),
    /// and one whose argument a call leaves out (without a schema default) is not sent, so the
    /// input's own `default` applies. Without `inputs` and `variables`, every argument is an
    /// input of its own name.
    #[serde(default)]
    pub inputs: Option<BTreeMap<String, Template>>,
    /// Pipeline variables: name -> value template, sent only when the manifest lists them
    /// (GitLab refuses them unless the token's role reaches the project's
    /// `ci_pipeline_variables_minimum_override_role`); one whose argument a call leaves out is
    /// not sent.
    #[serde(default)]
    pub variables: Option<BTreeMap<String, Template>>,
    /// The pipeline input that carries the call's name; the pipeline makes it its name with
    /// `workflow: name: $[[ inputs.flowgate_call ]]`, so a retried start finds it by name.
    #[serde(default = "default_key_input")]
    pub key_input: String,
    /// Carry the call's name as this pipeline variable instead of an input (a pipeline without
    /// `spec:inputs`, whose `workflow: name:` is `$FLOWGATE_CALL`; needs pipeline variables).
    #[serde(default)]
    pub key_variable: Option<String>,
    /// The environment variable holding the API token.
    #[serde(default = "default_token_env")]
    pub token_env: String,
    /// How the token is sent.
    #[serde(default)]
    pub token_kind: TokenKind,
    /// The environment variable holding a pipeline trigger token: then starts use the trigger
    /// endpoint (the API token is still used to read and cancel).
    #[serde(default)]
    pub trigger_token_env: Option<String>,
    /// Blocking manual jobs that are questions, by job name.
    #[serde(default)]
    pub questions: BTreeMap<String, Question>,
    /// A JSON file of a job's artifacts that is the result.
    #[serde(default)]
    pub result_artifact: Option<ResultFile>,
    /// A dotenv file (`KEY=value` lines) of a job's artifacts whose values are the result.
    #[serde(default)]
    pub result_dotenv: Option<ResultFile>,
    /// How far back a start looks for the pipeline of a retried call.
    #[serde(default = "default_window")]
    pub dedupe_window_s: u64,
    /// How many trace lines of a failed job reach the failure.
    #[serde(default = "default_tail")]
    pub trace_tail_lines: usize,
}

fn default_base() -> String {
    "https://gitlab.com".to_owned()
}
fn default_token_env() -> String {
    "GITLAB_TOKEN".to_owned()
}
fn default_window() -> u64 {
    3600
}
fn default_tail() -> usize {
    30
}
fn default_key_input() -> String {
    "flowgate_call".to_owned()
}

impl GitLabTarget {
    /// Reads a tool's `target` block (without its `engine` key), binding its templates to the
    /// tool's input schema.
    ///
    /// # Errors
    /// A [`TargetError`] naming the offending key.
    pub fn from_manifest(spec: TargetSpec<'_>) -> Result<Self, TargetError> {
        Self::from_config(spec.config, spec.input_schema)
    }

    /// [`GitLabTarget::from_manifest`] from the block and the tool's input schema alone.
    ///
    /// # Errors
    /// A [`TargetError`] naming the offending key.
    pub fn from_config(
        target: &Map<String, Value>,
        input_schema: &Map<String, Value>,
    ) -> Result<Self, TargetError> {
        let mut t: GitLabTarget = parse_target(crate::KIND, target)?;
        let bind = |key: String, template: Template| {
            template
                .bind(input_schema)
                .map_err(|e| TargetError::at(key.clone(), format!("gitlab-ci target: {key}: {e}")))
        };
        t.git_ref = bind("ref".into(), t.git_ref)?;
        for (field, templates) in [("inputs", &mut t.inputs), ("variables", &mut t.variables)] {
            if let Some(templates) = templates {
                for (name, template) in templates.iter_mut() {
                    *template = bind(format!("{field}.{name}"), template.clone())?;
                }
            }
        }
        if !(t.base_url.starts_with("https://") || t.base_url.starts_with("http://")) {
            return Err(TargetError::at(
                "base_url",
                format!(
                    "gitlab-ci target: base_url {:?} must be an http(s) URL",
                    t.base_url
                ),
            ));
        }
        if t.project.trim().is_empty() || t.project.starts_with('/') || t.project.ends_with('/') {
            return Err(TargetError::at(
                "project",
                "gitlab-ci target: project must be a numeric id or a path like group/project",
            ));
        }
        if t.git_ref.source().trim().is_empty() {
            return Err(TargetError::at(
                "ref",
                "gitlab-ci target: ref must not be empty",
            ));
        }
        if !valid_input(&t.key_input) {
            return Err(TargetError::at(
                "key_input",
                "gitlab-ci target: key_input must be an input name (letters, digits, _ and -)",
            ));
        }
        if t.inputs
            .as_ref()
            .is_some_and(|i| i.contains_key(&t.key_input))
            && t.key_variable.is_none()
        {
            return Err(TargetError::at(
                format!("inputs.{}", t.key_input),
                format!(
                    "gitlab-ci target: input {} carries the call's name (key_input); map the argument under another input",
                    t.key_input
                ),
            ));
        }
        for (job, q) in &t.questions {
            for name in q.inputs.values() {
                if !valid_input(name) {
                    return Err(TargetError::at(
                        format!("questions.{job}.inputs"),
                        format!(
                            "gitlab-ci target: job input name {name:?} may only hold letters, digits, _ and -"
                        ),
                    ));
                }
            }
        }
        let names = t.variables.iter().flat_map(|v| v.keys());
        let answer_vars = t.questions.values().flat_map(|q| q.variables.values());
        for name in names.chain(answer_vars).chain(t.key_variable.as_ref()) {
            if !valid_variable(name) {
                return Err(TargetError::at(
                    "variables",
                    format!(
                        "gitlab-ci target: variable name {name:?} may only hold letters, digits and _"
                    ),
                ));
            }
        }
        for (job, q) in &t.questions {
            if q.requested_schema.get("type").and_then(Value::as_str) != Some("object") {
                return Err(TargetError::at(
                    format!("questions.{job}.requested_schema"),
                    "gitlab-ci target: requested_schema must be a JSON Schema of type object",
                ));
            }
        }
        Ok(t)
    }

    /// `https://host/api/v4/user`: the token's own user.
    pub(crate) fn user_url(&self) -> String {
        format!("{}/api/v4/user", self.base_url.trim_end_matches('/'))
    }

    /// `https://host/api/v4/projects/<encoded id or path>`.
    pub(crate) fn project_url(&self) -> String {
        format!(
            "{}/api/v4/projects/{}",
            self.base_url.trim_end_matches('/'),
            flowgate_http::paging::encode(&self.project)
        )
    }
}

/// GitLab's rule for variable keys.
pub(crate) fn valid_variable(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// GitLab's rule for input names (`$[[ inputs.name ]]`).
pub(crate) fn valid_input(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 255
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "properties": {"env": {}, "replicas": {"type": "integer"}, "version": {}}})
    }

    fn parse(v: Value) -> Result<GitLabTarget, String> {
        located(v).map_err(|e| e.message)
    }

    fn located(v: Value) -> Result<GitLabTarget, TargetError> {
        GitLabTarget::from_config(
            v.as_object().expect("object"),
            schema().as_object().expect("object"),
        )
    }

    #[test]
    fn defaults_and_urls() {
        let t = parse(json!({"project": "group/sub project", "ref": "main"})).expect("ok");
        assert_eq!(
            t.project_url(),
            "https://gitlab.com/api/v4/projects/group%2Fsub%20project"
        );
        assert_eq!(t.token_env, "GITLAB_TOKEN");
        assert_eq!(t.dedupe_window_s, 3600);
    }

    #[test]
    fn bad_targets_are_named() {
        assert!(
            parse(json!({"project": "p"}))
                .expect_err("ref")
                .contains("ref")
        );
        assert!(
            parse(json!({"project": "p", "ref": "main", "brnach": "x"}))
                .expect_err("typo")
                .contains("brnach")
        );
        assert!(
            parse(json!({"project": "p", "ref": "main", "variables": {"A-B": "x"}}))
                .expect_err("var")
                .contains("A-B")
        );
        assert!(parse(json!({"project": "p", "ref": "main", "base_url": "gitlab.com"})).is_err());
        assert!(
            parse(json!({"project": "p", "ref": "main",
                "questions": {"approve": {"message": "ok?", "requested_schema": {"type": "string"}}}}))
            .is_err()
        );
    }

    #[test]
    fn templates_are_bound_to_the_schema_at_load() {
        let t = parse(json!({"project": "p", "ref": "release-{version}",
            "inputs": {"environment": "{env}", "replicas": "{replicas}"}}))
        .expect("declared arguments");
        assert_eq!(t.git_ref.source(), "release-{version}");
        let e = located(
            json!({"project": "p", "ref": "main", "inputs": {"environment": "{enviroment}"}}),
        )
        .expect_err("undeclared");
        assert_eq!(e.key.as_deref(), Some("inputs.environment"));
        assert!(e.message.contains("names no argument"), "{e}");
        // The old spelling around a declared argument is refused with the fix.
        let e = located(json!({"project": "p", "ref": "main", "variables": {"ENV": "{{env}}"}}))
            .expect_err("old spelling");
        assert_eq!(e.key.as_deref(), Some("variables.ENV"));
        assert!(e.message.contains("write `{env}`"), "{e}");
        let e = located(json!({"project": "p", "ref": "{{version}}"})).expect_err("old ref");
        assert_eq!(e.key.as_deref(), Some("ref"));
    }
}
