//! What a set of GitLab CI tools needs of each project: the token's scope and role, the
//! project's pipeline-variables setting, and what its `.gitlab-ci.yml` must declare.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use crate::GitLabTarget;

/// What the tools of one project send.
#[derive(Default)]
struct Needs {
    token_env: BTreeSet<String>,
    /// Pipeline and job variables the tools send (each needs pipeline variables allowed).
    variables: BTreeSet<String>,
    /// Pipeline inputs the tools send by name (None: every argument of some tool).
    inputs: BTreeSet<String>,
    every_argument: bool,
    /// The call's name: `$[[ inputs.x ]]` or `$X`.
    names: BTreeSet<String>,
    /// Job inputs answers are played with, as `job.input`.
    job_inputs: BTreeSet<String>,
}

/// One entry per instance and project: the `api` scope (creating pipelines, playing and
/// cancelling jobs, naming a pipeline need it; `read_api` is not enough) and the Developer role,
/// the project's `ci_pipeline_variables_minimum_override_role` and what it must allow, and what
/// the pipeline configuration must declare.
pub fn scopes(targets: &[GitLabTarget]) -> Value {
    let mut by_project: BTreeMap<(String, String), Needs> = BTreeMap::new();
    for t in targets {
        let n = by_project
            .entry((t.base_url.clone(), t.project.clone()))
            .or_default();
        n.token_env.insert(t.token_env.clone());
        n.token_env.extend(t.trigger_token_env.iter().cloned());
        n.variables
            .extend(t.variables.iter().flat_map(|v| v.keys().cloned()));
        n.variables.extend(t.key_variable.iter().cloned());
        match (&t.inputs, &t.variables) {
            (Some(inputs), _) => n.inputs.extend(inputs.keys().cloned()),
            (None, None) => n.every_argument = true,
            (None, Some(_)) => {}
        }
        match &t.key_variable {
            Some(v) => n.names.insert(format!("${v}")),
            None => {
                n.inputs.insert(t.key_input.clone());
                n.names.insert(format!("$[[ inputs.{} ]]", t.key_input))
            }
        };
        for (job, q) in &t.questions {
            n.variables.extend(q.variables.values().cloned());
            let default = q.inputs.is_empty() && q.variables.is_empty();
            n.job_inputs
                .extend(q.inputs.values().map(|i| format!("{job}.{i}")));
            if default {
                let fields = q.requested_schema["properties"]
                    .as_object()
                    .map(|p| p.keys().cloned().collect::<Vec<_>>())
                    .unwrap_or_default();
                n.job_inputs
                    .extend(fields.into_iter().map(|f| format!("{job}.{f}")));
            }
        }
    }
    Value::Array(
        by_project
            .into_iter()
            .map(|((base, project), n)| {
                let variables = if n.variables.is_empty() {
                    json!({
                        "setting": "ci_pipeline_variables_minimum_override_role",
                        "sent": [],
                        "needs": "any value, no_one_allowed included (GitLab.com's default): these tools send no pipeline or job variables",
                    })
                } else {
                    json!({
                        "setting": "ci_pipeline_variables_minimum_override_role",
                        "sent": n.variables,
                        "needs": "developer, or maintainer/owner when the token has that role; not no_one_allowed: these tools send pipeline or job variables",
                    })
                };
                let mut inputs: Vec<String> = n.inputs.into_iter().collect();
                if n.every_argument {
                    inputs.push("every argument of the tools without target.inputs, by its name".into());
                }
                json!({
                    "instance": base,
                    "project": project,
                    "token_scopes": ["api"],
                    "role": "Developer (Maintainer if the ref is protected and Developers may not merge to it)",
                    "token_env": n.token_env,
                    "pipeline_variables": variables,
                    "pipeline_configuration": {
                        "spec_inputs": inputs,
                        "workflow_name": n.names,
                        "job_inputs": n.job_inputs,
                        "gitlab": "17.10 or later (pipeline inputs through the API), 16.9 or later (the pipelines list's name filter), 16.6 or later (naming a pipeline that records a declined question); 18.10 or later for job inputs",
                    },
                })
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(v: Value) -> GitLabTarget {
        let schema = json!({"properties": {"env": {}, "day": {}}});
        GitLabTarget::from_config(v.as_object().expect("o"), schema.as_object().expect("o"))
            .expect("t")
    }

    #[test]
    fn one_entry_per_project_naming_the_variables_setting_and_what_it_needs() {
        let s = scopes(&[
            t(json!({"project": "a/b", "ref": "main"})),
            t(
                json!({"project": "a/b", "ref": "main", "inputs": {"env": "{env}"},
                     "questions": {"apply": {"message": "ok?", "requested_schema":
                        {"type": "object", "properties": {"approver": {"type": "string"}}}}}}),
            ),
            t(
                json!({"project": "c/d", "ref": "main", "variables": {"DAY": "{day}"},
                     "key_variable": "FLOWGATE_CALL"}),
            ),
        ]);
        assert_eq!(s.as_array().map(Vec::len), Some(2));
        assert_eq!(s[0]["token_scopes"], json!(["api"]));
        assert_eq!(s[0]["token_env"], json!(["GITLAB_TOKEN"]));
        let restricted = &s[0]["pipeline_variables"];
        assert_eq!(
            restricted["setting"],
            "ci_pipeline_variables_minimum_override_role"
        );
        assert_eq!(restricted["sent"], json!([]));
        assert!(
            restricted["needs"]
                .as_str()
                .unwrap_or("")
                .contains("no_one_allowed included")
        );
        let config = &s[0]["pipeline_configuration"];
        assert_eq!(
            config["workflow_name"],
            json!(["$[[ inputs.flowgate_call ]]"])
        );
        assert_eq!(config["job_inputs"], json!(["apply.approver"]));
        let inputs = config["spec_inputs"].to_string();
        assert!(
            inputs.contains("env")
                && inputs.contains("flowgate_call")
                && inputs.contains("every argument"),
            "{inputs}"
        );
        let vars = &s[1]["pipeline_variables"];
        assert_eq!(vars["sent"], json!(["DAY", "FLOWGATE_CALL"]));
        assert!(
            vars["needs"]
                .as_str()
                .unwrap_or("")
                .contains("not no_one_allowed")
        );
        assert_eq!(
            s[1]["pipeline_configuration"]["workflow_name"],
            json!(["$FLOWGATE_CALL"])
        );
    }
}
