//! `flowgate ask` and `flowgate status`: what a command run by the local engine calls.
//!
//! Exit codes of `ask`: 0 answered (the answer on stdout), 3 declined, 4 cancelled, 5 timed
//! out, 2 misuse (outside a local-engine command, or a bad schema).

use std::process::ExitCode;
use std::time::Duration;

use flowgate_local::ask::{self, AskError};
use serde_json::{Value, json};

use crate::cli::AskArgs;

pub(crate) fn ask(args: AskArgs) -> ExitCode {
    let schema = if args.confirm {
        json!({"type": "object", "properties": {"confirm": {"type": "boolean"}}, "required": ["confirm"]})
    } else if let Some(text) = &args.schema {
        match serde_json::from_str::<Value>(text) {
            Ok(v) if v.get("type").and_then(Value::as_str) == Some("object") => v,
            Ok(_) => {
                return usage("--schema must be a JSON Schema object with \"type\": \"object\"");
            }
            Err(e) => return usage(&format!("--schema is not JSON: {e}")),
        }
    } else {
        ask::default_schema()
    };
    let run_dir = match ask::run_dir_from_env() {
        Ok(d) => d,
        Err(e) => return usage(&e.to_string()),
    };
    match ask::ask(
        run_dir,
        &args.message,
        schema,
        args.timeout_secs.map(Duration::from_secs),
    ) {
        Ok(answer) => {
            let shown = match &args.field {
                Some(field) => match answer.get(field) {
                    Some(Value::String(s)) => s.clone(),
                    Some(other) => other.to_string(),
                    None => String::new(),
                },
                None => answer.to_string(),
            };
            crate::out!("{shown}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("flowgate ask: {e}");
            ExitCode::from(match e {
                AskError::Declined => 3,
                AskError::Cancelled => 4,
                AskError::TimedOut(_) => 5,
                AskError::NoRunDir | AskError::Io(_) | AskError::Malformed(_) => 2,
            })
        }
    }
}

pub(crate) fn status(message: &str) -> ExitCode {
    match ask::set_status(message) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => usage(&e.to_string()),
    }
}

fn usage(message: &str) -> ExitCode {
    eprintln!("flowgate: {message}");
    ExitCode::from(2)
}
