//! A tool's Workflows target, from its manifest.

use std::collections::BTreeMap;

use flowgate_core::{TargetError, parse_target};
use serde::Deserialize;
use serde_json::{Map, Value};

/// The execution's call logging level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallLogLevel {
    /// Log every call and its result.
    LogAllCalls,
    /// Log only calls that raise.
    LogErrorsOnly,
    /// Log no calls.
    LogNone,
}

/// How calls authenticate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CredentialsKind {
    /// Application Default Credentials (the default without `endpoint`).
    Adc,
    /// No credentials (the default with `endpoint`: an emulator or a test fake).
    Anonymous,
}

/// What to ask while a step waits on a callback.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputSpec {
    /// The question.
    pub message: String,
    /// The form's JSON Schema (an object with flat properties).
    #[serde(default = "default_schema")]
    pub requested_schema: Value,
}

fn default_schema() -> Value {
    serde_json::json!({"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]})
}

/// The `target` block of a `google-workflows` tool.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GcwTarget {
    /// The Google Cloud project.
    pub project: String,
    /// The workflow's location (`us-central1`).
    pub location: String,
    /// The workflow id.
    pub workflow: String,
    /// Another endpoint (a regional or private endpoint, an emulator, a test fake).
    #[serde(default)]
    pub endpoint: Option<String>,
    /// `adc` or `anonymous`: by default ADC, and anonymous when `endpoint` is set (a regional
    /// endpoint needs `credentials: adc`).
    #[serde(default)]
    pub credentials: Option<CredentialsKind>,
    /// The execution's call log level (the workflow's own setting by default).
    #[serde(default)]
    pub call_log_level: Option<CallLogLevel>,
    /// What to ask while a step waits on a callback, by step name (`"*"`: any step).
    #[serde(default)]
    pub inputs: BTreeMap<String, InputSpec>,
    /// Labels for every execution (cost labels, owners). Execution labels replace the
    /// workflow's own in Workflows, so list here the workflow labels executions should keep;
    /// flowgate adds its `flowgate-*` labels to these.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

impl GcwTarget {
    /// Reads a manifest `target` block (without its `engine` key).
    ///
    /// # Errors
    /// A [`TargetError`] naming the offending key.
    pub fn from_manifest(target: &Map<String, Value>) -> Result<Self, TargetError> {
        let t: GcwTarget = parse_target(crate::KIND, target)?;
        for (key, value) in [
            ("project", &t.project),
            ("location", &t.location),
            ("workflow", &t.workflow),
        ] {
            if value.is_empty() || value.contains('/') {
                return Err(TargetError::at(
                    key,
                    format!("google-workflows target: {key} {value:?} must be a plain id"),
                ));
            }
        }
        // The API's rules for labels (keys: a lowercase letter first; both: at most 63 of
        // lowercase letters, digits, `_` and `-`), checked at load rather than at the first call;
        // the `flowgate-` prefix is flowgate's own.
        let label_ok = |s: &str, key: bool| {
            s.len() <= 63
                && s.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
                && (!key || s.bytes().next().is_some_and(|b| b.is_ascii_lowercase()))
        };
        if t.labels.len() > 61 {
            return Err(TargetError::at(
                "labels",
                "google-workflows target: at most 61 labels (an execution has 64, flowgate uses 3)",
            ));
        }
        for (k, v) in &t.labels {
            if !label_ok(k, true) || !label_ok(v, false) || k.starts_with("flowgate-") {
                return Err(TargetError::at(
                    "labels",
                    format!(
                        "google-workflows target: label {k}: {v} is not a Workflows label (keys \
                         start with a lowercase letter; keys and values are at most 63 lowercase \
                         letters, digits, `_` and `-`; `flowgate-` keys are flowgate's)"
                    ),
                ));
            }
        }
        Ok(t)
    }

    /// `projects/P/locations/L/workflows/W`.
    pub fn parent(&self) -> String {
        format!(
            "projects/{}/locations/{}/workflows/{}",
            self.project, self.location, self.workflow
        )
    }

    /// Whether an execution name belongs to this tool's workflow.
    ///
    /// The API names executions with the project *number* even when asked with the project
    /// id, so the project part may be either; location, workflow and execution must match.
    pub(crate) fn owns(&self, name: &str) -> bool {
        let parts: Vec<&str> = name.split('/').collect();
        let [
            "projects",
            project,
            "locations",
            location,
            "workflows",
            workflow,
            "executions",
            id,
        ] = parts.as_slice()
        else {
            return false;
        };
        let project_ok = *project == self.project
            || (!project.is_empty() && project.bytes().all(|b| b.is_ascii_digit()));
        project_ok && *location == self.location && *workflow == self.workflow && !id.is_empty()
    }

    /// How this tool's calls authenticate.
    pub fn credentials_kind(&self) -> CredentialsKind {
        self.credentials.unwrap_or(match self.endpoint {
            Some(_) => CredentialsKind::Anonymous,
            None => CredentialsKind::Adc,
        })
    }

    /// The base URL of the REST API.
    pub(crate) fn base_url(&self) -> String {
        self.endpoint
            .clone()
            .unwrap_or_else(|| "https://workflowexecutions.googleapis.com".to_owned())
            .trim_end_matches('/')
            .to_owned()
    }

    /// What to ask while `step` waits.
    pub(crate) fn input_for(&self, step: Option<&str>) -> InputSpec {
        step.and_then(|s| self.inputs.get(s))
            .or_else(|| self.inputs.get("*"))
            .cloned()
            .unwrap_or_else(|| InputSpec {
                message: match step {
                    Some(s) => format!("The workflow is waiting in step {s}; what should it get?"),
                    None => "The workflow is waiting for an answer.".to_owned(),
                },
                requested_schema: default_schema(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<GcwTarget, String> {
        GcwTarget::from_manifest(v.as_object().expect("object")).map_err(|e| e.message)
    }

    #[test]
    fn names_and_inputs() {
        let t = parse(json!({
            "project": "p", "location": "europe-west1", "workflow": "etl",
            "inputs": {"await_approval": {"message": "Ship?"}}
        }))
        .expect("ok");
        assert_eq!(
            t.parent(),
            "projects/p/locations/europe-west1/workflows/etl"
        );
        assert!(t.owns("projects/p/locations/europe-west1/workflows/etl/executions/abc"));
        assert!(!t.owns("projects/p/locations/europe-west1/workflows/other/executions/abc"));
        assert!(!t.owns("projects/p/locations/europe-west1/workflows/etl/executions/a/b"));
        // The API answers with the project number, whatever the request named.
        assert!(
            t.owns("projects/123456789012/locations/europe-west1/workflows/etl/executions/abc")
        );
        assert!(!t.owns("projects/other/locations/europe-west1/workflows/etl/executions/abc"));
        assert!(!t.owns("projects/123/locations/us-east1/workflows/etl/executions/abc"));
        assert!(!t.owns("projects/123/locations/europe-west1/workflows/etl/executions/"));
        assert_eq!(t.input_for(Some("await_approval")).message, "Ship?");
        assert!(t.input_for(Some("other")).message.contains("other"));
        assert_eq!(t.base_url(), "https://workflowexecutions.googleapis.com");
    }

    #[test]
    fn bad_targets_are_named() {
        assert!(
            parse(json!({"project": "p", "location": "l"}))
                .expect_err("missing")
                .contains("workflow")
        );
        assert!(
            parse(json!({"project": "p", "location": "l", "workflow": "w", "region": "x"}))
                .expect_err("typo")
                .contains("region")
        );
        assert!(parse(json!({"project": "p/x", "location": "l", "workflow": "w"})).is_err());
        let with = |labels: Value| {
            parse(json!({"project": "p", "location": "l", "workflow": "w", "labels": labels}))
        };
        assert!(with(json!({"cost-center": "eng_42"})).is_ok());
        assert!(
            with(json!({"Cost": "x"}))
                .expect_err("upper")
                .contains("Cost")
        );
        assert!(with(json!({"1x": "x"})).is_err());
        assert!(with(json!({"flowgate-tool": "x"})).is_err());
        assert!(with(json!({"team": "A B"})).is_err());
        assert!(
            parse(
                json!({"project": "p", "location": "l", "workflow": "w", "call_log_level": "loud"})
            )
            .is_err()
        );
    }
}
