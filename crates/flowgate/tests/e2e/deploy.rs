//! The deploy files stay true to the binary: every environment variable they set is one the
//! binary reads, and the permissions they grant are exactly the ones `flowgate policy` asks for.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
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
    // Besides flowgate's own, the variables the manifest baked into the image names.
    let baked = std::fs::read_to_string(repo().join("examples/stepfunctions/tools.yaml"))
        .expect("the baked manifest");
    let baked_vars: BTreeSet<String> = baked
        .split("${")
        .skip(1)
        .filter_map(|rest| rest.split_once('}').map(|(name, _)| name.to_owned()))
        .collect();
    for (name, _) in &env {
        assert!(
            known.contains(*name) || baked_vars.contains(*name),
            "service.yaml sets {name}, which neither flowgate nor the baked manifest reads"
        );
    }
    for name in &baked_vars {
        assert!(
            env.iter().any(|(k, _)| k == name),
            "the baked manifest needs {name}, which service.yaml does not set: the service would not start"
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
    // flowgate holds requests no longer than the service lets them run: it is told the
    // timeout, and its synchronous wait fits inside it.
    let timeout = spec["timeoutSeconds"].as_u64().expect("timeoutSeconds");
    assert_eq!(
        get("FLOWGATE_REQUEST_TIMEOUT_SECS"),
        Some(timeout.to_string().as_str()),
        "flowgate bounds its holds by the service's timeoutSeconds"
    );
    let sync_wait: u64 = get("FLOWGATE_SYNC_WAIT_SECS")
        .and_then(|v| v.parse().ok())
        .expect("FLOWGATE_SYNC_WAIT_SECS");
    assert!(
        sync_wait < timeout,
        "the synchronous wait fits the request timeout"
    );
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

/// What scripts/deploy-artifacts built (`FLOWGATE_TEST_DEPLOY_ARTIFACTS`): the Lambda zip, the
/// image's exported filesystem and its configuration.
fn artifacts() -> PathBuf {
    match std::env::var_os("FLOWGATE_TEST_DEPLOY_ARTIFACTS") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => panic!(
            "FLOWGATE_TEST_DEPLOY_ARTIFACTS is not set: this test runs what users deploy. Run \
             scripts/test, or `scripts/deploy-artifacts DIR` (a release build: minutes) and set \
             FLOWGATE_TEST_DEPLOY_ARTIFACTS=DIR"
        ),
    }
}

/// A Step Functions tool on moto whose machine waits `seconds`, as a manifest line.
async fn waiting_tool(name: &str, seconds: u64) -> String {
    use flowgate_stepfunctions::testing::{
        admin_client, create_machine, moto_url, pass_wait_pass, unique,
    };
    let url = moto_url();
    let arn = create_machine(
        &admin_client(&url),
        &unique("deploy"),
        &pass_wait_pass(seconds),
    )
    .await;
    format!(
        "tools:\n  - name: {name}\n    input_schema: {{type: object, properties: {{name: {{type: string}}}}}}\n    poll_interval_ms: 200\n    target: {{engine: stepfunctions, state_machine_arn: \"{arn}\", endpoint_url: \"{url}\"}}\n"
    )
}

/// The zip cargo-lambda built, unpacked as Lambda unpacks it into /var/task with a manifest
/// beside it (what deploy/lambda/README.md says to add), runs its own `bootstrap` under the
/// emulator: a Step Functions tool on moto as a task, to its result.
#[tokio::test]
async fn the_lambda_zip_runs_a_task_flow_under_the_emulator() {
    let zip = artifacts().join("bootstrap.zip");
    let task_root = tempfile::tempdir().expect("tempdir");
    let unzipped = Command::new("unzip")
        .arg("-q")
        .arg(&zip)
        .arg("-d")
        .arg(task_root.path())
        .status()
        .expect("unzip");
    assert!(unzipped.success(), "unzip {}", zip.display());
    let tools = task_root.path().join("tools");
    std::fs::create_dir_all(&tools).expect("tools");
    std::fs::write(tools.join("sfn.yaml"), waiting_tool("greet", 1).await).expect("manifest");
    let bootstrap = task_root.path().join("bootstrap");
    let lambda = crate::lambda::Lambda::start_function(
        &bootstrap,
        task_root.path(),
        crate::lambda::Config {
            env: vec![
                ("FLOWGATE_AUTH_MODE".into(), "aws-iam".into()),
                ("FLOWGATE_MANIFEST".into(), "/var/task/tools".into()),
                ("FLOWGATE_LOG_FORMAT".into(), "json".into()),
            ],
            ..crate::lambda::Config::default()
        },
    );
    let task_id = lambda
        .started("greet", serde_json::json!({"name": "zip"}))
        .await;
    for _ in 0..120 {
        let got = lambda
            .mcp(
                "tasks/get",
                &task_id,
                serde_json::json!({"taskId": task_id}),
            )
            .await;
        match got["result"]["status"].as_str() {
            Some("completed") => {
                let text = got["result"]["result"]["content"][0]["text"]
                    .as_str()
                    .unwrap_or_default();
                assert!(text.contains("\"greeting\":\"hello zip\""), "{got}");
                return;
            }
            Some("working") => tokio::time::sleep(std::time::Duration::from_millis(250)).await,
            _ => panic!("{got}"),
        }
    }
    panic!("the task did not complete");
}

/// The (source, destination) of each COPY in a Dockerfile's final stage (from `FROM
/// scratch` on).
fn final_stage_copies(dockerfile: &str) -> Vec<(String, String)> {
    dockerfile
        .lines()
        .skip_while(|l| !l.starts_with("FROM scratch"))
        .filter(|l| l.starts_with("COPY "))
        .filter_map(|l| {
            let words: Vec<&str> = l
                .split_whitespace()
                .skip(1)
                .filter(|w| !w.starts_with("--"))
                .collect();
            match words.as_slice() {
                [source, destination] => Some(((*source).to_owned(), (*destination).to_owned())),
                _ => None,
            }
        })
        .collect()
}

/// Every file and folder under `root`, as absolute paths inside it.
fn tree(root: &Path) -> BTreeSet<String> {
    fn walk(root: &Path, dir: &Path, into: &mut BTreeSet<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let inside = format!("/{}", path.strip_prefix(root).unwrap_or(&path).display());
            into.insert(inside);
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                walk(root, &path, into);
            }
        }
    }
    let mut all = BTreeSet::new();
    walk(root, root, &mut all);
    all
}

