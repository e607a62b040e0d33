//! GitLab values to flowgate's, and arguments to GitLab's.

use std::collections::BTreeMap;

use flowgate_core::TaskState;
use flowgate_core::template::Template;
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

/// The pipeline variables of a call: the manifest's templates only (none without them), each
/// value [`unexpanded`]; a template whose argument the call leaves out (without a schema
/// default) sends nothing, so the pipeline's own value applies.
pub(crate) fn variables(
    templates: Option<&BTreeMap<String, Template>>,
    args: &Value,
) -> Vec<(String, String)> {
    templates
        .into_iter()
        .flatten()
        .filter_map(|(k, t)| t.render(args).map(|v| (k.clone(), unexpanded(&v))))
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
    fn variables_are_unexpanded_and_left_out_arguments_unset() {
        let schema = json!({"properties": {"tenant": {}, "note": {}, "tier": {"default": "gold"}}});
        let bind = |s: &str| {
            Template::parse(s)
                .and_then(|t| t.bind(schema.as_object().expect("o")))
                .expect("template")
        };
        let templates: BTreeMap<String, Template> = [
            ("PRICE".to_owned(), bind("{tenant} costs $5 and $$")),
            ("NOTE".to_owned(), bind("{note}")),
            ("TIER".to_owned(), bind("{tier}")),
        ]
        .into();
        let args = json!({"tenant": "acme"});
        assert_eq!(
            variables(Some(&templates), &args),
            vec![
                ("PRICE".to_owned(), "acme costs $$5 and $$$$".to_owned()),
                ("TIER".to_owned(), "gold".to_owned()),
            ],
            "NOTE is left out: the pipeline's own value applies"
        );
        assert!(variables(None, &args).is_empty());
    }

    #[test]
    fn dotenv_files() {
        assert_eq!(
            dotenv("# c\nA=1\nB=\"two words\"\n\nC='x'\n"),
            json!({"A": "1", "B": "two words", "C": "x"})
        );
    }
}
