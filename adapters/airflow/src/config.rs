//! A tool's Airflow target, from its manifest.

use std::collections::BTreeMap;

use flowgate_core::template::Template;
use flowgate_core::{TargetError, TargetSpec, parse_target};
use serde::Deserialize;
use serde_json::{Map, Value};

/// The `target` block of an `airflow` tool.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AirflowTarget {
    /// The Airflow API server (`http://airflow.internal:8080`): the REST API is under
    /// `/api/v2`, the token endpoint at `/auth/token`.
    pub base_url: String,
    /// The DAG a call runs.
    pub dag_id: String,
    /// The run's `conf`: key -> value template; a template that is exactly one `{name}` keeps
    /// the argument's JSON type, and one whose argument a call leaves out (without a schema
    /// default) is not sent, so the DAG's own param default applies. Without it, every
    /// argument is a conf key of its own name.
    #[serde(default)]
    pub conf: Option<BTreeMap<String, Template>>,
    /// The task whose XCom is the result (`return_value` unless `result_key` says); without
    /// it the result is the run's state and each task's.
    #[serde(default)]
    pub result_task: Option<String>,
    /// The XCom key of `result_task` that is the result.
    #[serde(default = "default_result_key")]
    pub result_key: String,
    /// The environment variable holding a ready API token (a JWT), sent as a bearer token.
    /// When it is set, `username_env`/`password_env` are not used.
    #[serde(default = "default_token_env")]
    pub token_env: String,
    /// The environment variable holding the user name flowgate gets tokens for from
    /// `POST /auth/token` (renewed when Airflow answers 401: tokens expire).
    #[serde(default = "default_username_env")]
    pub username_env: String,
    /// The environment variable holding that user's password.
    #[serde(default = "default_password_env")]
    pub password_env: String,
    /// The option a declined question chooses, when the step offers it (`ApprovalOperator`'s
    /// `Reject`); a step without it is failed instead, and the run with it.
    #[serde(default = "default_decline_option")]
    pub decline_option: String,
    /// How many log lines of a failed task reach the failure.
    #[serde(default = "default_tail")]
    pub log_tail_lines: usize,
    /// How long after a step starts waiting flowgate holds an answer back, at least
    /// (Airflow 3.3 fails a step answered within about half a second of its wait starting).
    #[serde(default = "default_guard")]
    pub answer_guard_ms: u64,
}

fn default_result_key() -> String {
    "return_value".to_owned()
}
fn default_token_env() -> String {
    "AIRFLOW_TOKEN".to_owned()
}
fn default_username_env() -> String {
    "AIRFLOW_USERNAME".to_owned()
}
fn default_password_env() -> String {
    "AIRFLOW_PASSWORD".to_owned()
}
fn default_decline_option() -> String {
    "Reject".to_owned()
}
fn default_tail() -> usize {
    30
}
fn default_guard() -> u64 {
    1500
}

/// Airflow's rule for DAG and task ids (`KEY_REGEX`: letters, digits, `_`, `-`, `.`; at most
/// 250 characters).
pub(crate) fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 250
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

impl AirflowTarget {
    /// Reads a tool's `target` block (without its `engine` key), binding its templates to the
    /// tool's input schema.
    ///
    /// # Errors
    /// A [`TargetError`] naming the offending key.
    pub fn from_manifest(spec: TargetSpec<'_>) -> Result<Self, TargetError> {
        Self::from_config(spec.config, spec.input_schema)
    }

    /// [`AirflowTarget::from_manifest`] from the block and the tool's input schema alone.
    ///
    /// # Errors
    /// A [`TargetError`] naming the offending key.
    pub fn from_config(
        target: &Map<String, Value>,
        input_schema: &Map<String, Value>,
    ) -> Result<Self, TargetError> {
        let mut t: AirflowTarget = parse_target(crate::KIND, target)?;
        if let Some(conf) = &mut t.conf {
            for (name, template) in conf.iter_mut() {
                let key = format!("conf.{name}");
                *template = template.clone().bind(input_schema).map_err(|e| {
                    TargetError::at(key.clone(), format!("airflow target: {key}: {e}"))
                })?;
            }
            if conf.contains_key(crate::mapping::MARKER) {
                return Err(TargetError::at(
                    format!("conf.{}", crate::mapping::MARKER),
                    format!(
                        "airflow target: conf key {} carries the call's marker; map the argument under another key",
                        crate::mapping::MARKER
                    ),
                ));
            }
        }
        if !(t.base_url.starts_with("https://") || t.base_url.starts_with("http://")) {
            return Err(TargetError::at(
                "base_url",
                format!(
                    "airflow target: base_url {:?} must be an http(s) URL",
                    t.base_url
                ),
            ));
        }
        t.base_url = t.base_url.trim_end_matches('/').to_owned();
        if !valid_id(&t.dag_id) {
            return Err(TargetError::at(
                "dag_id",
                "airflow target: dag_id must be a DAG id (letters, digits, _, - and .)",
            ));
        }
        if let Some(task) = &t.result_task
            && !valid_id(task)
        {
            return Err(TargetError::at(
                "result_task",
                "airflow target: result_task must be a task id (letters, digits, _, - and .)",
            ));
        }
        if t.result_key.is_empty() {
            return Err(TargetError::at(
                "result_key",
                "airflow target: result_key must not be empty",
            ));
        }
        Ok(t)
    }

    /// `https://host/api/v2/dags/<dag>`.
    pub(crate) fn dag_url(&self) -> String {
        format!("{}/api/v2/dags/{}", self.base_url, self.dag_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<AirflowTarget, TargetError> {
        let schema = json!({"type": "object", "properties": {"day": {}, "name": {}}});
        AirflowTarget::from_config(
            v.as_object().expect("object"),
            schema.as_object().expect("object"),
        )
    }

    #[test]
    fn defaults_and_urls() {
        let t = parse(json!({"base_url": "http://af:8080/", "dag_id": "etl.daily"})).expect("ok");
        assert_eq!(t.dag_url(), "http://af:8080/api/v2/dags/etl.daily");
        assert_eq!(t.result_key, "return_value");
        assert_eq!(t.decline_option, "Reject");
        assert_eq!(t.answer_guard_ms, 1500);
        assert_eq!(t.username_env, "AIRFLOW_USERNAME");
    }

    #[test]
    fn bad_targets_are_named() {
        let key = |v: Value| parse(v).expect_err("refused").key;
        assert_eq!(
            key(json!({"base_url": "af:8080", "dag_id": "d"})).as_deref(),
            Some("base_url")
        );
        assert_eq!(
            key(json!({"base_url": "http://af", "dag_id": "a/b"})).as_deref(),
            Some("dag_id")
        );
        assert_eq!(
            key(json!({"base_url": "http://af", "dag_id": "d", "result_task": "x y"})).as_deref(),
            Some("result_task")
        );
        assert_eq!(
            key(json!({"base_url": "http://af", "dag_id": "d", "conf": {"day": "{dya}"}}))
                .as_deref(),
            Some("conf.day")
        );
        assert_eq!(
            key(json!({"base_url": "http://af", "dag_id": "d", "conf": {"flowgate": "{day}"}}))
                .as_deref(),
            Some("conf.flowgate")
        );
        let typo =
            parse(json!({"base_url": "http://af", "dag_id": "d", "dagid": "x"})).expect_err("typo");
        assert!(typo.message.contains("dagid"), "{typo}");
    }
}
