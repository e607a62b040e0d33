//! OpenTelemetry traces over OTLP, configured by the standard `OTEL_*` variables.
//!
//! Nothing is exported unless an endpoint is set (`OTEL_EXPORTER_OTLP_ENDPOINT` or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`), and `OTEL_SDK_DISABLED=true` or
//! `OTEL_TRACES_EXPORTER=none` turn it off. The protocol is `http/protobuf` (the default) or
//! `grpc` (`OTEL_EXPORTER_OTLP_PROTOCOL`, `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`); headers,
//! timeout and compression come from their `OTEL_EXPORTER_OTLP_*` variables (read by
//! `opentelemetry-otlp`), the service name from `OTEL_SERVICE_NAME` or
//! `OTEL_RESOURCE_ATTRIBUTES` (default `flowgate`), the sampler from `OTEL_TRACES_SAMPLER` and
//! `OTEL_TRACES_SAMPLER_ARG`, and the batch from `OTEL_BSP_*` (read by the SDK).
//!
//! Spans are exported by the SDK's batch processor on a thread of its own: ending a span puts
//! it in a bounded queue (dropped when full), so a request never waits for the collector.
//!
//! Only flowgate's own spans (target [`crate::SPAN_TARGET`]: one per MCP request, one per
//! engine call) are exported; log events stay in the logs.
//!
//! The sampler (`OTEL_TRACES_SAMPLER`: `always_on`, `always_off`, `traceidratio`, and the
//! `parentbased_` forms of these, the default `parentbased_always_on`) decides before a
//! request's span is made, with the SDK's own samplers: a request it leaves out gets no span,
//! and its engine calls none, so an unsampled request costs the pipeline nothing (building a
//! span only to drop it cost a poll much of its throughput). The SDK then records what was
//! decided (its sampler is always on). A root's ratio decision is drawn from a fresh random
//! trace id, as the SDK draws it. Engine calls are traced as children of a sampled request;
//! the few made outside any request (the Step Functions engine's listing sweep) are counted
//! in the metrics only.

use std::sync::OnceLock;

use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{SpanKind, TraceContextExt as _, TraceId, TracerProvider as _};
use opentelemetry_otlp::{Protocol, WithExportConfig as _, WithTonicConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{
    IdGenerator as _, RandomIdGenerator, Sampler, SamplingDecision, SdkTracerProvider,
    ShouldSample as _,
};
use tracing::Subscriber;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::Layer;
use tracing_subscriber::registry::LookupSpan;

use crate::SPAN_TARGET;

/// The name of a request's span.
pub(crate) const REQUEST_SPAN: &str = "mcp request";

/// The process's sampler (set once by [`Traces::from_env`]; `parentbased_always_on` before).
static SAMPLER: OnceLock<Sampling> = OnceLock::new();

/// The variables that say where traces go, most specific first.
const ENDPOINT_VARS: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
];
/// The variables that say how, most specific first.
const PROTOCOL_VARS: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
];

/// The trace pipeline: a tracer provider exporting over OTLP. Clones share it.
#[derive(Debug, Clone)]
pub struct Traces {
    provider: SdkTracerProvider,
    /// Where spans go, for the start-up log line.
    pub endpoint: String,
    /// `http/protobuf` or `grpc`.
    pub protocol: &'static str,
}

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// Where and how the variables `var` reads ask traces to go; `None` when they ask for none.
fn wanted(var: impl Fn(&str) -> Option<String>) -> Result<Option<(String, Protocol)>, String> {
    let var = |name: &str| var(name).filter(|v| !v.trim().is_empty());
    let first = |names: &[&str]| {
        names
            .iter()
            .find_map(|n| var(n).map(|v| ((*n).to_owned(), v)))
    };
    if var("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
        return Ok(None);
    }
    match var("OTEL_TRACES_EXPORTER") {
        Some(exporter) if exporter.trim() == "none" => return Ok(None),
        Some(exporter) if exporter.trim() != "otlp" => {
            return Err(format!(
                "OTEL_TRACES_EXPORTER={exporter:?}: flowgate exports traces with otlp (or none)"
            ));
        }
        _ => {}
    }
    let Some((_, endpoint)) = first(&ENDPOINT_VARS) else {
        return Ok(None);
    };
    let protocol = match first(&PROTOCOL_VARS) {
        None => Protocol::HttpBinary,
        Some((_, p)) if p.trim() == "http/protobuf" => Protocol::HttpBinary,
        Some((_, p)) if p.trim() == "grpc" => Protocol::Grpc,
        Some((name, p)) => {
            return Err(format!(
                "{name}={p:?}: flowgate exports traces over http/protobuf or grpc"
            ));
        }
    };
    Ok(Some((endpoint, protocol)))
}