/// The image CI built from the Dockerfile's final stage holds exactly the files that stage
/// copies (and the folders they sit in): the published Dockerfile and CI ship the same image.
#[test]
fn the_ci_image_holds_exactly_what_the_dockerfile_final_stage_copies() {
    let dockerfile = std::fs::read_to_string(repo().join("deploy/Dockerfile")).expect("Dockerfile");
    let rootfs = artifacts().join("rootfs");
    let mut want = BTreeSet::new();
    let mut add_with_parents = |path: &str| {
        let mut path = PathBuf::from(path);
        loop {
            if path.as_os_str() != "/" {
                want.insert(path.display().to_string());
            }
            if !path.pop() {
                break;
            }
        }
    };
    for (source, dest) in final_stage_copies(&dockerfile) {
        // The build stage's /out is what deploy/image/stage assembled.
        let staged = artifacts()
            .join("image-build")
            .join(source.trim_start_matches('/'));
        if staged.is_dir() {
            // A folder's contents land in the destination.
            let dest = dest.trim_end_matches('/');
            for inner in tree(&staged) {
                add_with_parents(&format!("{dest}{inner}"));
            }
            if !dest.is_empty() {
                add_with_parents(dest);
            }
        } else {
            add_with_parents(&dest);
        }
    }
    let have = tree(&rootfs);
    assert_eq!(
        have, want,
        "the CI image's files vs deploy/Dockerfile's final stage"
    );
    assert!(want.contains("/flowgate") && want.contains("/tmp"));
}

