//! One span per MCP request, and its count in `flowgate_mcp_requests_total`.
//!
//! The span follows OpenTelemetry's MCP conventions: named `{method} {tool}` (or `{method}`),
//! kind SERVER, with `mcp.method.name`, `jsonrpc.request.id`, `mcp.protocol.version`,
//! `network.transport`, `gen_ai.tool.name` on `tools/call`, and on an error `error.type` and
//! `rpc.response.status_code` (the JSON-RPC code). flowgate adds `flowgate.tool` (also for
//! `tasks/*`, once the task's handle is open), `flowgate.principal.issuer` (who vouched for the
//! caller; never a token or a subject) and `flowgate.outcome`. Its parent is the trace context
//! the request names (`params._meta`, else the HTTP `traceparent` header).

use std::time::Instant;

use tracing::field::Empty;

use crate::SPAN_TARGET;

/// The methods flowgate serves, as metric label values (anything else is `other`, so a client
/// cannot make up label values).
const METHODS: [&str; 12] = [
    "initialize",
    "ping",
    "server/discover",
    "tools/list",
    "tools/call",
    "tasks/get",
    "tasks/update",
    "tasks/cancel",
    "tasks/list",
    "tasks/result",
    "notifications/initialized",
    "notifications/cancelled",
];

/// `method` as a bounded label value.
pub fn method_label(method: &str) -> &'static str {
    METHODS
        .iter()
        .find(|m| **m == method)
        .copied()
        .unwrap_or("other")
}

/// What a request is, as far as the transport has read it.
#[derive(Debug, Clone, Copy, Default)]
pub struct RequestInfo<'a> {
    /// The JSON-RPC method.
    pub method: &'a str,
    /// The JSON-RPC id (as JSON text), for requests.
    pub id: Option<&'a str>,
    /// The tool a `tools/call` names.
    pub tool: Option<&'a str>,
    /// The protocol revision the request says it speaks.
    pub revision: Option<&'a str>,
    /// Who vouched for the caller (`None`: unauthenticated).
    pub issuer: Option<&'a str>,
    /// `tcp` (HTTP) or `pipe` (stdio).
    pub transport: &'static str,
}

/// An MCP request being served: its span, and when it began (for its duration).
#[derive(Debug)]
pub struct Request {
    span: tracing::Span,
    method: &'static str,
    began: Option<Instant>,
}

impl Request {
    /// The request's span (disabled when traces are off), with `parent` as its parent.
    pub fn begin(info: RequestInfo<'_>, parent: Option<opentelemetry::Context>) -> Request {
        let method = method_label(info.method);
        let span = tracing::info_span!(
            target: SPAN_TARGET,
            "mcp request",
            otel.name = match info.tool {
                Some(tool) if method == "tools/call" => format!("{method} {tool}"),
                _ => method.to_owned(),
            },
            otel.kind = "server",
            otel.status_code = Empty,
            otel.status_description = Empty,
            mcp.method.name = info.method,
            jsonrpc.request.id = info.id,
            mcp.protocol.version = info.revision,
            network.transport = info.transport,
            gen_ai.tool.name = info.tool.filter(|_| method == "tools/call"),
            gen_ai.operation.name = (method == "tools/call").then_some("execute_tool"),
            flowgate.tool = info.tool.filter(|_| method == "tools/call"),
            flowgate.principal.issuer = info.issuer,
            flowgate.outcome = Empty,
            error.r#type = Empty,
            rpc.response.status_code = Empty,
        );
        if let Some(parent) = parent
            && !span.is_disabled()
        {
            crate::traces::set_parent(&span, parent);
        }
        let began = crate::metrics::get().map(|_| Instant::now());
        Request {
            span,
            method,
            began,
        }
    }

    /// The span to run the request in.
    pub fn span(&self) -> &tracing::Span {
        &self.span
    }

    /// The request was answered: with a JSON-RPC error `code`, or not (`None`).
    pub fn end(self, code: Option<i64>) {
        if !self.span.is_disabled() {
            match code {
                None => {
                    self.span.record("flowgate.outcome", "ok");
                }
                Some(code) => {
                    let code = code.to_string();
                    self.span.record("flowgate.outcome", "error");
                    self.span.record("error.type", code.as_str());
                    self.span.record("rpc.response.status_code", code.as_str());
                    self.span.record("otel.status_code", "error");
                }
            }
        }
        if let (Some(metrics), Some(began)) = (crate::metrics::get(), self.began) {
            metrics.request(self.method, code, began.elapsed());
        }
    }
}

/// Names the tool the current request works for (a `tasks/*` request, once its handle is open).
pub fn tool(name: &str) {
    tracing::Span::current().record("flowgate.tool", name);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_bounded() {
        assert_eq!(method_label("tasks/get"), "tasks/get");
        assert_eq!(method_label("made/up\nline"), "other");
    }
}
