//! Airflow values to flowgate's and back: run states, the call's marker in `conf`, the form of
//! a human-in-the-loop step and the answer to it, and a failed task's log.

use std::collections::BTreeMap;

use flowgate_core::TaskState;
use flowgate_core::template::Template;
use serde_json::{Map, Value, json};

use crate::api::HitlDetail;

/// The `conf` key that marks a run as a flowgate call: `{"key": <idempotency key>,
/// "principal": <principal tag>}`. Airflow answers 409 for a taken `dag_run_id` without
/// comparing `conf`, so this is how a start tells its own run from another's.
pub(crate) const MARKER: &str = "flowgate";
/// What every run id flowgate makes starts with.
pub(crate) const RUN_PREFIX: &str = "flowgate-";
/// The note flowgate leaves on a run it cancelled.
pub(crate) const CANCELLED_NOTE: &str = "flowgate: cancelled";
/// The start of the note flowgate leaves on a run whose question was declined.
pub(crate) const DECLINED_NOTE: &str = "flowgate: declined ";
/// The form field that carries the chosen option(s), unless a param has that name.
const CHOICE: &str = "choice";
/// The field it falls back to.
const CHOICE_FALLBACK: &str = "chosen_options";

/// The run id of a call: `flowgate-<idempotency key>` (41 characters of `[a-z0-9-]`).
pub(crate) fn run_id(key: &str) -> String {
    format!("{RUN_PREFIX}{key}")
}

/// Whether `run` is a run id flowgate makes.
pub(crate) fn is_run_id(run: &str) -> bool {
    run.strip_prefix(RUN_PREFIX).is_some_and(|key| {
        key.len() == 32 && key.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

/// The call marker a run's `conf` carries: (key, principal tag).
pub(crate) fn marker(conf: Option<&Value>) -> Option<(&str, &str)> {
    let m = conf?.get(MARKER)?;
    Some((m.get("key")?.as_str()?, m.get("principal")?.as_str()?))
}

/// Maps a DAG run state onto the task model; the engine refines failed (cancelled, declined)
/// and running (a step waiting for an answer). Unknown states are never guessed.
pub(crate) fn state(run_state: &str) -> TaskState {
    match run_state {
        "queued" => TaskState::Submitted,
        "running" => TaskState::Working,
        "success" => TaskState::Completed,
        "failed" => TaskState::Failed,
        other => {
            tracing::warn!(state = other, "Airflow DAG run state flowgate does not map");
            TaskState::Unknown
        }
    }
}

/// The `conf` of a call: the manifest's templates (a key whose argument the call leaves out,
/// without a schema default, is not sent), or every argument under its own name; and the
/// call's marker.
pub(crate) fn conf(
    templates: Option<&BTreeMap<String, Template>>,
    args: &Value,
    key: &str,
    principal: &str,
) -> Value {
    let mut out = Map::new();
    match templates {
        Some(templates) => {
            for (k, t) in templates {
                if let Some(v) = t.render_value(args) {
                    out.insert(k.clone(), v);
                }
            }
        }
        None => {
            if let Some(given) = args.as_object() {
                out.extend(
                    given
                        .iter()
                        .filter(|(_, v)| !v.is_null())
                        .map(|(k, v)| (k.clone(), v.clone())),
                );
            }
        }
    }
    out.insert(
        MARKER.to_owned(),
        json!({"key": key, "principal": principal}),
    );
    Value::Object(out)
}

/// The question key of a waiting step: `<task_id>/<map_index>/<try_number>` (unique for the
/// run's life: a retried step waits again under a new try).
pub(crate) fn question_key(d: &HitlDetail) -> String {
    let ti = &d.task_instance;
    format!("{}/{}/{}", ti.task_id, ti.map_index, ti.try_number)
}

/// The task id, map index and try a question key names.
pub(crate) fn parse_question_key(key: &str) -> Option<(&str, i64, u32)> {
    let mut parts = key.rsplitn(3, '/');
    let tr = parts.next()?.parse().ok()?;
    let map_index = parts.next()?.parse().ok()?;
    let task = parts.next()?;
    crate::config::valid_id(task).then_some((task, map_index, tr))
}

/// The options an accepting answer chooses among: every option but the one a decline picks
/// (an `ApprovalOperator` then needs no choice at all: accepting approves).
fn accept_options<'a>(d: &'a HitlDetail, decline_option: &str) -> Vec<&'a str> {
    let rest: Vec<&str> = d
        .options
        .iter()
        .map(String::as_str)
        .filter(|o| *o != decline_option)
        .collect();
    if rest.is_empty() {
        d.options.iter().map(String::as_str).collect()
    } else {
        rest
    }
}

/// The name of the choice field of a step's form.
fn choice_field(d: &HitlDetail) -> &'static str {
    if d.params.contains_key(CHOICE) {
        CHOICE_FALLBACK
    } else {
        CHOICE
    }
}