/// The SAM template runs the architecture it is told (x86_64 by default: what CI builds and
/// runs), and the Cloud Run service holds requests as long as flowgate may.
#[test]
fn the_template_takes_the_architecture_as_a_parameter() {
    let template = yaml("deploy/lambda/template.yaml");
    let param = &template["Parameters"]["Architecture"];
    assert_eq!(param["Default"], "x86_64");
    assert_eq!(
        param["AllowedValues"],
        serde_json::json!(["x86_64", "arm64"])
    );
    let function = &template["Resources"]["FlowgateFunction"]["Properties"];
    assert_eq!(
        function["Architectures"],
        serde_json::json!([{"Ref": "Architecture"}])
    );
    // The URL streams by default, and flowgate is told the URL's mode.
    assert_eq!(
        template["Parameters"]["InvokeMode"]["Default"],
        "RESPONSE_STREAM"
    );
    assert_eq!(
        function["FunctionUrlConfig"]["InvokeMode"],
        serde_json::json!({"Ref": "InvokeMode"})
    );
    assert_eq!(
        function["Environment"]["Variables"]["FLOWGATE_LAMBDA_INVOKE_MODE"],
        serde_json::json!({"Ref": "InvokeMode"})
    );
}

/// The image's configuration as buildah recorded it (OCI config: User, Env, Entrypoint, Cmd).
fn image_config() -> Value {
    let text = std::fs::read_to_string(artifacts().join("image.json")).expect("image.json");
    let inspect: Value = serde_json::from_str(&text).expect("image.json is JSON");
    inspect["OCIv1"]["config"].clone()
}

/// The image's filesystem copied into a fresh folder, with the mount points a container
/// runtime adds (/proc, /dev and its usual devices).
fn container_root() -> tempfile::TempDir {
    let root = tempfile::tempdir().expect("tempdir");
    let copied = Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", artifacts().join("rootfs").display()))
        .arg(root.path())
        .status()
        .expect("cp");
    assert!(copied.success());
    for dir in ["proc", "dev"] {
        std::fs::create_dir_all(root.path().join(dir)).expect("mount point");
    }
    for dev in ["null", "zero", "random", "urandom"] {
        std::fs::write(root.path().join("dev").join(dev), "").expect("device mount point");
    }
    root
}

/// Files outside /tmp, /proc and /dev with their size and modification time.
fn outside_tmp(root: &Path) -> Vec<(String, u64, Option<std::time::SystemTime>)> {
    tree(root)
        .into_iter()
        .filter(|p| {
            !["/tmp/", "/proc/", "/dev/"]
                .iter()
                .any(|d| p.starts_with(d))
        })
        .map(|p| {
            let meta = std::fs::symlink_metadata(root.join(p.trim_start_matches('/')));
            let (len, modified) = meta
                .map(|m| (m.len(), m.modified().ok()))
                .unwrap_or((0, None));
            (p, len, modified)
        })
        .collect()
}

/// The process started from `exe` inside `root` among `pid`'s descendants.
fn descendant_running(pid: u32, root: &Path) -> Option<u32> {
    let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).ok()?;
    for child in children
        .split_whitespace()
        .filter_map(|c| c.parse::<u32>().ok())
    {
        let exe = std::fs::read_link(format!("/proc/{child}/exe")).ok();
        if exe.is_some_and(|e| e.starts_with(root)) {
            return Some(child);
        }
        if let Some(found) = descendant_running(child, root) {
            return Some(found);
        }
    }
    None
}

