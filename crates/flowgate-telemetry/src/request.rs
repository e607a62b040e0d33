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
use crate::traces::REQUEST_SPAN;

/// The methods flowgate serves, as metric label values (anything else is `other`, so a client
/// cannot make up label values).
pub(crate) const METHODS: [&str; 13] = [
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
    "subscriptions/listen",
    "notifications/initialized",
    "notifications/cancelled",
];

/// `method` as a bounded label value.
pub fn method_label(method: &str) -> &'static str {
    label(method_index(method))
}

/// The label of the method at `index` among the methods flowgate serves (`other` for none).
fn label(index: Option<usize>) -> &'static str {
    index.map_or("other", |i| METHODS[i])
}

/// The position of `method` among the methods flowgate serves.
pub(crate) fn method_index(method: &str) -> Option<usize> {
    METHODS.iter().position(|m| *m == method)
}

/// What a request is, as far as the transport has read it.
#[derive(Clone, Copy, Default)]
pub struct RequestInfo<'a> {
    /// The JSON-RPC method.
    pub method: &'a str,
    /// The JSON-RPC id (shown as JSON text), for requests: written out only for a span the
    /// sampler keeps.
    pub id: Option<&'a dyn std::fmt::Display>,
    /// The tool a `tools/call` names.
    pub tool: Option<&'a str>,
    /// The protocol revision the request says it speaks.
    pub revision: Option<&'a str>,
    /// Who vouched for the caller (`None`: unauthenticated).
    pub issuer: Option<&'a str>,
    /// `tcp` (HTTP) or `pipe` (stdio).
    pub transport: &'static str,
}

impl std::fmt::Debug for RequestInfo<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestInfo")
            .field("method", &self.method)
            .field("id", &self.id.map(ToString::to_string))
            .field("tool", &self.tool)
            .field("revision", &self.revision)
            .field("issuer", &self.issuer)
            .field("transport", &self.transport)
            .finish()
    }
}

/// An MCP request being served: its span, and when it began (for its duration).
#[derive(Debug)]
pub struct Request {
    span: tracing::Span,
    /// The method's position in [`METHODS`] (`None`: `other`), found once: its label and the
    /// series the metrics keep per method both come from it.
    index: Option<usize>,
    began: Option<Instant>,
}

impl Request {
    /// The request's span, whose parent `parent` finds (asked only when traces are on): a
    /// disabled span when traces are off or the sampler leaves the request out (see
    /// [`crate::traces`]).
    pub fn begin(
        info: RequestInfo<'_>,
        parent: impl FnOnce() -> Option<opentelemetry::Context>,
    ) -> Request {
        let index = method_index(info.method);
        let traced = crate::traces::layer_made();
        let parent = if traced { parent() } else { None };
        let span = if traced && crate::traces::sampled(parent.as_ref()) {
            traced_span(&info, label(index), parent)
        } else {
            tracing::Span::none()
        };
        let began = crate::metrics::get().map(|_| Instant::now());
        Request { span, index, began }
    }

    /// The span to run the request in.
    pub fn span(&self) -> &tracing::Span {
        &self.span
    }

    /// The request was answered, as `ended` says.
    pub fn end(self, ended: Ended) {
        let code = match ended {
            Ended::Error(code) => Some(code),
            _ => None,
        };
        if !self.span.is_disabled() {
            record_end(&self.span, ended);
        }
        if let (Some(metrics), Some(began)) = (crate::metrics::get(), self.began) {
            let outcome = match ended {
                Ended::Ok => "ok",
                Ended::Error(_) => "error",
                Ended::Refused(_) => "refused",
            };
            metrics.request(
                label(self.index),
                self.index,
                outcome,
                code,
                began.elapsed(),
            );
        }
    }
}

// The span's making and its last fields are kept out of `begin` and `end` (`cold`, never
// inlined), as the engine call's span is kept out of `Instrumented`: every request observed
// runs those two and, sampled in production, one in many is traced, while code the untraced
// path jumps over still fills the instruction cache lines it runs through (docs/benchmarks.md
// has what this saves). With every request traced the hint is wrong, at
// the cost of a call.

/// The span of a request the sampler keeps, child of `parent` when there is one.
#[cold]
#[inline(never)]
fn traced_span(
    info: &RequestInfo<'_>,
    method: &'static str,
    parent: Option<opentelemetry::Context>,
) -> tracing::Span {
    let span = tracing::info_span!(
        target: SPAN_TARGET,
        REQUEST_SPAN,
        otel.name = match info.tool {
            Some(tool) if method == "tools/call" => format!("{method} {tool}"),
            _ => method.to_owned(),
        },
        otel.kind = "server",
        otel.status_code = Empty,
        otel.status_description = Empty,
        mcp.method.name = info.method,
        jsonrpc.request.id = info.id.map(tracing::field::display),
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
    if let Some(parent) = parent {
        crate::traces::set_parent(&span, parent);
    }
    span
}

/// Records how the request whose span is `span` ended.
#[cold]
#[inline(never)]
fn record_end(span: &tracing::Span, ended: Ended) {
    match ended {
        Ended::Ok => {
            span.record("flowgate.outcome", "ok");
        }
        Ended::Error(code) => {
            let code = code.to_string();
            span.record("flowgate.outcome", "error");
            span.record("error.type", code.as_str());
            span.record("rpc.response.status_code", code.as_str());
            span.record("otel.status_code", "error");
        }
        Ended::Refused(status) => {
            let status = status.to_string();
            span.record("flowgate.outcome", "refused");
            span.record("error.type", status.as_str());
            span.record("otel.status_code", "error");
        }
    }
}

/// How a request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// With a result (a tool error included: that is the tool's answer, not the request's).
    Ok,
    /// With a JSON-RPC error of this code.
    Error(i64),
    /// Refused by the transport with this HTTP status and no JSON-RPC error (a scope it lacks).
    Refused(u16),
}

/// Whether requests are traced or counted at all (when not, the transports skip the work).
pub fn active() -> bool {
    crate::metrics::get().is_some() || crate::traces::layer_made()
}

/// Names the tool the request whose span is `span` works for (a `tasks/*` request, once its
/// handle is open).
pub fn tool(span: &tracing::Span, name: &str) {
    if !span.is_disabled() {
        span.record("flowgate.tool", name);
    }
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
