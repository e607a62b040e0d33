//! The Google Cloud IAM roles a set of Workflows tools needs.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::GcwTarget;

/// One binding per project: `roles/workflows.invoker` (create, get, list and cancel executions,
/// list and send callbacks) for flowgate's service account, naming the workflows it is for.
pub fn roles(targets: &[GcwTarget]) -> Value {
    let mut by_project: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for t in targets {
        let workflows = by_project.entry(&t.project).or_default();
        let parent = t.parent();
        if !workflows.contains(&parent) {
            workflows.push(parent);
        }
    }
    Value::Array(
        by_project
            .into_iter()
            .map(|(project, workflows)| json!({"project": project, "role": "roles/workflows.invoker", "workflows": workflows}))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_invoker_binding_per_project() {
        let t = |p: &str, w: &str| {
            GcwTarget::from_manifest(
                json!({"project": p, "location": "l", "workflow": w})
                    .as_object()
                    .expect("o"),
            )
            .expect("t")
        };
        let r = roles(&[t("a", "x"), t("a", "y"), t("b", "z"), t("a", "x")]);
        assert_eq!(r.as_array().map(Vec::len), Some(2));
        assert_eq!(
            r[0]["workflows"],
            json!([
                "projects/a/locations/l/workflows/x",
                "projects/a/locations/l/workflows/y"
            ])
        );
        assert_eq!(r[1]["role"], "roles/workflows.invoker");
    }
}