/// The image as Cloud Run runs it, without a container runtime (none can start here): its
/// exported filesystem as a read-only root (chroot) with a tmpfs /tmp, in PID and mount
/// namespaces of its own (unshare), as the image's user, with the image's entrypoint, command
/// and environment and `PORT` set. `/mcp` and the service's probe paths answer; a request in
/// flight when SIGTERM comes is answered and the process is gone within Cloud Run's 10 s; no
/// file outside /tmp changed.
#[tokio::test]
async fn the_image_serves_as_its_user_from_a_read_only_root_and_drains_on_sigterm() {
    let config = image_config();
    let user = config["User"].as_str().expect("the image names its user");
    assert_eq!(user, "65532:65532", "a non-root user");
    let root = container_root();
    let tools = root.path().join("etc/flowgate/tools");
    std::fs::write(
        tools.join("zz-test.yaml"),
        waiting_tool("slow_greet", 3).await,
    )
    .expect("manifest");
    let before = outside_tmp(root.path());

    let port = crate::support::free_port();
    let mut argv: Vec<String> = Vec::new();
    for part in ["Entrypoint", "Cmd"] {
        argv.extend(
            config[part]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(str::to_owned),
        );
    }
    let script = format!(
        "set -e; r=\"$1\"; shift; mount --make-rprivate /; mount --bind \"$r\" \"$r\"; \
         mount -o remount,bind,ro \"$r\"; mount -t tmpfs -o mode=1777,size=64m tmpfs \"$r/tmp\"; \
         mount -t proc proc \"$r/proc\"; for d in null zero random urandom; do \
         mount --bind /dev/$d \"$r/dev/$d\"; done; exec chroot --userspec={user} \"$r\" \"$@\""
    );
    let mut cmd = Command::new("unshare");
    cmd.args(["--pid", "--fork", "--mount", "sh", "-c", &script, "sh"])
        .arg(root.path())
        .args(&argv)
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("PORT", port.to_string())
        .env("FLOWGATE_HANDLE_KEYS", crate::support::KEY)
        .env("FLOWGATE_ALLOW_UNAUTHENTICATED", "true")
        .env("FLOWGATE_ALLOWED_HOSTS", "*")
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit());
    // The variables service.yaml sets for the baked manifest.
    let service = yaml("deploy/cloudrun/service.yaml");
    let container = &service["spec"]["template"]["spec"]["containers"][0];
    for var in container["env"].as_array().into_iter().flatten() {
        if let (Some(k), Some(v)) = (var["name"].as_str(), var["value"].as_str())
            && k.ends_with("_ARN")
        {
            cmd.env(k, v);
        }
    }
    for pair in config["Env"].as_array().into_iter().flatten() {
        if let Some((k, v)) = pair.as_str().and_then(|p| p.split_once('=')) {
            cmd.env(k, v);
        }
    }
    let mut namespace = cmd.spawn().expect("unshare (this test runs as root)");
    crate::support::wait_for_port(port);
    let server = descendant_running(namespace.id(), root.path()).expect("the server process");
    let status = std::fs::read_to_string(format!("/proc/{server}/status")).expect("status");
    let uid = status
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .unwrap_or_default()
        .to_owned();
    assert!(
        uid.split_whitespace().skip(1).all(|u| u == "65532"),
        "runs as the image's user: {uid}"
    );

    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    for probe in ["startupProbe", "livenessProbe"] {
        let path = container[probe]["httpGet"]["path"]
            .as_str()
            .expect("a probe path");
        let answer = http.get(format!("{base}{path}")).send().await.expect(probe);
        assert_eq!(answer.status(), 200, "{probe} {path}");
    }
    let mcp = |body: Value| {
        http.post(format!("{base}/mcp"))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25")
            .body(body.to_string())
            .send()
    };
    let listed = mcp(serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .await
        .expect("tools/list")
        .text()
        .await
        .expect("body");
    assert!(
        listed.contains("slow_greet") && listed.contains("nightly_etl"),
        "the baked manifest and the test tool: {listed}"
    );

    // A synchronous call (no task) in flight when SIGTERM comes: it finishes, and so does the
    // process, within Cloud Run's 10 s.
    let call = tokio::spawn(mcp(serde_json::json!({
        "jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "slow_greet", "arguments": {"name": "drain"}}
    })));
    tokio::time::sleep(std::time::Duration::from_millis(700)).await;
    let signalled = std::time::Instant::now();
    let killed = Command::new("kill")
        .args(["-TERM", &server.to_string()])
        .status()
        .expect("kill");
    assert!(killed.success());
    let answer = call
        .await
        .expect("join")
        .expect("the in-flight call is answered");
    let text = answer.text().await.expect("body");
    assert!(text.contains("hello drain"), "{text}");
    let exit = tokio::task::spawn_blocking(move || namespace.wait())
        .await
        .expect("join")
        .expect("wait");
    let took = signalled.elapsed();
    assert!(
        took < std::time::Duration::from_secs(10),
        "drained in {took:?}"
    );
    assert!(exit.success(), "exit {exit:?}");
    assert_eq!(
        outside_tmp(root.path()),
        before,
        "nothing outside /tmp changed"
    );
}

