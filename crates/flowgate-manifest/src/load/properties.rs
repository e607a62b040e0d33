//! Property-based tests of the manifest loader: YAML of any shape, valid manifests edited the
//! way hands and tools break them, and `${NAME}` references holding any value. Every input
//! loads or is refused with errors that each name a place inside the text; nothing panics.
//!
//! Case counts are bounded for CI; `PROPTEST_CASES=N` runs a longer campaign (docs/testing.md,
//! "Property tests").

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::*;

fn cases(default: u32) -> proptest::test_runner::Config {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default);
    proptest::test_runner::Config {
        cases,
        failure_persistence: None,
        ..proptest::test_runner::Config::default()
    }
}

/// Valid manifests to start edits from: the bundled examples and one using every key.
const SEEDS: [&str; 6] = [
    include_str!("../../../../examples/flowgate.yaml"),
    include_str!("../../../../examples/stepfunctions/tools.yaml"),
    include_str!("../../../../examples/gitlab-ci/tools.yaml"),
    include_str!("../../../../examples/airflow/tools.yaml"),
    r#"
default_scopes: [jobs.run]
tools:
  - name: etl
    description: "Run the ETL for ${REGION}."
    input_schema:
      type: object
      properties:
        day: { type: string, format: date, default: "2026-12-01" }
        rows: { type: integer, minimum: 0 }
      required: [day]
    output_schema: { type: object }
    task: required
    poll_interval_ms: 500
    ttl_ms: null
    failure: jsonrpc_error
    elicit:
      - argument: day
        message: Which day?
    scopes: []
    target:
      engine: stepfunctions
      state_machine_arn: "arn:aws:states:${REGION}:123456789012:stateMachine:etl"
      execution_name: "etl-{day}-{{literal}}"
      command: ["./etl.sh", '${REGION}', "$${NOT_EXPANDED}", "$HOME"]
"#,
    "tools:\n  - name: hello\n    target: { engine: local, command: [echo, hi] }\n",
];

fn env(name: &str) -> Option<String> {
    match name {
        "REGION" => Some("eu-west-1".to_owned()),
        // What the examples reference.
        n if n.starts_with("FLOWGATE_TEST") || n.ends_with("_TOKEN") => Some("x".to_owned()),
        _ => None,
    }
}

/// Loads `text`; on refusal checks that every error is located inside it and says something.
fn load_checked(text: &str, env: impl Fn(&str) -> Option<String>) -> Result<Manifest, String> {
    let file = Path::new("m.yaml");
    match parse_with_env(text, file, env) {
        Ok(m) => Ok(m),
        Err(errors) => {
            if errors.is_empty() {
                return Err("refused with no error".into());
            }
            // YAML's line breaks: LF, CRLF, a lone CR.
            let lines = text.replace("\r\n", "\n").matches(['\n', '\r']).count() as u64 + 1;
            for e in &errors {
                if e.file != file || e.line == 0 || e.column == 0 || e.line > lines {
                    return Err(format!("{e:?} is not a place in the {lines}-line text"));
                }
                if e.message.trim().is_empty() {
                    return Err(format!("{e:?} says nothing"));
                }
            }
            Ok(Manifest::default())
        }
    }
}

/// Text made of YAML's own tokens, to reach the parser's corners rather than fail at once.
fn yaml_like() -> impl Strategy<Value = String> {
    let token = prop_oneof![
        Just("tools:".to_owned()),
        Just("\n".to_owned()),
        Just("  ".to_owned()),
        Just("- ".to_owned()),
        Just("name: ".to_owned()),
        Just("target: ".to_owned()),
        Just("engine: local".to_owned()),
        Just("{".to_owned()),
        Just("}".to_owned()),
        Just("[".to_owned()),
        Just("]".to_owned()),
        Just(", ".to_owned()),
        Just(": ".to_owned()),
        Just("&a ".to_owned()),
        Just("*a".to_owned()),
        Just("<<: ".to_owned()),
        Just("!!str ".to_owned()),
        Just("!custom ".to_owned()),
        Just("|\n".to_owned()),
        Just(">-\n".to_owned()),
        Just("\"".to_owned()),
        Just("'".to_owned()),
        Just("# c\n".to_owned()),
        Just("---\n".to_owned()),
        Just("...\n".to_owned()),
        Just("? ".to_owned()),
        Just("${X}".to_owned()),
        Just("$${".to_owned()),
        Just("${".to_owned()),
        Just("\t".to_owned()),
        Just("\u{feff}".to_owned()),
        Just("%YAML 1.2\n".to_owned()),
        "[a-z_]{1,8}",
        "-?[0-9]{1,20}",
        ".{1,4}",
    ];
    proptest::collection::vec(token, 0..60).prop_map(|t| t.concat())
}

