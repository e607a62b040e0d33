//! The least-privilege IAM policy a set of Step Functions tools needs.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use crate::{SfnTarget, WorkflowType};

/// The IAM policies for `targets`: the one the flowgate function itself needs (`function`), and
/// one per role that tools assume (`roles`, keyed by role ARN), each an IAM policy document.
pub fn policies(targets: &[SfnTarget]) -> Value {
    let mut direct = Vec::new();
    let mut by_role: BTreeMap<String, Vec<&SfnTarget>> = BTreeMap::new();
    for t in targets {
        match &t.role_arn {
            Some(role) => by_role.entry(role.clone()).or_default().push(t),
            None => direct.push(t),
        }
    }
    let mut function = statements(&direct);
    if !by_role.is_empty() {
        function.push(json!({
            "Sid": "FlowgateAssumeToolRoles",
            "Effect": "Allow",
            "Action": ["sts:AssumeRole"],
            "Resource": by_role.keys().collect::<Vec<_>>(),
        }));
    }
    let roles: serde_json::Map<String, Value> = by_role
        .into_iter()
        .map(|(role, ts)| (role, document(statements(&ts))))
        .collect();
    json!({"function": document(function), "roles": roles})
}

fn document(statements: Vec<Value>) -> Value {
    json!({"Version": "2012-10-17", "Statement": statements})
}

/// The statements for tools whose calls use flowgate's own credentials, held to the Service
/// Authorization Reference for Step Functions: each action on the resource types it supports,
/// and `*` for the actions that support none.
///
/// - `StartExecution`, `ListExecutions`, `StartSyncExecution`: the state machine (and, for a
///   tool started on a version or alias, that qualified ARN too).
/// - `DescribeExecution`, `GetExecutionHistory`, `StopExecution`: executions, whose ARNs are
///   always the unqualified machine's (`...:execution:NAME:*`).
/// - `SendTaskSuccess`, `SendTaskFailure`: no resource type; the task token authorizes the
///   call, and a statement scoped to a state machine would deny them at run time.
///
/// These are exactly the calls the engine makes (a test records them against moto).
fn statements(targets: &[&SfnTarget]) -> Vec<Value> {
    let mut machines = BTreeSet::new();
    let mut executions = BTreeSet::new();
    let mut express = BTreeSet::new();
    for t in targets {
        let set = match t.workflow_type {
            WorkflowType::Standard => {
                executions.insert(
                    t.unqualified_arn()
                        .replacen(":stateMachine:", ":execution:", 1)
                        + ":*",
                );
                &mut machines
            }
            WorkflowType::Express => &mut express,
        };
        set.insert(t.state_machine_arn.clone());
        set.insert(t.unqualified_arn().to_owned());
    }
    let mut out = Vec::new();
    if !machines.is_empty() {
        out.push(json!({
            "Sid": "FlowgateStartAndListExecutions",
            "Effect": "Allow",
            "Action": ["states:ListExecutions", "states:StartExecution"],
            "Resource": machines.iter().collect::<Vec<_>>(),
        }));
        out.push(json!({
            "Sid": "FlowgateFollowAndStopExecutions",
            "Effect": "Allow",
            "Action": ["states:DescribeExecution", "states:GetExecutionHistory", "states:StopExecution"],
            "Resource": executions.iter().collect::<Vec<_>>(),
        }));
        out.push(json!({
            "Sid": "FlowgateAnswerInputStates",
            "Effect": "Allow",
            "Action": ["states:SendTaskFailure", "states:SendTaskSuccess"],
            "Resource": "*",
        }));
    }
    if !express.is_empty() {
        out.push(json!({
            "Sid": "FlowgateRunExpressWorkflows",
            "Effect": "Allow",
            "Action": ["states:StartSyncExecution"],
            "Resource": express.iter().collect::<Vec<_>>(),
        }));
    }
    out
}

/// Every Step Functions action the policies can grant (for the test that holds them to the
/// calls the engine makes).
pub fn granted_actions() -> &'static [&'static str] {
    &[
        "DescribeExecution",
        "GetExecutionHistory",
        "ListExecutions",
        "SendTaskFailure",
        "SendTaskSuccess",
        "StartExecution",
        "StartSyncExecution",
        "StopExecution",
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(arn: &str, extra: Value) -> SfnTarget {
        let mut v = json!({"state_machine_arn": arn});
        if let (Some(m), Value::Object(e)) = (v.as_object_mut(), extra) {
            m.extend(e);
        }
        SfnTarget::from_config(v.as_object().expect("object"), &serde_json::Map::new())
            .expect("target")
    }

    #[test]
    fn exactly_the_machines_and_actions_the_engine_uses() {
        let etl = "arn:aws:states:eu-west-1:111111111111:stateMachine:etl";
        let fast = "arn:aws:states:eu-west-1:111111111111:stateMachine:fast";
        let p = policies(&[
            target(etl, json!({})),
            target(fast, json!({"type": "express"})),
        ]);
        let statements = p["function"]["Statement"].as_array().expect("statements");
        assert_eq!(statements.len(), 4);
        assert_eq!(statements[0]["Resource"], json!([etl]));
        assert_eq!(
            statements[1]["Resource"],
            json!(["arn:aws:states:eu-west-1:111111111111:execution:etl:*"])
        );
        assert_eq!(
            statements[3]["Action"],
            json!(["states:StartSyncExecution"])
        );
        assert_eq!(statements[3]["Resource"], json!([fast]));
        assert_eq!(statements[2]["Resource"], json!("*"));
        assert!(p["roles"].as_object().expect("roles").is_empty());
        let all: Vec<&str> = statements
            .iter()
            .flat_map(|s| s["Action"].as_array().into_iter().flatten())
            .filter_map(Value::as_str)
            .collect();
        assert!(
            !all.iter().any(|a| a.ends_with('*')),
            "no wildcard actions: {all:?}"
        );
    }

    #[test]
    fn a_qualified_machine_starts_there_and_follows_unqualified_executions() {
        let alias = "arn:aws:states:eu-west-1:111111111111:stateMachine:etl:prod";
        let p = policies(&[target(alias, json!({}))]);
        let statements = p["function"]["Statement"].as_array().expect("statements");
        assert_eq!(
            statements[0]["Resource"],
            json!([
                "arn:aws:states:eu-west-1:111111111111:stateMachine:etl",
                alias
            ])
        );
        assert_eq!(
            statements[1]["Resource"],
            json!(["arn:aws:states:eu-west-1:111111111111:execution:etl:*"])
        );
    }

    #[test]
    fn tools_with_roles_get_their_own_policy_and_the_function_may_assume_them() {
        let arn = "arn:aws:states:us-east-1:222222222222:stateMachine:deploy";
        let role = "arn:aws:iam::222222222222:role/deployer";
        let p = policies(&[target(arn, json!({"role_arn": role}))]);
        let function = p["function"]["Statement"].as_array().expect("statements");
        assert_eq!(function.len(), 1);
        assert_eq!(function[0]["Action"], json!(["sts:AssumeRole"]));
        assert_eq!(function[0]["Resource"], json!([role]));
        assert_eq!(
            p["roles"][role]["Statement"].as_array().map(Vec::len),
            Some(3)
        );
    }
}
