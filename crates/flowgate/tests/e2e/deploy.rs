//! The deploy files stay true to the binary: every environment variable they set is one the
//! binary reads, and the permissions they grant are exactly the ones `flowgate policy` asks for.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

use crate::support::bin;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn yaml(path: &str) -> Value {
    let text = std::fs::read_to_string(repo().join(path)).expect("read deploy file");
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// What `flowgate env` lists.
fn variables_the_binary_reads() -> BTreeSet<String> {
    let out = Command::new(bin())
        .arg("env")
        .output()
        .expect("flowgate env");
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect()
}

fn actions(statements: &Value) -> BTreeSet<String> {
    statements
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|s| match &s["Action"] {
            Value::Array(a) => a
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect::<Vec<_>>(),
            Value::String(one) => vec![one.clone()],
            _ => vec![],
        })
        .collect()
}

fn policy_for(manifest: &str) -> Value {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("m.yaml");
    std::fs::write(&path, manifest).expect("write");
    let out = Command::new(bin())
        .arg("policy")
        .arg(&path)
        .output()
        .expect("flowgate policy");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("policy JSON")
}

const SFN_MANIFEST: &str = "tools:\n  - name: etl\n    target: {engine: stepfunctions, state_machine_arn: 'arn:aws:states:eu-west-1:123456789012:stateMachine:etl'}\n  - name: quick\n    task: forbidden\n    target: {engine: stepfunctions, type: express, state_machine_arn: 'arn:aws:states:eu-west-1:123456789012:stateMachine:quick'}\n  - name: deploy\n    target: {engine: stepfunctions, role_arn: 'arn:aws:iam::123456789012:role/deployer', state_machine_arn: 'arn:aws:states:eu-west-1:123456789012:stateMachine:deploy'}\n";

#[test]
fn flowgate_policy_names_exactly_the_machines_and_actions() {
    let p = policy_for(SFN_MANIFEST);
    let function = &p["aws"]["function"]["Statement"];
    let by_sid = |sid: &str| {
        function
            .as_array()
            .and_then(|a| a.iter().find(|s| s["Sid"] == sid))
            .cloned()
            .unwrap_or(Value::Null)
    };
    assert_eq!(
        by_sid("FlowgateStartAndListExecutions")["Resource"],
        serde_json::json!(["arn:aws:states:eu-west-1:123456789012:stateMachine:etl"])
    );
    assert_eq!(
        by_sid("FlowgateFollowAndStopExecutions")["Resource"],
        serde_json::json!(["arn:aws:states:eu-west-1:123456789012:execution:etl:*"])
    );
    assert_eq!(
        by_sid("FlowgateRunExpressWorkflows")["Action"],
        serde_json::json!(["states:StartSyncExecution"])
    );
    assert_eq!(
        by_sid("FlowgateAssumeToolRoles")["Resource"],
        serde_json::json!(["arn:aws:iam::123456789012:role/deployer"])
    );
    let role = &p["aws"]["roles"]["arn:aws:iam::123456789012:role/deployer"]["Statement"];
    assert!(
        role.to_string().contains("stateMachine:deploy")
            && !role.to_string().contains("stateMachine:etl")
    );
    assert!(
        !function.to_string().contains("stateMachine:deploy"),
        "assumed-role tools are not granted to the function"
    );
    let local = policy_for("tools:\n  - name: a\n    target: {engine: local, command: [true]}\n");
    assert!(local.get("aws").is_none());
    let gcw = policy_for(
        "tools:\n  - name: a\n    target: {engine: google-workflows, project: p1, location: europe-west1, workflow: etl}\n",
    );
    assert_eq!(
        gcw["gcp"],
        serde_json::json!([{"project": "p1", "role": "roles/workflows.invoker", "workflows": ["projects/p1/locations/europe-west1/workflows/etl"]}])
    );
}

