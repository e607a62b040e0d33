//! What a newcomer meets first: every example checks, `flowgate check` lists every error in one
//! run, two manifest sources at once are refused, and `flowgate env` names every variable the
//! code reads.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::bin;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Values for the `${NAME}` references of the examples, and the credentials their engines
/// look for when a target is bound (`flowgate check` binds every tool, as `serve` does).
const EXAMPLE_ENV: &[(&str, &str)] = &[
    (
        "NIGHTLY_ETL_ARN",
        "arn:aws:states:eu-west-1:123456789012:stateMachine:nightly-etl",
    ),
    (
        "DEPLOY_ARN",
        "arn:aws:states:eu-west-1:123456789012:stateMachine:deploy",
    ),
    ("GOOGLE_CLOUD_PROJECT", "acme-prod"),
    ("GITHUB_TOKEN", "ghs_example"),
    ("GITLAB_TOKEN", "glpat-example"),
];

/// The `${NAME}` references in a manifest text (`$${` is the literal escape).
fn references(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("${") {
        let escaped = at > 0 && rest.as_bytes()[at - 1] == b'$';
        rest = &rest[at + 2..];
        let end = rest.find('}').unwrap_or(0);
        let name = &rest[..end];
        if !escaped
            && !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
            && !name.starts_with("FLOWGATE_")
        {
            names.insert(name.to_owned());
        }
    }
    names
}

/// `flowgate check --manifest <folder>` succeeds for every folder of examples/ (and the bundled
/// example file): pipeline and workflow files in their subfolders are not read as manifests.
#[test]
fn every_example_checks() {
    let examples = repo().join("examples");
    let mut checked = Vec::new();
    let mut entries: Vec<PathBuf> = std::fs::read_dir(&examples)
        .expect("examples/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    let known: BTreeMap<&str, &str> = EXAMPLE_ENV.iter().copied().collect();
    for path in entries {
        let manifests: Vec<PathBuf> = if path.is_dir() {
            std::fs::read_dir(&path)
                .expect("example folder")
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
                .collect()
        } else if path.extension().is_some_and(|x| x == "yaml") {
            vec![path.clone()]
        } else {
            continue;
        };
        for manifest in &manifests {
            let text = std::fs::read_to_string(manifest).expect("read");
            for name in references(&text) {
                assert!(
                    known.contains_key(name.as_str()),
                    "{} references ${{{name}}}: give it an example value in EXAMPLE_ENV",
                    manifest.display()
                );
            }
        }
        let out = Command::new(bin())
            .arg("check")
            .arg("--manifest")
            .arg(&path)
            .envs(EXAMPLE_ENV.iter().copied())
            .output()
            .expect("run check");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains(", ok"),
            "flowgate check --manifest {}:\n{stdout}{}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        checked.push(path.file_name().map(|n| n.to_string_lossy().into_owned()));
    }
    // The folders of this commit, so a folder that is skipped by mistake shows.
    for folder in [
        "conformance",
        "github-actions",
        "gitlab-ci",
        "google-workflows",
        "stepfunctions",
        "flowgate.yaml",
    ] {
        assert!(
            checked.contains(&Some(folder.to_owned())),
            "{folder} was not checked: {checked:?}"
        );
    }
}

/// Writes `text` and runs `flowgate check` on it: (success, stderr).
fn check(dir: &Path, text: &str) -> (bool, String) {
    let path = dir.join("tools.yaml");
    std::fs::write(&path, text).expect("write");
    let out = Command::new(bin())
        .arg("check")
        .arg(&path)
        .output()
        .expect("run check");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A manifest with two mistakes in one target (a placeholder naming no argument, a misspelt
/// key) and a misspelt key in another tool: one run lists all three, each at its line and
/// column.
#[test]
fn check_lists_every_error_in_one_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (ok, stderr) = check(
        dir.path(),
        "\
tools:
  - name: deploy
    input_schema: {type: object, properties: {service: {type: string}}}
    target:
      engine: stepfunctions
      state_machine_arn: arn:aws:states:eu-west-1:123456789012:stateMachine:deploy
      execution_name: \"deploy-{servce}\"
      regoin: eu-west-1
  - name: report
    tsk: required
    target: {engine: local, command: [echo, hi]}
",
    );
    assert!(!ok);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 4, "three errors and the count: {stderr}");
    assert!(
        lines[0].ends_with("tools.yaml:7:7: stepfunctions target: execution_name: \"deploy-{servce}\": `{servce}` names no argument of the tool's input_schema (declared: service)"),
        "{stderr}"
    );
    assert!(
        lines[1].contains("tools.yaml:8:7: stepfunctions target: unknown field `regoin`"),
        "{stderr}"
    );
    assert!(
        lines[2].contains("tools.yaml:10:5: unknown field `tsk`") && !lines[2].contains("line 10"),
        "located once: {stderr}"
    );
    assert_eq!(lines[3], "3 error(s) in the manifest");

    // A misspelt key inside a target leaves the field it meant missing: that follows from the
    // typo and is not reported, and the keys after it are still checked.
    let (ok, stderr) = check(
        dir.path(),
        "\
tools:
  - name: load
    input_schema: {type: object, properties: {day: {type: string}}}
    target:
      engine: gitlab-ci
      project: acme/etl
      ref: main
      inputs:
        day: \"{{day}}\"
        region: \"{region}\"
      questions:
        apply: {mesage: Apply?}
",
    );
    assert!(!ok);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 4, "three errors and the count: {stderr}");
    assert!(
        lines[0].contains("tools.yaml:9:9:") && lines[0].contains("write `{day}`"),
        "{stderr}"
    );
    assert!(
        lines[1].contains("tools.yaml:10:9:") && lines[1].contains("`{region}`"),
        "{stderr}"
    );
    assert!(
        lines[2].contains("tools.yaml:12:17:") && lines[2].contains("`mesage`"),
        "{stderr}"
    );
    assert!(!stderr.contains("missing field"), "{stderr}");

    // Fixed one by one, the count goes down to none: nothing was a consequence of another.
    let (ok, stderr) = check(
        dir.path(),
        "tools:\n  - name: report\n    task: required\n    target: {engine: local, command: [echo, hi]}\n",
    );
    assert!(ok, "{stderr}");
}