/// The sampler the variables `var` reads name (OpenTelemetry's names and defaults; a ratio
/// outside 0..=1 or not a number is refused, naming the variable, where the SDK would quietly
/// sample everything).
fn sampler_wanted(var: impl Fn(&str) -> Option<String>) -> Result<Sampling, String> {
    let name = var("OTEL_TRACES_SAMPLER").filter(|v| !v.trim().is_empty());
    let name = name.as_deref().map_or("parentbased_always_on", str::trim);
    let ratio = || match var("OTEL_TRACES_SAMPLER_ARG").filter(|v| !v.trim().is_empty()) {
        None => Ok(1.0),
        Some(arg) => match arg.trim().parse::<f64>() {
            Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
            _ => Err(format!(
                "OTEL_TRACES_SAMPLER_ARG={arg:?}: a sampling ratio is a number from 0 to 1"
            )),
        },
    };
    let (parent_based, root) = match name {
        "always_on" => (false, Root::Always),
        "always_off" => (false, Root::Never),
        "traceidratio" => (false, Root::Ratio(ratio()?)),
        "parentbased_always_on" => (true, Root::Always),
        "parentbased_always_off" => (true, Root::Never),
        "parentbased_traceidratio" => (true, Root::Ratio(ratio()?)),
        other => {
            return Err(format!(
                "OTEL_TRACES_SAMPLER={other:?}: flowgate samples with always_on, always_off, \
                 traceidratio or their parentbased_ forms"
            ));
        }
    };
    Ok(Sampling::new(parent_based, root))
}

/// How requests are sampled: the SDK's sampler, and the decision it makes for a root.
#[derive(Debug)]
pub(crate) struct Sampling {
    sdk: Sampler,
    root: Root,
}

/// What a sampler decides for a root (a request without a remote parent).
#[derive(Debug, Clone, Copy)]
enum Root {
    Always,
    Never,
    /// Keeps a root when its trace id falls within the ratio (`TraceIdRatioBased`).
    Ratio(f64),
}

impl Sampling {
    fn new(parent_based: bool, root: Root) -> Self {
        let sdk_root = match root {
            Root::Always => Sampler::AlwaysOn,
            Root::Never => Sampler::AlwaysOff,
            Root::Ratio(ratio) => Sampler::TraceIdRatioBased(ratio),
        };
        let sdk = if parent_based {
            Sampler::ParentBased(Box::new(sdk_root))
        } else {
            sdk_root
        };
        Sampling { sdk, root }
    }
}

fn sampler() -> &'static Sampling {
    SAMPLER.get_or_init(|| Sampling::new(true, Root::Always))
}

/// Whether the sampler keeps a request whose remote parent is `parent` (`None`: a root).
pub(crate) fn sampled(parent: Option<&opentelemetry::Context>) -> bool {
    decide(sampler(), parent)
}

fn decide(sampling: &Sampling, parent: Option<&opentelemetry::Context>) -> bool {
    // A root (most requests): the root sampler's decision, as the SDK makes it for a random
    // trace id, without making one and a sampling result for the SDK to judge. Of what traces
    // cost a request the sampler leaves out, the SDK's decision was the most code run.
    if parent.is_none() {
        return match sampling.root {
            Root::Always => true,
            Root::Never => false,
            Root::Ratio(ratio) => keeps(ratio),
        };
    }
    let sampler = &sampling.sdk;
    let trace_id = parent
        .map(|cx| cx.span().span_context().trace_id())
        .filter(|id| *id != TraceId::INVALID)
        .unwrap_or_else(|| RandomIdGenerator::default().new_trace_id());
    let kept = sampler.should_sample(parent, trace_id, REQUEST_SPAN, &SpanKind::Server, &[], &[]);
    kept.decision == SamplingDecision::RecordAndSample
}

/// Whether a root whose trace id is random is kept at `ratio`: as `TraceIdRatioBased` judges a
/// trace id (its low 63 bits below the ratio's share of 2^63), for 64 random bits.
fn keeps(ratio: f64) -> bool {
    if ratio >= 1.0 {
        return true;
    }
    // The SDK's bound, computed the same way.
    let bound = (ratio.max(0.0) * (1u64 << 63) as f64) as u64;
    (random_u64() >> 1) < bound
}

