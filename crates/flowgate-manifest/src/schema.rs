//! JSON Schema checks in one place. Tool arguments, tool results and the answers to a
//! workflow's questions all go through this code, so their problems read alike: each names the
//! part of the instance it is about.

use std::sync::Arc;

use serde_json::Value;

/// How problems name what they are about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Naming {
    /// The instance as a whole (`arguments`), for problems at its root.
    pub whole: &'static str,
    /// What a part is called (`argument`), before the JSON pointer to it (`argument /day`).
    pub part: &'static str,
}

impl Naming {
    /// A tool call's arguments.
    pub const ARGUMENTS: Naming = Naming {
        whole: "arguments",
        part: "argument",
    };
    /// A tool's result.
    pub const RESULT: Naming = Naming {
        whole: "result",
        part: "result field",
    };
    /// The content of an answer to a form elicitation.
    pub const ANSWER: Naming = Naming {
        whole: "content",
        part: "field",
    };
}

/// A compiled JSON Schema. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Schema(Arc<jsonschema::Validator>);

impl Schema {
    /// Compiles `schema` (draft 2020-12 unless it says otherwise in `$schema`).
    ///
    /// # Errors
    /// When `schema` is not a valid JSON Schema; the message says why.
    pub fn compile(schema: &Value) -> Result<Self, String> {
        jsonschema::validator_for(schema)
            .map(|v| Schema(Arc::new(v)))
            .map_err(|e| e.to_string())
    }

    /// Checks `instance`.
    ///
    /// # Errors
    /// One message per problem, each naming where it is (see [`Naming`]).
    pub fn check(&self, instance: &Value, naming: Naming) -> Result<(), Vec<String>> {
        check(&self.0, instance, naming)
    }
}

/// Checks `instance` against a compiled validator; the one place problems are worded.
pub(crate) fn check(
    validator: &jsonschema::Validator,
    instance: &Value,
    naming: Naming,
) -> Result<(), Vec<String>> {
    let problems: Vec<String> = validator
        .iter_errors(instance)
        .map(|e| {
            let path = e.instance_path().to_string();
            if path.is_empty() {
                format!("{}: {e}", naming.whole)
            } else {
                format!("{} {path}: {e}", naming.part)
            }
        })
        .collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn problems_name_the_part_or_the_whole() {
        let schema = Schema::compile(&json!({
            "type": "object",
            "properties": {"approve": {"type": "boolean"}},
            "required": ["approve", "reason"],
        }))
        .expect("valid schema");
        assert_eq!(
            schema.check(&json!({"approve": true, "reason": "x"}), Naming::ANSWER),
            Ok(())
        );
        let problems = schema
            .check(&json!({"approve": "yes"}), Naming::ANSWER)
            .expect_err("two problems");
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(
            problems.iter().any(|p| p.starts_with("field /approve: ")),
            "{problems:?}"
        );
        assert!(
            problems
                .iter()
                .any(|p| p.starts_with("content: ") && p.contains("\"reason\"")),
            "{problems:?}"
        );
    }

    #[test]
    fn an_invalid_schema_does_not_compile() {
        let e = Schema::compile(&json!({"type": "no such type"})).expect_err("invalid");
        assert!(!e.is_empty());
    }
}
