//! GitHub's refusals of a start, sorted by who can fix them: a fault of the call's arguments
//! stays `InvalidInput` ("check the arguments"), a fault of the tool's setup (the workflow, the
//! repository, the credentials) becomes `Misconfigured` or `Denied` ("tell an operator"), so a
//! model is never sent to retry what no argument can fix.

use flowgate_core::EngineError;

use crate::KIND;
use crate::api::Api;
use crate::config::GhTarget;

/// Where the parts of a dispatch came from, to tell whose fault a refusal is.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Origin<'a> {
    /// The ref sent.
    pub git_ref: &'a str,
    /// Whether the ref came from the call's arguments (else it is the tool's constant).
    pub ref_from_arguments: bool,
    /// Whether the tool maps inputs explicitly (else every argument is an input of its name).
    pub explicit_inputs: bool,
}

fn misconfigured(message: String) -> EngineError {
    EngineError::Misconfigured {
        engine: KIND,
        message,
    }
}

/// The names in GitHub's `Unexpected inputs provided: ["a","b"]`.
fn unexpected_inputs(message: &str) -> Option<Vec<String>> {
    let list = message.split("Unexpected inputs provided:").nth(1)?.trim();
    let end = list.find(']')?;
    serde_json::from_str(&list[..=end]).ok()
}

/// The name in GitHub's `Required input 'x' not provided`.
fn required_input(message: &str) -> Option<&str> {
    let rest = message.split("Required input '").nth(1)?;
    rest.split('\'').next()
}

/// The ref in GitHub's `No ref found for: x`.
fn missing_ref(message: &str) -> Option<&str> {
    Some(message.split("No ref found for:").nth(1)?.trim())
}

/// What a refused dispatch (or run lookup) means for `target`. A 404 asks GitHub once more
/// whether the repository is visible, to say which of the two is missing.
pub(crate) async fn explain(
    api: &Api,
    target: &GhTarget,
    error: EngineError,
    origin: Origin<'_>,
) -> EngineError {
    let repo = format!("{}/{}", target.owner, target.repo);
    let workflow = &target.workflow;
    match error {
        EngineError::NotFound { .. } => match api.repository_visible().await {
            Ok(false) => misconfigured(format!(
                "the repository {repo} does not exist, or flowgate's credentials cannot see it: \
                 give the token (or the GitHub App installation) access to {repo}"
            )),
            Ok(true) => misconfigured(format!(
                "there is no workflow {workflow} in {repo}: the workflow file must be \
                 .github/workflows/{workflow} on the default branch (or give its numeric id)"
            )),
            Err(e) => e,
        },
        EngineError::Denied { message, .. } => EngineError::Denied {
            engine: KIND,
            message: if message.contains("401") {
                format!(
                    "GitHub refused flowgate's credentials ({message}): the token (or the App's \
                     key) is wrong, revoked or expired"
                )
            } else {
                format!(
                    "flowgate's credentials may not start {workflow} in {repo} ({message}): they \
                     need the repository permission Actions: write (`flowgate policy` lists \
                     every permission the tool uses)"
                )
            },
        },
        EngineError::InvalidInput { message, .. } => {
            if message.contains("does not have 'workflow_dispatch' trigger") {
                return misconfigured(format!(
                    "the workflow {workflow} in {repo} cannot be started through the API: add \
                     `workflow_dispatch:` (with the inputs the tool sends) under its `on:`"
                ));
            }
            if let Some(names) = unexpected_inputs(&message) {
                if names.contains(&target.key_input) {
                    return misconfigured(format!(
                        "the workflow {workflow} does not declare the input {key}: add \
                         `{key}: {{type: string, required: false}}` under \
                         on.workflow_dispatch.inputs, and put ${{{{ inputs.{key} }}}} in its \
                         `run-name` (flowgate finds its runs by it)",
                        key = target.key_input
                    ));
                }
                if origin.explicit_inputs {
                    return misconfigured(format!(
                        "the tool sends the inputs {names:?}, which the workflow {workflow} does \
                         not declare: fix the tool's `inputs` or the workflow"
                    ));
                }
                if names.iter().all(|n| target.declared_arguments.contains(n)) {
                    return misconfigured(format!(
                        "the tool's input_schema offers the arguments {names:?}, which the \
                         workflow {workflow} does not declare as inputs: map the tool's \
                         `inputs`, or declare them in the workflow"
                    ));
                }
                return EngineError::InvalidInput {
                    engine: KIND,
                    message: format!(
                        "the workflow {workflow} takes no input named {names:?}: leave those \
                         arguments out ({message})"
                    ),
                };
            }
            if let Some(name) = required_input(&message) {
                if origin.explicit_inputs {
                    return misconfigured(format!(
                        "the workflow {workflow} requires the input {name}, which the tool's \
                         `inputs` do not send"
                    ));
                }
                return EngineError::InvalidInput {
                    engine: KIND,
                    message: format!(
                        "the workflow {workflow} requires the input {name}: pass the argument \
                         {name}"
                    ),
                };
            }
            if let Some(r) = missing_ref(&message) {
                return if origin.ref_from_arguments {
                    EngineError::InvalidInput {
                        engine: KIND,
                        message: format!("there is no branch or tag {r:?} in {repo}"),
                    }
                } else {
                    misconfigured(format!(
                        "the tool's ref {:?} is not a branch or tag of {repo}",
                        origin.git_ref
                    ))
                };
            }
            // Values GitHub refuses (a choice not offered, a boolean that is not one, inputs
            // over 65,535 characters): the arguments' to fix.
            EngineError::InvalidInput {
                engine: KIND,
                message,
            }
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn githubs_messages_are_read_for_their_names() {
        assert_eq!(
            unexpected_inputs(
                "actions.createWorkflowDispatch: HTTP 422: Unexpected inputs provided: [\"flowgate_call\", \"x\"]"
            ),
            Some(vec!["flowgate_call".to_owned(), "x".to_owned()])
        );
        assert_eq!(
            required_input("HTTP 422: Required input 'version' not provided"),
            Some("version")
        );
        assert_eq!(
            missing_ref("HTTP 422: No ref found for: nope"),
            Some("nope")
        );
        assert_eq!(unexpected_inputs("something else"), None);
    }
}
