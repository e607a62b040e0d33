//! What the MCP headers of a request must say, checked against its body once.
//!
//! - `MCP-Protocol-Version`: a revision flowgate knows (an unknown one is refused with a
//!   plain 400, unless the request's `_meta` names its revision itself); on `initialize`, the
//!   revision the body asks for (`-32600`); on any other request whose `_meta` names a
//!   revision, that revision (`-32020`), and present.
//! - From 2026-07-28 (SEP-2243, so that intermediaries can route without reading bodies):
//!   `Mcp-Method` equal to the body's method; `Mcp-Name` equal to the tool's name or the task's
//!   id (base64 in `=?base64?…?=` when it is no plain header value); one `Mcp-Param-<Name>`
//!   for each argument the tool's input schema marks with `x-mcp-header`. Each at most once.
//!   A `tasks/*` request without `Mcp-Name` is served as if it carried `params.taskId`:
//!   SEP-2663 asks clients to mirror it, flowgate routes nothing on it (any instance answers
//!   for any task), and shipped clients omit it (the Python `mcp` 2.3 client with
//!   `fastmcp-tasks`). A header that is present and disagrees is refused: tolerance covers
//!   absence, never contradiction.
//!
//! A refusal is [`Refusal`]: a JSON-RPC error (always HTTP 400) or, for an unknown version
//! header, a line of text.

use axum::http::{HeaderMap, HeaderName};
use base64::Engine as _;
use rmcp::ErrorData;
use rmcp::model::{ErrorCode, JsonObject, ProtocolVersion};
use serde_json::Value;

use super::names;
use crate::jsonrpc::Incoming;

/// The `=?base64?…?=` form of a header value that is not plain text (SEP-2243).
const BASE64_PREFIX: &str = "=?base64?";
const BASE64_SUFFIX: &str = "?=";

/// Why the headers refuse a request.
#[derive(Debug, PartialEq)]
pub(crate) enum Refusal {
    /// A JSON-RPC error, answered with HTTP 400.
    Error(ErrorData),
    /// A plain-text 400 (the version header is unusable before any message is read).
    Text(String),
}

/// Checks the headers of `message` (a request or notification); `schema` finds the input
/// schema of a tool by name, for its `Mcp-Param-*` headers.
pub(crate) fn check(
    headers: &HeaderMap,
    message: &Incoming,
    schema: impl Fn(&str) -> Option<std::sync::Arc<JsonObject>>,
) -> Result<(), Refusal> {
    let header_version = match headers.get(names::MCP_PROTOCOL_VERSION) {
        None => None,
        Some(value) => Some(value.to_str().map_err(|_| {
            Refusal::Text("Bad Request: Invalid MCP-Protocol-Version header encoding".to_owned())
        })?),
    };
    let meta_version = message
        .params
        .get("_meta")
        .and_then(|m| m.get(META_PROTOCOL_VERSION))
        .and_then(Value::as_str);
    let method = message.method();
    if method == "initialize" {
        let asked = message
            .params
            .get("protocolVersion")
            .and_then(Value::as_str);
        if let (Some(header), Some(asked)) = (header_version, asked)
            && header != asked
        {
            return Err(Refusal::Error(ErrorData::invalid_request(
                format!(
                    "Invalid Request: MCP-Protocol-Version header ({header}) does not match initialize params.protocolVersion ({asked})"
                ),
                None,
            )));
        }
    } else if let Some(version) = header_version
        && meta_version.is_none()
        && !ProtocolVersion::KNOWN_VERSIONS
            .iter()
            .any(|v| v.as_str() == version)
    {
        return Err(Refusal::Text(format!(
            "Bad Request: Unsupported MCP-Protocol-Version: {version}"
        )));
    }
    if header_version.is_some_and(|v| v >= ProtocolVersion::STANDARD_HEADERS.as_str()) {
        standard(headers, message, schema).map_err(|why| Refusal::Error(mismatch(why)))?;
    }
    if message.id.is_some() && message.method.is_some() && method != "initialize" {
        match (meta_version, header_version) {
            (Some(_), None) => {
                return Err(Refusal::Error(mismatch(
                    "request _meta protocolVersion requires MCP-Protocol-Version header".into(),
                )));
            }
            (Some(meta), Some(header)) if meta != header => {
                return Err(Refusal::Error(mismatch(format!(
                    "MCP-Protocol-Version header ({header}) does not match request _meta protocolVersion ({meta})"
                ))));
            }
            _ => {}
        }
    }
    Ok(())
}