/// The question's text: the subject, then the body.
pub(crate) fn message(d: &HitlDetail) -> String {
    match d.body.as_deref().map(str::trim).filter(|b| !b.is_empty()) {
        Some(body) => format!("{}\n\n{body}", d.subject),
        None => d.subject.clone(),
    }
}

/// The form of a step: a choice among its options (single, or several when `multiple`) unless
/// accepting can only mean one option, and each param with its schema, description and
/// default.
pub(crate) fn form(d: &HitlDetail, decline_option: &str) -> Value {
    let mut properties = Map::new();
    let mut required = Vec::new();
    let options = accept_options(d, decline_option);
    if options.len() > 1 {
        let defaults: Vec<&str> = d
            .defaults
            .iter()
            .flatten()
            .map(String::as_str)
            .filter(|o| options.contains(o))
            .collect();
        let mut field = if d.multiple {
            json!({"type": "array", "items": {"type": "string", "enum": options},
                   "title": "Options", "uniqueItems": true, "minItems": 1})
        } else {
            json!({"type": "string", "enum": options, "title": "Option"})
        };
        match (d.multiple, defaults.first()) {
            (true, Some(_)) => field["default"] = json!(defaults),
            (false, Some(first)) => field["default"] = json!(first),
            (_, None) => required.push(Value::String(choice_field(d).to_owned())),
        }
        properties.insert(choice_field(d).to_owned(), field);
    }
    for (name, param) in &d.params {
        let mut field = match param.get("schema") {
            Some(Value::Object(s)) if !s.is_empty() => Value::Object(s.clone()),
            _ => json!({"type": "string"}),
        };
        if let Some(description) = param.get("description").and_then(Value::as_str) {
            field["description"] = Value::String(description.to_owned());
        }
        match param.get("value") {
            Some(v) if !v.is_null() => field["default"] = v.clone(),
            _ => required.push(Value::String(name.clone())),
        }
        properties.insert(name.clone(), field);
    }
    let mut schema = json!({"type": "object", "properties": properties});
    if !required.is_empty() {
        schema["required"] = Value::Array(required);
    }
    schema
}

/// What an accepting answer sends: the chosen options and the params, checked against the
/// step (the options it offers, one or several, every param known); `Err` says what is wrong.
pub(crate) fn answer(
    d: &HitlDetail,
    decline_option: &str,
    content: &Map<String, Value>,
) -> Result<(Vec<String>, Map<String, Value>), String> {
    let options = accept_options(d, decline_option);
    let field = choice_field(d);
    let chosen: Vec<String> = match content.get(field) {
        None | Some(Value::Null) if options.len() == 1 => vec![options[0].to_owned()],
        None | Some(Value::Null) => match d.defaults.as_ref().filter(|v| !v.is_empty()) {
            Some(defaults) => defaults.clone(),
            None => return Err(format!("{field} is required: one of {options:?}")),
        },
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| format!("{field} holds {v}, not an option"))
            })
            .collect::<Result<_, _>>()?,
        Some(other) => return Err(format!("{field} is {other}, not an option")),
    };
    if chosen.is_empty() {
        return Err(format!("{field} chooses nothing: choose from {options:?}"));
    }
    if chosen.len() > 1 && !d.multiple {
        return Err(format!(
            "{field} chooses {chosen:?}: this step takes one option"
        ));
    }
    if let Some(bad) = chosen.iter().find(|c| !d.options.contains(c)) {
        return Err(format!(
            "{bad:?} is not an option of this step: {:?}",
            d.options
        ));
    }
    let mut params = Map::new();
    for (name, value) in content {
        if name == field {
            continue;
        }
        if !d.params.contains_key(name) {
            return Err(format!(
                "{name} is not a field of this step: {:?}",
                d.params.keys().collect::<Vec<_>>()
            ));
        }
        params.insert(name.clone(), value.clone());
    }
    // Airflow validates params_input as a whole: a param left out keeps its default.
    for (name, param) in &d.params {
        if !params.contains_key(name)
            && let Some(v) = param.get("value").filter(|v| !v.is_null())
        {
            params.insert(name.clone(), v.clone());
        }
    }
    Ok((chosen, params))
}

/// The params a decline sends (each param's default: Airflow checks them even then).
pub(crate) fn default_params(d: &HitlDetail) -> Map<String, Value> {
    d.params
        .iter()
        .filter_map(|(name, p)| {
            p.get("value")
                .filter(|v| !v.is_null())
                .map(|v| (name.clone(), v.clone()))
        })
        .collect()
}

