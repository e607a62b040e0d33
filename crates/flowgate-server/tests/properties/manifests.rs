//! Manifests whose targets hold templates, loaded and bound to an engine the way
//! `flowgate serve` does (`flowgate_manifest::parse_str`, then `ToolSet::build`, whose engine
//! factories parse each template and bind it to the tool's `input_schema` through
//! `TargetSpec::template`): any template text loads or is refused with an error at its key's
//! line and column.

use std::path::Path;
use std::sync::Arc;

use flowgate_core::testing::FakeEngine;
use flowgate_core::{Engine, Registry, TargetError};
use flowgate_server::ToolSet;
use proptest::prelude::*;
use serde_json::Value;

use crate::cases;

/// A registry whose `templated` engine reads every string under `target.templates` as a
/// template, as the engines do for their template fields.
fn registry() -> Registry {
    let mut registry = Registry::new();
    let engine = FakeEngine::new();
    registry.register(
        "templated",
        Box::new(move |spec| {
            let templates = spec
                .config
                .get("templates")
                .and_then(Value::as_object)
                .ok_or_else(|| TargetError::whole("templated target: templates is required"))?;
            for (key, source) in templates {
                let source = source.as_str().ok_or_else(|| {
                    TargetError::at(format!("templates.{key}"), "a template is a string")
                })?;
                spec.template("templated", &format!("templates.{key}"), source)?;
            }
            Ok(Arc::new(engine.clone()) as Arc<dyn Engine>)
        }),
    );
    registry
}

/// A YAML double-quoted scalar holding `text`: `"` and `\\` escaped, and every character YAML
/// does not let a document hold as it is (controls, DEL, C1, U+FEFF, U+FFFE/F) as `\\u`.
fn quoted(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        let printable = matches!(c, ' '..='~' | '\u{a0}'..='\u{d7ff}' | '\u{e000}'..='\u{fffd}' | '\u{10000}'..)
            && c != '\u{feff}';
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if printable => out.push(c),
            c if (c as u32) <= 0xffff => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push_str(&format!("\\U{:08x}", c as u32)),
        }
    }
    out.push('"');
    out
}

proptest! {
    #![proptest_config(cases(300))]

    /// Any template text in a target: the tool loads, or the error is at the template's own
    /// line, names its key, and says what is wrong.
    #[test]
    fn templates_in_targets_load_or_are_refused_at_their_key(
        source in prop_oneof![
            ".{0,30}",
            "[{}a-z_ ]{0,20}",
            Just("{{service}}".to_owned()),
            Just("deploy-{service}-{version}".to_owned()),
            Just("{ service }".to_owned()),
        ],
        declared in proptest::collection::btree_set("[a-z_]{1,8}", 0..3),
        blank_lines in 0usize..3,
    ) {
        let properties: String = declared
            .iter()
            .filter(|name| *name != "service")
            .map(|name| format!("{name}: {{ type: string }}, "))
            .collect();
        let text = format!(
            "tools:\n  - name: t\n    input_schema: {{ type: object, properties: {{ {properties}service: {{ type: string }} }} }}\n{}    target:\n      engine: templated\n      templates:\n        name: {}\n",
            "\n".repeat(blank_lines),
            quoted(&source),
        );
        let manifest = flowgate_manifest::parse_str(&text, Path::new("m.yaml"));
        let manifest = manifest.map_err(|e| format!("{e:?}"));
        prop_assert!(manifest.is_ok(), "the YAML itself is valid: {:?}", manifest);
        let manifest = manifest.unwrap_or_default();
        match ToolSet::build(&manifest, &registry()) {
            Ok(tools) => prop_assert!(tools.get("t").is_some()),
            Err(errors) => {
                prop_assert_eq!(errors.len(), 1, "{:?}", errors);
                let e = &errors[0];
                prop_assert_eq!(e.line, 7 + blank_lines as u64, "{}", e);
                prop_assert!(e.message.contains("templates.name"), "{}", e);
                prop_assert!(e.message.len() > "templates.name".len() + 20, "{}", e);
            }
        }
    }
}
