//! The MCP error boundary: which engine failures become tool errors (for the model to read)
//! and which become JSON-RPC errors.

use flowgate_core::EngineError;
use rmcp::ErrorData;
use rmcp::model::{CallToolResult, ContentBlock};

/// `-32601` for `method`: its name is the message.
pub(crate) fn method_not_found(method: &str) -> ErrorData {
    ErrorData::new(
        rmcp::model::ErrorCode::METHOD_NOT_FOUND,
        method.to_owned(),
        None,
    )
}

/// The one answer for a handle that does not open, belongs to someone else, or names an
/// execution the engine no longer has: they must be indistinguishable.
pub(crate) fn task_not_found() -> ErrorData {
    ErrorData::invalid_params("Failed to retrieve task: Task not found", None)
}

/// The answer for a task whose handle opened (it is the caller's) but whose tool this server
/// no longer serves (a manifest without it): saying so, not "not found", since the execution
/// itself may well exist.
pub(crate) fn tool_gone(tool: Option<&str>) -> ErrorData {
    let tool = tool.map_or_else(|| "its tool".to_owned(), |t| format!("its tool {t:?}"));
    ErrorData::invalid_params(
        format!(
            "Failed to retrieve task: {tool} is no longer served by this server (a reload \
             or redeploy removed it, or pointed it at another workflow); the execution is left \
             as it is"
        ),
        None,
    )
}

/// A tool result that tells the model what went wrong when starting `tool`.
pub(crate) fn tool_error(tool: &str, error: &EngineError) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(start_failed(tool, error))])
}

/// What tells the model what went wrong when starting `tool`, and what to do.
pub(crate) fn start_failed(tool: &str, error: &EngineError) -> String {
    let advice = match error {
        EngineError::InvalidInput { .. } => "Check the arguments and call again.",
        EngineError::Denied { .. } => {
            "flowgate's credentials may not start this workflow; tell an operator."
        }
        EngineError::Throttled { .. } | EngineError::Unavailable { .. } => {
            "The engine is unreachable or busy right now; nothing was started. Try again later."
        }
        EngineError::NotFound { .. } => {
            "The workflow this tool names does not exist; tell an operator."
        }
        EngineError::Misconfigured { .. } => {
            "Calling again, with any arguments, will not help until the tool is fixed."
        }
        EngineError::Timeout { .. } => {
            "The engine did not answer in time, so the workflow may or may not have started; \
             check the engine before calling again."
        }
        _ => "Tell an operator.",
    };
    format!("{tool}: {error}. {advice}")
}

/// A JSON-RPC error for engine failures outside a tool result (tasks/update, tasks/cancel).
pub(crate) fn rpc_error(tool: &str, error: &EngineError) -> ErrorData {
    if error.is_not_found() {
        return task_not_found();
    }
    ErrorData::internal_error(format!("{tool}: {error}"), None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(r: &CallToolResult) -> String {
        serde_json::to_value(r).expect("json")["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    #[test]
    fn every_kind_reads_as_an_actionable_tool_error() {
        let cases = [
            (
                EngineError::InvalidInput {
                    engine: "local",
                    message: "bad".into(),
                },
                "arguments",
            ),
            (
                EngineError::Denied {
                    engine: "local",
                    message: "no".into(),
                },
                "credentials",
            ),
            (
                EngineError::Throttled {
                    engine: "local",
                    retry_after: None,
                },
                "nothing was started",
            ),
            (
                EngineError::Unavailable {
                    engine: "local",
                    message: "down".into(),
                    source: None,
                },
                "Try again",
            ),
            (
                EngineError::NotFound {
                    engine: "local",
                    what: "m".into(),
                },
                "does not exist",
            ),
            (
                EngineError::Unsupported {
                    engine: "local",
                    operation: "start",
                },
                "operator",
            ),
            (
                EngineError::Timeout {
                    engine: "local",
                    message: "start".into(),
                },
                "may or may not have started",
            ),
        ];
        for (error, hint) in cases {
            let r = tool_error("deploy", &error);
            assert_eq!(r.is_error, Some(true));
            let t = text(&r);
            assert!(t.starts_with("deploy: local"), "{t}");
            assert!(t.contains(hint), "{t}");
        }
    }

    #[test]
    fn not_found_is_invalid_params() {
        let e = rpc_error(
            "t",
            &EngineError::NotFound {
                engine: "x",
                what: "y".into(),
            },
        );
        assert_eq!(e.code.0, -32602);
        assert_eq!(e, task_not_found());
        let e = rpc_error(
            "t",
            &EngineError::Denied {
                engine: "x",
                message: "no".into(),
            },
        );
        assert_eq!(e.code.0, -32603);
    }
}
