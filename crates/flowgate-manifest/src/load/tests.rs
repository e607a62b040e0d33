//! Manifest parsing tests: good manifests, and the located error of each kind of bad one.

use std::path::Path;

use serde_json::json;

use super::*;

const GOOD: &str = r#"
tools:
  - name: etl
    description: Run the ETL.
    input_schema:
      type: object
      properties:
        day: { type: string }
        rows: { type: integer, minimum: 0 }
      required: [day]
    output_schema:
      type: object
    task: required
    poll_interval_ms: 500
    failure: jsonrpc_error
    target:
      engine: local
      command: ["./etl.sh", "--fast"]
  - name: hello
    ttl_ms: null
    target: { engine: local, command: [echo, hi] }
"#;

fn parse(text: &str) -> Result<Manifest, Vec<ManifestError>> {
    parse_str(text, Path::new("m.yaml"))
}

fn one_error(text: &str) -> ManifestError {
    let mut errors = parse(text).expect_err("should fail");
    assert_eq!(errors.len(), 1, "{errors:?}");
    errors.remove(0)
}

#[test]
fn a_good_manifest_parses_with_defaults() {
    let m = parse(GOOD).expect("parse");
    let etl = m.tool("etl").expect("etl");
    assert_eq!(etl.task, TaskSupport::Required);
    assert_eq!(etl.poll_interval_ms, 500);
    assert_eq!(etl.failure, FailureMode::JsonRpcError);
    assert_eq!(etl.target.engine, "local");
    assert_eq!(etl.target.config["command"], json!(["./etl.sh", "--fast"]));
    assert_eq!(
        etl.target.location.line, 17,
        "the block starts at its first key"
    );
    assert!(etl.output_schema.is_some());
    let hello = m.tool("hello").expect("hello");
    assert_eq!(hello.task, TaskSupport::Optional);
    assert_eq!(hello.ttl, Ttl::Unlimited);
    assert_eq!(etl.ttl, Ttl::EngineDefault);
    assert_eq!(etl.ttl.resolve(Some(5)), Some(5));
    assert_eq!(etl.ttl.resolve(None), Some(Ttl::FALLBACK_MS));
    assert_eq!(hello.poll_interval_ms, DEFAULT_POLL_INTERVAL_MS);
    assert_eq!(
        hello.input_schema,
        json!({"type": "object"}).as_object().cloned().expect("obj")
    );
}

#[test]
fn arguments_are_checked_and_errors_name_the_field() {
    let m = parse(GOOD).expect("parse");
    let etl = m.tool("etl").expect("etl");
    assert!(
        etl.validate_arguments(&json!({"day": "2026-12-01"}))
            .is_ok()
    );
    let errors = etl
        .validate_arguments(&json!({"rows": -1}))
        .expect_err("bad");
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(
        errors
            .iter()
            .any(|e| e.contains("day") && e.contains("required")),
        "{errors:?}"
    );
    assert!(
        errors.iter().any(|e| e.starts_with("argument /rows")),
        "{errors:?}"
    );
}

#[test]
fn unknown_keys_are_errors_with_line_and_column() {
    let e = one_error("tools:\n  - name: a\n    targte: {}\n    target: {engine: local}\n");
    assert_eq!((e.line, e.column), (3, 5), "{e}");
    assert!(e.message.contains("targte"), "{e}");
    assert!(e.to_string().starts_with("m.yaml:3:5: "), "{e}");
}

#[test]
fn bad_values_are_located() {
    let e = one_error("tools:\n  - name: a\n    task: sometimes\n    target: {engine: local}\n");
    assert_eq!(e.line, 3, "{e}");
    let e = one_error("tools:\n  - name: 'bad name'\n    target: {engine: local}\n");
    assert_eq!((e.line, e.column), (2, 11), "{e}");
    let e = one_error(
        "tools:\n  - name: a\n    input_schema: {type: string}\n    target: {engine: local}\n",
    );
    assert_eq!(e.line, 3, "{e}");
    assert!(e.message.contains("type: object"), "{e}");
    let e = one_error(
        "tools:\n  - name: a\n    input_schema: {type: object, properties: {x: {type: 12}}}\n    target: {engine: local}\n",
    );
    assert!(e.message.contains("not a valid JSON Schema"), "{e}");
    let e =
        one_error("tools:\n  - name: a\n    poll_interval_ms: 5\n    target: {engine: local}\n");
    assert_eq!(e.line, 3, "{e}");
    let e = one_error("tools:\n  - name: a\n    target: {command: [x]}\n");
    assert_eq!(e.line, 3, "{e}");
    assert!(e.message.contains("engine"), "{e}");
    let e = one_error("tools:\n  - name: a\n    target: {engine: local}\n   bad indent: 1\n");
    assert_eq!(e.line, 4, "{e}");
}