/// The `_meta` key of a request's revision.
const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";

fn mismatch(why: String) -> ErrorData {
    ErrorData::new(ErrorCode::HEADER_MISMATCH, why, None)
}

/// The SEP-2243 headers against the body.
fn standard(
    headers: &HeaderMap,
    message: &Incoming,
    schema: impl Fn(&str) -> Option<std::sync::Arc<JsonObject>>,
) -> Result<(), String> {
    let Some(method) = message.method.as_deref() else {
        return Ok(());
    };
    if method == "initialize" {
        // The handshake may omit the headers; one it sends must agree.
        let mut values = headers.get_all(names::MCP_METHOD).iter();
        let Some(first) = values.next() else {
            return Ok(());
        };
        if values.next().is_some() {
            return Err(
                "multiple Mcp-Method header values supplied; initialize requires exactly one"
                    .into(),
            );
        }
        if first != "initialize" {
            return Err(format!(
                "Mcp-Method header `{}` does not match body method `initialize`",
                String::from_utf8_lossy(first.as_bytes())
            ));
        }
        return Ok(());
    }
    match single(headers, &names::MCP_METHOD)? {
        None => return Err("missing required Mcp-Method header".into()),
        Some(value) if value != method => {
            return Err(format!(
                "Mcp-Method header `{value}` does not match body method `{method}`"
            ));
        }
        Some(_) => {}
    }
    if let Some(expected) = message.name() {
        match single(headers, &names::MCP_NAME)? {
            // Tolerated for tasks (see the module).
            None if method.starts_with("tasks/") => {}
            None => return Err(format!("missing required Mcp-Name header for `{method}`")),
            // A plain value (what a task id always is) is compared as it is.
            Some(raw) if raw == expected && !raw.starts_with(BASE64_PREFIX) => {}
            Some(raw) => {
                let decoded =
                    decoded(raw).ok_or_else(|| "Mcp-Name header is not valid Base64".to_owned())?;
                if decoded != expected {
                    return Err(format!(
                        "Mcp-Name header `{decoded}` does not match body value `{expected}`"
                    ));
                }
            }
        }
    }
    if let Some(tool) = message.tool()
        && let Some(schema) = schema(tool)
    {
        let arguments = message.params.get("arguments");
        for (path, header) in annotated(&schema) {
            let property = path.join(".");
            let name = format!("mcp-param-{}", header.to_ascii_lowercase());
            let Ok(name) = HeaderName::try_from(name.as_str()) else {
                continue;
            };
            let sent = single(headers, &name)?;
            let full = format!("Mcp-Param-{header}");
            let body = arguments
                .and_then(|a| path.iter().try_fold(a, |v, k| v.get(k)))
                .filter(|v| !v.is_null())
                .and_then(primitive);
            match (sent, body) {
                (None, None) => {}
                (Some(_), None) => {
                    return Err(format!(
                        "unexpected {full} header for absent or null `{property}`"
                    ));
                }
                (None, Some(_)) => return Err(format!("missing {full} header for `{property}`")),
                (Some(raw), Some(expected)) => {
                    let decoded =
                        decoded(raw).ok_or_else(|| format!("{full} header is not valid Base64"))?;
                    if decoded != expected {
                        return Err(format!(
                            "{full} header `{decoded}` does not match body value `{expected}`"
                        ));
                    }
                }
            }
        }
    }
    Ok(())
}

/// The one value of header `name`, if present; two values, or one that is not text, refuse.
fn single<'a>(headers: &'a HeaderMap, name: &HeaderName) -> Result<Option<&'a str>, String> {
    let mut values = headers.get_all(name).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(format!("duplicate {name} header"));
    }
    value
        .to_str()
        .map(Some)
        .map_err(|_| format!("{name} header contains invalid characters"))
}

/// A header value as text: its base64 form decoded.
fn decoded(value: &str) -> Option<String> {
    match value
        .strip_prefix(BASE64_PREFIX)
        .and_then(|inner| inner.strip_suffix(BASE64_SUFFIX))
    {
        Some(inner) => {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(inner)
                .ok()?;
            String::from_utf8(bytes).ok()
        }
        None => Some(value.to_owned()),
    }
}