/// On Cloud Run a request ends after the service's timeoutSeconds, which it passes as
/// `FLOWGATE_REQUEST_TIMEOUT_SECS`: a synchronous call is answered (and its run stopped)
/// before then, whatever `FLOWGATE_SYNC_WAIT_SECS` says.
#[tokio::test]
async fn a_synchronous_call_ends_before_the_request_timeout() {
    let state = tempfile::tempdir().expect("tempdir");
    let server = crate::support::Server::start_with(
        state.path(),
        None,
        &[
            ("FLOWGATE_SYNC_WAIT_SECS", "60"),
            ("FLOWGATE_REQUEST_TIMEOUT_SECS", "5"),
        ],
        None,
    );
    let body = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "long_job",
        "arguments": {"steps": 30},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "deploy-test", "version": "0"},
            "io.modelcontextprotocol/clientCapabilities": {},
        },
    }});
    let started = std::time::Instant::now();
    let answer = reqwest::Client::new()
        .post(&server.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "long_job")
        .body(body.to_string())
        .timeout(std::time::Duration::from_secs(30))
        .send()
        .await
        .expect("answered")
        .text()
        .await
        .expect("body");
    let took = started.elapsed();
    assert!(
        took < std::time::Duration::from_secs(5),
        "answered after {took:?}: {answer}"
    );
    assert!(answer.contains("stopped"), "{answer}");
}

/// deploy/image/stage bakes the manifest it is given (a folder as it is, subfolders included)
/// where the image's FLOWGATE_MANIFEST points, and the Dockerfile passes its MANIFEST build
/// argument to it (the Step Functions example by default).
#[test]
fn the_image_bakes_the_manifest_it_is_given() {
    let dockerfile = std::fs::read_to_string(repo().join("deploy/Dockerfile")).expect("Dockerfile");
    assert!(
        dockerfile.contains("ARG MANIFEST=examples/stepfunctions")
            && dockerfile.contains("deploy/image/stage target/deploy/flowgate /out \"$MANIFEST\""),
        "the build argument reaches the stage"
    );
    let mine = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(mine.path().join("pipelines")).expect("mkdir");
    std::fs::copy(
        repo().join("examples/gitlab-ci/tools.yaml"),
        mine.path().join("tools.yaml"),
    )
    .expect("copy");
    std::fs::write(
        mine.path().join("pipelines/x.gitlab-ci.yml"),
        "stages: [a]\n",
    )
    .expect("write");
    let out = tempfile::tempdir().expect("tempdir");
    let staged = out.path().join("out");
    let stage = |manifest: Option<&Path>| {
        let mut cmd = Command::new(repo().join("deploy/image/stage"));
        cmd.arg(bin()).arg(&staged);
        if let Some(m) = manifest {
            cmd.arg(m);
        }
        let done = cmd.output().expect("run deploy/image/stage");
        assert!(
            done.status.success(),
            "{}",
            String::from_utf8_lossy(&done.stderr)
        );
        tree(&staged.join("etc/flowgate/tools"))
    };
    assert_eq!(
        stage(Some(mine.path())),
        BTreeSet::from([
            "/pipelines".to_owned(),
            "/pipelines/x.gitlab-ci.yml".to_owned(),
            "/tools.yaml".to_owned()
        ])
    );
    let baked =
        std::fs::read_to_string(staged.join("etc/flowgate/tools/tools.yaml")).expect("baked");
    assert!(
        baked.contains("engine: gitlab-ci"),
        "your manifest, not the example"
    );
    assert!(
        stage(None).contains("/tools.yaml")
            && std::fs::read_to_string(staged.join("etc/flowgate/tools/tools.yaml"))
                .expect("baked")
                .contains("engine: stepfunctions"),
        "the Step Functions example by default"
    );
    let missing = Command::new(repo().join("deploy/image/stage"))
        .arg(bin())
        .arg(&staged)
        .arg(mine.path().join("nope"))
        .output()
        .expect("run");
    assert!(
        !missing.status.success(),
        "a manifest that is not there stops the build"
    );
}