/// One edit of a manifest's text, at a line or a character position.
#[derive(Debug, Clone)]
enum Edit {
    DeleteChars(usize, usize),
    InsertText(usize, String),
    DeleteLine(usize),
    DuplicateLine(usize),
    SwapLines(usize, usize),
    Indent(usize, i8),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (any::<usize>(), 1usize..6).prop_map(|(at, n)| Edit::DeleteChars(at, n)),
        (
            any::<usize>(),
            prop_oneof![
                Just(":".to_owned()),
                Just("- ".to_owned()),
                Just("{".to_owned()),
                Just("]".to_owned()),
                Just("\"".to_owned()),
                Just("'".to_owned()),
                Just("*x".to_owned()),
                Just("&x ".to_owned()),
                Just("${".to_owned()),
                Just("${UNSET_VAR}".to_owned()),
                Just("${FLOWGATE_HANDLE_KEYS}".to_owned()),
                Just("\n".to_owned()),
                Just("\t".to_owned()),
                Just("#".to_owned()),
                Just("null".to_owned()),
                Just("99999999999999999999999".to_owned()),
                ".{1,3}",
            ]
        )
            .prop_map(|(at, s)| Edit::InsertText(at, s)),
        any::<usize>().prop_map(Edit::DeleteLine),
        any::<usize>().prop_map(Edit::DuplicateLine),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Edit::SwapLines(a, b)),
        (any::<usize>(), -4i8..=4).prop_map(|(at, by)| Edit::Indent(at, by)),
    ]
}

fn apply(text: &str, edit: &Edit) -> String {
    let mut chars: Vec<char> = text.chars().collect();
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let pick = |i: usize, len: usize| if len == 0 { 0 } else { i % len };
    match edit {
        Edit::DeleteChars(at, n) => {
            let at = pick(*at, chars.len());
            let end = (at + n).min(chars.len());
            chars.drain(at..end);
            return chars.into_iter().collect();
        }
        Edit::InsertText(at, s) => {
            let at = pick(*at, chars.len() + 1);
            chars.splice(at..at, s.chars());
            return chars.into_iter().collect();
        }
        Edit::DeleteLine(at) if !lines.is_empty() => {
            lines.remove(pick(*at, lines.len()));
        }
        Edit::DuplicateLine(at) if !lines.is_empty() => {
            let at = pick(*at, lines.len());
            lines.insert(at, lines[at].clone());
        }
        Edit::SwapLines(a, b) if !lines.is_empty() => {
            let (a, b) = (pick(*a, lines.len()), pick(*b, lines.len()));
            lines.swap(a, b);
        }
        Edit::Indent(at, by) if !lines.is_empty() => {
            let at = pick(*at, lines.len());
            let line = &mut lines[at];
            if *by > 0 {
                line.insert_str(0, &" ".repeat(*by as usize));
            } else {
                let strip = line
                    .chars()
                    .take((-*by) as usize)
                    .take_while(|c| *c == ' ')
                    .count();
                line.drain(..strip);
            }
        }
        _ => {}
    }
    lines.join("\n") + "\n"
}

/// A `${V}` reference in one scalar style, and what the loaded description must then be.
fn styled(style: u8, value: &str) -> (String, String) {
    match style % 5 {
        0 => ("description: ${V}".to_owned(), value.to_owned()),
        1 => ("description: \"${V}\"".to_owned(), value.to_owned()),
        2 => ("description: '${V}'".to_owned(), value.to_owned()),
        3 => ("description: |-\n      ${V}".to_owned(), value.to_owned()),
        _ => ("description: >-\n      ${V}".to_owned(), value.to_owned()),
    }
}

