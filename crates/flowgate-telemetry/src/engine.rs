//! Every engine call, traced and counted in one place: [`Instrumented`], a decorator the server
//! puts around each tool's engine.
//!
//! Each call (each attempt, when `flowgate_core::retrying::Retrying` outside it retries) gets a span (`flowgate.engine`,
//! `flowgate.operation`, `flowgate.tool`, `flowgate.status`, `flowgate.throttled`,
//! `flowgate.retry`, `flowgate.attempt`, and `flowgate.task.state` for a read) whose parent is
//! the request being served, and counts in `flowgate_engine_calls_total` and
//! `flowgate_engine_call_duration_seconds`. Adapters add what only they know through
//! [`flowgate_core::observe`]: a throttled answer of the engine's API marks the call's span even
//! when the adapter answered from what it had already read.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use flowgate_core::{
    Capabilities, Engine, EngineError, ExecutionRecord, ExecutionRef, ExecutionSummary,
    InputResponse, ListFilter, StartRequest, Started, TaskState,
};
use tracing::Instrument as _;
use tracing::field::Empty;

use crate::SPAN_TARGET;
use crate::metrics::{Metrics, ToolName, ToolSeries};

/// Which attempt of a call the current engine call is, as the retrying decorator outside this
/// one says (`flowgate_core::retrying`): 1 for the first.
fn current_attempt() -> u32 {
    flowgate_core::retrying::attempt()
}

/// The value of the `status` field and the `outcome` label for a call's result.
pub fn outcome(error: Option<&EngineError>) -> &'static str {
    match error {
        None => "ok",
        Some(EngineError::NotFound { .. }) => "not_found",
        Some(EngineError::InvalidInput { .. }) => "invalid_input",
        Some(EngineError::Denied { .. }) => "denied",
        Some(EngineError::Throttled { .. }) => "throttled",
        Some(EngineError::Unavailable { .. }) => "unavailable",
        Some(EngineError::Timeout { .. }) => "timeout",
        Some(EngineError::Misconfigured { .. }) => "misconfigured",
        Some(EngineError::Unsupported { .. }) => "unsupported",
        Some(_) => "error",
    }
}

/// An engine whose every call is traced and counted, under its tool's name.
#[derive(Debug)]
pub struct Instrumented<E> {
    inner: E,
    tool: ToolName,
    /// The tool's series, when metrics are on (shared with the server, which counts the
    /// tool's polls in them).
    series: Option<Arc<ToolSeries>>,
}

impl<E: Engine> Instrumented<E> {
    /// `inner`, serving `tool`, counted in the process's metrics when they are on.
    pub fn new(inner: E, tool: &str) -> Self {
        Self::with_metrics(inner, tool, crate::metrics::get())
    }

    /// `inner`, serving `tool`, counted in `metrics`.
    pub fn with_metrics(inner: E, tool: &str, metrics: Option<&'static Metrics>) -> Self {
        let series = metrics.map(|m| Arc::new(ToolSeries::new(m, tool, inner.kind())));
        Instrumented {
            inner,
            tool: tool.into(),
            series,
        }
    }

    /// The tool's series, when metrics are on.
    pub fn series(&self) -> Option<&Arc<ToolSeries>> {
        self.series.as_ref()
    }

    /// The engine being decorated.
    pub fn inner(&self) -> &E {
        &self.inner
    }

    async fn observed<T>(
        &self,
        operation: &'static str,
        call: impl Future<Output = Result<T, EngineError>>,
        state: impl FnOnce(&T) -> Option<TaskState>,
    ) -> Result<T, EngineError> {
        let engine = self.inner.kind();
        let attempt = current_attempt();
        let span = if crate::traces::in_traced_request() {
            call_span(engine, operation, &self.tool, attempt)
        } else {
            tracing::Span::none()
        };
        if span.is_disabled() && self.series.is_none() {
            return call.await;
        }
        let began = Instant::now();
        // (A call of an untraced request is not wrapped in a span that records nothing.)
        let result = if span.is_disabled() {
            call.await
        } else {
            call.instrument(span.clone()).await
        };
        let took = began.elapsed();
        let outcome = outcome(result.as_ref().err());
        if !span.is_disabled() {
            record(&span, outcome, &result, state);
        }
        if let Some(series) = &self.series {
            series.engine_call(operation, outcome, took);
            if attempt > 1 {
                series.engine_retry(operation);
            }
        }
        result
    }
}