#[test]
fn duplicates_are_errors() {
    let e = one_error(
        "tools:\n  - name: a\n    target: {engine: local}\n  - name: a\n    target: {engine: local}\n",
    );
    assert_eq!(e.line, 4, "{e}");
    assert!(e.message.contains("declared twice"), "{e}");
}

#[test]
fn env_values_are_resolved_and_missing_ones_are_located() {
    // SAFETY of the test: the variable names are unique to this test.
    let text = "tools:\n  - name: a\n    description: ${FLOWGATE_TEST_DESC_7}\n    target: {engine: local}\n";
    let e = one_error(text);
    assert_eq!(e.line, 3, "{e}");
    assert!(e.message.contains("FLOWGATE_TEST_DESC_7"), "{e}");
    assert!(e.message.contains("environment variable"), "{e}");
    let text = text.replace("FLOWGATE_TEST_DESC_7", "CARGO_PKG_NAME");
    let m = parse(&text).expect("parse");
    assert_eq!(m.tools[0].description, "flowgate-manifest");
}

#[test]
fn folders_load_every_yaml_file_and_catch_cross_file_duplicates() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("a.yaml"),
        "tools:\n  - name: a\n    target: {engine: local}\n",
    )
    .expect("write");
    std::fs::write(
        dir.path().join("b.yml"),
        "tools:\n  - name: b\n    target: {engine: local}\n",
    )
    .expect("write");
    std::fs::write(dir.path().join("notes.txt"), "ignored").expect("write");
    let m = load_path(dir.path()).expect("load");
    assert_eq!(
        m.tools.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
        ["a", "b"]
    );
    std::fs::write(
        dir.path().join("c.yaml"),
        "tools:\n  - name: a\n    target: {engine: local}\n",
    )
    .expect("write");
    let errors = load_path(dir.path()).expect_err("duplicate");
    assert!(errors[0].to_string().contains("c.yaml:2"), "{errors:?}");
}

#[test]
fn elicit_entries_take_the_argument_schema_and_must_name_a_property() {
    let text = "tools:\n  - name: a\n    input_schema: {type: object, properties: {who: {type: string, minLength: 1}}}\n    elicit:\n      - {argument: who, message: Who?, field: name}\n    target: {engine: local}\n";
    let m = parse(text).expect("parse");
    let e = &m.tools[0].elicit[0];
    assert_eq!(
        (e.argument.as_str(), e.field.as_str(), e.message.as_str()),
        ("who", "name", "Who?")
    );
    assert_eq!(e.schema, json!({"type": "string", "minLength": 1}));
    let bad = text.replace("argument: who", "argument: whom");
    let err = one_error(&bad);
    assert_eq!(err.line, 5, "{err}");
    assert!(err.message.contains("whom"), "{err}");
}

#[test]
fn scopes_come_from_the_tool_else_the_manifest_default() {
    let m = parse(
        r#"
default_scopes: [tools.run]
tools:
  - name: own
    scopes: [deploy, deploy, tools.run]
    target: { engine: local, command: [echo] }
  - name: defaulted
    target: { engine: local, command: [echo] }
  - name: open
    scopes: []
    target: { engine: local, command: [echo] }
"#,
    )
    .expect("valid");
    assert_eq!(m.tool("own").expect("own").scopes, ["deploy", "tools.run"]);
    assert_eq!(m.tool("defaulted").expect("d").scopes, ["tools.run"]);
    assert!(m.tool("open").expect("open").scopes.is_empty());
    let plain = parse(GOOD).expect("valid");
    assert!(plain.tools.iter().all(|t| t.scopes.is_empty()));
}

#[test]
fn a_scope_with_a_space_or_quote_is_refused_where_it_is() {
    let e = one_error(
        r#"
tools:
  - name: t
    scopes: ["two words"]
    target: { engine: local, command: [echo] }
"#,
    );
    assert_eq!(e.line, 4, "{e}");
    assert!(e.message.contains("\"two words\" is not a scope"), "{e}");
    let e = one_error("default_scopes: ['a\"b']\ntools: []\n");
    assert!(e.message.contains("default_scopes"), "{e}");
}

