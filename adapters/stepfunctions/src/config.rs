//! A tool's Step Functions target, from its manifest.

use flowgate_core::template::Template;
use flowgate_core::{TargetError, TargetSpec, parse_target};
use serde::Deserialize;
use serde_json::{Map, Value};

/// Standard executions run as tasks; express executions run synchronously.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkflowType {
    /// Long-running, durable: the execution is the task.
    #[default]
    Standard,
    /// Short and synchronous (`StartSyncExecution`); never offered as a task.
    Express,
}

/// The `target` block of a `stepfunctions` tool.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SfnTarget {
    /// The state machine to start.
    pub state_machine_arn: String,
    /// The region; the state machine ARN's region by default.
    #[serde(default)]
    pub region: Option<String>,
    /// Another endpoint (an emulator, a VPC endpoint).
    #[serde(default)]
    pub endpoint_url: Option<String>,
    /// A role to assume for this tool's calls.
    #[serde(default)]
    pub role_arn: Option<String>,
    /// An execution-name template such as `deploy-{service}-{version}` (flowgate's one
    /// template language, checked against the tool's input schema): a retried call with the
    /// same arguments reaches the same execution instead of starting a second one.
    #[serde(default)]
    pub execution_name: Option<Template>,
    /// Wrap the arguments as `{<input_key>: arguments}` instead of passing them as the input.
    #[serde(default)]
    pub input_key: Option<String>,
    /// A JSON pointer (`/summary`) to the part of the execution output that is the tool result.
    #[serde(default)]
    pub output_pointer: Option<String>,
    /// `standard` (default) or `express`.
    #[serde(default, rename = "type")]
    pub workflow_type: WorkflowType,
    /// Read the execution history while it runs, for the current state's name and for input
    /// states (one more API call per poll of a running execution). On by default.
    #[serde(default = "yes")]
    pub history: bool,
}

fn yes() -> bool {
    true
}

impl SfnTarget {
    /// Reads a tool's `target` block (without its `engine` key), binding its templates to the
    /// tool's input schema.
    ///
    /// # Errors
    /// A [`TargetError`] naming the offending key.
    pub fn from_manifest(spec: TargetSpec<'_>) -> Result<Self, TargetError> {
        Self::from_config(spec.config, spec.input_schema)
    }

    /// [`SfnTarget::from_manifest`] from the block and the schema alone.
    ///
    /// # Errors
    /// A [`TargetError`] naming the offending key.
    pub fn from_config(
        target: &Map<String, Value>,
        input_schema: &Map<String, Value>,
    ) -> Result<Self, TargetError> {
        let mut t: SfnTarget = parse_target(crate::KIND, target)?;
        let parts: Vec<&str> = t.state_machine_arn.split(':').collect();
        if !(7..=8).contains(&parts.len())
            || parts[0] != "arn"
            || parts[2] != "states"
            || parts[5] != "stateMachine"
        {
            return Err(TargetError::at(
                "state_machine_arn",
                format!(
                    "stepfunctions target: state_machine_arn {:?} is not a state machine ARN \
                     (arn:aws:states:REGION:ACCOUNT:stateMachine:NAME, or with :VERSION or :ALIAS)",
                    t.state_machine_arn
                ),
            ));
        }
        if let Some(template) = t.execution_name.take() {
            let template = template.bind(input_schema).map_err(|e| {
                TargetError::at(
                    "execution_name",
                    format!("stepfunctions target: execution_name: {e}"),
                )
            })?;
            t.execution_name = Some(template);
        }
        if t.output_pointer
            .as_ref()
            .is_some_and(|p| !p.is_empty() && !p.starts_with('/'))
        {
            return Err(TargetError::at(
                "output_pointer",
                "stepfunctions target: output_pointer must be a JSON pointer such as /summary",
            ));
        }
        Ok(t)
    }

    /// The region: the configured one, else the state machine ARN's.
    pub fn region(&self) -> String {
        self.region.clone().unwrap_or_else(|| {
            self.state_machine_arn
                .split(':')
                .nth(3)
                .unwrap_or("us-east-1")
                .to_owned()
        })
    }

    /// The state machine's ARN without a version or alias qualifier: executions started on
    /// `...:stateMachine:etl:prod` or `...:stateMachine:etl:3` are still `...:execution:etl:NAME`.
    pub fn unqualified_arn(&self) -> &str {
        let arn = self.state_machine_arn.as_str();
        match arn.match_indices(':').nth(6) {
            Some((at, _)) => &arn[..at],
            None => arn,
        }
    }