/// The span of an engine call of a traced request (kept out of `observed`, as the request's
/// span is kept out of `Request::begin`: see the note there).
#[cold]
#[inline(never)]
fn call_span(engine: &str, operation: &str, tool: &str, attempt: u32) -> tracing::Span {
    tracing::info_span!(
        target: SPAN_TARGET,
        "engine call",
        otel.name = format_args!("{engine} {operation}").to_string(),
        otel.kind = "client",
        otel.status_code = Empty,
        otel.status_description = Empty,
        flowgate.engine = engine,
        flowgate.operation = operation,
        flowgate.tool = tool,
        flowgate.retry = attempt > 1,
        flowgate.attempt = i64::from(attempt),
        flowgate.status = Empty,
        flowgate.throttled = Empty,
        flowgate.task.state = Empty,
    )
}

/// Records how a traced engine call ended (out of line, as `call_span`).
#[cold]
#[inline(never)]
fn record<T>(
    span: &tracing::Span,
    outcome: &'static str,
    result: &Result<T, EngineError>,
    state: impl FnOnce(&T) -> Option<TaskState>,
) {
    span.record("flowgate.status", outcome);
    match result {
        Ok(value) => {
            if let Some(state) = state(value) {
                span.record("flowgate.task.state", state.as_str());
            }
        }
        Err(e) => {
            if matches!(e, EngineError::Throttled { .. }) {
                span.record("flowgate.throttled", true);
            }
            // A missing execution is an answer, not a fault of the call.
            if !e.is_not_found() {
                span.record("otel.status_code", "error");
                span.record("otel.status_description", outcome);
            }
        }
    }
}

fn record_state(record: &ExecutionRecord) -> Option<TaskState> {
    Some(record.state)
}

fn no_state<T>(_: &T) -> Option<TaskState> {
    None
}

#[deny(clippy::missing_trait_methods)]
#[async_trait]
impl<E: Engine> Engine for Instrumented<E> {
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn retention_ms(&self) -> Option<u64> {
        self.inner.retention_ms()
    }

    fn pacing(&self) -> Option<Duration> {
        self.inner.pacing()
    }

    fn reference_scope(&self) -> String {
        self.inner.reference_scope()
    }

