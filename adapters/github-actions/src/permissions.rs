//! The least privilege a target's credentials need: every REST call the engine makes, with the
//! fine-grained repository permission GitHub documents for it (the "Fine-grained access tokens"
//! section of each endpoint's page, which GitHub App installations share), and the permissions
//! that follow. `flowgate policy` prints them.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::config::GhTarget;

/// One call the engine makes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Call {
    /// The operation, as the engine names it in errors (`actions.createWorkflowDispatch`).
    pub operation: &'static str,
    /// `POST /repos/{owner}/{repo}/...`.
    pub endpoint: &'static str,
    /// The fine-grained repository permission and its access.
    pub permission: (&'static str, &'static str),
    /// What flowgate makes it for.
    pub purpose: &'static str,
    /// Which targets make it.
    pub when: When,
}

/// Which targets make a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum When {
    Always,
    /// Targets with a `result_artifact`.
    ResultArtifact,
    /// Targets that authenticate with a token (reviews as a required reviewer).
    Token,
    /// Targets that authenticate as a GitHub App (its own custom protection rules).
    App,
}

/// Every call, in the order a task meets them.
pub(crate) const CALLS: &[Call] = &[
    Call {
        operation: "actions.listWorkflowRuns",
        endpoint: "GET /repos/{owner}/{repo}/actions/workflows/{workflow_id}/runs",
        permission: ("actions", "read"),
        purpose: "find the run a call's key started (a retried start), list the tasks",
        when: When::Always,
    },
    Call {
        operation: "actions.createWorkflowDispatch",
        endpoint: "POST /repos/{owner}/{repo}/actions/workflows/{workflow_id}/dispatches",
        permission: ("actions", "write"),
        purpose: "start a run",
        when: When::Always,
    },
    Call {
        operation: "repos.get",
        endpoint: "GET /repos/{owner}/{repo}",
        permission: ("metadata", "read"),
        purpose: "tell a missing workflow from a repository the credentials cannot see",
        when: When::Always,
    },
    Call {
        operation: "actions.getWorkflowRun",
        endpoint: "GET /repos/{owner}/{repo}/actions/runs/{run_id}",
        permission: ("actions", "read"),
        purpose: "a task's status",
        when: When::Always,
    },
    Call {
        operation: "actions.listJobsForWorkflowRun",
        endpoint: "GET /repos/{owner}/{repo}/actions/runs/{run_id}/jobs",
        permission: ("actions", "read"),
        purpose: "the running job and step, the failing one",
        when: When::Always,
    },
    Call {
        operation: "actions.getPendingDeploymentsForRun",
        endpoint: "GET /repos/{owner}/{repo}/actions/runs/{run_id}/pending_deployments",
        permission: ("actions", "read"),
        purpose: "the environments holding a run (questions, wait timers)",
        when: When::Always,
    },
    Call {
        operation: "repos.getAllDeploymentProtectionRules",
        endpoint: "GET /repos/{owner}/{repo}/environments/{environment_name}/deployment_protection_rules",
        permission: ("actions", "read"),
        purpose: "which GitHub App decides an environment (the App's own rule, or who to name)",
        when: When::Always,
    },
    Call {
        operation: "actions.getReviewsForRun",
        endpoint: "GET /repos/{owner}/{repo}/actions/runs/{run_id}/approvals",
        permission: ("actions", "read"),
        purpose: "reviews given (question keys, rejections, the output)",
        when: When::Always,
    },
    Call {
        operation: "actions.reviewPendingDeploymentsForRun",
        endpoint: "POST /repos/{owner}/{repo}/actions/runs/{run_id}/pending_deployments",
        permission: ("deployments", "write"),
        purpose: "answer a review as a required reviewer",
        when: When::Token,
    },
    Call {
        operation: "actions.reviewCustomGatesForRun",
        endpoint: "POST /repos/{owner}/{repo}/actions/runs/{run_id}/deployment_protection_rule",
        permission: ("deployments", "write"),
        purpose: "answer for the App's own custom deployment protection rule",
        when: When::App,
    },
    Call {
        operation: "actions.listWorkflowRunArtifacts",
        endpoint: "GET /repos/{owner}/{repo}/actions/runs/{run_id}/artifacts",
        permission: ("actions", "read"),
        purpose: "find the result artifact",
        when: When::ResultArtifact,
    },
    Call {
        operation: "actions.downloadArtifact",
        endpoint: "GET /repos/{owner}/{repo}/actions/artifacts/{artifact_id}/{archive_format}",
        permission: ("actions", "read"),
        purpose: "read the result artifact",
        when: When::ResultArtifact,
    },
    Call {
        operation: "actions.downloadJobLogsForWorkflowRun",
        endpoint: "GET /repos/{owner}/{repo}/actions/jobs/{job_id}/logs",
        permission: ("actions", "read"),
        purpose: "the failing job's log tail",
        when: When::Always,
    },
    Call {
        operation: "actions.cancelWorkflowRun",
        endpoint: "POST /repos/{owner}/{repo}/actions/runs/{run_id}/cancel",
        permission: ("actions", "write"),
        purpose: "cancel a task",
        when: When::Always,
    },
    Call {
        operation: "actions.forceCancelWorkflowRun",
        endpoint: "POST /repos/{owner}/{repo}/actions/runs/{run_id}/force-cancel",
        permission: ("actions", "write"),
        purpose: "stop a step that ignores the cancel past cancel_grace_ms",
        when: When::Always,
    },
];

