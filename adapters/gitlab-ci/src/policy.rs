//! The GitLab token scopes and roles a set of GitLab CI tools needs.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::GitLabTarget;

/// One entry per instance and project: the `api` scope (creating pipelines, playing and
/// cancelling jobs need it; `read_api` is not enough) and the Developer role (play a manual
/// job, cancel a pipeline; Maintainer when the ref is protected), with the token variable.
pub fn scopes(targets: &[GitLabTarget]) -> Value {
    let mut by_project: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for t in targets {
        let envs = by_project
            .entry((t.base_url.clone(), t.project.clone()))
            .or_default();
        for env in std::iter::once(&t.token_env).chain(t.trigger_token_env.as_ref()) {
            if !envs.contains(env) {
                envs.push(env.clone());
            }
        }
    }
    Value::Array(
        by_project
            .into_iter()
            .map(|((base, project), envs)| {
                json!({
                    "instance": base,
                    "project": project,
                    "token_scopes": ["api"],
                    "role": "Developer (Maintainer if the ref is protected and Developers may not merge to it)",
                    "token_env": envs,
                })
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_entry_per_project() {
        let t = |p: &str| {
            GitLabTarget::from_manifest(
                json!({"project": p, "ref": "main"}).as_object().expect("o"),
            )
            .expect("t")
        };
        let s = scopes(&[t("a/b"), t("a/b"), t("c/d")]);
        assert_eq!(s.as_array().map(Vec::len), Some(2));
        assert_eq!(s[0]["token_scopes"], json!(["api"]));
        assert_eq!(s[0]["token_env"], json!(["GITLAB_TOKEN"]));
    }
}
