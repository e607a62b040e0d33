//! One incoming JSON-RPC message, parsed once.
//!
//! The HTTP transport parses each request body here once (module `http::entry`), stdio each
//! line. Every later step (the header checks, the telemetry span, the dispatcher and its
//! entries) reads this instead of the body; a message that is not JSON or no JSON-RPC message
//! gets the one answer every transport gives ([`not_json`], [`not_a_message`]).

use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// The answer to a message that is JSON but no JSON-RPC message (every transport's).
pub(crate) fn not_a_message() -> rmcp::ErrorData {
    rmcp::ErrorData::invalid_request(
        "Invalid Request: the message is JSON but not a JSON-RPC request, notification or response",
        None,
    )
}

/// The answer to a message that is not JSON (every transport's).
pub(crate) fn not_json(problem: &dyn std::fmt::Display) -> rmcp::ErrorData {
    rmcp::ErrorData::parse_error(format!("Parse error: {problem}"), None)
}

/// The parts of a JSON-RPC message flowgate looks at before (or instead of) rmcp.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Incoming {
    /// Whether `jsonrpc` is `"2.0"`, as every message must say.
    pub(crate) jsonrpc_2_0: bool,
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
    /// Whether the message is a JSON-RPC 2.0 request, notification or response: `jsonrpc` is
    /// `"2.0"`; a request's `method` is text and its `id` text or an integer; a response has
    /// `result` or `error`.
    pub(crate) well_formed: bool,
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
        // A body checked as UTF-8 at once is read as text, whose strings are then not checked
        // one by one; one that is not UTF-8 gets the reader's error, with its position.
        let members: Members = match std::str::from_utf8(body) {
            Ok(text) => serde_json::from_str(text)?,
            Err(_) => serde_json::from_slice(body)?,
        };
        Ok(Incoming::from_members(members, revision))
    }

    /// The message `value` is, in `revision` when the transport knows it.
    pub(crate) fn from_value(value: Value, revision: Option<&str>) -> Self {
        let Value::Object(mut message) = value else {
            return Incoming::default();
        };
        let mut take = |key: &str| message.remove(key);
        let members = Members {
            object: true,
            jsonrpc: take("jsonrpc"),
            id: take("id"),
            method: take("method"),
            params: take("params"),
            result: take("result"),
            error: take("error"),
        };
        Incoming::from_members(members, revision)
    }

    fn from_members(members: Members, revision: Option<&str>) -> Self {
        if !members.object {
            return Incoming::default();
        }
        let valid_id = |id: &Option<Value>| match id {
            Some(Value::String(_)) => true,
            Some(Value::Number(n)) => n.is_i64(),
            _ => false,
        };
        let jsonrpc_2_0 = members.jsonrpc.as_ref().and_then(Value::as_str) == Some("2.0");
        let well_formed = jsonrpc_2_0
            && match &members.method {
                Some(Value::String(_)) => members.id.is_none() || valid_id(&members.id),
                Some(_) => false,
                None => {
                    members.result.is_some() && valid_id(&members.id)
                        || members.error.is_some()
                            && (valid_id(&members.id)
                                || matches!(members.id, None | Some(Value::Null)))
                }
            };
        let method = match members.method {
            Some(Value::String(m)) => Some(m),
            _ => None,
        };
        let mut incoming = Incoming {
            jsonrpc_2_0,
            well_formed,
            id: members.id,
            params: members.params.unwrap_or(Value::Null),
            result: members.result,
            error: members.error,
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

    /// Whether the message is a JSON-RPC message at all (see `well_formed`).
    pub(crate) fn is_message(&self) -> bool {
        self.well_formed
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

    /// The tool a `tools/call` names (`None` for any other method).
    pub(crate) fn tool(&self) -> Option<&str> {
        if self.method() == "tools/call" {
            self.name()
        } else {
            None
        }
    }

    /// The params as an object (an empty one when they are absent or not an object).
    pub(crate) fn params_object(&self) -> Map<String, Value> {
        match &self.params {
            Value::Object(map) => map.clone(),
            _ => Map::new(),
        }
    }
}

/// The members of a message that [`Incoming`] keeps, read from the text in one pass: each is
/// built as a value, any other member is skipped without being built, and the last of a
/// repeated member counts (as when the message is read into one JSON value and taken apart,
/// which cost a map of every member and its removal again on every request).
#[derive(Default)]
struct Members {
    /// Whether the message is a JSON object at all.
    object: bool,
    jsonrpc: Option<Value>,
    id: Option<Value>,
    method: Option<Value>,
    params: Option<Value>,
    result: Option<Value>,
    error: Option<Value>,
}

impl<'de> Deserialize<'de> for Members {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(MembersVisitor)
    }
}

/// A member's name, without keeping it.
enum Member {
    Jsonrpc,
    Id,
    Method,
    Params,
    Result,
    Error,
    Other,
}

impl<'de> Deserialize<'de> for Member {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Name;
        impl Visitor<'_> for Name {
            type Value = Member;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a member name")
            }
            fn visit_str<E>(self, name: &str) -> Result<Member, E> {
                Ok(match name {
                    "jsonrpc" => Member::Jsonrpc,
                    "id" => Member::Id,
                    "method" => Member::Method,
                    "params" => Member::Params,
                    "result" => Member::Result,
                    "error" => Member::Error,
                    _ => Member::Other,
                })
            }
        }
        deserializer.deserialize_str(Name)
    }
}

