//! The one template language every engine renders call arguments with: execution names,
//! refs, workflow inputs, pipeline inputs and variables.
//!
//! ```text
//! deploy-{service}-{version}     the arguments `service` and `version`
//! { service }                    spaces around a name are allowed
//! {{literal}}                    `{{` and `}}` are literal braces: `{literal}`
//! ```
//!
//! A template is parsed when its manifest loads (a broken one never waits for its first call)
//! and bound to the tool's `input_schema` ([`Template::bind`]): every placeholder must name a
//! declared property, so a typo is a located load error, not a failed call. Rendering follows
//! these rules, the same for every engine:
//!
//! - a string argument is inserted as it is (byte for byte); any other value as compact JSON;
//! - a template that is exactly one placeholder keeps the argument's JSON type
//!   ([`Template::render_value`]), for engines whose fields are typed (GitLab `spec:inputs`);
//! - an argument the call leaves out (or sends as `null`) takes the schema's `default` when the
//!   property has one; otherwise the whole field is *unset* (`None`): the engine leaves it out,
//!   so the workflow's own default applies, instead of refusing a call that was valid.
//!
//! Placeholders name top-level arguments only; a template cannot reach into nested values.

use std::collections::BTreeMap;
use std::fmt;

use serde_json::{Map, Value};

/// A parsed template (see the module docs for the syntax and the rendering rules).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(try_from = "String")]
pub struct Template {
    source: String,
    parts: Vec<Part>,
    /// The schema `default` of each placeholder that has one (filled by [`Template::bind`]).
    defaults: BTreeMap<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Argument(String),
}

/// Why a template was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct TemplateError(String);

impl TryFrom<String> for Template {
    type Error = TemplateError;

    fn try_from(source: String) -> Result<Self, Self::Error> {
        Template::parse(&source)
    }
}

impl fmt::Display for Template {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

impl Template {
    /// Parses `source`; placeholders are not yet checked against a schema.
    ///
    /// # Errors
    /// An unclosed `{`, a `}` without its `{` (write `}}` for a literal one), an empty
    /// placeholder, or a `{` inside one.
    pub fn parse(source: &str) -> Result<Self, TemplateError> {
        let mut parts = Vec::new();
        let mut text = String::new();
        let mut chars = source.char_indices().peekable();
        while let Some((at, c)) = chars.next() {
            match c {
                '{' if chars.peek().is_some_and(|&(_, n)| n == '{') => {
                    chars.next();
                    text.push('{');
                }
                '}' if chars.peek().is_some_and(|&(_, n)| n == '}') => {
                    chars.next();
                    text.push('}');
                }
                '{' => {
                    let mut name = String::new();
                    let mut closed = false;
                    for (_, c) in chars.by_ref() {
                        match c {
                            '}' => {
                                closed = true;
                                break;
                            }
                            '{' => {
                                return Err(TemplateError(format!(
                                    "{source:?}: `{{` inside the placeholder at byte {at} \
                                     (write `{{{{` for a literal brace)"
                                )));
                            }
                            c => name.push(c),
                        }
                    }
                    if !closed {
                        return Err(TemplateError(format!(
                            "{source:?}: the `{{` at byte {at} is never closed \
                             (write `{{{{` for a literal brace)"
                        )));
                    }
                    let name = name.trim();
                    if name.is_empty() {
                        return Err(TemplateError(format!(
                            "{source:?}: empty placeholder `{{}}` at byte {at}; \
                             name an argument, as in `{{version}}`"
                        )));
                    }
                    if !text.is_empty() {
                        parts.push(Part::Text(std::mem::take(&mut text)));
                    }
                    parts.push(Part::Argument(name.to_owned()));
                }
                '}' => {
                    return Err(TemplateError(format!(
                        "{source:?}: the `}}` at byte {at} closes nothing \
                         (write `}}}}` for a literal brace)"
                    )));
                }
                c => text.push(c),
            }
        }
        if !text.is_empty() {
            parts.push(Part::Text(text));
        }
        Ok(Template {
            source: source.to_owned(),
            parts,
            defaults: BTreeMap::new(),
        })
    }