/// 64 random bits for sampling decisions (xorshift64*, a generator per thread seeded from the
/// standard library's random hash keys): not for secrets, only for a fair coin.
fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    thread_local! {
        static STATE: std::cell::Cell<u64> = std::cell::Cell::new(
            std::collections::hash_map::RandomState::new().build_hasher().finish() | 1,
        );
    }
    STATE.with(|state| {
        let mut x = state.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        state.set(x);
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    })
}

/// Whether the current span is within a traced request's span: engine calls make their span
/// only then, so the two places that make flowgate's spans decide which are traced and the
/// layer's filter is its target alone. (A filter that asked the context instead would not
/// spare an unsampled request the work: the registry still makes, enters and closes a span
/// that every per-layer filter turns down when a filter's answer depends on the context.)
///
/// Answered from a counter of the thread's entered request spans ([`RequestMarker`], part of
/// the layer): an engine call of an unsampled request asks a thread-local, not the registry
/// for the current span and its parents (a measurable share of a poll's CPU when it did:
/// docs/benchmarks.md).
pub(crate) fn in_traced_request() -> bool {
    ENTERED_REQUESTS.with(|n| n.get() > 0)
}

/// Whether a trace layer was made ([`Traces::layer`]): before it, no request is traced.
static LAYER_MADE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether requests may be traced: a trace layer was made. Asked instead of the subscriber
/// (`tracing::enabled!`) on every request: the log layer's filter turns flowgate's spans down
/// and the trace layer's takes them, so the subscriber asked both filters each time (a fifth of
/// what traces cost a request the sampler leaves out). A request's span is still made through
/// the subscriber, which decides whether it records it.
pub(crate) fn layer_made() -> bool {
    LAYER_MADE.load(std::sync::atomic::Ordering::Relaxed)
}

