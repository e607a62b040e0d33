//! GitLab values to flowgate's, and arguments to GitLab's.

use std::collections::BTreeMap;

use flowgate_core::TaskState;
use serde_json::{Map, Value};

/// Maps a pipeline status onto the task model. `manual` is working here; the engine raises it
/// to input_required when a job the manifest names waits. `canceling` is still working: the
/// runner runs the cancelled jobs' `after_script` (up to five minutes) before `canceled`.
/// Unknown statuses are never guessed.
pub(crate) fn state(status: &str) -> TaskState {
    match status {
        "created" | "waiting_for_resource" | "preparing" | "pending" | "scheduled" => {
            TaskState::Submitted
        }
        "running" | "manual" | "canceling" => TaskState::Working,
        "success" | "skipped" => TaskState::Completed,
        "failed" => TaskState::Failed,
        "canceled" => TaskState::Cancelled,
        other => {
            tracing::warn!(
                status = other,
                "GitLab pipeline status flowgate does not map"
            );
            TaskState::Unknown
        }
    }
}

/// The text of an argument for a variable: strings as they are, anything else as JSON.
pub(crate) fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A variable's value as sent, so that the job sees `value` itself: GitLab has no raw flag for
/// pipeline or job variables given through the API, and the runner expands `$NAME`, `${NAME}`
/// and `$$` in them (Go's `os.Expand`); a doubled `$` comes out as one.
pub(crate) fn unexpanded(value: &str) -> String {
    value.replace('$', "$$")
}

/// Replaces each `{{name}}` (spaces allowed) with the argument `name`.
///
/// # Errors
/// The name of an argument the template uses that the call does not have.
pub(crate) fn render(template: &str, args: &Map<String, Value>) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else {
            out.push_str(&rest[start..]);
            return Ok(out);
        };
        let name = after[..end].trim();
        match args.get(name) {
            Some(v) if !v.is_null() => out.push_str(&text(v)),
            _ => return Err(name.to_owned()),
        }
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

/// A template that is exactly one `{{name}}` keeps the argument's JSON value.
pub(crate) fn render_value(template: &str, args: &Map<String, Value>) -> Result<Value, String> {
    let t = template.trim();
    if let Some(name) = t.strip_prefix("{{").and_then(|r| r.strip_suffix("}}"))
        && !name.contains("{{")
    {
        let name = name.trim();
        return args
            .get(name)
            .filter(|v| !v.is_null())
            .cloned()
            .ok_or_else(|| name.to_owned());
    }
    render(template, args).map(Value::String)
}

/// The pipeline variables of a call: the manifest's templates only (none without them), each
/// value [`unexpanded`].
pub(crate) fn variables(
    templates: Option<&BTreeMap<String, String>>,
    args: &Map<String, Value>,
) -> Result<Vec<(String, String)>, String> {
    let Some(templates) = templates else {
        return Ok(Vec::new());
    };
    templates
        .iter()
        .map(|(k, v)| {
            render(v, args)
                .map(|v| (k.clone(), unexpanded(&v)))
                .map_err(|n| format!("variable {k} needs the argument {n}"))
        })
        .collect()
}

/// `KEY=value` lines (GitLab's dotenv report format: no `export`, quotes kept as written
/// except one surrounding pair) as a JSON object.
pub(crate) fn dotenv(text: &str) -> Value {
    let mut out = Map::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some((k, v)) = line.split_once('=') {
            let v = v.trim();
            let v = v
                .strip_prefix('"')
                .and_then(|x| x.strip_suffix('"'))
                .or_else(|| v.strip_prefix('\'').and_then(|x| x.strip_suffix('\'')))
                .unwrap_or(v);
            out.insert(k.trim().to_owned(), Value::String(v.to_owned()));
        }
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_documented_status_maps() {
        let table = [
            ("created", TaskState::Submitted),
            ("waiting_for_resource", TaskState::Submitted),
            ("preparing", TaskState::Submitted),
            ("pending", TaskState::Submitted),
            ("scheduled", TaskState::Submitted),
            ("running", TaskState::Working),
            ("manual", TaskState::Working),
            ("success", TaskState::Completed),
            ("skipped", TaskState::Completed),
            ("failed", TaskState::Failed),
            ("canceled", TaskState::Cancelled),
            ("canceling", TaskState::Working),
            ("exploded", TaskState::Unknown),
        ];
        for (s, want) in table {
            assert_eq!(state(s), want, "{s}");
        }
    }

    #[test]
    fn templates_and_variables() {
        let args = json!({"tenant": "acme", "n": 3, "dry": true});
        let args = args.as_object().expect("o");
        assert_eq!(
            render("deploy/{{ tenant }}", args).as_deref(),
            Ok("deploy/acme")
        );
        assert_eq!(render("{{missing}}", args), Err("missing".to_owned()));
        assert_eq!(render_value("{{n}}", args), Ok(json!(3)));
        assert_eq!(render_value("n={{n}}", args), Ok(json!("n=3")));
        assert!(variables(None, args).expect("none").is_empty());
        let templates: BTreeMap<String, String> =
            [("PRICE".to_owned(), "{{tenant}} costs $5 and $$".to_owned())].into();
        assert_eq!(
            variables(Some(&templates), args).expect("vars"),
            vec![("PRICE".to_owned(), "acme costs $$5 and $$$$".to_owned())]
        );
    }

    #[test]
    fn dotenv_files() {
        assert_eq!(
            dotenv("# c\nA=1\nB=\"two words\"\n\nC='x'\n"),
            json!({"A": "1", "B": "two words", "C": "x"})
        );
    }
}