/// A JSON primitive as SEP-2243 writes it in a header.
fn primitive(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// The properties an input schema marks with `x-mcp-header`, reached through `properties`
/// alone: each one's path and header name.
fn annotated(schema: &JsonObject) -> Vec<(Vec<String>, String)> {
    fn walk(
        properties: Option<&Value>,
        path: &mut Vec<String>,
        out: &mut Vec<(Vec<String>, String)>,
    ) {
        let Some(Value::Object(properties)) = properties else {
            return;
        };
        for (name, schema) in properties {
            path.push(name.clone());
            if let Some(Value::String(header)) = schema.get("x-mcp-header")
                && !header.is_empty()
            {
                out.push((path.clone(), header.clone()));
            }
            walk(schema.get("properties"), path, out);
            path.pop();
        }
    }
    let mut out = Vec::new();
    walk(schema.get("properties"), &mut Vec::new(), &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.append(
                HeaderName::try_from(*k).expect("name"),
                v.parse().expect("value"),
            );
        }
        map
    }

    fn modern(method: &str, params: Value) -> Incoming {
        let mut params = params;
        params["_meta"] = json!({META_PROTOCOL_VERSION: "2026-07-28"});
        Incoming::from_value(
            json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}),
            Some("2026-07-28"),
        )
    }

    #[test]
    fn annotated_arguments_need_their_headers_and_agree_with_them() {
        let schema: JsonObject = serde_json::from_value(json!({
            "type": "object",
            "properties": {
                "region": {"type": "string", "x-mcp-header": "Region"},
                "opts": {"type": "object", "properties": {"dry": {"type": "boolean", "x-mcp-header": "Dry"}}}
            }
        }))
        .expect("schema");
        let schema = std::sync::Arc::new(schema);
        let find = |_: &str| Some(std::sync::Arc::clone(&schema));
        let call = modern(
            "tools/call",
            json!({"name": "deploy", "arguments": {"region": "eu west", "opts": {"dry": true}}}),
        );
        let base = [
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", "deploy"),
        ];
        let with = |extra: &[(&'static str, &'static str)]| {
            let mut all = base.to_vec();
            all.extend_from_slice(extra);
            headers(&all)
        };
        let ok = with(&[("mcp-param-region", "eu west"), ("mcp-param-dry", "true")]);
        assert_eq!(check(&ok, &call, find), Ok(()));
        let b64 = with(&[
            ("mcp-param-region", "=?base64?ZXUgd2VzdA==?="),
            ("mcp-param-dry", "true"),
        ]);
        assert_eq!(check(&b64, &call, find), Ok(()));
        for (bad, says) in [
            (
                with(&[("mcp-param-dry", "true")]),
                "missing Mcp-Param-Region",
            ),
            (
                with(&[("mcp-param-region", "us"), ("mcp-param-dry", "true")]),
                "does not match",
            ),
            (
                with(&[
                    ("mcp-param-region", "eu west"),
                    ("mcp-param-region", "eu west"),
                    ("mcp-param-dry", "true"),
                ]),
                "duplicate",
            ),
        ] {
            let Err(Refusal::Error(e)) = check(&bad, &call, find) else {
                panic!("refused: {bad:?}");
            };
            assert_eq!(e.code, ErrorCode::HEADER_MISMATCH);
            assert!(e.message.contains(says), "{}", e.message);
        }
    }

    #[test]
    fn a_task_request_may_omit_its_name_but_not_contradict_it() {
        let get = modern("tasks/get", json!({"taskId": "fg2.abc"}));
        let base = [
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tasks/get"),
        ];
        assert_eq!(check(&headers(&base), &get, |_| None), Ok(()));
        let mut other = base.to_vec();
        other.push(("mcp-name", "fg2.xyz"));
        assert!(matches!(
            check(&headers(&other), &get, |_| None),
            Err(Refusal::Error(_))
        ));
        let list = modern("tools/call", json!({"name": "t"}));
        let base = [
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
        ];
        assert!(matches!(
            check(&headers(&base), &list, |_| None),
            Err(Refusal::Error(_))
        ));
    }
}
