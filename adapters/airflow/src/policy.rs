//! What a set of Airflow tools needs of each Airflow: which DAGs, and the permissions the
//! user flowgate authenticates as must hold on them.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use crate::AirflowTarget;

/// The resource permissions of Airflow's FAB auth manager each tool's calls use, on the DAG
/// (`DAG:<dag_id>`, or every DAG): triggering and marking runs, reading task instances, logs
/// and XComs, reading and answering human-in-the-loop steps (`HITL Detail`, Airflow 3.1+).
const PERMISSIONS: [(&str, &str, &str); 9] = [
    ("can_read", "DAGs", "the DAG: whether it is paused"),
    ("can_create", "DAG Runs", "start: trigger a run"),
    ("can_read", "DAG Runs", "get, list: read runs"),
    (
        "can_edit",
        "DAG Runs",
        "cancel, decline: mark a run failed with a note",
    ),
    (
        "can_read",
        "Task Instances",
        "get: the current and failing tasks, waiting steps",
    ),
    (
        "can_read",
        "Task Logs",
        "get: the end of a failed task's log",
    ),
    ("can_read", "XComs", "get: the result task's XCom"),
    (
        "can_read",
        "HITL Detail",
        "get: the questions of waiting steps",
    ),
    (
        "can_edit",
        "HITL Detail",
        "respond: answer a human-in-the-loop step",
    ),
];

/// One entry per Airflow: its DAGs, the credentials' variables, the permissions, and the role
/// that holds them under the simple auth manager.
pub fn permissions(targets: &[AirflowTarget]) -> Value {
    let mut by_base: BTreeMap<String, (BTreeSet<String>, BTreeSet<String>)> = BTreeMap::new();
    for t in targets {
        let (dags, envs) = by_base.entry(t.base_url.clone()).or_default();
        dags.insert(t.dag_id.clone());
        envs.insert(format!(
            "{} (or {} and {})",
            t.token_env, t.username_env, t.password_env
        ));
    }
    Value::Array(
        by_base
            .into_iter()
            .map(|(base, (dags, envs))| {
                json!({
                    "airflow": base,
                    "dags": dags,
                    "credentials_env": envs,
                    "permissions": PERMISSIONS.iter().map(|(action, resource, why)| json!({
                        "action": action,
                        "resource": resource,
                        "on": dags.iter().map(|d| format!("DAG:{d}")).collect::<Vec<_>>(),
                        "for": why,
                    })).collect::<Vec<_>>(),
                    "simple_auth_manager_role": "user (triggers, marks and answers; viewer cannot)",
                    "assigned_users": "a step that names assigned_users is answered only by them: include the flowgate user",
                    "airflow_version": "3.1 or later (human-in-the-loop steps); 3.3 parks a waiting step in awaiting_input",
                })
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(base: &str, dag: &str) -> AirflowTarget {
        let v = json!({"base_url": base, "dag_id": dag});
        AirflowTarget::from_config(v.as_object().expect("o"), &serde_json::Map::new()).expect("t")
    }

    #[test]
    fn one_entry_per_airflow_naming_each_dag() {
        let p = permissions(&[t("http://a", "x"), t("http://a", "y"), t("http://b", "x")]);
        assert_eq!(p.as_array().map(Vec::len), Some(2));
        assert_eq!(p[0]["dags"], json!(["x", "y"]));
        let runs = p[0]["permissions"]
            .as_array()
            .expect("list")
            .iter()
            .find(|e| e["resource"] == "DAG Runs" && e["action"] == "can_create")
            .expect("trigger");
        assert_eq!(runs["on"], json!(["DAG:x", "DAG:y"]));
        assert_eq!(p[1]["airflow"], "http://b");
    }
}
