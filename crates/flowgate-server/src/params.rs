//! Params of the methods flowgate serves, decoded with the field at fault named.
//!
//! The params of a method flowgate serves that do not fit (`taskId: 123`, `arguments: "x"`)
//! are `-32602` naming the field: the method exists and its params are invalid (a decoder that
//! falls back to "unknown method" would say `-32601`). Every entry of the dispatcher decodes
//! its params here, so every refusal reads the same.

use rmcp::ErrorData;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// `params` of a `method` request as a `T`.
///
/// # Errors
/// `-32602` naming the field at fault (or that the params are missing).
pub(crate) fn decode<T: DeserializeOwned>(
    method: &str,
    params: Option<&Value>,
) -> Result<T, ErrorData> {
    let invalid = |problem: String| {
        ErrorData::invalid_params(format!("invalid params for {method}: {problem}"), None)
    };
    match params {
        None | Some(Value::Null) => Err(invalid("params are missing".to_owned())),
        Some(params) => {
            serde_path_to_error::deserialize::<_, T>(params).map_err(|e| invalid(located(&e)))
        }
    }
}

fn located(error: &serde_path_to_error::Error<serde_json::Error>) -> String {
    let path = error.path().to_string();
    if path.is_empty() || path == "." {
        error.inner().to_string()
    } else {
        format!("{path}: {}", error.inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn wrongly_typed_params_are_invalid_params_naming_the_field() {
        use rmcp::model::{
            CallToolRequestParams, ErrorCode, GetTaskParams, PaginatedRequestParams,
            UpdateTaskParams,
        };
        let field = |e: ErrorData, field: &str| {
            assert_eq!(e.code, ErrorCode::INVALID_PARAMS);
            assert!(e.message.contains(field), "{}", e.message);
        };
        field(
            decode::<GetTaskParams>("tasks/get", Some(&json!({"taskId": 123}))).expect_err("bad"),
            "taskId",
        );
        field(
            decode::<UpdateTaskParams>(
                "tasks/update",
                Some(&json!({"taskId": "t", "inputResponses": []})),
            )
            .expect_err("bad"),
            "inputResponses",
        );
        field(
            decode::<CallToolRequestParams>(
                "tools/call",
                Some(&json!({"name": "x", "arguments": "x"})),
            )
            .expect_err("bad"),
            "arguments",
        );
        field(
            decode::<PaginatedRequestParams>("tools/list", Some(&json!({"cursor": 5})))
                .expect_err("bad"),
            "cursor",
        );
        field(
            decode::<GetTaskParams>("tasks/result", None).expect_err("missing"),
            "missing",
        );
        let ok: GetTaskParams =
            decode("tasks/get", Some(&json!({"taskId": "t"}))).expect("decodes");
        assert_eq!(ok.task_id, "t");
    }
}