    /// The state machine's name (for messages: never the ARN, which names the account).
    pub fn state_machine_name(&self) -> &str {
        self.unqualified_arn().rsplit(':').next().unwrap_or("")
    }

    /// The execution ARN a named execution of this state machine has.
    pub(crate) fn execution_arn(&self, name: &str) -> String {
        self.execution_prefix() + name
    }

    fn execution_prefix(&self) -> String {
        self.unqualified_arn()
            .replacen(":stateMachine:", ":execution:", 1)
            + ":"
    }

    /// The name of an execution of this tool's state machine, from its ARN.
    pub(crate) fn execution_name_of<'a>(&self, execution_arn: &'a str) -> Option<&'a str> {
        execution_arn
            .strip_prefix(&self.execution_prefix())
            .filter(|name| !name.is_empty() && !name.contains(':'))
    }

    /// Whether an execution ARN belongs to this tool's state machine.
    pub(crate) fn owns(&self, execution_arn: &str) -> bool {
        let prefix = self.execution_prefix();
        execution_arn.starts_with(&prefix) && execution_arn.len() > prefix.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const ARN: &str = "arn:aws:states:eu-west-1:123456789012:stateMachine:etl";

    fn parse(v: Value) -> Result<SfnTarget, String> {
        parse_typed(v).map_err(|e| e.message)
    }

    fn parse_typed(v: Value) -> Result<SfnTarget, TargetError> {
        let schema = json!({"type": "object", "properties": {"a": {}, "day": {}}});
        SfnTarget::from_config(
            v.as_object().expect("object"),
            schema.as_object().expect("object"),
        )
    }

    #[test]
    fn errors_point_at_their_key() {
        let e = parse_typed(json!({"state_machine_arn": ARN, "regoin": "x"})).expect_err("typo");
        assert_eq!(e.key.as_deref(), Some("regoin"));
        let e = parse_typed(json!({"state_machine_arn": "etl"})).expect_err("arn");
        assert_eq!(e.key.as_deref(), Some("state_machine_arn"));
    }

    #[test]
    fn defaults_and_derived_values() {
        let t = parse(json!({"state_machine_arn": ARN})).expect("ok");
        assert_eq!(t.region(), "eu-west-1");
        assert_eq!(t.workflow_type, WorkflowType::Standard);
        assert!(t.history);
        assert_eq!(
            t.execution_arn("run-1"),
            "arn:aws:states:eu-west-1:123456789012:execution:etl:run-1"
        );
        assert!(t.owns("arn:aws:states:eu-west-1:123456789012:execution:etl:run-1"));
        assert!(!t.owns("arn:aws:states:eu-west-1:123456789012:execution:etl2:run-1"));
        assert!(!t.owns("arn:aws:states:eu-west-1:123456789012:execution:etl:"));
    }

    #[test]
    fn qualified_arns_start_there_and_own_the_unqualified_executions() {
        for qualifier in ["prod", "3"] {
            let t = parse(json!({"state_machine_arn": format!("{ARN}:{qualifier}")})).expect("ok");
            assert_eq!(t.unqualified_arn(), ARN);
            assert_eq!(t.state_machine_name(), "etl");
            assert_eq!(
                t.execution_arn("run-1"),
                "arn:aws:states:eu-west-1:123456789012:execution:etl:run-1"
            );
            assert!(t.owns("arn:aws:states:eu-west-1:123456789012:execution:etl:run-1"));
        }
        assert!(parse(json!({"state_machine_arn": format!("{ARN}:prod:x")})).is_err());
    }

    #[test]
    fn bad_targets_are_named() {
        assert!(
            parse(json!({"state_machine_arn": ARN, "regoin": "x"}))
                .expect_err("typo")
                .contains("regoin")
        );
        assert!(
            parse(json!({"state_machine_arn": "etl"}))
                .expect_err("arn")
                .contains("not a state machine ARN")
        );
        assert!(parse(json!({"state_machine_arn": ARN, "execution_name": "x-{a"})).is_err());
        assert!(parse(json!({"state_machine_arn": ARN, "execution_name": "x-{a}"})).is_ok());
        let e = parse_typed(json!({"state_machine_arn": ARN, "execution_name": "x-{dya}"}))
            .expect_err("undeclared");
        assert_eq!(e.key.as_deref(), Some("execution_name"));
        assert!(e.message.contains("names no argument"), "{e}");
        assert!(parse(json!({"state_machine_arn": ARN, "output_pointer": "summary"})).is_err());
        assert!(parse(json!({"state_machine_arn": ARN, "type": "express"})).is_ok());
    }
}
