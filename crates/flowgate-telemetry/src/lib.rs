//! flowgate's telemetry: OpenTelemetry traces over OTLP ([`traces`]), Prometheus metrics
//! ([`metrics`], served by [`listener`]), and [`Instrumented`], the decorator through which
//! every engine call is traced and counted.
//!
//! Both are off unless asked for (an OTLP endpoint in the standard `OTEL_*` variables,
//! `--metrics-listen`), and cost a disabled span and an `Option` check per event when off.
//! Adapters report what only they know (throttled answers, the trace to hand on to X-Ray)
//! through `flowgate_core::observe`, which [`install_observer`] connects to this crate.

mod engine;
pub mod listener;
pub mod metrics;
pub mod request;
pub mod traces;

pub use engine::{Instrumented, outcome};
pub use metrics::Metrics;
pub use request::{Ended, Request, RequestInfo};
pub use traces::Traces;

/// The target of the spans flowgate exports (MCP requests, engine calls): the trace pipeline
/// takes these and nothing else, and the logs leave them out.
pub const SPAN_TARGET: &str = "flowgate::otel";

/// Receives adapters' reports: a throttled answer marks the current engine call's span and
/// counts in `flowgate_engine_throttles_total`; the trace context is the current span's.
#[derive(Debug)]
struct Observer;

impl flowgate_core::observe::Observer for Observer {
    fn throttled(&self, engine: &'static str) {
        tracing::Span::current().record("flowgate.throttled", true);
        if let Some(metrics) = metrics::get() {
            metrics.engine_throttled(engine);
        }
    }

    fn trace_context(&self) -> Option<flowgate_core::observe::TraceContext> {
        traces::current_context()
    }
}

/// Connects adapters' reports to this crate (once per process; later calls do nothing).
pub fn install_observer() {
    flowgate_core::observe::install(&Observer);
}