/// `FLOWGATE_MANIFEST_YAML` beside a manifest path would be ignored: serve refuses to start and
/// names both, whichever way the path was given.
#[test]
fn an_inline_manifest_beside_a_path_is_refused_naming_both() {
    let manifest = repo().join("examples/flowgate.yaml");
    let state = tempfile::tempdir().expect("tempdir");
    let serve = |via_env: bool| {
        let mut cmd = Command::new(bin());
        cmd.args(["serve", "--stdio"])
            .arg("--state-dir")
            .arg(state.path())
            .env("FLOWGATE_MANIFEST_YAML", "tools: []\n")
            .env("FLOWGATE_HANDLE_KEYS", crate::support::KEY)
            .stdin(std::process::Stdio::null());
        if via_env {
            cmd.env("FLOWGATE_MANIFEST", &manifest);
        } else {
            cmd.env_remove("FLOWGATE_MANIFEST")
                .arg("--manifest")
                .arg(&manifest);
        }
        cmd.output().expect("run serve")
    };
    for via_env in [true, false] {
        let out = serve(via_env);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{stderr}");
        let named = if via_env {
            format!("FLOWGATE_MANIFEST={}", manifest.display())
        } else {
            format!("--manifest {}", manifest.display())
        };
        assert!(
            stderr.contains(&named) && stderr.contains("FLOWGATE_MANIFEST_YAML are both set"),
            "{stderr}"
        );
    }
}

/// Names the variables flowgate sets for the commands and pipelines it runs (it never reads
/// them), which `flowgate env` rightly leaves out.
const SET_NOT_READ: &[&str] = &["FLOWGATE_TOOL", "FLOWGATE_ARGS", "FLOWGATE_BIN"];

/// Every `"FLOWGATE_..."` string literal in the code that ships (test modules and test-only
/// files left out): the names of variables the binary reads, or sets for what it runs.
fn flowgate_names_in_code() -> BTreeMap<String, PathBuf> {
    fn walk(dir: &Path, into: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                if path.file_name().is_some_and(|n| n != "tests") {
                    walk(&path, into);
                }
            } else if path.extension().is_some_and(|x| x == "rs")
                && !path.file_name().is_some_and(|n| {
                    ["tests.rs", "testing.rs", "properties.rs"].contains(&&*n.to_string_lossy())
                })
            {
                into.push(path);
            }
        }
    }
    let mut files = Vec::new();
    for group in ["crates", "adapters"] {
        for krate in std::fs::read_dir(repo().join(group))
            .expect("crates")
            .flatten()
        {
            walk(&krate.path().join("src"), &mut files);
        }
    }
    let mut names = BTreeMap::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("read source");
        // Test modules sit at the end of a file, after `#[cfg(test)]`.
        let shipped = text.split("#[cfg(test)]").next().unwrap_or_default();
        let mut rest = shipped;
        while let Some(at) = rest.find("\"FLOWGATE_") {
            rest = &rest[at + 1..];
            let len = rest
                .bytes()
                .take_while(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || *b == b'_')
                .count();
            let name = &rest[..len];
            // A prefix (`"FLOWGATE_ARG_"`) is not a variable; a name inside a longer string is
            // text, not a look-up.
            if rest.as_bytes().get(len) == Some(&b'"') && !name.ends_with('_') {
                names.entry(name.to_owned()).or_insert_with(|| file.clone());
            }
        }
    }
    names
}

/// `flowgate env` and the code agree: every FLOWGATE_ variable the code names is listed (save
/// the few flowgate sets for what it runs), and every listed FLOWGATE_ variable is in the code.
#[test]
fn flowgate_env_lists_every_variable_the_code_reads() {
    let out = Command::new(bin())
        .arg("env")
        .output()
        .expect("flowgate env");
    assert!(out.status.success());
    let listed: BTreeSet<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect();
    let in_code = flowgate_names_in_code();
    assert!(
        in_code.contains_key("FLOWGATE_MANIFEST") && in_code.len() > 20,
        "the scan finds the code's variables: {in_code:?}"
    );
    for (name, file) in &in_code {
        if SET_NOT_READ.contains(&name.as_str()) {
            continue;
        }
        assert!(
            listed.contains(name),
            "{name} (in {}) is missing from `flowgate env`",
            file.display()
        );
    }
    for name in listed.iter().filter(|n| n.starts_with("FLOWGATE_")) {
        assert!(
            in_code.contains_key(name),
            "`flowgate env` lists {name}, which no code reads"
        );
    }
    for name in SET_NOT_READ {
        assert!(
            in_code.contains_key(*name),
            "{name} is no longer in the code: drop it from SET_NOT_READ"
        );
    }
}
