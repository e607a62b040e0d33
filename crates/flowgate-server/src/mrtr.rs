//! Asking for missing arguments before a task starts (SEP-2322 multi-round-trip requests).
//!
//! A manifest tool may list arguments to `elicit` when a call leaves them out. The first round
//! answers `tools/call` with `resultType: "input_required"`, one form elicitation per missing
//! argument, and a `requestState`; the client retries the same call with `inputResponses` and
//! that state; once nothing is missing the call goes on (and starts its task).
//!
//! `requestState` is attacker-controlled input, so it is sealed with the deployment's handle
//! keys under its own purpose (`fs1`, never confused with a task handle), bound to the caller's
//! principal, to the tool, and to a digest of the call's arguments, and expires after
//! [`STATE_TTL`]. It holds only the answers gathered so far; replaying it within its lifetime
//! can do no more than calling the tool again with those answers as arguments, which is why no
//! server-side single-use record is kept (there is no server-side state to keep it in).

use std::collections::BTreeMap;

use chrono::Utc;
use flowgate_core::{Action, InputResponse};
use rmcp::ErrorData;
use rmcp::model::{InputRequests, InputRequiredResult, InputResponses};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::{Caller, FlowgateServer, ToolEntry};

/// The sealing purpose of request states.
const PURPOSE: &str = "fs1";
/// How long a request state may be echoed back.
const STATE_TTL: chrono::Duration = chrono::Duration::minutes(10);

#[derive(Serialize, Deserialize)]
struct PendingCall {
    tool: String,
    /// Hex SHA-256 of the call's arguments as first sent.
    args: String,
    gathered: Map<String, Value>,
    /// Expiry, Unix milliseconds.
    exp: i64,
}

/// What gathering decided.
pub(crate) enum Gathered {
    /// Every argument that can be asked for is present: go on with these arguments.
    Ready(Map<String, Value>),
    /// Ask the client (the first round, or answers are still missing).
    Ask(InputRequiredResult),
    /// The caller refused to answer: why nothing was started.
    Refused(String),
}

fn digest(arguments: &Map<String, Value>) -> String {
    let bytes = serde_json::to_vec(arguments).unwrap_or_default();
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn invalid_state() -> ErrorData {
    ErrorData::invalid_params(
        "requestState is invalid, expired, or belongs to another call; call the tool again without it",
        None,
    )
}

impl FlowgateServer {
    /// Fills missing arguments from this round's answers and the sealed state of earlier rounds,
    /// or decides what to ask next (when the client `can_elicit`).
    pub(crate) fn gather(
        &self,
        caller: &Caller,
        entry: &ToolEntry,
        mut arguments: Map<String, Value>,
        responses: Option<InputResponses>,
        request_state: Option<&str>,
        can_elicit: bool,
    ) -> Result<Gathered, ErrorData> {
        if entry.spec.elicit.is_empty() {
            return Ok(Gathered::Ready(arguments));
        }
        let principal = caller.principal_key();
        let args_digest = digest(&arguments);
        let mut gathered = match request_state {
            None => Map::new(),
            Some(token) => {
                let bytes = self
                    .inner
                    .keys
                    .open_bytes(PURPOSE, token, principal)
                    .map_err(|_| invalid_state())?;
                let state: PendingCall =
                    serde_json::from_slice(&bytes).map_err(|_| invalid_state())?;
                if state.tool != entry.spec.name
                    || state.args != args_digest
                    || state.exp < Utc::now().timestamp_millis()
                {
                    return Err(invalid_state());
                }
                state.gathered
            }
        };
        let responses: BTreeMap<String, Value> = responses.unwrap_or_default();
        for e in &entry.spec.elicit {
            if arguments.contains_key(&e.argument) || gathered.contains_key(&e.argument) {
                continue;
            }
            let Some(value) = responses.get(&e.argument) else {
                continue;
            };
            let response: InputResponse = serde_json::from_value(value.clone()).map_err(|_| {
                ErrorData::invalid_params(
                    format!(
                        "inputResponses.{} is not an elicitation result ({{action, content}})",
                        e.argument
                    ),
                    None,
                )
            })?;
            match response.action {
                Action::Accept => {
                    if let Some(answer) = response.content.as_ref().and_then(|c| c.get(&e.field)) {
                        gathered.insert(e.argument.clone(), answer.clone());
                    }
                }
                Action::Decline | Action::Cancel => {
                    let text = format!(
                        "{}: the caller declined to provide `{}`, so nothing was started",
                        entry.spec.name, e.argument
                    );
                    return Ok(Gathered::Refused(text));
                }
            }
        }
        let missing: Vec<_> = entry
            .spec
            .elicit
            .iter()
            .filter(|e| !arguments.contains_key(&e.argument) && !gathered.contains_key(&e.argument))
            .collect();
        if missing.is_empty() || !can_elicit {
            // Without the elicitation capability, schema validation names what is missing.
            arguments.extend(gathered);
            return Ok(Gathered::Ready(arguments));
        }
        let requests: InputRequests = missing
            .iter()
            .filter_map(|e| {
                let request = json!({
                    "method": "elicitation/create",
                    "params": {
                        "mode": "form",
                        "message": e.message,
                        "requestedSchema": {
                            "type": "object",
                            "properties": { e.field.clone(): e.schema },
                            "required": [e.field],
                        },
                    },
                });
                serde_json::from_value(request)
                    .ok()
                    .map(|r| (e.argument.clone(), r))
            })
            .collect();
        let state = PendingCall {
            tool: entry.spec.name.clone(),
            args: args_digest,
            gathered,
            exp: (Utc::now() + STATE_TTL).timestamp_millis(),
        };
        let token = self.inner.keys.seal_bytes(
            PURPOSE,
            &serde_json::to_vec(&state).unwrap_or_default(),
            principal,
        );
        Ok(Gathered::Ask(InputRequiredResult::new(
            Some(requests),
            Some(token),
        )))
    }
}
