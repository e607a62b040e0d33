//! Step Functions values to flowgate's: statuses, times, names, inputs and outputs.

use aws_sdk_sfn::types::ExecutionStatus;
use chrono::{DateTime, Utc};
use flowgate_core::TaskState;
use serde_json::{Map, Value};

/// Maps an execution status onto the task model; unknown statuses are never guessed.
pub(crate) fn state(status: &ExecutionStatus) -> TaskState {
    match status {
        ExecutionStatus::Running | ExecutionStatus::PendingRedrive => TaskState::Working,
        ExecutionStatus::Succeeded => TaskState::Completed,
        ExecutionStatus::Failed | ExecutionStatus::TimedOut => TaskState::Failed,
        ExecutionStatus::Aborted => TaskState::Cancelled,
        other => {
            tracing::warn!(
                status = other.as_str(),
                "unknown Step Functions execution status"
            );
            TaskState::Unknown
        }
    }
}

/// The engine's time as UTC.
pub(crate) fn time(t: &aws_sdk_sfn::primitives::DateTime) -> DateTime<Utc> {
    DateTime::from_timestamp(t.secs(), t.subsec_nanos()).unwrap_or_default()
}

/// The longest execution name Step Functions takes.
const NAME_MAX: usize = 80;
/// Hex digits of the digest a cleaned or cut name carries.
const DIGEST_LEN: usize = 10;

/// Turns an execution name rendered from the tool's template into one Step Functions takes.
/// Step Functions names are 1-80 characters; flowgate keeps to letters, digits, `-` and `_`
/// (anything else becomes `-`). Cleaning and cutting map different values to one string
/// ("ann lee", "ann/lee"), and equal names would make two different calls one execution: when
/// either changed the rendered text, the name ends with a digest of the text as rendered, so
/// names differ whenever the values do.
pub(crate) fn execution_name(out: &str) -> Result<String, String> {
    let clean: String = out
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect();
    if clean.is_empty() {
        return Err("execution_name renders empty".into());
    }
    if clean == out && clean.len() <= NAME_MAX {
        return Ok(clean);
    }
    use sha2::Digest;
    let digest: String = sha2::Sha256::digest(out.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let keep = NAME_MAX - DIGEST_LEN - 1;
    let head: String = clean.chars().take(keep).collect();
    Ok(format!("{head}-{}", &digest[..DIGEST_LEN]))
}

/// Whether two execution inputs are the same JSON value (Step Functions may re-serialise).
pub(crate) fn same_input(a: &str, b: &str) -> bool {
    match (
        serde_json::from_str::<Value>(a),
        serde_json::from_str::<Value>(b),
    ) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// The execution input for a call.
pub(crate) fn input(arguments: &Value, input_key: Option<&str>) -> String {
    match input_key {
        Some(key) => {
            let mut map = Map::new();
            map.insert(key.to_owned(), arguments.clone());
            Value::Object(map).to_string()
        }
        None => arguments.to_string(),
    }
}

/// The tool result from the execution output (JSON when it parses, else the text).
pub(crate) fn output(raw: Option<&str>, pointer: Option<&str>) -> Value {
    let value = match raw {
        Some(text) => serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned())),
        None => Value::Null,
    };
    match pointer {
        Some(p) if !p.is_empty() => value.pointer(p).cloned().unwrap_or(Value::Null),
        _ => value,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_documented_status_maps() {
        let table = [
            (ExecutionStatus::Running, TaskState::Working),
            (ExecutionStatus::PendingRedrive, TaskState::Working),
            (ExecutionStatus::Succeeded, TaskState::Completed),
            (ExecutionStatus::Failed, TaskState::Failed),
            (ExecutionStatus::TimedOut, TaskState::Failed),
            (ExecutionStatus::Aborted, TaskState::Cancelled),
            (ExecutionStatus::from("SOMETHING_NEW"), TaskState::Unknown),
        ];
        for (status, want) in table {
            assert_eq!(state(&status), want, "{status:?}");
        }
    }

    #[test]
    fn names_render_from_arguments_and_are_sanitised() {
        let args = json!({"service": "web-api", "version": 42});
        assert_eq!(
            render_name("deploy-{service}-{version}", &args).expect("ok"),
            "deploy-web-api-42"
        );
        assert!(execution_name("").is_err(), "an empty name");
    }

    fn render_name(source: &str, arguments: &Value) -> Result<String, String> {
        let schema = json!({"properties": {"service": {}, "version": {}, "who": {}}});
        let template = flowgate_core::template::Template::parse(source)
            .and_then(|t| t.bind(schema.as_object().expect("object")))
            .map_err(|e| e.to_string())?;
        execution_name(&template.render(arguments).ok_or("unset")?)
    }

    #[test]
    fn values_that_clean_or_cut_to_one_string_still_get_different_names() {
        let name = |v: &str| render_name("run-{who}", &json!({"who": v})).expect("ok");
        let names = [name("ann lee"), name("ann/lee"), name("ann-lee")];
        assert_eq!(
            names[2], "run-ann-lee",
            "a clean value keeps its plain name"
        );
        assert!(names[0].starts_with("run-ann-lee-"), "{}", names[0]);
        assert_ne!(names[0], names[1]);
        assert_ne!(names[0], names[2]);
        assert_ne!(names[1], names[2]);
        let long_a = name(&format!("{}a", "x".repeat(100)));
        let long_b = name(&format!("{}b", "x".repeat(100)));
        assert_eq!(long_a.len(), 80);
        assert_ne!(long_a, long_b);
        assert_eq!(
            name("ann lee"),
            names[0],
            "the same values make the same name"
        );
    }

    #[test]
    fn inputs_compare_as_json() {
        assert!(same_input(r#"{"a":1,"b":[2]}"#, r#"{ "b": [2], "a": 1 }"#));
        assert!(!same_input(r#"{"a":1}"#, r#"{"a":2}"#));
    }

    #[test]
    fn inputs_and_outputs() {
        assert_eq!(input(&json!({"a": 1}), None), r#"{"a":1}"#);
        assert_eq!(input(&json!({"a": 1}), Some("args")), r#"{"args":{"a":1}}"#);
        assert_eq!(
            output(Some(r#"{"s": {"n": 2}}"#), Some("/s")),
            json!({"n": 2})
        );
        assert_eq!(output(Some("plain"), None), json!("plain"));
        assert_eq!(output(None, None), Value::Null);
    }
}
