//! What adapters tell the operator's telemetry, without depending on it.
//!
//! Adapters know things the server cannot see from an engine call's result: that the engine's
//! API answered "slow down" even though the adapter then answered from what it already knew,
//! or which trace an engine call belongs to (so a Step Functions execution can carry it on to
//! X-Ray). They report through these functions; the binary installs one [`Observer`] (the
//! telemetry crate's) at start. With none installed every call is a load of an empty cell.

use std::sync::OnceLock;

/// The receiver of adapters' reports.
pub trait Observer: Send + Sync + 'static {
    /// The engine's API refused a call of `engine` for its rate limit (HTTP 429, a secondary
    /// rate limit, AWS `ThrottlingException`), whatever the adapter then made of it.
    fn throttled(&self, engine: &'static str);

    /// The trace the current engine call belongs to, when traces are being recorded.
    fn trace_context(&self) -> Option<TraceContext>;
}

static OBSERVER: OnceLock<&'static dyn Observer> = OnceLock::new();

/// Installs the process's observer. Only the first call has an effect (returns `false` after).
pub fn install(observer: &'static dyn Observer) -> bool {
    OBSERVER.set(observer).is_ok()
}

/// Reports a throttled answer of `engine`'s API.
pub fn throttled(engine: &'static str) {
    if let Some(observer) = OBSERVER.get() {
        observer.throttled(engine);
    }
}

/// The trace of the current engine call, if any.
pub fn trace_context() -> Option<TraceContext> {
    OBSERVER.get().and_then(|o| o.trace_context())
}

/// One span of a distributed trace (W3C trace context ids).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceContext {
    /// The trace's 16-byte id.
    pub trace_id: [u8; 16],
    /// The span's 8-byte id.
    pub span_id: [u8; 8],
    /// Whether the trace is sampled (recorded).
    pub sampled: bool,
}

impl TraceContext {
    /// The AWS X-Ray trace header for this span: `Root=1-<8 hex>-<24 hex>;Parent=<16
    /// hex>;Sampled=<0|1>`. X-Ray trace ids are W3C ids whose first 4 bytes are the epoch
    /// seconds; others are accepted by X-Ray as they are.
    pub fn xray_header(&self) -> String {
        let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
        format!(
            "Root=1-{}-{};Parent={};Sampled={}",
            hex(&self.trace_id[..4]),
            hex(&self.trace_id[4..]),
            hex(&self.span_id),
            u8::from(self.sampled)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_xray_header_splits_the_trace_id_as_xray_does() {
        let context = TraceContext {
            trace_id: [
                0x5f, 0x84, 0xc7, 0xa9, 0x1d, 0x3c, 0x66, 0x1a, 0x33, 0x61, 0xb1, 0xd4, 0x7e, 0x02,
                0x5b, 0x36,
            ],
            span_id: [0x53, 0x99, 0x5c, 0x3f, 0x42, 0xcd, 0x8a, 0xd8],
            sampled: true,
        };
        assert_eq!(
            context.xray_header(),
            "Root=1-5f84c7a9-1d3c661a3361b1d47e025b36;Parent=53995c3f42cd8ad8;Sampled=1"
        );
    }
}