thread_local! {
    /// How many traced requests' spans the thread is inside (entered and not yet exited).
    static ENTERED_REQUESTS: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Counts the thread's entries into traced requests' spans (a span is entered and exited on
/// one thread: a future's span, around each of its polls).
struct RequestMarker;

impl<S> Layer<S> for RequestMarker
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_enter(&self, id: &tracing::span::Id, ctx: tracing_subscriber::layer::Context<'_, S>) {
        if is_request(ctx.metadata(id)) {
            ENTERED_REQUESTS.with(|n| n.set(n.get().saturating_add(1)));
        }
    }

    fn on_exit(&self, id: &tracing::span::Id, ctx: tracing_subscriber::layer::Context<'_, S>) {
        if is_request(ctx.metadata(id)) {
            ENTERED_REQUESTS.with(|n| n.set(n.get().saturating_sub(1)));
        }
    }
}

fn is_request(metadata: Option<&'static tracing::Metadata<'static>>) -> bool {
    metadata.is_some_and(|m| m.target() == SPAN_TARGET && m.name() == REQUEST_SPAN)
}

impl Traces {
    /// The pipeline the environment asks for, `None` when it asks for none.
    ///
    /// Must be called within a Tokio runtime (the gRPC client's connection lives on it).
    ///
    /// # Errors
    /// An unknown protocol or exporter, or an endpoint the exporter cannot use, naming the
    /// variable.
    pub fn from_env() -> Result<Option<Traces>, String> {
        let Some((endpoint, protocol)) = wanted(var)? else {
            return Ok(None);
        };
        let exporter = match protocol {
            Protocol::Grpc => {
                let mut builder = opentelemetry_otlp::SpanExporter::builder().with_tonic();
                if endpoint.trim_start().starts_with("https:") {
                    builder = builder.with_tls_config(
                        opentelemetry_otlp::tonic_types::transport::ClientTlsConfig::new()
                            .with_native_roots(),
                    );
                }
                builder.with_protocol(Protocol::Grpc).build()
            }
            _ => opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(Protocol::HttpBinary)
                .build(),
        }
        .map_err(|e| format!("OpenTelemetry exporter for {endpoint}: {e}"))?;
        let _ = SAMPLER.set(sampler_wanted(var)?);
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_sampler(Sampler::AlwaysOn)
            .with_resource(resource())
            .build();
        Ok(Some(Traces {
            provider,
            endpoint,
            protocol: if protocol == Protocol::Grpc {
                "grpc"
            } else {
                "http/protobuf"
            },
        }))
    }

    /// A pipeline around `provider` (tests export to memory).
    #[cfg(test)]
    pub(crate) fn with_provider(provider: SdkTracerProvider) -> Traces {
        Traces {
            provider,
            endpoint: String::new(),
            protocol: "memory",
        }
    }

    /// The subscriber layer that turns flowgate's sampled spans into OpenTelemetry spans (and
    /// marks the threads inside a traced request, for [`in_traced_request`]).
    ///
    /// No OpenTelemetry context is attached while a span is entered (no code here reads
    /// `Context::current()`: parents come from the spans, the adapters' trace context from
    /// [`current_context`]), which spares every poll of a traced future a context switch.
    pub fn layer<S>(&self) -> impl Layer<S> + Send + Sync + 'static
    where
        S: Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
    {
        use tracing_subscriber::filter::{LevelFilter, filter_fn};
        LAYER_MADE.store(true, std::sync::atomic::Ordering::Relaxed);
        let tracer = self.provider.tracer("flowgate");
        tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_level(false)
            .with_location(false)
            .with_threads(false)
            .with_target(false)
            .with_tracked_inactivity(false)
            .with_context_activation(false)
            .and_then(RequestMarker)
            .with_filter(
                filter_fn(|meta| meta.target() == SPAN_TARGET)
                    // flowgate's spans are INFO: the hint keeps every crate's `debug!` and
                    // `trace!` off by the global level check.
                    .with_max_level_hint(LevelFilter::INFO),
            )
    }

    /// Exports every span ended so far and waits for the collector's answer (on AWS Lambda,
    /// before the invocation ends: the environment may be frozen until the next one). Blocks
    /// the calling thread: call it off the async workers.
    ///
    /// # Errors
    /// The exporter's error, for the log.
    pub fn flush(&self) -> Result<(), String> {
        self.provider.force_flush().map_err(|e| e.to_string())
    }

    /// Exports what is left and stops the exporter (at exit). Blocks like [`Traces::flush`].
    pub fn shutdown(&self) {
        if let Err(e) = self.provider.shutdown() {
            tracing::warn!(error = %e, "OpenTelemetry exporter did not shut down cleanly");
        }
    }
}

/// The service's resource: the detected one (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`,
/// the SDK's own attributes), named `flowgate` unless the environment names it.
fn resource() -> Resource {
    let detected = Resource::builder().build();
    let named = detected
        .get(&opentelemetry::Key::from_static_str("service.name"))
        .is_some_and(|name| !name.as_str().starts_with("unknown_service"));
    let builder = Resource::builder().with_attribute(opentelemetry::KeyValue::new(
        "service.version",
        env!("CARGO_PKG_VERSION"),
    ));
    if named {
        builder.build()
    } else {
        builder.with_service_name("flowgate").build()
    }
}

/// W3C trace context fields in HTTP headers.
struct Headers<'a>(&'a http::HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}

/// W3C trace context fields in a request's `_meta` (SEP-414: bare `traceparent`, `tracestate`).
struct Meta<'a>(&'a serde_json::Map<String, serde_json::Value>);

impl Extractor for Meta<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(serde_json::Value::as_str)
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(String::as_str).collect()
    }
}

/// The remote parent a request names: `traceparent` (and `tracestate`) in its `params._meta`
/// (SEP-414: the MCP message's own context, on every transport), else its HTTP headers. `None`
/// when neither holds a valid one.
pub fn remote_parent(
    meta: Option<&serde_json::Map<String, serde_json::Value>>,
    headers: Option<&http::HeaderMap>,
) -> Option<opentelemetry::Context> {
    let propagator = TraceContextPropagator::new();
    let valid = |cx: opentelemetry::Context| cx.span().span_context().is_valid().then_some(cx);
    if let Some(meta) = meta
        && meta.contains_key("traceparent")
        && let Some(cx) = valid(propagator.extract(&Meta(meta)))
    {
        return Some(cx);
    }
    let headers = headers?;
    // (A constant name: a `&str` is parsed into a header name on every look-up.)
    const TRACEPARENT: http::HeaderName = http::HeaderName::from_static("traceparent");
    headers.get(TRACEPARENT)?;
    valid(propagator.extract(&Headers(headers)))
}

