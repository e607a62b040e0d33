//! A tool's `output_schema`, enforced on every result whatever the engine.
//!
//! MCP promises clients that a tool with an output schema returns structured content matching
//! it. Engines return whatever the workflow produced, so both paths a result takes to the
//! client (`tasks/get` and the synchronous answer) shape it here: a result that does not match
//! becomes a tool error listing the problems, with the output kept as text.

use flowgate_core::wire::{self, Outcome, WireTask};
use flowgate_core::{ExecutionRecord, TaskState};
use flowgate_manifest::{Naming, Schema};
use serde_json::{Value, json};

use crate::ToolEntry;

impl ToolEntry {
    /// `record` on the 2026-07-28 wire, with the output schema enforced.
    pub(crate) fn project(&self, record: &ExecutionRecord) -> WireTask {
        let mut task = wire::project(record, &self.presentation);
        task.outcome = enforce(&self.spec.name, self.output.as_ref(), record, task.outcome);
        task
    }

    /// What `record` means for the caller, with the output schema enforced.
    pub(crate) fn outcome(&self, record: &ExecutionRecord) -> Outcome {
        let outcome = wire::outcome(record, &self.presentation);
        enforce(&self.spec.name, self.output.as_ref(), record, outcome)
    }
}

/// `outcome`, or a tool error when `record` completed with output that `schema` refuses.
fn enforce(
    tool: &str,
    schema: Option<&Schema>,
    record: &ExecutionRecord,
    outcome: Outcome,
) -> Outcome {
    let Some(schema) = schema else {
        return outcome;
    };
    if record.state != TaskState::Completed {
        return outcome;
    }
    let output = record.output.as_ref().unwrap_or(&Value::Null);
    let Err(problems) = schema.check(output, Naming::RESULT) else {
        return outcome;
    };
    tracing::warn!(
        tool,
        ?problems,
        "a result does not match the tool's output schema"
    );
    let text = match output {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    Outcome::Completed(json!({
        "content": [
            {"type": "text", "text": format!(
                "{tool}: the workflow's result does not match the tool's output schema:\n- {}",
                problems.join("\n- ")
            )},
            {"type": "text", "text": format!("The result was: {text}")},
        ],
        "isError": true,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use flowgate_core::wire::{FailureMode, Presentation};

    fn schema() -> Schema {
        Schema::compile(&json!({
            "type": "object",
            "properties": {"count": {"type": "integer"}},
            "required": ["count"],
        }))
        .expect("schema")
    }

    fn completed(output: Value) -> ExecutionRecord {
        let at = chrono::DateTime::from_timestamp(1_764_670_000, 0).expect("time");
        let mut r = ExecutionRecord::new(TaskState::Completed, "SUCCEEDED", at);
        r.output = Some(output);
        r
    }

    fn shaped(record: &ExecutionRecord) -> Outcome {
        let how = Presentation {
            failure: FailureMode::ToolError,
            structured: true,
            ttl_ms: None,
            poll_interval_ms: 1000,
        };
        enforce(
            "count",
            Some(&schema()),
            record,
            wire::outcome(record, &how),
        )
    }

    fn result(outcome: Outcome) -> Value {
        match outcome {
            Outcome::Completed(result) => result,
            other => panic!("not completed: {other:?}"),
        }
    }

    #[test]
    fn a_matching_result_keeps_its_structured_content() {
        let r = result(shaped(&completed(json!({"count": 3}))));
        assert_eq!(r["isError"], false);
        assert_eq!(r["structuredContent"], json!({"count": 3}));
    }

    #[test]
    fn a_result_that_does_not_match_is_a_tool_error_naming_the_problems() {
        for (output, problem) in [
            (json!({"count": "three"}), "result field /count: "),
            (json!({}), "result: "),
            (json!("plain text"), "result: "),
        ] {
            let r = result(shaped(&completed(output.clone())));
            assert_eq!(r["isError"], true, "{r}");
            assert!(r.get("structuredContent").is_none(), "{r}");
            let first = r["content"][0]["text"].as_str().unwrap_or_default();
            assert!(first.contains(problem), "{output}: {first}");
            let kept = r["content"][1]["text"].as_str().unwrap_or_default();
            assert!(kept.starts_with("The result was: "), "{kept}");
        }
    }

    #[test]
    fn failures_and_tools_without_a_schema_are_left_alone() {
        let at = chrono::DateTime::from_timestamp(1_764_670_000, 0).expect("time");
        let failed = ExecutionRecord::new(TaskState::Failed, "FAILED", at);
        assert_eq!(
            enforce("t", Some(&schema()), &failed, Outcome::Cancelled),
            Outcome::Cancelled
        );
        let bad = completed(json!({"count": "three"}));
        assert_eq!(enforce("t", None, &bad, Outcome::Working), Outcome::Working);
    }
}
