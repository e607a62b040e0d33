//! The template language (`flowgate_core::template`): parsing what a manifest writes, binding it
//! to an input schema, rendering what a call sends.

use flowgate_core::template::Template;
use proptest::prelude::*;
use serde_json::{Map, Value, json};

use crate::cases;

/// Text with its braces doubled: a template that means exactly `text`.
fn escape(text: &str) -> String {
    text.replace('{', "{{").replace('}', "}}")
}

/// A piece of a template: literal text, or an argument's name.
#[derive(Debug, Clone)]
enum Piece {
    Text(String),
    Argument(String),
}

fn piece() -> impl Strategy<Value = Piece> {
    prop_oneof![
        ".{0,12}".prop_map(Piece::Text),
        "[A-Za-z_][A-Za-z0-9_.-]{0,10}".prop_map(Piece::Argument),
    ]
}

fn arbitrary_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        ".{0,20}".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::btree_map(".{0,8}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn schema_declaring<'a>(names: impl Iterator<Item = &'a str>) -> Map<String, Value> {
    let properties: Map<String, Value> = names.map(|n| (n.to_owned(), json!({}))).collect();
    json!({"type": "object", "properties": properties})
        .as_object()
        .cloned()
        .unwrap_or_default()
}

proptest! {
    #![proptest_config(cases(800))]

    /// Any source: parsed or refused with a message; binding and rendering a parsed one, with
    /// any schema and any arguments, never panics.
    #[test]
    fn any_source_parses_or_is_refused(
        source in prop_oneof![".{0,60}", "[{}a-z ]{0,30}"],
        schema in arbitrary_json(),
        arguments in arbitrary_json(),
    ) {
        match Template::parse(&source) {
            Err(e) => prop_assert!(!e.to_string().is_empty()),
            Ok(t) => {
                prop_assert_eq!(t.source(), source.as_str());
                let _ = t.render(&arguments);
                let _ = t.render_value(&arguments);
                if let Some(schema) = schema.as_object()
                    && let Ok(bound) = t.bind(schema)
                {
                    let _ = bound.render(&arguments);
                }
            }
        }
    }

    /// Doubled braces are literal braces: escaped text is a fixed template that renders to
    /// the text itself, byte for byte.
    #[test]
    fn escaped_text_renders_as_itself(text in ".{0,80}") {
        let t = Template::parse(&escape(&text)).expect("escaped text parses");
        prop_assert!(t.is_fixed());
        prop_assert_eq!(t.render(&json!({})), Some(text));
    }

    /// A template built from pieces names its arguments in order, binds to a schema that
    /// declares them (and to no schema that lacks one), and inserts string arguments byte for
    /// byte whatever they hold (braces, quotes, newlines).
    #[test]
    fn placeholders_render_their_arguments_byte_for_byte(
        pieces in proptest::collection::vec(piece(), 0..6),
        values in proptest::collection::vec(".{0,16}", 6),
    ) {
        let source: String = pieces
            .iter()
            .map(|p| match p {
                Piece::Text(t) => escape(t),
                Piece::Argument(a) => format!("{{{a}}}"),
            })
            .collect();
        let t = Template::parse(&source).expect("a built template parses");
        let names: Vec<&str> = pieces
            .iter()
            .filter_map(|p| match p {
                Piece::Argument(a) => Some(a.as_str()),
                Piece::Text(_) => None,
            })
            .collect();
        prop_assert_eq!(t.arguments().collect::<Vec<_>>(), names.clone());
        // Each argument gets the value of its first position.
        let mut arguments = Map::new();
        for (name, value) in names.iter().zip(values.iter().cycle()) {
            arguments.entry(name.to_string()).or_insert(json!(value));
        }
        let expected: String = pieces
            .iter()
            .map(|p| match p {
                Piece::Text(t) => t.clone(),
                Piece::Argument(a) => arguments[a.as_str()].as_str().unwrap_or("").to_owned(),
            })
            .collect();
        let bound = t.clone().bind(&schema_declaring(names.iter().copied()));
        let bound = bound.expect("declared arguments bind");
        prop_assert_eq!(bound.render(&Value::Object(arguments.clone())), Some(expected));
        if let Some((missing, rest)) = names.split_first() {
            let without = schema_declaring(rest.iter().copied().filter(|n| n != missing));
            let refused = t.bind(&without).expect_err("an undeclared placeholder");
            prop_assert!(refused.to_string().contains(missing), "{}", refused);
        }
    }
}