/// Makes `parent` the parent of `span` (a request's span, before it is entered).
pub fn set_parent(span: &tracing::Span, parent: opentelemetry::Context) {
    // A span nothing exports (no pipeline) has no parent to set.
    let _ = span.set_parent(parent);
}

/// The OpenTelemetry ids of the current span, when it is being recorded.
pub(crate) fn current_context() -> Option<flowgate_core::observe::TraceContext> {
    let span = tracing::Span::current();
    if span.is_disabled() {
        return None;
    }
    let cx = span.context();
    let otel = cx.span();
    let context = otel.span_context();
    context
        .is_valid()
        .then(|| flowgate_core::observe::TraceContext {
            trace_id: context.trace_id().to_bytes(),
            span_id: context.span_id().to_bytes(),
            sampled: context.is_sampled(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An environment holding only `pairs`, as the settings' readers take one.
    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: std::collections::HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name: &str| map.get(name).cloned()
    }

    #[test]
    fn nothing_is_exported_without_an_endpoint_and_a_bad_setting_is_named() {
        assert_eq!(wanted(vars(&[])), Ok(None));
        assert_eq!(
            wanted(vars(&[
                ("OTEL_SERVICE_NAME", "x"),
                ("OTEL_EXPORTER_OTLP_ENDPOINT", " ")
            ])),
            Ok(None)
        );
        let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318");
        assert_eq!(
            wanted(vars(&[endpoint])),
            Ok(Some(("http://127.0.0.1:4318".into(), Protocol::HttpBinary)))
        );
        assert_eq!(
            wanted(vars(&[endpoint, ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")])),
            Ok(Some(("http://127.0.0.1:4318".into(), Protocol::Grpc)))
        );
        // The traces' own variables come first.
        assert_eq!(
            wanted(vars(&[
                endpoint,
                (
                    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                    "http://collector:4317"
                ),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
                ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc"),
            ])),
            Ok(Some(("http://collector:4317".into(), Protocol::Grpc)))
        );
        assert_eq!(
            wanted(vars(&[endpoint, ("OTEL_SDK_DISABLED", "true")])),
            Ok(None)
        );
        assert_eq!(
            wanted(vars(&[endpoint, ("OTEL_TRACES_EXPORTER", "none")])),
            Ok(None)
        );
        let e = wanted(vars(&[
            endpoint,
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
        ]))
        .expect_err("not built in");
        assert!(e.contains("OTEL_EXPORTER_OTLP_PROTOCOL"), "{e}");
        let e = wanted(vars(&[endpoint, ("OTEL_TRACES_EXPORTER", "zipkin")])).expect_err("no");
        assert!(e.contains("OTEL_TRACES_EXPORTER"), "{e}");
    }

    /// Headers naming a remote parent in one trace, sampled or not as `flags` says.
    fn traceparent(flags: &str) -> http::HeaderMap {
        let mut headers = http::HeaderMap::new();
        headers.insert(
            "traceparent",
            http::HeaderValue::from_str(&format!(
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-{flags}"
            ))
            .expect("header"),
        );
        headers
    }

    #[test]
    fn the_sampler_is_named_by_the_standard_variables_and_a_bad_one_is_refused() {
        let parent =
            |flags: &str| remote_parent(None, Some(&traceparent(flags))).expect("a parent");
        let (kept, dropped) = (parent("01"), parent("00"));
        let decisions = |sampler: &Sampling| {
            (
                decide(sampler, None),
                decide(sampler, Some(&kept)),
                decide(sampler, Some(&dropped)),
            )
        };
        // The default follows a remote parent and keeps every root.
        let default = sampler_wanted(vars(&[])).expect("default");
        assert_eq!(decisions(&default), (true, true, false));
        let none = sampler_wanted(vars(&[
            ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "0"),
        ]))
        .expect("ratio 0");
        assert_eq!(decisions(&none), (false, true, false));
        let always = sampler_wanted(vars(&[("OTEL_TRACES_SAMPLER", "always_on")])).expect("on");
        assert_eq!(decisions(&always), (true, true, true));
        let off = sampler_wanted(vars(&[("OTEL_TRACES_SAMPLER", "always_off")])).expect("off");
        assert_eq!(decisions(&off), (false, false, false));
        // A ratio of a tenth keeps about a tenth of the roots.
        let tenth = sampler_wanted(vars(&[
            ("OTEL_TRACES_SAMPLER", "traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "0.1"),
        ]))
        .expect("a tenth");
        let roots = (0..10_000).filter(|_| decide(&tenth, None)).count();
        assert!((700..1300).contains(&roots), "{roots} of 10,000 kept");
        // A hundredth, following a parent where there is one.
        let hundredth = sampler_wanted(vars(&[
            ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "0.01"),
        ]))
        .expect("a hundredth");
        let roots = (0..100_000).filter(|_| decide(&hundredth, None)).count();
        assert!((800..1200).contains(&roots), "{roots} of 100,000 kept");
        assert_eq!(
            (
                decide(&hundredth, Some(&kept)),
                decide(&hundredth, Some(&dropped))
            ),
            (true, false)
        );
        for (pairs, named) in [
            (
                &[("OTEL_TRACES_SAMPLER", "jaeger_remote")][..],
                "OTEL_TRACES_SAMPLER",
            ),
            (
                &[
                    ("OTEL_TRACES_SAMPLER", "traceidratio"),
                    ("OTEL_TRACES_SAMPLER_ARG", "1.5"),
                ][..],
                "OTEL_TRACES_SAMPLER_ARG",
            ),
            (
                &[
                    ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
                    ("OTEL_TRACES_SAMPLER_ARG", "a tenth"),
                ][..],
                "OTEL_TRACES_SAMPLER_ARG",
            ),
        ] {
            let e = sampler_wanted(vars(pairs)).expect_err("refused");
            assert!(e.contains(named), "{e}");
        }
    }

    #[test]
    fn a_request_names_its_parent_by_header_or_meta() {
        let headers = traceparent("01");
        let parent = remote_parent(None, Some(&headers)).expect("a parent");
        assert_eq!(
            parent.span().span_context().trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        let meta = serde_json::json!({
            "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "tracestate": "vendor=1",
        });
        let parent = remote_parent(meta.as_object(), None).expect("a parent from _meta");
        assert_eq!(
            parent.span().span_context().span_id().to_string(),
            "b7ad6b7169203331"
        );
        // _meta wins over the header; garbage in _meta falls back to the header.
        let both = remote_parent(meta.as_object(), Some(&headers)).expect("a parent");
        assert_eq!(
            both.span().span_context().trace_id().to_string(),
            "0af7651916cd43dd8448eb211c80319c"
        );
        let bad = serde_json::json!({"traceparent": "00-zz-yy-01"});
        assert!(remote_parent(bad.as_object(), None).is_none());
        let fallback = remote_parent(bad.as_object(), Some(&headers)).expect("the header");
        assert_eq!(
            fallback.span().span_context().trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert!(remote_parent(None, None).is_none());
    }

    /// Spans exported to memory, for tests.
    #[derive(Debug, Clone, Default)]
    struct Collected(std::sync::Arc<std::sync::Mutex<Vec<opentelemetry_sdk::trace::SpanData>>>);

    impl opentelemetry_sdk::trace::SpanExporter for Collected {
        async fn export(
            &self,
            batch: Vec<opentelemetry_sdk::trace::SpanData>,
        ) -> opentelemetry_sdk::error::OTelSdkResult {
            self.0.lock().expect("lock").extend(batch);
            Ok(())
        }
    }

    fn attribute(span: &opentelemetry_sdk::trace::SpanData, key: &str) -> Option<String> {
        span.attributes
            .iter()
            .find(|kv| kv.key.as_str() == key)
            .map(|kv| kv.value.to_string())
    }

    /// An engine that reports a throttled answer and the trace it runs in, as an adapter would.
    #[derive(Debug, Default)]
    struct Reporting {
        seen: std::sync::Mutex<Option<flowgate_core::observe::TraceContext>>,
        /// Whether each read ran inside a span (recorded or not).
        read_in_span: std::sync::Mutex<Vec<bool>>,
    }

    #[async_trait::async_trait]
    impl flowgate_core::Engine for Reporting {
        fn kind(&self) -> &'static str {
            "reporting"
        }
        fn capabilities(&self) -> flowgate_core::Capabilities {
            flowgate_core::Capabilities::default()
        }
        async fn start(
            &self,
            _: flowgate_core::StartRequest,
        ) -> Result<flowgate_core::Started, flowgate_core::EngineError> {
            *self.seen.lock().expect("lock") = flowgate_core::observe::trace_context();
            flowgate_core::observe::throttled("reporting");
            Ok(flowgate_core::Started {
                execution: flowgate_core::ExecutionRef("run-1".into()),
                created_at: chrono::Utc::now(),
            })
        }
        async fn get(
            &self,
            _: &flowgate_core::ExecutionRef,
        ) -> Result<flowgate_core::ExecutionRecord, flowgate_core::EngineError> {
            self.read_in_span
                .lock()
                .expect("lock")
                .push(!tracing::Span::current().is_none());
            Err(flowgate_core::EngineError::Throttled {
                engine: "reporting",
                retry_after: None,
            })
        }
        async fn respond(
            &self,
            _: &flowgate_core::ExecutionRef,
            _: &str,
            _: flowgate_core::InputResponse,
        ) -> Result<(), flowgate_core::EngineError> {
            Ok(())
        }
        /// Always throttled: retried until the attempts run out.
        async fn cancel(
            &self,
            _: &flowgate_core::ExecutionRef,
        ) -> Result<(), flowgate_core::EngineError> {
            flowgate_core::observe::throttled("reporting");
            Err(flowgate_core::EngineError::Throttled {
                engine: "reporting",
                retry_after: Some(std::time::Duration::from_millis(1)),
            })
        }
    }

    /// A trace pipeline exporting to memory (each span as it ends), with the adapters'
    /// reports connected.
    fn in_memory() -> (Collected, Traces) {
        crate::install_observer();
        let collected = Collected::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(collected.clone())
            .build();
        (collected, Traces::with_provider(provider))
    }

    #[tokio::test]
    async fn an_unsampled_request_and_its_engine_calls_cost_the_pipeline_nothing() {
        use flowgate_core::Engine as _;
        use tracing::Instrument as _;
        use tracing_subscriber::layer::SubscriberExt as _;

        let (collected, traces) = in_memory();
        // Log lines beside, filtered as the binary filters them (its spans left out).
        let lines = tracing_subscriber::fmt::layer()
            .with_writer(std::io::sink)
            .with_filter(tracing_subscriber::EnvFilter::new(format!(
                "warn,{SPAN_TARGET}=off"
            )));
        let subscriber = tracing_subscriber::registry()
            .with(lines)
            .with(traces.layer());
        let _default = tracing::subscriber::set_default(subscriber);
        let engine = crate::Instrumented::with_metrics(Reporting::default(), "etl", None);
        let run = flowgate_core::ExecutionRef("run-1".into());

        // The process's sampler here is the default, parentbased_always_on: a request whose
        // remote parent was not sampled is left out, one whose parent was is kept.
        for (flags, id) in [("00", "1"), ("01", "2")] {
            let headers = traceparent(flags);
            let info = crate::RequestInfo {
                method: "tasks/get",
                id: Some(&id),
                transport: "tcp",
                ..Default::default()
            };
            let request = crate::Request::begin(info, || remote_parent(None, Some(&headers)));
            assert_eq!(request.span().is_disabled(), flags == "00");
            let read = engine.get(&run).instrument(request.span().clone()).await;
            assert!(read.is_err());
            // Only a sampled request's engine call has a trace to hand on.
            let seen = async { flowgate_core::observe::trace_context() }
                .instrument(request.span().clone())
                .await;
            assert_eq!(seen.is_some_and(|cx| cx.sampled), flags == "01");
            request.end(crate::Ended::Error(-32602));
        }
        // An engine call outside any request is counted, not traced.
        engine.get(&run).await.expect_err("throttled");
        // Only the sampled request's read had a span at all: the others made none.
        assert_eq!(
            *engine.inner().read_in_span.lock().expect("lock"),
            [false, true, false]
        );
        traces.flush().expect("flush");

        let spans = collected.0.lock().expect("lock").clone();
        let names: Vec<_> = spans.iter().map(|s| s.name.to_string()).collect();
        assert_eq!(names.len(), 2, "{names:?}");
        let request = spans
            .iter()
            .find(|s| s.name == "tasks/get")
            .expect("the sampled request");
        assert_eq!(
            attribute(request, "jsonrpc.request.id").as_deref(),
            Some("2")
        );
        assert_eq!(
            attribute(request, "rpc.response.status_code").as_deref(),
            Some("-32602")
        );
        let get = spans
            .iter()
            .find(|s| s.name == "reporting get")
            .expect("the sampled request's read");
        assert_eq!(get.parent_span_id, request.span_context.span_id());
    }

    #[tokio::test]
    async fn engine_calls_are_children_of_the_request_and_carry_what_adapters_report() {
        use flowgate_core::Engine as _;
        use tracing_subscriber::layer::SubscriberExt as _;

        let (collected, traces) = in_memory();
        let subscriber = tracing_subscriber::registry().with(traces.layer());
        let _default = tracing::subscriber::set_default(subscriber);

        // As the server stacks them: each attempt of a retried call is a call of its own.
        let engine = flowgate_core::retrying::Retrying::new(crate::Instrumented::with_metrics(
            Reporting::default(),
            "etl",
            None,
        ));
        let request =
            tracing::info_span!(target: SPAN_TARGET, REQUEST_SPAN, otel.name = "tools/call etl");
        set_parent(
            &request,
            remote_parent(None, Some(&traceparent("01"))).expect("parent"),
        );
        let started = {
            use tracing::Instrument as _;
            async {
                let started = engine
                    .start(flowgate_core::StartRequest::new(
                        "etl",
                        serde_json::json!({}),
                        "p",
                    ))
                    .await;
                let run = flowgate_core::ExecutionRef("run-1".into());
                assert!(engine.get(&run).await.is_err());
                assert!(engine.cancel(&run).await.is_err());
                started
            }
            .instrument(request.clone())
            .await
        };
        assert!(started.is_ok());
        drop(request);
        traces.flush().expect("flush");

        let spans = collected.0.lock().expect("lock").clone();
        let find = |name: &str| {
            spans
                .iter()
                .find(|s| s.name == name)
                .unwrap_or_else(|| panic!("no span {name} in {spans:?}"))
        };
        let request = find("tools/call etl");
        let start = find("reporting start");
        let get = find("reporting get");
        let cancels: Vec<_> = spans
            .iter()
            .filter(|s| s.name == "reporting cancel")
            .collect();
        let attempts: Vec<_> = cancels
            .iter()
            .filter_map(|s| attribute(s, "flowgate.attempt"))
            .collect();
        assert_eq!(attempts, ["1", "2", "3"], "one span per attempt");
        let retried = cancels[1];
        let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
        assert_eq!(request.span_context.trace_id().to_string(), trace);
        assert_eq!(request.parent_span_id.to_string(), "00f067aa0ba902b7");
        assert!(request.parent_span_is_remote);
        for call in [start, get, retried] {
            assert_eq!(call.span_context.trace_id().to_string(), trace);
            assert_eq!(call.parent_span_id, request.span_context.span_id());
            assert_eq!(call.span_kind, opentelemetry::trace::SpanKind::Client);
            assert_eq!(
                attribute(call, "flowgate.engine").as_deref(),
                Some("reporting")
            );
            assert_eq!(attribute(call, "flowgate.tool").as_deref(), Some("etl"));
        }
        // The adapter's throttled answer marks the start, which itself succeeded.
        assert_eq!(attribute(start, "flowgate.status").as_deref(), Some("ok"));
        assert_eq!(
            attribute(start, "flowgate.throttled").as_deref(),
            Some("true")
        );
        assert_eq!(attribute(start, "flowgate.retry").as_deref(), Some("false"));
        // The read was throttled, and not retried.
        assert_eq!(
            attribute(get, "flowgate.status").as_deref(),
            Some("throttled")
        );
        assert_eq!(attribute(get, "flowgate.retry").as_deref(), Some("false"));
        assert_eq!(
            spans.iter().filter(|s| s.name == "reporting get").count(),
            1
        );
        // The cancel was throttled, and retried: its second attempt says so.
        assert_eq!(
            attribute(retried, "flowgate.status").as_deref(),
            Some("throttled")
        );
        assert_eq!(
            attribute(retried, "flowgate.throttled").as_deref(),
            Some("true")
        );
        assert_eq!(
            attribute(retried, "flowgate.retry").as_deref(),
            Some("true")
        );
        assert!(matches!(
            retried.status,
            opentelemetry::trace::Status::Error { .. }
        ));
        // What the adapter was told of its trace is the start's own span (for X-Ray).
        let seen = engine
            .inner()
            .inner()
            .seen
            .lock()
            .expect("lock")
            .expect("a trace context");
        assert_eq!(seen.trace_id, start.span_context.trace_id().to_bytes());
        assert_eq!(seen.span_id, start.span_context.span_id().to_bytes());
        assert!(seen.sampled);
    }
}
