//! The answers of one `tasks/update`, checked before any reaches the engine.
//!
//! An answer to an outstanding question must be an elicitation result (`{action, content}`), and
//! accepted content must match the question's `requestedSchema`, checked by the same machinery
//! as tool arguments. The update is checked whole: one bad answer refuses all of them, so a
//! workflow never goes on with half an update. Answers to keys that are not outstanding are
//! ignored, as the tasks extension asks, and never reach the engine.

use flowgate_core::{Action, ExecutionRecord, InputRequest, InputResponse};
use flowgate_manifest::{Naming, Schema};
use rmcp::ErrorData;
use rmcp::model::InputResponses;
use serde_json::{Map, Value, json};

/// The answers to deliver, in key order, once every one of them is sound.
///
/// # Errors
/// `-32602` naming each bad answer's key and what is wrong with it (the field, for content
/// that does not match the question's schema); `data.invalid` maps each key to its problems.
pub(crate) fn checked(
    record: &ExecutionRecord,
    responses: InputResponses,
) -> Result<Vec<(String, InputResponse)>, ErrorData> {
    let mut deliver = Vec::new();
    let mut invalid = Map::new();
    for (key, value) in responses {
        let Some(question) = record.input_requests.iter().find(|q| q.key == key) else {
            tracing::debug!(key, "ignored a response to a key that is not outstanding");
            continue;
        };
        match problems(question, value) {
            Ok(response) => deliver.push((key, response)),
            Err(problems) => {
                invalid.insert(key, json!(problems));
            }
        }
    }
    if invalid.is_empty() {
        return Ok(deliver);
    }
    let message = invalid
        .iter()
        .flat_map(|(key, problems)| {
            problems
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(move |p| format!("inputResponses.{key}: {p}"))
        })
        .collect::<Vec<_>>()
        .join("; ");
    Err(ErrorData::invalid_params(
        format!("nothing was delivered: {message}"),
        Some(json!({"invalid": invalid})),
    ))
}

/// The answer to `question`, or what is wrong with it.
fn problems(question: &InputRequest, value: Value) -> Result<InputResponse, Vec<String>> {
    let response: InputResponse = serde_json::from_value(value).map_err(|e| {
        vec![format!(
            "not an elicitation result ({{action, content}}): {e}"
        )]
    })?;
    if response.action != Action::Accept {
        return Ok(response);
    }
    let schema = Schema::compile(&question.requested_schema).map_err(|e| {
        vec![format!(
            "the question's requestedSchema is not a valid JSON Schema ({e}), so no content can \
             be checked against it; only decline or cancel can answer it"
        )]
    })?;
    // MCP's shape first (a flat object of the requested fields), then the question's schema.
    let shape = response.form_problems(&question.requested_schema);
    if !shape.is_empty() {
        return Err(shape);
    }
    // An accepted form without content is an empty form.
    let content = response.content.clone().unwrap_or_else(|| json!({}));
    schema.check(&content, Naming::ANSWER)?;
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;
    use flowgate_core::TaskState;

    fn record() -> ExecutionRecord {
        let at = chrono::DateTime::from_timestamp(1_764_670_000, 0).expect("time");
        let mut r = ExecutionRecord::new(TaskState::InputRequired, "RUNNING", at);
        r.input_requests = vec![
            InputRequest {
                key: "count".into(),
                message: "How many?".into(),
                requested_schema: json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}),
            },
            InputRequest {
                key: "sure".into(),
                message: "Sure?".into(),
                requested_schema: json!({"type": "object", "properties": {"confirm": {"type": "boolean"}}}),
            },
        ];
        r
    }

    fn responses(v: Value) -> InputResponses {
        serde_json::from_value(v).expect("responses")
    }

    #[test]
    fn sound_answers_are_delivered_and_strays_ignored() {
        let ok = checked(
            &record(),
            responses(json!({
                "count": {"action": "accept", "content": {"n": 2}},
                "sure": {"action": "decline"},
                "gone": {"action": "accept", "content": {"anything": 1}},
                "junk": 7,
            })),
        )
        .expect("sound");
        let keys: Vec<&str> = ok.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["count", "sure"]);
        assert_eq!(ok[1].1.action, Action::Decline);
    }

    #[test]
    fn one_bad_answer_refuses_the_whole_update_naming_key_and_field() {
        let e = checked(
            &record(),
            responses(json!({
                "count": {"action": "accept", "content": {"n": 2}},
                "sure": {"action": "accept", "content": {"confirm": "yes"}},
            })),
        )
        .expect_err("refused");
        assert_eq!(e.code.0, -32602);
        assert!(
            e.message.contains("inputResponses.sure: field /confirm: "),
            "{}",
            e.message
        );
        assert!(!e.message.contains("inputResponses.count"), "{}", e.message);
        let data = e.data.expect("data");
        assert!(data["invalid"]["sure"].is_array(), "{data}");
    }

    #[test]
    fn answers_in_another_shape_than_a_flat_form_deliver_nothing() {
        // The question's schema alone would accept these (no additionalProperties: false).
        for content in [
            json!({"n": 2, "extra": true}),
            json!({"n": 2, "confirm": {"approve": true}}),
        ] {
            let e = checked(
                &record(),
                responses(json!({
                    "count": {"action": "accept", "content": content},
                    "sure": {"action": "accept", "content": {"confirm": true}},
                })),
            )
            .expect_err("refused");
            assert_eq!(e.code.0, -32602);
            assert!(
                e.message.starts_with("nothing was delivered"),
                "{}",
                e.message
            );
            assert!(
                e.message.contains("inputResponses.count: field /"),
                "{}",
                e.message
            );
        }
        let e = checked(
            &record(),
            responses(json!({"sure": {"action": "accept", "content": {"confirm": [true]}}})),
        )
        .expect_err("refused");
        assert!(
            e.message.contains("field /confirm: must be"),
            "{}",
            e.message
        );
    }

    #[test]
    fn missing_content_malformed_results_and_broken_schemas_are_refused() {
        let mut r = record();
        r.input_requests[1].requested_schema = json!({"type": "no such type"});
        let e = checked(
            &r,
            responses(json!({
                "count": {"action": "accept"},
                "sure": {"action": "accept", "content": {}},
            })),
        )
        .expect_err("refused");
        assert!(
            e.message.contains("inputResponses.count: content: "),
            "{}",
            e.message
        );
        assert!(e.message.contains("\"n\""), "{}", e.message);
        assert!(
            e.message
                .contains("inputResponses.sure: the question's requestedSchema")
        );
        let e = checked(&record(), responses(json!({"count": {"action": "maybe"}})))
            .expect_err("refused");
        assert!(
            e.message.contains("not an elicitation result"),
            "{}",
            e.message
        );
        // A decline needs no valid schema.
        assert!(checked(&r, responses(json!({"sure": {"action": "decline"}}))).is_ok());
    }
}
