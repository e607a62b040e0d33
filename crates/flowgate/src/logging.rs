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
use tracing_subscriber::field::{MakeVisitor, VisitFmt, VisitOutput};
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
        lines.fmt_fields(TextFields).with_filter(filter).boxed()
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

/// The text format's fields: `name=value` with a value that is one token as it is, any other
/// value quoted and escaped (Rust's string escapes: `\n`, `\"`, `\u{1b}`), and the message
/// with its control characters escaped.
struct TextFields;

impl<'w> MakeVisitor<Writer<'w>> for TextFields {
    type Visitor = TextVisitor<'w>;

    fn make_visitor(&self, writer: Writer<'w>) -> TextVisitor<'w> {
        TextVisitor {
            writer,
            first: true,
            result: Ok(()),
        }
    }
}

struct TextVisitor<'w> {
    writer: Writer<'w>,
    first: bool,
    result: fmt::Result,
}

/// A value written bare: nothing that could end the line, start another field or a quote.
fn bare(value: &str) -> bool {
    !value.is_empty()
        && !value
            .chars()
            .any(|c| c.is_control() || c.is_whitespace() || matches!(c, '"' | '=' | '\\'))
}

impl TextVisitor<'_> {
    fn write(&mut self, field: &Field, value: &str) {
        if self.result.is_err() {
            return;
        }
        let separator = if self.first { "" } else { " " };
        self.first = false;
        let name = field.name();
        self.result = if name == "message" {
            write!(self.writer, "{separator}")
                .and_then(|()| value.chars().try_for_each(|c| self.write_message_char(c)))
        } else if bare(value) {
            write!(self.writer, "{separator}{name}={value}")
        } else {
            write!(self.writer, "{separator}{name}={value:?}")
        };
    }

    fn write_message_char(&mut self, c: char) -> fmt::Result {
        if c.is_control() {
            write!(self.writer, "{}", c.escape_default())
        } else {
            write!(self.writer, "{c}")
        }
    }
}

impl Visit for TextVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.write(field, value);
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.write(field, &format!("{value:?}"));
    }
}

impl VisitOutput<fmt::Result> for TextVisitor<'_> {
    fn finish(self) -> fmt::Result {
        self.result
    }
}

impl VisitFmt for TextVisitor<'_> {
    fn writer(&mut self) -> &mut dyn fmt::Write {
        &mut self.writer
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

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use super::*;

    /// Everything the subscriber writes, kept for the test to read.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().map_or(Ok(0), |mut b| {
                b.extend_from_slice(buf);
                Ok(buf.len())
            })
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn client_chosen_text_neither_splits_nor_forges_a_text_line() {
        let out = Captured::default();
        let writer = out.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .fmt_fields(TextFields)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            let forged = "x\n2026-12-04T00:00:00Z  INFO audit event=\"cancelled\"";
            let span = tracing::info_span!("request", requestId = "r-1", mcpMethod = %"a b=c");
            let _in = span.enter();
            tracing::info!(
                tool = forged,
                reason = %"quote \" and \\ back\rslash",
                plain = "tools/call",
                "refused {}",
                "\u{1b}[31mred\nline"
            );
        });
        let text = String::from_utf8(out.0.lock().map(|b| b.clone()).unwrap_or_default())
            .unwrap_or_default();
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(text.contains("refused \\u{1b}[31mred\\nline"), "{text}");
        assert!(
            text.contains(r#"tool="x\n2026-12-04T00:00:00Z  INFO audit event=\"cancelled\"""#),
            "{text}"
        );
        assert!(
            text.contains(r#"reason="quote \" and \\ back\rslash""#),
            "{text}"
        );
        assert!(text.contains("plain=tools/call"), "{text}");
        assert!(text.contains(r#"mcpMethod="a b=c""#), "{text}");
        assert!(text.contains("requestId=r-1"), "{text}");
    }
}