/// The last `lines` lines of a task's log (Airflow's structured entries: the event, its level,
/// and an exception's type and message), each at most 500 characters.
pub(crate) fn log_tail(entries: &[Value], lines: usize) -> String {
    // Airflow merges the log's sources (the task's logger, its stdout) in no fixed order:
    // the entries' timestamps give theirs. The "log message source details" group names the
    // log file (a path of this run): left out, like every group marker.
    let mut sorted: Vec<&Value> = entries.iter().collect();
    sorted.sort_by_key(|e| e.get("timestamp").and_then(Value::as_str).unwrap_or(""));
    let mut out: Vec<String> = Vec::new();
    let mut in_sources = false;
    for e in sorted {
        let line = match e {
            Value::String(s) => s.clone(),
            Value::Object(o) => {
                let event = o.get("event").and_then(Value::as_str).unwrap_or_default();
                if event == "::group::Log message source details" {
                    in_sources = true;
                }
                if event.starts_with("::group::") || event == "::endgroup::" {
                    if event == "::endgroup::" {
                        in_sources = false;
                    }
                    continue;
                }
                if in_sources {
                    continue;
                }
                let level = o.get("level").and_then(Value::as_str).unwrap_or("");
                let mut line = if level.is_empty() {
                    event.to_owned()
                } else {
                    format!("[{level}] {event}")
                };
                for detail in o
                    .get("error_detail")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let t = detail.get("exc_type").and_then(Value::as_str).unwrap_or("");
                    let v = detail
                        .get("exc_value")
                        .and_then(Value::as_str)
                        .unwrap_or("");
                    line.push_str(&format!(": {t}: {v}"));
                }
                line
            }
            other => other.to_string(),
        };
        out.push(line.chars().take(500).collect());
    }
    let skip = out.len().saturating_sub(lines);
    out[skip..].join("\n")
}

/// An ISO 8601 duration as Airflow writes a timedelta (`PT4S`, `P1DT2H30M`, `PT0.5S`).
pub(crate) fn duration(text: &str) -> Option<std::time::Duration> {
    let rest = text.strip_prefix('P')?;
    let (days, time) = match rest.split_once('T') {
        Some((d, t)) => (d, t),
        None => (rest, ""),
    };
    let mut seconds = 0f64;
    let mut read = |part: &str, units: &[(char, f64)]| -> Option<()> {
        let mut number = String::new();
        for c in part.chars() {
            if c.is_ascii_digit() || c == '.' {
                number.push(c);
            } else {
                let (_, scale) = units.iter().find(|(u, _)| *u == c)?;
                seconds += number.parse::<f64>().ok()? * scale;
                number.clear();
            }
        }
        number.is_empty().then_some(())
    };
    read(days, &[('W', 604_800.0), ('D', 86_400.0)])?;
    read(time, &[('H', 3_600.0), ('M', 60.0), ('S', 1.0)])?;
    std::time::Duration::try_from_secs_f64(seconds).ok()
}

