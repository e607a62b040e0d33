//! One incoming JSON-RPC message, parsed once.
//!
//! The HTTP transport parses each request body here once (module `http::parse`) and puts the
//! result in the request's extensions; stdio parses each line here. Every later step (the
//! `Mcp-Name` fill-in, the scope check, the 2025-11-25 dialect, the JSON-RPC error for a body
//! that is no message) reads this instead of the body.

use serde_json::{Map, Value};

/// The parts of a JSON-RPC message flowgate looks at before (or instead of) rmcp.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Incoming {
    /// `id`, as sent (requests and responses).
    pub(crate) id: Option<Value>,
    /// `method` (requests and notifications).
    pub(crate) method: Option<String>,
    /// `params` (`Null` when absent).
    pub(crate) params: Value,
    /// `result` (a response).
    pub(crate) result: Option<Value>,
    /// `error` (an error response).
    pub(crate) error: Option<Value>,
    /// The protocol revision the message is in: the transport's (`MCP-Protocol-Version` on
    /// HTTP, the session's on stdio), or for an `initialize` without one, the revision it asks
    /// for. `None` when neither says.
    pub(crate) revision: Option<String>,
}

impl Incoming {
    /// Parses `body`, in `revision` when the transport knows it.
    ///
    /// # Errors
    /// When `body` is not JSON. JSON that is no message (an array, an object without
    /// `method` or `result`) parses, with nothing set but what it has.
    pub(crate) fn parse(body: &[u8], revision: Option<&str>) -> Result<Self, serde_json::Error> {
        let value: Value = serde_json::from_slice(body)?;
        Ok(Incoming::from_value(value, revision))
    }

    /// The message `value` is, in `revision` when the transport knows it.
    pub(crate) fn from_value(value: Value, revision: Option<&str>) -> Self {
        let Value::Object(mut message) = value else {
            return Incoming::default();
        };
        let mut take = |key: &str| message.remove(key);
        let method = match take("method") {
            Some(Value::String(m)) => Some(m),
            _ => None,
        };
        let mut incoming = Incoming {
            id: take("id"),
            params: take("params").unwrap_or(Value::Null),
            result: take("result"),
            error: take("error"),
            method,
            revision: revision.map(str::to_owned),
        };
        if incoming.revision.is_none() && incoming.method.as_deref() == Some("initialize") {
            incoming.revision = incoming.params["protocolVersion"]
                .as_str()
                .map(str::to_owned);
        }
        incoming
    }

    /// The method, or `""` for a response.
    pub(crate) fn method(&self) -> &str {
        self.method.as_deref().unwrap_or("")
    }

    /// Whether the message is in `revision`.
    pub(crate) fn is_in(&self, revision: &str) -> bool {
        self.revision.as_deref() == Some(revision)
    }

    /// What the message names: the tool of a `tools/call`, the task of a `tasks/*` request.
    pub(crate) fn name(&self) -> Option<&str> {
        let key = match self.method() {
            "tools/call" => "name",
            m if m.starts_with("tasks/") => "taskId",
            _ => return None,
        };
        self.params.get(key)?.as_str()
    }

    /// The params as an object (an empty one when they are absent or not an object).
    pub(crate) fn params_object(&self) -> Map<String, Value> {
        match &self.params {
            Value::Object(map) => map.clone(),
            _ => Map::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_request_gives_its_method_id_name_params_and_revision() {
        let m = Incoming::parse(
            br#"{"jsonrpc":"2.0","id":7,"method":"tasks/get","params":{"taskId":"fg1.k.x"}}"#,
            Some("2026-07-28"),
        )
        .expect("json");
        assert_eq!(m.method(), "tasks/get");
        assert_eq!(m.id, Some(json!(7)));
        assert_eq!(m.name(), Some("fg1.k.x"));
        assert!(m.is_in("2026-07-28"));
        let call = Incoming::from_value(
            json!({"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"deploy"}}),
            None,
        );
        assert_eq!(call.name(), Some("deploy"));
        assert_eq!(call.revision, None);
    }

    #[test]
    fn an_initialize_without_a_header_is_in_the_revision_it_asks_for() {
        let m = Incoming::from_value(
            json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25"}}),
            None,
        );
        assert!(m.is_in("2025-11-25"));
        let told = Incoming::from_value(
            json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25"}}),
            Some("2026-07-28"),
        );
        assert!(told.is_in("2026-07-28"));
    }

    #[test]
    fn responses_and_json_that_is_no_message_parse_with_what_they_have() {
        let r = Incoming::from_value(
            json!({"jsonrpc":"2.0","id":"fge.x","result":{"action":"accept"}}),
            None,
        );
        assert_eq!(r.method(), "");
        assert_eq!(r.result, Some(json!({"action": "accept"})));
        assert_eq!(r.name(), None);
        assert_eq!(
            Incoming::from_value(json!([1, 2]), None),
            Incoming::default()
        );
        let odd = Incoming::from_value(json!({"id": 7, "x": 1}), None);
        assert_eq!(odd.id, Some(json!(7)));
        assert!(Incoming::parse(b"{\"jsonrpc\": ", None).is_err());
    }
}
