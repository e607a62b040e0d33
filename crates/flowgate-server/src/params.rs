//! Requests for methods flowgate serves whose params do not decode.
//!
//! rmcp decodes each request into the variant for its method and, when the params do not fit
//! (`taskId: 123`, `arguments: "x"`), falls back to a custom request, whose default answer is
//! `-32601` method not found (HTTP 404). For a method flowgate serves that is wrong: the method
//! exists and its params are invalid, so the answer is `-32602` naming the field. Methods
//! flowgate does not serve stay method-not-found. The 2025-11-25 dialect decodes its params
//! with [`decode`], so its refusals read the same.

use rmcp::ErrorData;
use rmcp::model::{
    CallToolRequestMethod, CallToolRequestParams, CancelTaskMethod, CancelTaskParams, ConstString,
    CustomRequest, DiscoverRequestMethod, DiscoverRequestParams, ErrorCode, GetTaskMethod,
    GetTaskParams, ListToolsRequestMethod, PaginatedRequestParams, UpdateTaskMethod,
    UpdateTaskParams,
};
use serde::de::DeserializeOwned;
use serde_json::Value;

/// What is wrong with the params of one method, or `None` if they decode.
type Check = fn(Option<&Value>) -> Option<String>;

/// The methods flowgate serves, with their params' types.
const SERVED: &[(&str, Check)] = &[
    (
        CallToolRequestMethod::VALUE,
        required::<CallToolRequestParams>,
    ),
    (
        ListToolsRequestMethod::VALUE,
        optional::<PaginatedRequestParams>,
    ),
    (GetTaskMethod::VALUE, required::<GetTaskParams>),
    (UpdateTaskMethod::VALUE, required::<UpdateTaskParams>),
    (CancelTaskMethod::VALUE, required::<CancelTaskParams>),
    (
        DiscoverRequestMethod::VALUE,
        optional::<DiscoverRequestParams>,
    ),
];

/// The answer to a request rmcp could not route to a typed handler.
pub(crate) fn unrouted(request: &CustomRequest) -> ErrorData {
    let Some((method, check)) = SERVED.iter().find(|(m, _)| *m == request.method) else {
        return ErrorData::new(ErrorCode::METHOD_NOT_FOUND, request.method.clone(), None);
    };
    let problem = check(request.params.as_ref())
        .unwrap_or_else(|| "they do not match the method's params".to_owned());
    ErrorData::invalid_params(format!("invalid params for {method}: {problem}"), None)
}

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

fn required<T: DeserializeOwned>(params: Option<&Value>) -> Option<String> {
    match params {
        None | Some(Value::Null) => Some("params are missing".to_owned()),
        Some(params) => problem::<T>(params),
    }
}

fn optional<T: DeserializeOwned>(params: Option<&Value>) -> Option<String> {
    params
        .filter(|p| !p.is_null())
        .and_then(|params| problem::<T>(params))
}

/// The decoding error of `params` as a `T`, led by the path of the field at fault.
fn problem<T: DeserializeOwned>(params: &Value) -> Option<String> {
    let error = serde_path_to_error::deserialize::<_, T>(params).err()?;
    Some(located(&error))
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

    fn answer(method: &str, params: Option<Value>) -> ErrorData {
        unrouted(&CustomRequest::new(method, params))
    }

    #[test]
    fn wrongly_typed_params_of_served_methods_are_invalid_params_naming_the_field() {
        for (method, params, field) in [
            ("tasks/get", json!({"taskId": 123}), "taskId"),
            ("tasks/cancel", json!({"taskId": null}), "taskId"),
            (
                "tasks/update",
                json!({"taskId": "t", "inputResponses": []}),
                "inputResponses",
            ),
            (
                "tools/call",
                json!({"name": "x", "arguments": "x"}),
                "arguments",
            ),
            ("tools/list", json!({"cursor": 5}), "cursor"),
        ] {
            let e = answer(method, Some(params));
            assert_eq!(e.code, ErrorCode::INVALID_PARAMS, "{method}");
            assert!(e.message.contains(field), "{method}: {}", e.message);
        }
        let e = answer("tasks/get", None);
        assert_eq!(e.code, ErrorCode::INVALID_PARAMS);
        assert!(e.message.contains("missing"), "{}", e.message);
    }

    #[test]
    fn decoding_names_the_field_as_the_fallback_does() {
        let e = decode::<GetTaskParams>("tasks/get", Some(&json!({"taskId": 123})))
            .expect_err("invalid");
        assert_eq!(e, answer("tasks/get", Some(json!({"taskId": 123}))));
        let e = decode::<GetTaskParams>("tasks/result", None).expect_err("missing");
        assert!(e.message.contains("missing"), "{}", e.message);
        let ok: GetTaskParams =
            decode("tasks/get", Some(&json!({"taskId": "t"}))).expect("decodes");
        assert_eq!(ok.task_id, "t");
    }

    #[test]
    fn methods_flowgate_does_not_serve_are_not_found() {
        for method in ["tasks/list", "tasks/result", "prompts/get", "no/such"] {
            let e = answer(method, Some(json!({})));
            assert_eq!(e.code, ErrorCode::METHOD_NOT_FOUND, "{method}");
        }
    }
}