#[test]
fn the_sam_template_sets_only_variables_the_binary_reads_and_grants_what_policy_prints() {
    let template = yaml("deploy/lambda/template.yaml");
    let function = &template["Resources"]["FlowgateFunction"]["Properties"];
    let env = function["Environment"]["Variables"]
        .as_object()
        .expect("environment");
    let known = variables_the_binary_reads();
    for name in env.keys() {
        assert!(
            known.contains(name),
            "template sets {name}, which flowgate does not read"
        );
    }
    assert!(env.contains_key("FLOWGATE_MANIFEST"), "a manifest source");
    assert!(env.contains_key("FLOWGATE_HANDLE_KEYS_SSM"), "a key source");
    // The function chooses its callers explicitly: IAM-signed requests only, and flowgate
    // reads the caller from the IAM request context.
    assert_eq!(function["FunctionUrlConfig"]["AuthType"], "AWS_IAM");
    assert_eq!(env["FLOWGATE_AUTH_MODE"], "aws-iam");
    assert!(
        !env.contains_key("FLOWGATE_ALLOW_UNAUTHENTICATED"),
        "the template must not opt out of authentication"
    );
    assert_eq!(function["Handler"], "bootstrap");
    assert_eq!(function["Runtime"], "provided.al2023");

    let policies = template["Resources"]["FlowgateRole"]["Properties"]["Policies"]
        .as_array()
        .expect("policies");
    let granted: BTreeSet<String> = policies
        .iter()
        .flat_map(|p| actions(&p["PolicyDocument"]["Statement"]))
        .collect();
    let standard_only = "tools:\n  - name: etl\n    target: {engine: stepfunctions, state_machine_arn: 'arn:aws:states:eu-west-1:123456789012:stateMachine:etl'}\n";
    let mut wanted = actions(&policy_for(standard_only)["aws"]["function"]["Statement"]);
    wanted.insert("ssm:GetParameter".into()); // FLOWGATE_HANDLE_KEYS_SSM
    assert_eq!(
        granted, wanted,
        "the template grants exactly what flowgate policy asks for"
    );
    let sids: Vec<&str> = policies
        .iter()
        .flat_map(|p| {
            p["PolicyDocument"]["Statement"]
                .as_array()
                .into_iter()
                .flatten()
        })
        .filter_map(|s| s["Sid"].as_str())
        .collect();
    for sid in [
        "FlowgateStartAndListExecutions",
        "FlowgateFollowAndStopExecutions",
        "FlowgateAnswerInputStates",
    ] {
        assert!(sids.contains(&sid), "{sid} missing from the template");
    }
    // The task-token calls are granted on "*" in both, as the Service Authorization Reference
    // requires for actions without a resource type.
    let answer = |statements: &Value| {
        statements
            .as_array()
            .and_then(|a| a.iter().find(|s| s["Sid"] == "FlowgateAnswerInputStates"))
            .map(|s| s["Resource"].clone())
            .unwrap_or(Value::Null)
    };
    let template_answer = policies
        .iter()
        .map(|p| answer(&p["PolicyDocument"]["Statement"]))
        .find(|r| !r.is_null())
        .unwrap_or(Value::Null);
    assert_eq!(template_answer, serde_json::json!("*"));
    assert_eq!(
        answer(&policy_for(standard_only)["aws"]["function"]["Statement"]),
        serde_json::json!("*")
    );
}

#[test]
fn the_cloud_run_service_sets_only_variables_the_binary_reads() {
    let service = yaml("deploy/cloudrun/service.yaml");
    let spec = &service["spec"]["template"]["spec"];
    let container = &spec["containers"][0];
    let known = variables_the_binary_reads();
    let env: Vec<(&str, &str)> = container["env"]
        .as_array()
        .expect("env")
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap_or(""),
                e["value"].as_str().unwrap_or(""),
            )
        })
        .collect();
    for (name, _) in &env {
        assert!(
            known.contains(*name),
            "service.yaml sets {name}, which flowgate does not read"
        );
    }
    let get = |n: &str| env.iter().find(|(k, _)| *k == n).map(|(_, v)| *v);
    assert!(
        get("FLOWGATE_ALLOWED_HOSTS").is_some(),
        "Cloud Run needs its host allowed"
    );
    let key_file = get("FLOWGATE_HANDLE_KEYS_FILE").expect("a key source");
    let mount = container["volumeMounts"][0]["mountPath"]
        .as_str()
        .expect("mount");
    let item = spec["volumes"][0]["secret"]["items"][0]["path"]
        .as_str()
        .expect("item");
    assert_eq!(
        key_file,
        format!("{mount}/{item}"),
        "the key file is the mounted secret"
    );
    // IAP in front, and flowgate verifying IAP's assertion for this service's audience.
    assert_eq!(
        service["metadata"]["annotations"]["run.googleapis.com/iap-enabled"],
        "true"
    );
    assert_eq!(get("FLOWGATE_AUTH_MODE"), Some("google-iap"));
    assert!(
        get("FLOWGATE_AUTH_AUDIENCE").is_some_and(|a| a.starts_with("/projects/")),
        "IAP's audience"
    );
    assert_eq!(get("FLOWGATE_ALLOW_UNAUTHENTICATED"), None);
    assert_eq!(container["startupProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(container["ports"][0]["containerPort"], 8080);
    // The Dockerfile bakes the manifest where the service looks for it.
    let dockerfile = std::fs::read_to_string(repo().join("deploy/Dockerfile")).expect("Dockerfile");
    let manifest = get("FLOWGATE_MANIFEST").expect("a manifest source");
    assert!(
        dockerfile.contains(&format!("FLOWGATE_MANIFEST={manifest}")),
        "Dockerfile and service.yaml agree on the manifest path"
    );
}

/// The container image serves every engine the binary builds by default except `local` (no
/// shell in the image): a Cloud Run deployment granted Workflows roles must be able to serve
/// Workflows tools.
#[test]
fn the_image_builds_every_default_engine_but_local() {
    let cargo =
        std::fs::read_to_string(repo().join("crates/flowgate/Cargo.toml")).expect("Cargo.toml");
    let list = |line: &str| -> BTreeSet<String> {
        line.split([',', '[', ']'])
            .map(|f| f.trim().trim_matches('"').to_owned())
            .filter(|f| !f.is_empty())
            .collect()
    };
    let defaults = cargo
        .lines()
        .find_map(|l| l.trim().strip_prefix("default = "))
        .map(list)
        .expect("crates/flowgate has default features");
    let dockerfile = std::fs::read_to_string(repo().join("deploy/Dockerfile")).expect("Dockerfile");
    let built = dockerfile
        .split_whitespace()
        .skip_while(|w| *w != "--features")
        .nth(1)
        .map(list)
        .expect("the Dockerfile names its features");
    let mut want = defaults;
    want.remove("local");
    assert_eq!(
        built, want,
        "deploy/Dockerfile's --features vs crates/flowgate's defaults"
    );
}