/// What a token target needs besides permissions to answer an environment's review: GitHub's
/// "Prevent self-review" refuses exactly the setup where flowgate dispatches and approves as
/// one user, and nothing in the permissions would show it.
pub(crate) const REVIEWS_WITH_A_TOKEN: &str = "to answer an environment's review, the token's \
    user must be one of its required reviewers, and the environment must not have \"Prevent \
    self-review\" on: the token both starts the run and approves it, and with that setting GitHub \
    lets nobody approve a run they started. With it on, another reviewer approves in GitHub, or \
    the environment gets a custom deployment protection rule of a GitHub App flowgate runs as";

fn made_by(call: &Call, target: &GhTarget) -> bool {
    match call.when {
        When::Always => true,
        When::ResultArtifact => target.result_artifact.is_some(),
        When::Token => target.app.is_none(),
        When::App => target.app.is_some(),
    }
}

fn stronger(a: &'static str, b: &'static str) -> &'static str {
    if a == "write" || b == "write" {
        "write"
    } else {
        "read"
    }
}

/// The repository permissions each target's credentials need, per repository, with the calls
/// that need each one.
pub(crate) fn permissions(targets: &[GhTarget]) -> Value {
    let mut repos: BTreeMap<String, (BTreeMap<&str, &str>, Vec<&Call>)> = BTreeMap::new();
    let mut token_repos: Vec<String> = Vec::new();
    for t in targets {
        let repo = format!("{}/{}", t.owner, t.repo);
        if t.app.is_none() && !token_repos.contains(&repo) {
            token_repos.push(repo.clone());
        }
        let (perms, calls) = repos.entry(repo).or_default();
        for call in CALLS.iter().filter(|c| made_by(c, t)) {
            let (name, access) = call.permission;
            let have = perms.get(name).copied().unwrap_or("read");
            perms.insert(name, stronger(have, access));
            if !calls.iter().any(|c| c.operation == call.operation) {
                calls.push(call);
            }
        }
    }
    let repositories: serde_json::Map<String, Value> = repos
        .into_iter()
        .map(|(repo, (perms, calls))| {
            let calls: Vec<Value> = calls
                .iter()
                .map(|c| {
                    json!({
                        "call": c.endpoint,
                        "needs": format!("{}: {}", c.permission.0, c.permission.1),
                        "for": c.purpose,
                    })
                })
                .collect();
            let mut entry = json!({"permissions": perms, "calls": calls});
            if token_repos.contains(&repo) {
                entry["reviews"] = json!(REVIEWS_WITH_A_TOKEN);
            }
            (repo, entry)
        })
        .collect();
    json!({
        "note": "repository permissions of a fine-grained token or GitHub App installation, \
                 each traced to the calls GitHub documents it for; a GitHub App also signs its \
                 installation tokens with its private key (no permission)",
        "repositories": repositories,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Map;

    /// Calls made with the App's own JWT (no repository permission: the App's private key).
    const APP_CALLS: &[&str] = &[
        "apps.createInstallationAccessToken",
        "apps.getAuthenticated",
    ];

    fn target(extra: Value) -> GhTarget {
        let mut v = json!({"owner": "acme", "repo": "app", "workflow": "r.yml", "ref": "main",
                           "token_env": "FLOWGATE_SURELY_UNSET_TOKEN_VAR"});
        if let (Some(m), Value::Object(e)) = (v.as_object_mut(), extra) {
            m.extend(e);
        }
        GhTarget::from_config(v.as_object().expect("object"), &Map::new()).expect("target")
    }

    /// Every operation the REST client names is in the table (or made with the App's JWT),
    /// and the table names none it does not make: a call added without its permission fails.
    #[test]
    fn every_call_the_client_makes_is_traced_to_its_permission() {
        let source = include_str!("api.rs").to_owned() + include_str!("auth.rs");
        let mut named: Vec<&str> = source
            .split('"')
            .filter(|s| {
                (s.starts_with("actions.") || s.starts_with("repos.") || s.starts_with("apps."))
                    && s[s.find('.').unwrap_or(0) + 1..]
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric())
            })
            .collect();
        named.sort_unstable();
        named.dedup();
        for op in &named {
            assert!(
                CALLS.iter().any(|c| c.operation == *op) || APP_CALLS.contains(op),
                "{op} is made but not in the permission table"
            );
        }
        for c in CALLS {
            assert!(
                named.contains(&c.operation),
                "{} is never made",
                c.operation
            );
        }
    }

    #[test]
    fn a_token_target_needs_actions_write_deployments_write_and_metadata_only() {
        let p = permissions(&[target(json!({}))]);
        let repo = &p["repositories"]["acme/app"];
        assert_eq!(
            repo["permissions"],
            json!({"actions": "write", "deployments": "write", "metadata": "read"})
        );
        let calls: Vec<&str> = repo["calls"]
            .as_array()
            .expect("calls")
            .iter()
            .filter_map(|c| c["call"].as_str())
            .collect();
        assert!(
            calls
                .iter()
                .any(|c| c.ends_with("/pending_deployments") && c.starts_with("POST"))
        );
        assert!(
            !calls
                .iter()
                .any(|c| c.ends_with("/deployment_protection_rule"))
        );
        assert!(
            !calls.iter().any(|c| c.contains("/artifacts")),
            "no result artifact"
        );
        assert!(!p.to_string().contains("contents"), "{p}");
        let reviews = repo["reviews"].as_str().unwrap_or_default();
        assert!(reviews.contains("Prevent self-review"), "{p}");
    }

    #[test]
    fn an_app_target_reviews_through_its_own_rule_and_reads_its_artifact() {
        let p = permissions(&[target(json!({
            "app": {"app_id": 1, "installation_id": 2},
            "result_artifact": {"name": "r", "path": "r.json"}
        }))]);
        let calls = p["repositories"]["acme/app"]["calls"].to_string();
        assert!(calls.contains("/deployment_protection_rule"), "{calls}");
        assert!(
            !calls.contains("POST /repos/{owner}/{repo}/actions/runs/{run_id}/pending_deployments")
        );
        assert!(calls.contains("/artifacts/{artifact_id}"), "{calls}");
        let perms: Map<String, Value> =
            serde_json::from_value(p["repositories"]["acme/app"]["permissions"].clone())
                .expect("permissions");
        assert_eq!(perms.len(), 3, "{perms:?}");
        assert!(
            p["repositories"]["acme/app"].get("reviews").is_none(),
            "an App answers its own rule, never as a reviewer: {p}"
        );
    }
}