/// The exception a task's log ends with (`ValueError: no rows for ...`).
pub(crate) fn exception(entries: &[Value]) -> Option<String> {
    entries.iter().rev().find_map(|e| {
        let detail = e.get("error_detail")?.as_array()?.first()?;
        let t = detail.get("exc_type")?.as_str()?;
        let v = detail.get("exc_value")?.as_str()?;
        Some(format!("{t}: {}", v.chars().take(1000).collect::<String>()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn detail(v: Value) -> HitlDetail {
        let mut base = json!({
            "options": ["Approve", "Reject"], "subject": "Deploy?", "body": "Now.",
            "defaults": null, "multiple": false, "params": {},
            "created_at": "2026-12-07T08:35:10Z", "response_received": false,
            "task_instance": {"task_id": "approve", "map_index": -1, "state": "awaiting_input", "try_number": 1}
        });
        if let (Some(b), Value::Object(v)) = (base.as_object_mut(), v) {
            b.extend(v);
        }
        serde_json::from_value(base).expect("detail")
    }

    #[test]
    fn every_run_state_maps() {
        for (s, want) in [
            ("queued", TaskState::Submitted),
            ("running", TaskState::Working),
            ("success", TaskState::Completed),
            ("failed", TaskState::Failed),
            ("exploded", TaskState::Unknown),
        ] {
            assert_eq!(state(s), want, "{s}");
        }
    }

    #[test]
    fn run_ids_and_markers() {
        let key = "0123456789abcdef0123456789abcdef";
        assert!(is_run_id(&run_id(key)));
        for bad in ["", "flowgate-", "manual__2026", &format!("flowgate-{key}0")] {
            assert!(!is_run_id(bad), "{bad}");
        }
        let c = conf(None, &json!({"day": "x", "gone": null}), key, "p1");
        assert_eq!(c["day"], "x");
        assert!(c.get("gone").is_none());
        assert_eq!(marker(Some(&c)), Some((key, "p1")));
        assert_eq!(marker(Some(&json!({"day": 1}))), None);
    }

    #[test]
    fn question_keys_read_back() {
        let d = detail(json!({}));
        let key = question_key(&d);
        assert_eq!(key, "approve/-1/1");
        assert_eq!(parse_question_key(&key), Some(("approve", -1, 1)));
        assert_eq!(parse_question_key("a.b/3/2"), Some(("a.b", 3, 2)));
        for bad in ["never-asked", "x/y/1", "/1/1", "a/1"] {
            assert_eq!(parse_question_key(bad), None, "{bad}");
        }
    }

    #[test]
    fn an_approval_is_a_go_ahead_with_its_params() {
        let d = detail(
            json!({"params": {"approver": {"value": "", "schema": {"type": "string"}, "description": "Who"}}}),
        );
        let f = form(&d, "Reject");
        assert_eq!(
            f,
            json!({"type": "object", "properties": {"approver": {"type": "string", "description": "Who", "default": ""}}})
        );
        let (chosen, params) = answer(
            &d,
            "Reject",
            json!({"approver": "Al"}).as_object().expect("o"),
        )
        .expect("ok");
        assert_eq!(chosen, vec!["Approve"]);
        assert_eq!(params["approver"], "Al");
        assert!(answer(&d, "Reject", json!({"who": 1}).as_object().expect("o")).is_err());
        assert_eq!(message(&d), "Deploy?\n\nNow.");
    }

    #[test]
    fn several_options_are_a_choice_checked_before_sending() {
        let d = detail(
            json!({"options": ["eu", "us", "apac"], "multiple": true, "defaults": ["eu"],
            "params": {"replicas": {"value": 2, "schema": {"type": "integer", "minimum": 1}}}}),
        );
        let f = form(&d, "Reject");
        assert_eq!(f["properties"]["choice"]["type"], "array");
        assert_eq!(f["properties"]["choice"]["default"], json!(["eu"]));
        assert!(f.get("required").is_none());
        let ok = |v: Value| answer(&d, "Reject", v.as_object().expect("o"));
        assert_eq!(ok(json!({})).expect("defaults").0, vec!["eu"]);
        let (chosen, params) = ok(json!({"choice": ["us", "apac"]})).expect("two");
        assert_eq!(chosen, vec!["us", "apac"]);
        assert_eq!(params["replicas"], 2, "a param left out keeps its default");
        assert!(ok(json!({"choice": ["mars"]})).is_err());
        assert!(ok(json!({"choice": []})).is_err());
        let single = detail(json!({"options": ["a", "b"]}));
        assert_eq!(form(&single, "Reject")["required"], json!(["choice"]));
        assert!(
            answer(
                &single,
                "Reject",
                json!({"choice": ["a", "b"]}).as_object().expect("o")
            )
            .is_err()
        );
        assert!(answer(&single, "Reject", &Map::new()).is_err());
    }

    #[test]
    fn durations_as_airflow_writes_them() {
        use std::time::Duration;
        assert_eq!(duration("PT4S"), Some(Duration::from_secs(4)));
        assert_eq!(duration("P1DT2H30M"), Some(Duration::from_secs(95_400)));
        assert_eq!(duration("PT0.5S"), Some(Duration::from_millis(500)));
        assert_eq!(duration("4 seconds"), None);
        assert_eq!(duration("PT4"), None);
    }

    #[test]
    fn log_tails_keep_the_end_and_the_exception() {
        let entries = vec![
            json!({"event": "::group::Log message source details"}),
            json!({"event": "/logs/run_id=x/attempt=1.log"}),
            json!({"event": "::endgroup::"}),
            json!({"event": "::group::Pre Execute"}),
            json!({"event": "loading", "level": "info"}),
            json!({"event": "Task failed with exception", "level": "error",
                   "error_detail": [{"exc_type": "ValueError", "exc_value": "no rows"}]}),
            json!({"event": "::endgroup::"}),
        ];
        assert_eq!(
            log_tail(&entries, 1),
            "[error] Task failed with exception: ValueError: no rows"
        );
        assert_eq!(log_tail(&entries, 5).lines().count(), 2);
        assert_eq!(exception(&entries).as_deref(), Some("ValueError: no rows"));
    }
}