    /// Checks the placeholders against a tool's `input_schema` and takes the `default` of
    /// each argument that declares one.
    ///
    /// # Errors
    /// A placeholder naming an argument the schema does not declare in `properties`, or the
    /// doubled-brace spelling (`{{name}}`, a literal `{name}`) around a declared argument's
    /// name, which is almost surely meant as a placeholder: the error gives the fix.
    pub fn bind(mut self, input_schema: &Map<String, Value>) -> Result<Self, TemplateError> {
        let properties = input_schema.get("properties").and_then(Value::as_object);
        let declared = |name: &str| properties.is_some_and(|p| p.contains_key(name));
        for name in doubled_brace_names(&self.source) {
            if declared(name) {
                return Err(TemplateError(format!(
                    "{:?}: `{{{{{name}}}}}` is a literal `{{{name}}}` (doubled braces are literal \
                     braces); write `{{{name}}}` for the argument `{name}`",
                    self.source
                )));
            }
        }
        for name in self.arguments() {
            if !declared(name) {
                let known: Vec<&str> = properties
                    .map(|p| p.keys().map(String::as_str).collect())
                    .unwrap_or_default();
                return Err(TemplateError(format!(
                    "{:?}: `{{{name}}}` names no argument of the tool's input_schema (declared: {})",
                    self.source,
                    if known.is_empty() {
                        "none".to_owned()
                    } else {
                        known.join(", ")
                    }
                )));
            }
        }
        let defaults: BTreeMap<String, Value> = self
            .arguments()
            .filter_map(|name| {
                let default = properties?.get(name)?.get("default")?;
                (!default.is_null()).then(|| (name.to_owned(), default.clone()))
            })
            .collect();
        self.defaults = defaults;
        Ok(self)
    }

    /// The template as written in the manifest.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The argument names the template uses, in order (repeats included).
    pub fn arguments(&self) -> impl Iterator<Item = &str> {
        self.parts.iter().filter_map(|p| match p {
            Part::Argument(name) => Some(name.as_str()),
            Part::Text(_) => None,
        })
    }

    /// Whether the template uses no argument (its text is fixed).
    pub fn is_fixed(&self) -> bool {
        self.arguments().next().is_none()
    }

    /// The argument's value for this call: the call's own, else the schema's default; `None`
    /// when the call leaves it out (or sends `null`) and there is no default.
    fn value<'a>(&'a self, name: &str, arguments: &'a Value) -> Option<&'a Value> {
        arguments
            .get(name)
            .filter(|v| !v.is_null())
            .or_else(|| self.defaults.get(name))
    }

    /// The text for a call's arguments; `None` (the field is unset) when an argument it uses
    /// is left out and has no default.
    pub fn render(&self, arguments: &Value) -> Option<String> {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Text(text) => out.push_str(text),
                Part::Argument(name) => match self.value(name, arguments)? {
                    Value::String(s) => out.push_str(s),
                    other => out.push_str(&other.to_string()),
                },
            }
        }
        Some(out)
    }

    /// Like [`Template::render`], but a template that is exactly one placeholder gives the
    /// argument's own JSON value (a number stays a number, an array an array).
    pub fn render_value(&self, arguments: &Value) -> Option<Value> {
        match self.parts.as_slice() {
            [Part::Argument(name)] => self.value(name, arguments).cloned(),
            _ => self.render(arguments).map(Value::String),
        }
    }
}

