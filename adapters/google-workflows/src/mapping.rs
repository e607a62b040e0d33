//! Workflows values to flowgate's.

use chrono::{DateTime, Utc};
use flowgate_core::TaskState;
use google_cloud_workflows_executions_v1::model::execution::State;
use serde_json::Value;

/// Maps an execution state onto the task model; unknown states are never guessed.
pub(crate) fn state(s: &State) -> TaskState {
    match s {
        State::Queued => TaskState::Submitted,
        // UNAVAILABLE means "execution data unavailable, see stateError", not an end: a task
        // must not turn terminal and then change.
        State::Active | State::Unavailable => TaskState::Working,
        State::Succeeded => TaskState::Completed,
        State::Failed => TaskState::Failed,
        State::Cancelled => TaskState::Cancelled,
        other => {
            tracing::warn!(state = ?other, "Workflows execution state flowgate does not map");
            TaskState::Unknown
        }
    }
}

/// The state's API name, for records and logs.
pub(crate) fn state_name(s: &State) -> String {
    s.name().unwrap_or("STATE_UNKNOWN").to_owned()
}

/// The engine's time as UTC.
pub(crate) fn time(t: Option<&google_cloud_wkt::Timestamp>) -> Option<DateTime<Utc>> {
    t.and_then(|t| DateTime::from_timestamp(t.seconds(), t.nanos().max(0) as u32))
}

/// A JSON string field as JSON (text when it does not parse).
pub(crate) fn json_field(text: &str) -> Value {
    if text.is_empty() {
        return Value::Null;
    }
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()))
}

/// The short error of a failed execution: the payload's `message` (or the payload itself).
pub(crate) fn error_summary(payload: &Value) -> String {
    match payload {
        Value::Object(map) => {
            let message = map
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("workflow error");
            match map
                .get("tags")
                .and_then(Value::as_array)
                .and_then(|t| t.first())
                .and_then(Value::as_str)
            {
                Some(tag) => format!("{tag}: {message}"),
                None => message.to_owned(),
            }
        }
        Value::String(s) => s.clone(),
        Value::Null => "workflow error".to_owned(),
        other => other.to_string(),
    }
}

/// A label value Workflows accepts: lowercase `[a-z0-9_-]`, at most 63 characters.
pub(crate) fn label_value(raw: &str) -> String {
    raw.chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .take(63)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_documented_state_maps() {
        let table = [
            (State::Queued, TaskState::Submitted),
            (State::Active, TaskState::Working),
            (State::Succeeded, TaskState::Completed),
            (State::Failed, TaskState::Failed),
            (State::Cancelled, TaskState::Cancelled),
            (State::Unavailable, TaskState::Working),
            (State::Unspecified, TaskState::Unknown),
        ];
        for (s, want) in table {
            assert_eq!(state(&s), want, "{s:?}");
        }
    }

    #[test]
    fn errors_and_labels() {
        assert_eq!(
            error_summary(&json!({"message": "no rows", "tags": ["ValueError"]})),
            "ValueError: no rows"
        );
        assert_eq!(error_summary(&json!("boom")), "boom");
        assert_eq!(json_field(r#"{"a":1}"#), json!({"a": 1}));
        assert_eq!(json_field("plain"), json!("plain"));
        assert_eq!(label_value("Deploy Service!"), "deploy-service-");
        assert_eq!(label_value(&"x".repeat(100)).len(), 63);
    }
}
