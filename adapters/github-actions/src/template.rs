//! `{argument}` templates for refs and workflow inputs (`release/{version}`); `{{` and `}}`
//! are literal braces.

use serde_json::Value;

/// Checks a template's braces at load, so a broken one never waits for its first call.
pub(crate) fn check(template: &str) -> Result<(), String> {
    render_with(template, |_| Some(String::new())).map(|_| ())
}

/// Renders `template` with the call's arguments (strings as they are, other values as JSON).
pub(crate) fn render(template: &str, arguments: &Value) -> Result<String, String> {
    render_with(template, |name| arguments.get(name).map(as_text))
}

/// An argument as an input's text: GitHub inputs are strings.
pub(crate) fn as_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn render_with(template: &str, lookup: impl Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::new();
    let mut chars = template.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '{' if chars.peek() == Some(&'{') => {
                chars.next();
                out.push('{');
            }
            '}' if chars.peek() == Some(&'}') => {
                chars.next();
                out.push('}');
            }
            '{' => {
                let mut name = String::new();
                let mut closed = false;
                for c in chars.by_ref() {
                    if c == '}' {
                        closed = true;
                        break;
                    }
                    name.push(c);
                }
                if !closed || name.is_empty() || name.contains('{') {
                    return Err(format!("bad placeholder in {template:?}"));
                }
                out.push_str(
                    &lookup(&name).ok_or_else(|| format!("the argument {name:?} is missing"))?,
                );
            }
            '}' => return Err(format!("unmatched '}}' in {template:?}")),
            c => out.push(c),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn renders_and_refuses_broken_templates() {
        let a = json!({"v": "1.2", "n": 3});
        assert_eq!(render("v{v}-{n} {{x}}", &a).expect("render"), "v1.2-3 {x}");
        assert!(render("{missing}", &a).is_err());
        assert!(check("{unclosed").is_err());
        assert!(check("a}b").is_err());
    }
}
