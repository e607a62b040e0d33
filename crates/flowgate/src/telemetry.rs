//! `flowgate serve`'s telemetry: the trace pipeline the `OTEL_*` variables ask for, the metrics
//! listener `--metrics-listen` asks for, and on AWS Lambda a flush of the traces before each
//! invocation ends.

use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use flowgate_telemetry::{Traces, listener, metrics};

/// The trace pipeline, when the environment sets an OTLP endpoint. Enter the runtime first:
/// the gRPC exporter's connection lives on it.
pub(crate) fn traces() -> Result<Option<Traces>, String> {
    let traces = Traces::from_env()?;
    flowgate_telemetry::install_observer();
    Ok(traces)
}

/// Turns metrics on and serves them on `address` (`--metrics-listen`).
pub(crate) async fn serve_metrics(address: &str) -> Result<(), String> {
    let metrics = metrics::enable();
    let bound = listener::bind(address).await?;
    let at = bound
        .local_addr()
        .map_or_else(|_| address.to_owned(), |a| a.to_string());
    listener::spawn(bound, metrics);
    tracing::info!("serving metrics on http://{at}/metrics");
    Ok(())
}

/// `app`, exporting the spans of each request before answering it: on AWS Lambda the
/// execution environment may be frozen once the invocation's answer is sent, and spans left
/// in the batch would wait for the next invocation, or be lost with the environment.
pub(crate) fn flush_after_each_request(app: Router, traces: Traces) -> Router {
    app.layer(axum::middleware::from_fn_with_state(traces, flush_after))
}

/// The longest a request's answer waits for its spans' export: a collector that does not
/// answer costs an invocation this much, never its answer (the spans go with a later export).
const FLUSH_WAIT: Duration = Duration::from_secs(2);

async fn flush_after(State(traces): State<Traces>, request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    // The export waits for the collector's answer: not on an async worker.
    let flush = tokio::task::spawn_blocking(move || traces.flush());
    match tokio::time::timeout(FLUSH_WAIT, flush).await {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(e))) => tracing::warn!(error = %e, "could not export this request's spans"),
        Ok(Err(e)) => tracing::warn!(error = %e, "could not export this request's spans"),
        Err(_) => tracing::warn!(
            wait_secs = FLUSH_WAIT.as_secs(),
            "the trace collector did not take this request's spans in time; answering anyway"
        ),
    }
    response
}