proptest! {
    #![proptest_config(cases(300))]

    /// Any text: loaded, or refused with located errors.
    #[test]
    fn any_text_loads_or_is_refused_at_a_place(
        text in prop_oneof![".{0,200}", yaml_like()],
    ) {
        let checked = load_checked(&text, env);
        prop_assert!(checked.is_ok(), "{}", checked.err().unwrap_or_default());
    }

    /// Valid manifests after a few edits: loaded, or refused with located errors.
    #[test]
    fn edited_manifests_load_or_are_refused_at_a_place(
        seed in 0..SEEDS.len(),
        edits in proptest::collection::vec(edit(), 1..5),
    ) {
        let mut text = SEEDS[seed].to_owned();
        for e in &edits {
            text = apply(&text, e);
        }
        let checked = load_checked(&text, env);
        prop_assert!(checked.is_ok(), "{}\n--- text ---\n{text}", checked.err().unwrap_or_default());
    }

    /// A reference's value is the field's value, byte for byte, in every scalar style, however
    /// it looks (quotes, colons, `#`, braces, `${`, anchors, newlines): a value never changes
    /// the document's structure.
    #[test]
    fn referenced_values_arrive_byte_for_byte(
        style in any::<u8>(),
        value in prop_oneof![
            "[^\u{0}-\u{8}\u{b}-\u{1f}\u{7f}-\u{9f}\u{feff}]{0,40}",
            Just("a: b".to_owned()),
            Just("\"quoted\" and 'single'".to_owned()),
            Just("# not a comment".to_owned()),
            Just("- item".to_owned()),
            Just("${V}".to_owned()),
            Just("$${V}".to_owned()),
            Just("*alias".to_owned()),
            Just("line one\nline two".to_owned()),
            Just("{ engine: evil }".to_owned()),
            Just("\n  - name: injected".to_owned()),
        ],
    ) {
        let (line, expected) = styled(style, &value);
        let text = format!(
            "tools:\n  - name: t\n    {line}\n    target: {{ engine: local, command: [echo] }}\n"
        );
        let vars: HashMap<&str, &str> = [("V", value.as_str())].into();
        let loaded = parse_with_env(&text, Path::new("m.yaml"), |n| vars.get(n).map(|v| (*v).to_owned()));
        let manifest = loaded.map_err(|e| format!("{e:?}"));
        prop_assert!(manifest.is_ok(), "{:?} in style {}: {:?}", value, style % 5, manifest);
        let manifest = manifest.unwrap_or_default();
        prop_assert_eq!(manifest.tools.len(), 1);
        prop_assert_eq!(&manifest.tools[0].description, &expected, "style {}", style % 5);
        prop_assert_eq!(manifest.tools[0].target.config.len(), 1, "the target kept its shape");
    }

    /// An unset reference is an error at its own line and column, wherever it is.
    #[test]
    fn unset_references_are_errors_at_their_place(
        prefix in "[a-z ]{0,20}",
        name in "[A-Z][A-Z0-9_]{0,12}",
        blank_lines in 0usize..4,
    ) {
        let text = format!(
            "tools:\n{}  - name: t\n    description: \"{prefix}${{{name}}}\"\n    target: {{ engine: local, command: [echo] }}\n",
            "\n".repeat(blank_lines)
        );
        let errors = parse_with_env(&text, Path::new("m.yaml"), |_| None)
            .expect_err("an unset variable");
        prop_assert_eq!(errors.len(), 1, "{:?}", errors);
        let e = &errors[0];
        prop_assert_eq!(e.line, 3 + blank_lines as u64);
        prop_assert_eq!(e.column, 19 + prefix.chars().count() as u64, "{}", e);
        prop_assert!(e.message.contains(&name), "{}", e);
    }
}

/// Inputs crafted to exhaust a parser: each is refused (or loaded) quickly and without
/// unbounded memory or stack.
#[test]
fn resource_bombs_are_refused_quickly() {
    let laughs = {
        let mut t = String::from(
            "a0: &a0 [\"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\"]\n",
        );
        for i in 1..12 {
            let refs = vec![format!("*a{}", i - 1); 9].join(", ");
            t.push_str(&format!("a{i}: &a{i} [{refs}]\n"));
        }
        t.push_str("tools:\n  - name: t\n    description: x\n    input_schema: { type: object, properties: { p: { default: *a11 } } }\n    target: { engine: local, command: [echo] }\n");
        t
    };
    let deep_flow = format!("tools: {}{}\n", "[".repeat(100_000), "]".repeat(100_000));
    let deep_block = {
        let mut t = String::from("tools:\n  - name: t\n    input_schema:\n");
        for depth in 0..5_000 {
            t.push_str(&" ".repeat(6 + depth));
            t.push_str("a:\n");
        }
        t
    };
    let long_scalar = format!(
        "tools:\n  - name: t\n    description: \"{}\"\n    target: {{ engine: local }}\n",
        "x".repeat(4 << 20)
    );
    let many_refs = format!(
        "tools:\n  - name: t\n    description: \"{}\"\n    target: {{ engine: local }}\n",
        "${UNSET}".repeat(100_000)
    );
    for (what, text) in [
        ("billion laughs", laughs),
        ("deep flow nesting", deep_flow),
        ("deep block nesting", deep_block),
        ("a 4 MB scalar", long_scalar),
        ("100k unset references", many_refs),
    ] {
        let started = Instant::now();
        let checked = load_checked(&text, env);
        assert!(
            checked.is_ok(),
            "{what}: {}",
            checked.err().unwrap_or_default()
        );
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{what} took {:?}",
            started.elapsed()
        );
    }
}