/// deploy/lambda/with-manifest-variables turns each `${NAME}` of a manifest into a stack
/// parameter and the function's variable NAME (scripts/deploy-artifacts runs cfn-lint and sam
/// validate on what it writes); a variable Lambda reserves is refused.
#[test]
fn the_lambda_template_takes_the_manifests_variables_as_parameters() {
    let run = |manifest: &Path| {
        Command::new("python3")
            .arg(repo().join("deploy/lambda/with-manifest-variables"))
            .arg(manifest)
            .env("FLOWGATE_BIN", bin())
            .output()
            .expect("run with-manifest-variables")
    };
    let out = run(&repo().join("examples/stepfunctions"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let template: Value =
        serde_saphyr::from_str(&String::from_utf8_lossy(&out.stdout)).expect("a YAML template");
    let original = yaml("deploy/lambda/template.yaml");
    let env = &template["Resources"]["FlowgateFunction"]["Properties"]["Environment"]["Variables"];
    for (variable, parameter) in [
        ("NIGHTLY_ETL_ARN", "NightlyEtlArn"),
        ("DEPLOY_ARN", "DeployArn"),
    ] {
        assert_eq!(
            template["Parameters"][parameter]["Type"], "String",
            "{template}"
        );
        assert_eq!(
            env[variable],
            serde_json::json!({"Ref": parameter}),
            "{env}"
        );
    }
    // Everything else is the template as it was.
    let before =
        original["Resources"]["FlowgateFunction"]["Properties"]["Environment"]["Variables"]
            .as_object()
            .expect("variables");
    for (name, value) in before {
        assert_eq!(&env[name], value, "{name}");
    }
    assert_eq!(
        template["Resources"]["FlowgateRole"],
        original["Resources"]["FlowgateRole"]
    );
    for (name, value) in original["Parameters"].as_object().expect("parameters") {
        assert_eq!(&template["Parameters"][name], value, "{name}");
    }

    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("tools.yaml"),
        "tools:\n  - name: a\n    target: {engine: stepfunctions, state_machine_arn: '${AWS_REGION}'}\n",
    )
    .expect("write");
    let refused = run(dir.path());
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("AWS_REGION"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
}

/// The Cloud Run variant without IAP: Google ID tokens verified by flowgate for the service
/// URL with the callers listed, Cloud Run's invoker check off (it would strip the signature),
/// the handle keys and the engine's token from Secret Manager, and only variables flowgate
/// reads.
#[test]
fn the_id_token_cloud_run_service_verifies_callers_and_reads_secrets_from_secret_manager() {
    let service = yaml("deploy/cloudrun/service-id-token.yaml");
    let annotations = &service["metadata"]["annotations"];
    assert_eq!(
        annotations["run.googleapis.com/invoker-iam-disabled"],
        "true"
    );
    assert!(annotations.get("run.googleapis.com/iap-enabled").is_none());
    let container = &service["spec"]["template"]["spec"]["containers"][0];
    let known = variables_the_binary_reads();
    let env = container["env"].as_array().expect("env");
    let get = |n: &str| env.iter().find(|e| e["name"] == n);
    for e in env {
        let name = e["name"].as_str().unwrap_or_default();
        assert!(
            known.contains(name),
            "it sets {name}, which flowgate does not read"
        );
    }
    assert_eq!(
        get("FLOWGATE_AUTH_MODE").expect("mode")["value"],
        "google-id-token"
    );
    assert!(
        get("FLOWGATE_AUTH_AUDIENCE")
            .and_then(|e| e["value"].as_str())
            .is_some_and(|a| a.starts_with("https://")),
        "the audience is the service URL"
    );
    assert!(
        get("FLOWGATE_AUTH_ALLOWED").is_some(),
        "the callers let through"
    );
    for secret in ["FLOWGATE_HANDLE_KEYS", "GITLAB_TOKEN"] {
        let e = get(secret).expect(secret);
        assert!(
            e.get("value").is_none(),
            "{secret} is never written in the file"
        );
        assert!(
            e["valueFrom"]["secretKeyRef"]["name"].is_string(),
            "{secret} comes from Secret Manager"
        );
    }
    // The manifest its header bakes needs no variable the service does not set.
    let out = Command::new(bin())
        .args(["env", "--manifest"])
        .arg(repo().join("examples/gitlab-ci"))
        .output()
        .expect("flowgate env --manifest");
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "", "no variables");
    let text = std::fs::read_to_string(repo().join("deploy/cloudrun/service-id-token.yaml"))
        .expect("read");
    assert!(text.contains("--build-arg MANIFEST=examples/gitlab-ci"));
    let dockerfile = std::fs::read_to_string(repo().join("deploy/Dockerfile")).expect("Dockerfile");
    let manifest = get("FLOWGATE_MANIFEST")
        .and_then(|e| e["value"].as_str())
        .expect("manifest");
    assert!(dockerfile.contains(&format!("FLOWGATE_MANIFEST={manifest}")));
}