/// Any JSON: an object gives its members; anything else is read through and gives none.
struct MembersVisitor;

impl<'de> Visitor<'de> for MembersVisitor {
    type Value = Members;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members, A::Error> {
        let mut members = Members {
            object: true,
            ..Members::default()
        };
        while let Some(member) = map.next_key::<Member>()? {
            let slot = match member {
                Member::Jsonrpc => &mut members.jsonrpc,
                Member::Id => &mut members.id,
                Member::Method => &mut members.method,
                Member::Params => &mut members.params,
                Member::Result => &mut members.result,
                Member::Error => &mut members.error,
                Member::Other => {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
            };
            *slot = Some(map.next_value()?);
        }
        Ok(members)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Members, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Members::default())
    }

    fn visit_bool<E>(self, _: bool) -> Result<Members, E> {
        Ok(Members::default())
    }

    fn visit_i64<E>(self, _: i64) -> Result<Members, E> {
        Ok(Members::default())
    }

    fn visit_u64<E>(self, _: u64) -> Result<Members, E> {
        Ok(Members::default())
    }

    fn visit_f64<E>(self, _: f64) -> Result<Members, E> {
        Ok(Members::default())
    }

    fn visit_str<E>(self, _: &str) -> Result<Members, E> {
        Ok(Members::default())
    }

    fn visit_unit<E>(self) -> Result<Members, E> {
        Ok(Members::default())
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
        // A task's handle is no tool.
        assert_eq!(m.tool(), None);
        assert!(m.is_in("2026-07-28"));
        assert!(m.jsonrpc_2_0);
        let call = Incoming::from_value(
            json!({"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"deploy"}}),
            None,
        );
        assert_eq!(call.name(), Some("deploy"));
        assert_eq!(call.tool(), Some("deploy"));
        assert_eq!(call.revision, None);
    }

    /// Reading a body's members in one pass gives what reading it into one value and taking
    /// that apart gives, for every shape (repeated and escaped member names, `null`s, other
    /// members, JSON that is no object), and the same error for what is not JSON.
    #[test]
    fn a_body_read_in_one_pass_is_the_body_read_whole() {
        let bodies: [&[u8]; 16] = [
            br#"{"jsonrpc":"2.0","id":7,"method":"tasks/get","params":{"taskId":"t","_meta":{"a":[1,{"b":null}]}}}"#,
            br#"{"id":null,"jsonrpc":"2.0","method":"notifications/x"}"#,
            br#"{"jsonrpc":"2.0","id":1,"id":"two","method":"a","method":"b","params":1,"params":{"x":2}}"#,
            br#"{"\u006aso\u006erpc":"2.0","\u0069d":3,"me\u0074hod":"tools/call","params":{"name":"d\u00e9ploy"}}"#,
            br#"{"jsonrpc":"1.0","id":1.5,"method":5,"result":{"ok":true},"error":{"code":-1}}"#,
            br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25"}}"#,
            br#"{"other":{"deep":[[[{"x":"y"}]]]},"jsonrpc":"2.0","method":"m","extra":[1,2,3]}"#,
            br#"{}"#,
            br#"[{"jsonrpc":"2.0","id":1,"method":"a"}]"#,
            br#""tasks/get""#,
            br#"5"#,
            br#"-1.5e3"#,
            br#"true"#,
            br#"null"#,
            " {\"jsonrpc\":\"2.0\",\"id\":\"\u{e9}\",\"method\":\"\u{1F600}\"} ".as_bytes(),
            br#"{"jsonrpc":"2.0","method":"m","params":null}"#,
        ];
        for body in bodies {
            for revision in [None, Some("2026-07-28")] {
                let whole =
                    Incoming::from_value(serde_json::from_slice(body).expect("json"), revision);
                let read = Incoming::parse(body, revision).expect("parses");
                assert_eq!(read, whole, "{}", String::from_utf8_lossy(body));
            }
        }
        let broken: [&[u8]; 6] = [
            b"",
            br#"{"jsonrpc":"2.0","#,
            br#"{"id":1}}"#,
            b"{\"method\":\"\xff\"}",
            br#"{"id":01}"#,
            br#"{"a":1,}"#,
        ];
        for body in broken {
            let whole = serde_json::from_slice::<Value>(body).expect_err("not json");
            let read = Incoming::parse(body, None).expect_err("not json");
            assert_eq!(read.to_string(), whole.to_string());
        }
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
        assert!(!odd.jsonrpc_2_0);
        assert!(Incoming::parse(b"{\"jsonrpc\": ", None).is_err());
    }
}