    fn locator<'a>(&self, execution: &'a ExecutionRef) -> Option<&'a str> {
        self.inner.locator(execution)
    }

    fn reference_at(&self, locator: &str) -> ExecutionRef {
        self.inner.reference_at(locator)
    }

    async fn run_sync(&self, request: StartRequest) -> Result<ExecutionRecord, EngineError> {
        self.observed("run_sync", self.inner.run_sync(request), record_state)
            .await
    }

    async fn start(&self, request: StartRequest) -> Result<Started, EngineError> {
        self.observed("start", self.inner.start(request), no_state)
            .await
    }

    fn execution_for(&self, request: &StartRequest) -> Option<ExecutionRef> {
        self.inner.execution_for(request)
    }

    async fn get(&self, execution: &ExecutionRef) -> Result<ExecutionRecord, EngineError> {
        self.observed("get", self.inner.get(execution), record_state)
            .await
    }

    async fn respond(
        &self,
        execution: &ExecutionRef,
        key: &str,
        response: InputResponse,
    ) -> Result<(), EngineError> {
        self.observed(
            "respond",
            self.inner.respond(execution, key, response),
            no_state,
        )
        .await
    }

    async fn cancel(&self, execution: &ExecutionRef) -> Result<(), EngineError> {
        self.observed("cancel", self.inner.cancel(execution), no_state)
            .await
    }

    async fn list(&self, filter: ListFilter) -> Result<Vec<ExecutionSummary>, EngineError> {
        self.observed("list", self.inner.list(filter), no_state)
            .await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use flowgate_core::testing::FakeEngine;
    use serde_json::json;

    use super::*;

    fn leak(metrics: Metrics) -> &'static Metrics {
        Box::leak(Box::new(metrics))
    }

    #[tokio::test]
    async fn calls_are_counted_by_operation_and_outcome_and_retries_are_marked() {
        let metrics = leak(Metrics::new());
        let fake = FakeEngine::new();
        // As the server stacks them: each attempt of a retried call is a call of its own.
        let engine = flowgate_core::retrying::Retrying::new(Instrumented::with_metrics(
            fake.clone(),
            "etl",
            Some(metrics),
        ));
        let request = StartRequest::new("etl", json!({"script": []}), "p");
        let started = engine.start(request).await.expect("start");
        engine.get(&started.execution).await.expect("get");
        let missing = ExecutionRef("nope".into());
        let gone = engine.get(&missing).await;
        assert!(gone.is_err_and(|e| e.is_not_found()));
        // A read that fails once, then is retried.
        fake.arm_read_fault(Some(0));
        engine
            .get(&started.execution)
            .await
            .expect("the retried get");
        let text = metrics.encode();
        for line in [
            "flowgate_engine_calls_total{tool=\"etl\",engine=\"fake\",operation=\"start\",outcome=\"ok\"} 1",
            "flowgate_engine_calls_total{tool=\"etl\",engine=\"fake\",operation=\"get\",outcome=\"ok\"} 2",
            "flowgate_engine_calls_total{tool=\"etl\",engine=\"fake\",operation=\"get\",outcome=\"not_found\"} 1",
            "flowgate_engine_calls_total{tool=\"etl\",engine=\"fake\",operation=\"get\",outcome=\"unavailable\"} 1",
            "flowgate_engine_call_duration_seconds_count{tool=\"etl\",engine=\"fake\",operation=\"get\"} 4",
            "flowgate_engine_retries_total{tool=\"etl\",engine=\"fake\",operation=\"get\"} 1",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
        assert!(
            !text.contains("operation=\"start\"} 1\nflowgate_engine_retries"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn the_decorator_changes_no_answer() {
        // The conformance suite every adapter passes, through the decorator.
        use flowgate_core::conformance::{
            Case, Fixture, LoseNextStartAnswer, TransientReadFault, run_all,
        };
        let metrics = leak(Metrics::new());
        let fake = FakeEngine::new();
        let engine: Arc<dyn Engine> = Arc::new(Instrumented::with_metrics(
            fake.clone(),
            "etl",
            Some(metrics),
        ));
        let case = |script: serde_json::Value| Case {
            engine: Arc::clone(&engine),
            arguments: json!({ "script": script }),
        };
        let fixture = Fixture {
            success: case(json!([{"work": 50, "status": "step 1"}, {"succeed": {"n": 1}}])),
            expected_output: json!({"n": 1}),
            failure: case(json!([{"work": 20}, {"fail": "Boom", "cause": "it broke"}])),
            expected_failure: "it broke".into(),
            slow: case(json!([{"work": 60_000}])),
            asks: Some(case(
                json!([{"work": 20}, {"ask": "Name?"}, {"succeed": "$answer"}]),
            )),
            answer: json!({"answer": "Alice"}),
            timeout: Duration::from_secs(10),
            lose_next_start_answer: Some(LoseNextStartAnswer(Arc::new({
                let fake = fake.clone();
                move || fake.lose_next_start_answer()
            }))),
            transient_read_fault: Some(TransientReadFault(Arc::new({
                let fake = fake.clone();
                move |skip| fake.arm_read_fault(skip)
            }))),
        };
        run_all(&fixture).await;
        assert!(
            metrics
                .encode()
                .contains("operation=\"cancel\",outcome=\"ok\"} ")
        );
    }
}