#[test]
fn every_unset_variable_is_reported_in_one_run() {
    let text = "tools:\n  - name: a\n    description: ${FLOWGATE_TEST_UNSET_A}\n    target:\n      engine: local\n      command:\n        - ${FLOWGATE_TEST_UNSET_B}\n";
    let errors = parse(text).expect_err("two unset");
    let found: Vec<(u64, u64, bool)> = errors
        .iter()
        .map(|e| (e.line, e.column, e.message.contains("environment variable")))
        .collect();
    assert_eq!(found, [(3, 18, true), (7, 11, true)], "{errors:?}");
    assert!(
        errors[0].message.contains("FLOWGATE_TEST_UNSET_A"),
        "{errors:?}"
    );
    assert!(
        errors[1].message.contains("FLOWGATE_TEST_UNSET_B"),
        "{errors:?}"
    );
}

#[test]
fn target_keys_are_located_each_at_its_own_line_and_column() {
    let text = "tools:\n  - name: a\n    target:\n      engine: local\n      command: [x]\n      inputs:\n        go: {mesage: m}\n";
    let m = parse(text).expect("parse");
    let t = &m.tools[0].target;
    let at = |p: &str| {
        let l = t.locate(Some(p));
        (l.line, l.column)
    };
    assert_eq!(at("command"), (5, 7));
    assert_eq!(at("inputs.go.mesage"), (7, 14));
    assert_eq!(at("command.0"), (5, 17));
    assert_eq!(at("not.written"), (4, 7), "a missing key is at the block");
    assert_eq!((t.locate(None).line, t.locate(None).column), (4, 7));
}