/// The trimmed names inside `{{name}}` spellings of `source` (doubled braces around a name).
fn doubled_brace_names(source: &str) -> Vec<&str> {
    let mut names = Vec::new();
    let mut rest = source;
    while let Some(start) = rest.find("{{") {
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else { break };
        let inner = after[..end].trim();
        if !inner.is_empty() && !inner.contains(['{', '}']) {
            names.push(inner);
        }
        rest = &after[end + 2..];
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Map<String, Value> {
        let schema = json!({
            "type": "object",
            "properties": {
                "service": {"type": "string"},
                "version": {"type": "string"},
                "count": {"type": "integer"},
                "tags": {"type": "array"},
                "region": {"type": "string", "default": "eu-west-1"},
                "note": {"type": "string"}
            },
            "required": ["service"]
        });
        schema.as_object().cloned().unwrap_or_default()
    }

    fn bound(source: &str) -> Template {
        Template::parse(source)
            .and_then(|t| t.bind(&schema()))
            .expect("template")
    }

    #[test]
    fn placeholders_literals_and_spaces() {
        let t = bound("deploy-{service}-{ version } {{x}} }}");
        let args = json!({"service": "web", "version": "1.2"});
        assert_eq!(t.render(&args).as_deref(), Some("deploy-web-1.2 {x} }"));
        assert_eq!(t.arguments().collect::<Vec<_>>(), ["service", "version"]);
        assert!(!t.is_fixed());
        assert!(bound("main").is_fixed());
        assert_eq!(t.to_string(), "deploy-{service}-{ version } {{x}} }}");
    }

    #[test]
    fn values_arrive_byte_for_byte_and_others_as_json() {
        let t = bound("{note}|{count}|{tags}");
        let tricky = "$HOME $$ ${X} \\n \"q\" 'q'\nline2 ünïcødé €";
        let args = json!({"note": tricky, "count": 3, "tags": ["a", 1]});
        assert_eq!(t.render(&args), Some(format!("{tricky}|3|[\"a\",1]")));
    }

    #[test]
    fn one_placeholder_keeps_the_json_type() {
        let args = json!({"count": 3, "tags": ["a"], "service": "web"});
        assert_eq!(bound("{count}").render_value(&args), Some(json!(3)));
        assert_eq!(
            bound(" {tags} ").render_value(&args),
            Some(json!(" [\"a\"] "))
        );
        assert_eq!(bound("{ tags }").render_value(&args), Some(json!(["a"])));
        assert_eq!(bound("n={count}").render_value(&args), Some(json!("n=3")));
    }

    #[test]
    fn left_out_arguments_take_the_default_or_leave_the_field_unset() {
        let args = json!({"service": "web", "note": null});
        assert_eq!(
            bound("{region}").render(&args).as_deref(),
            Some("eu-west-1")
        );
        assert_eq!(
            bound("{region}").render_value(&args),
            Some(json!("eu-west-1"))
        );
        assert_eq!(bound("v{version}").render(&args), None);
        assert_eq!(
            bound("{note}").render_value(&args),
            None,
            "null is left out"
        );
        assert_eq!(bound("{service}").render(&args).as_deref(), Some("web"));
    }

    #[test]
    fn broken_syntax_is_refused_with_the_fix() {
        for (source, says) in [
            ("x-{a", "never closed"),
            ("a}b", "closes nothing"),
            ("{}", "empty placeholder"),
            ("{ }", "empty placeholder"),
            ("{a{b}}", "inside the placeholder"),
        ] {
            let e = Template::parse(source).expect_err(source).to_string();
            assert!(e.contains(says), "{source}: {e}");
        }
    }

    #[test]
    fn placeholders_must_be_declared_and_the_old_spelling_is_refused() {
        let e = Template::parse("{servce}")
            .expect("syntax")
            .bind(&schema())
            .expect_err("typo");
        assert!(
            e.to_string().contains("`{servce}` names no argument"),
            "{e}"
        );
        assert!(e.to_string().contains("service"), "lists the declared: {e}");
        let e = Template::parse("deploy/{{ service }}")
            .expect("syntax")
            .bind(&schema())
            .expect_err("old spelling");
        assert!(e.to_string().contains("write `{service}`"), "{e}");
        // A doubled-brace word that is no argument is a literal, as documented.
        assert_eq!(
            bound("{{literal}}").render(&json!({})).as_deref(),
            Some("{literal}")
        );
        let e = Template::parse("{x}")
            .expect("syntax")
            .bind(&Map::new())
            .expect_err("nothing declared");
        assert!(e.to_string().contains("declared: none"), "{e}");
    }

    #[test]
    fn deserializes_from_a_manifest_string() {
        let t: Template = serde_json::from_value(json!("a-{b}")).expect("template");
        assert_eq!(t.source(), "a-{b}");
        assert!(serde_json::from_value::<Template>(json!("a-{b")).is_err());
    }
}
