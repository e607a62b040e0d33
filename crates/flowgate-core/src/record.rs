//! What an engine reports about one execution.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::TaskState;

/// One execution as its engine sees it right now. Read fresh from the engine on every poll;
/// flowgate never stores it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecutionRecord {
    /// The mapped state.
    pub state: TaskState,
    /// The engine's own word for the state (for logs and for `unknown`).
    pub engine_status: String,
    /// Human-readable progress: the current step, the last status line.
    pub status_message: Option<String>,
    /// When the engine created the execution.
    pub created_at: DateTime<Utc>,
    /// When the engine last changed it.
    pub updated_at: DateTime<Utc>,
    /// The result, once completed.
    pub output: Option<Value>,
    /// The engine-reported failure of the workflow, if it failed.
    pub failure: Option<EngineFailure>,
    /// The questions the execution is waiting on, in the order asked.
    pub input_requests: Vec<InputRequest>,
    /// A link to the engine's own page for this execution.
    pub console_url: Option<String>,
    /// Poll this execution no more often than this (its data is unavailable for a while, the
    /// engine is backlogged): the advertised `pollIntervalMs` is at least this long.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_poll_interval: Option<std::time::Duration>,
}

/// An engine-reported failure: the workflow ran and failed, as opposed to flowgate failing to
/// reach the engine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EngineFailure {
    /// The short error name (`States.TaskFailed`, `exit status 3`).
    pub error: String,
    /// The longer cause (a stack, the tail of stderr).
    pub cause: Option<String>,
}

/// A question an execution asks the client, shown as a form elicitation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InputRequest {
    /// Unique for the execution's whole life, derived from engine ids, never reused.
    pub key: String,
    /// What to ask.
    pub message: String,
    /// A JSON Schema object of the answer's fields (MCP elicitation's restricted subset).
    pub requested_schema: Value,
}

/// The client's answer to an [`InputRequest`], as MCP's `ElicitResult`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InputResponse {
    /// What the person chose.
    pub action: Action,
    /// The form's content when accepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Value>,
}

/// The three answers an elicitation can get.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Answered with content.
    Accept,
    /// Refused.
    Decline,
    /// Dismissed without a choice.
    Cancel,
}

impl InputResponse {
    /// What makes this answer's content something other than an MCP form answer to a question
    /// with `requested_schema`: a flat object holding only the requested properties, each a
    /// string, a number, a boolean or an array of strings (a multi-select enum). Each problem
    /// names its field (`field /name: ...`); empty when sound, or when the answer is not an
    /// acceptance. An accepted answer without content is an empty form.
    pub fn form_problems(&self, requested_schema: &Value) -> Vec<String> {
        if self.action != Action::Accept {
            return Vec::new();
        }
        let Some(content) = &self.content else {
            return Vec::new();
        };
        let Some(fields) = content.as_object() else {
            return vec![format!(
                "content: must be an object of the requested fields, not {}",
                kind(content)
            )];
        };
        let requested = requested_schema
            .get("properties")
            .and_then(Value::as_object);
        let mut problems = Vec::new();
        for (name, value) in fields {
            // The field as a JSON pointer token (RFC 6901), as schema problems name fields.
            let field = name.replace('~', "~0").replace('/', "~1");
            if !requested.is_some_and(|r| r.contains_key(name)) {
                problems.push(format!("field /{field}: was not asked for"));
                continue;
            }
            let flat = match value {
                Value::String(_) | Value::Number(_) | Value::Bool(_) => true,
                Value::Array(items) => items.iter().all(Value::is_string),
                Value::Null | Value::Object(_) => false,
            };
            if !flat {
                problems.push(format!(
                    "field /{field}: must be a string, a number, a boolean or an array of \
                     strings, not {}",
                    kind(value)
                ));
            }
        }
        problems
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(items) if items.iter().all(Value::is_string) => "an array of strings",
        Value::Array(_) => "an array holding other than strings",
        Value::Object(_) => "an object",
    }
}

impl ExecutionRecord {
    /// A fresh record in `state`, created and updated at `at`, with nothing else set.
    pub fn new(state: TaskState, engine_status: impl Into<String>, at: DateTime<Utc>) -> Self {
        ExecutionRecord {
            state,
            engine_status: engine_status.into(),
            status_message: None,
            created_at: at,
            updated_at: at,
            output: None,
            failure: None,
            input_requests: Vec::new(),
            console_url: None,
            min_poll_interval: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn accept(content: Value) -> InputResponse {
        InputResponse {
            action: Action::Accept,
            content: Some(content),
        }
    }

    #[test]
    fn form_answers_are_flat_objects_of_the_requested_fields() {
        let schema = json!({"type": "object", "properties": {
            "approve": {"type": "boolean"}, "reason": {"type": "string"},
            "n": {"type": "integer"}, "envs": {"type": "array", "items": {"type": "string"}}
        }});
        let sound = accept(json!({"approve": true, "reason": "ok", "n": 2, "envs": ["a", "b"]}));
        assert!(sound.form_problems(&schema).is_empty());
        let nested = accept(json!({"reason": {"approve": true}, "extra/x": 1, "n": null}));
        let problems = nested.form_problems(&schema);
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert!(
            problems
                .iter()
                .any(|p| p.starts_with("field /reason: must be"))
        );
        assert!(
            problems
                .iter()
                .any(|p| p == "field /extra~1x: was not asked for")
        );
        assert!(problems.iter().any(|p| p.starts_with("field /n: must be")));
        let mixed = accept(json!({"envs": ["a", 1]}));
        assert_eq!(mixed.form_problems(&schema).len(), 1);
        assert_eq!(accept(json!([true])).form_problems(&schema).len(), 1);
        let declined = InputResponse {
            action: Action::Decline,
            content: Some(json!(7)),
        };
        assert!(declined.form_problems(&schema).is_empty());
    }
}