#[test]
fn references_are_expanded_in_every_scalar_style_and_shell_text_is_kept() {
    let text = r##"
tools:
  - name: a
    description: "quoted ${SERVICE}"
    poll_interval_ms: ${POLL}
    input_schema:
      $defs: { day: { type: string, pattern: "^[0-9]+$" } }
      type: object
      properties: { day: { $ref: "#/$defs/day" } }
    target:
      engine: local
      env: { SERVICE: "${SERVICE}", LITERAL: '$${SERVICE}' }
      command:
        - /bin/sh
        - -c
        - |
          echo ${SERVICE} "$HOME" ${FLOWGATE_ARG_DAY:-today} $$
"##;
    let env = |name: &str| match name {
        "SERVICE" => Some("api: \"v2\" #1".to_owned()),
        "POLL" => Some("750".to_owned()),
        _ => None,
    };
    let m = parse_with_env(text, Path::new("t.yaml"), env).unwrap_or_else(|e| panic!("{e:?}"));
    let tool = &m.tools[0];
    assert_eq!(tool.description, "quoted api: \"v2\" #1");
    assert_eq!(tool.poll_interval_ms, 750);
    let target = serde_json::Value::Object(tool.target.config.clone());
    assert_eq!(target["env"]["SERVICE"], "api: \"v2\" #1");
    assert_eq!(target["env"]["LITERAL"], "${SERVICE}");
    assert_eq!(
        target["command"][2],
        "echo api: \"v2\" #1 \"$HOME\" ${FLOWGATE_ARG_DAY:-today} $$\n"
    );
    let schema = serde_json::Value::Object(tool.input_schema.clone()).to_string();
    assert!(schema.contains(r##""$ref":"#/$defs/day""##), "{schema}");
    assert!(schema.contains(r#""pattern":"^[0-9]+$""#), "{schema}");
}

#[test]
fn an_unset_reference_in_a_quoted_or_block_scalar_is_located() {
    let text = "tools:\n  - name: a\n    target:\n      engine: local\n      env: {A: \"x${FLOWGATE_TEST_UNSET_Q}\"}\n      command:\n        - |\n          run ${FLOWGATE_TEST_UNSET_BLOCK}\n";
    let errors = parse_with_env(text, Path::new("t.yaml"), |_| None).expect_err("unset");
    let at: Vec<(u64, u64)> = errors.iter().map(|e| (e.line, e.column)).collect();
    assert_eq!(at, [(5, 18), (8, 15)], "{errors:?}");
}

/// A manifest with mistakes in two tools (a typo'd key the reader stops at, and a bad value
/// the checks find) and two in a third gets all of them in one run, each at its place.
#[test]
fn every_error_of_every_tool_is_reported_in_one_run() {
    let text = "\
default_scopes: [tools.run]
tools:
  - name: a
    targte: {engine: local}
    target: {engine: local}

  - name: b
    poll_interval_ms: 5
    target: {engine: local}
  - name: 'bad name'
    input_schema: {type: string}
    target: {command: [x]}
  - name: fine
    target: {engine: local}
";
    let errors = parse(text).expect_err("four tools, three bad");
    let at: Vec<(u64, u64)> = errors.iter().map(|e| (e.line, e.column)).collect();
    assert_eq!(
        at,
        [(4, 5), (8, 23), (10, 11), (11, 19), (12, 13)],
        "{errors:#?}"
    );
    assert!(errors[0].message.contains("targte"), "{errors:#?}");
    assert!(
        errors[1].message.contains("poll_interval_ms"),
        "{errors:#?}"
    );
    assert!(errors[2].message.contains("tool name"), "{errors:#?}");
    assert!(errors[3].message.contains("type: object"), "{errors:#?}");
    assert!(errors[4].message.contains("engine"), "{errors:#?}");
}

/// Two tools each with an unknown key (the reader's kind of error) are both reported, also
/// when the sequence sits at column 1 and a top-level key follows the tools.
#[test]
fn two_unknown_keys_in_two_tools_are_both_reported() {
    let text = "tools:\n- name: a\n  tsak: required\n  target: {engine: local}\n- name: b\n  target: {engine: local}\n  descripton: x\ndefault_scopes: [s]\n";
    let errors = parse(text).expect_err("two typos");
    let at: Vec<(u64, u64)> = errors.iter().map(|e| (e.line, e.column)).collect();
    assert_eq!(at, [(3, 3), (7, 3)], "{errors:#?}");
}

/// A pipeline or workflow file directly in a manifest folder is named as not a manifest, with
/// the way out (a subfolder, which is not read).
#[test]
fn a_pipeline_beside_the_manifest_is_named_and_a_subfolder_is_not_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("tools.yaml"),
        "tools:\n  - name: a\n    target: {engine: local}\n",
    )
    .expect("write");
    let pipeline = "stages: [plan]\nplan:\n  stage: plan\n  script:\n    - echo ${CI_JOB_ID}\n";
    std::fs::write(dir.path().join("migrate.gitlab-ci.yml"), pipeline).expect("write");
    let errors = load_path(dir.path()).expect_err("a pipeline beside");
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].message.contains("not a flowgate manifest")
            && errors[0].message.contains("subfolder"),
        "{errors:?}"
    );
    std::fs::create_dir(dir.path().join("pipelines")).expect("mkdir");
    std::fs::rename(
        dir.path().join("migrate.gitlab-ci.yml"),
        dir.path().join("pipelines/migrate.gitlab-ci.yml"),
    )
    .expect("move");
    let m = load_path(dir.path()).expect("the pipeline in a subfolder is not read");
    assert_eq!(m.tools.len(), 1);
}

/// The variables a manifest references, for a deployment to set: `${NAME}` in any value, not
/// the escape, not the variables flowgate sets for its commands.
#[test]
fn a_manifests_variables_are_listed_with_their_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("a.yaml"),
        "tools:\n  - name: a\n    description: \"${DESC_X} $${LITERAL}\"\n    target: {engine: local, command: [sh, -c, 'echo ${FLOWGATE_ARG_DAY}'], env: '${B_VAR}'}\n",
    )
    .expect("write");
    std::fs::write(
        dir.path().join("b.yaml"),
        "tools:\n  - name: b\n    target: {engine: stepfunctions, state_machine_arn: '${B_VAR}'}\n",
    )
    .expect("write");
    let names = variables(dir.path()).expect("variables");
    assert_eq!(
        names.keys().map(String::as_str).collect::<Vec<_>>(),
        ["B_VAR", "DESC_X"]
    );
    assert!(names["B_VAR"].ends_with("a.yaml"));
    std::fs::write(
        dir.path().join("c.yaml"),
        "tools:\n  - name: c\n    description: ${FLOWGATE_HANDLE_KEYS}\n    target: {engine: local}\n",
    )
    .expect("write");
    assert!(variables(dir.path()).is_err(), "a refused reference");
}
