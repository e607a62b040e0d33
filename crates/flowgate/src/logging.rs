//! Logs on stderr: readable text on a terminal, JSON lines on Lambda and Cloud Run.
//!
//! A JSON line carries `timestamp`, `severity` (Cloud Logging's key, with its level names),
//! `level`, `target`, `message`, the event's fields, and the fields of every span it is in:
//! `requestId` from the HTTP request span (flowgate's) or the Lambda invocation span
//! (lambda_runtime's), so every line of a request can be found by its id. CloudWatch and Cloud
//! Logging both parse one JSON object per line.

use std::fmt;

use flowgate_telemetry::{SPAN_TARGET, Traces};
use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::Layer as _;
use tracing_subscriber::fmt::format::{JsonFields, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt as _;

use crate::env_vars;

/// Installs the global subscriber: the log lines, and the trace pipeline's spans when there
/// is one. Logs leave out the spans exported as traces (target [`SPAN_TARGET`]), so turning
/// traces on changes no log line.
pub(crate) fn init(json: bool, traces: Option<&Traces>) {
    let filter = tracing_subscriber::EnvFilter::try_from_env(env_vars::LOG)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,rmcp=warn"));
    let filter = match format!("{SPAN_TARGET}=off").parse() {
        Ok(directive) => filter.add_directive(directive),
        Err(_) => filter,
    };
    // Colour only where a person reads it: a file or a pipe gets plain text.
    let lines = tracing_subscriber::fmt::layer()
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    let lines = if json {
        lines
            .fmt_fields(JsonFields::new())
            .event_format(JsonLines)
            .with_filter(filter)
            .boxed()
    } else {
        lines.with_filter(filter).boxed()
    };
    let _ = tracing_subscriber::registry()
        .with(lines)
        .with(traces.map(Traces::layer))
        .try_init();
}

/// Whether logs should be JSON: `FLOWGATE_LOG_FORMAT`, else JSON on Lambda and Cloud Run.
pub(crate) fn wants_json() -> bool {
    match std::env::var(env_vars::LOG_FORMAT).as_deref() {
        Ok("json") => true,
        Ok("text") => false,
        _ => {
            std::env::var_os(env_vars::LAMBDA_RUNTIME_API).is_some()
                || std::env::var_os(env_vars::CLOUD_RUN_SERVICE).is_some()
        }
    }
}

struct JsonLines;

fn severity(level: &Level) -> &'static str {
    match *level {
        Level::ERROR => "ERROR",
        Level::WARN => "WARNING",
        Level::INFO => "INFO",
        Level::DEBUG | Level::TRACE => "DEBUG",
    }
}

struct Fields<'a>(&'a mut Map<String, Value>);

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), Value::from(value));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().to_owned(), Value::from(value));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().to_owned(), Value::from(value));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().to_owned(), Value::from(value));
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().to_owned(), Value::from(value));
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0
            .insert(field.name().to_owned(), Value::from(format!("{value:?}")));
    }
}

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        let mut line = Map::new();
        line.insert(
            "timestamp".into(),
            Value::from(chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true)),
        );
        line.insert("severity".into(), Value::from(severity(meta.level())));
        line.insert("level".into(), Value::from(meta.level().as_str()));
        line.insert("target".into(), Value::from(meta.target()));
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                let extensions = span.extensions();
                let Some(fields) = extensions.get::<FormattedFields<N>>() else {
                    continue;
                };
                if let Ok(Value::Object(map)) = serde_json::from_str::<Value>(fields.as_str()) {
                    line.extend(map);
                }
            }
        }
        event.record(&mut Fields(&mut line));
        writeln!(writer, "{}", Value::Object(line))
    }
}
