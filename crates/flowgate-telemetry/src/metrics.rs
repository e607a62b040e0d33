//! The Prometheus metrics flowgate keeps, and their one registry.
//!
//! Names follow Prometheus' conventions: the `flowgate_` prefix, base units in the name
//! (`_seconds`), `_total` on counters (the OpenMetrics encoder adds it to a counter's family
//! name). Label values are bounded: tool names come from the manifest, engines, operations,
//! outcomes, states and reasons from fixed lists, never from a request.
//!
//! The process keeps one [`Metrics`], made by [`enable`] when `--metrics-listen` is given;
//! until then [`get`] is `None` and nothing is counted (an `Option` check on each event).

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

/// Upper bounds (seconds) of the engine-call latency buckets: a local read takes a millisecond,
/// a cloud API call tens to hundreds, a start with retries seconds, and calls end by 20 s.
const LATENCY_BUCKETS: [f64; 13] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// A tool name as a label value (shared, so counting a call does not copy it).
pub type ToolName = Arc<str>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EngineCall {
    tool: ToolName,
    engine: &'static str,
    operation: &'static str,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EngineOperation {
    tool: ToolName,
    engine: &'static str,
    operation: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EngineKind {
    engine: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TaskOf {
    tool: ToolName,
    engine: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TaskCancelled {
    tool: ToolName,
    engine: &'static str,
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TaskFinished {
    tool: ToolName,
    engine: &'static str,
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolOnly {
    tool: ToolName,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Reason {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Pushed {
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Request {
    method: &'static str,
    outcome: &'static str,
    code: Option<i64>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Method {
    method: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReloadResult {
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Build {
    version: &'static str,
}

/// Every metric flowgate exports.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    engine_calls: Family<EngineCall, Counter>,
    engine_call_duration: Family<EngineOperation, Histogram>,
    engine_retries: Family<EngineOperation, Counter>,
    engine_throttles: Family<EngineKind, Counter>,
    tasks_started: Family<TaskOf, Counter>,
    tasks_answered: Family<TaskOf, Counter>,
    tasks_cancelled: Family<TaskCancelled, Counter>,
    tasks_finished: Family<TaskFinished, Counter>,
    tasks_get: Family<ToolOnly, Counter>,
    poll_interval: Family<ToolOnly, Gauge<f64, AtomicU64>>,
    auth_refusals: Family<Reason, Counter>,
    requests: Family<Request, Counter>,
    request_duration: Family<Method, Histogram>,
    reloads: Family<ReloadResult, Counter>,
    last_reload_successful: Gauge,
    last_reload_success_time: Gauge<f64, AtomicU64>,
    tools: Gauge,
    listeners: Gauge,
    notifications_pushed: Family<Pushed, Counter>,
    /// Each tool's engine, for the task events (which name only the tool).
    engines: RwLock<HashMap<ToolName, &'static str>>,
    /// The answered requests' series, by method (see [`ToolSeries`]).
    requests_ok: [OnceLock<Counter>; crate::request::METHODS.len()],
    request_durations: [OnceLock<Histogram>; crate::request::METHODS.len()],
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// Every family registered, `flowgate_build_info` set, no other series yet.
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("flowgate");
        let engine_calls = Family::<EngineCall, Counter>::default();
        registry.register(
            "engine_calls",
            "Engine calls (one per attempt) by tool, engine, operation and outcome",
            engine_calls.clone(),
        );
        let engine_call_duration = Family::<EngineOperation, Histogram>::new_with_constructor(
            latency_histogram as fn() -> Histogram,
        );
        registry.register_with_unit(
            "engine_call_duration",
            "How long engine calls took, by tool, engine and operation",
            Unit::Seconds,
            engine_call_duration.clone(),
        );
        let engine_retries = Family::<EngineOperation, Counter>::default();
        registry.register(
            "engine_retries",
            "Engine calls that were retries of a call that failed for a passing reason",
            engine_retries.clone(),
        );
        let engine_throttles = Family::<EngineKind, Counter>::default();
        registry.register(
            "engine_throttles",
            "Answers of an engine's API that refused a call for its rate limit",
            engine_throttles.clone(),
        );
        let tasks_started = Family::<TaskOf, Counter>::default();
        registry.register(
            "tasks_started",
            "Executions started (tasks created, synchronous calls begun) by tool and engine",
            tasks_started.clone(),
        );
        let tasks_answered = Family::<TaskOf, Counter>::default();
        registry.register(
            "tasks_answered",
            "tasks/update calls whose answers reached the engine, by tool and engine",
            tasks_answered.clone(),
        );
        let tasks_cancelled = Family::<TaskCancelled, Counter>::default();
        registry.register(
            "tasks_cancelled",
            "Cancellations the engine accepted, by tool, engine and reason (client, hung_up, sync_wait)",
            tasks_cancelled.clone(),
        );
        let tasks_finished = Family::<TaskFinished, Counter>::default();
        registry.register(
            "tasks_finished",
            "Executions this instance first saw in a terminal state, by tool, engine and state",
            tasks_finished.clone(),
        );
        let tasks_get = Family::<ToolOnly, Counter>::default();
        registry.register(
            "tasks_get",
            "tasks/get requests answered, by tool",
            tasks_get.clone(),
        );
        let poll_interval = Family::<ToolOnly, Gauge<f64, AtomicU64>>::default();
        registry.register_with_unit(
            "poll_interval",
            "The pollIntervalMs last advertised for a tool's task, in seconds",
            Unit::Seconds,
            poll_interval.clone(),
        );
        let auth_refusals = Family::<Reason, Counter>::default();
        registry.register(
            "auth_refusals",
            "Requests refused before reaching a tool, by reason",
            auth_refusals.clone(),
        );
        let requests = Family::<Request, Counter>::default();
        registry.register(
            "mcp_requests",
            "MCP requests answered, by method, outcome (ok, error, refused) and JSON-RPC error code",
            requests.clone(),
        );
        let request_duration = Family::<Method, Histogram>::new_with_constructor(
            latency_histogram as fn() -> Histogram,
        );
        registry.register_with_unit(
            "mcp_request_duration",
            "How long MCP requests took to answer, by method",
            Unit::Seconds,
            request_duration.clone(),
        );
        let reloads = Family::<ReloadResult, Counter>::default();
        registry.register(
            "manifest_reloads",
            "Manifest reloads by result (ok, error)",
            reloads.clone(),
        );
        let last_reload_successful = Gauge::default();
        last_reload_successful.set(1);
        registry.register(
            "manifest_last_reload_successful",
            "Whether the last manifest reload succeeded (1) or kept the previous tools (0)",
            last_reload_successful.clone(),
        );
        let last_reload_success_time = Gauge::<f64, AtomicU64>::default();
        last_reload_success_time.set(unix_now());
        registry.register_with_unit(
            "manifest_last_reload_success_timestamp",
            "When the tools being served were loaded (Unix time)",
            Unit::Seconds,
            last_reload_success_time.clone(),
        );
        let tools = Gauge::default();
        registry.register("tools", "Tools being served", tools.clone());
        let listeners = Gauge::default();
        registry.register(
            "listeners",
            "subscriptions/listen requests open on this instance",
            listeners.clone(),
        );
        let notifications_pushed = Family::<Pushed, Counter>::default();
        registry.register(
            "notifications_pushed",
            "Notifications pushed on subscriptions/listen streams, by kind",
            notifications_pushed.clone(),
        );
        let build = Family::<Build, Gauge>::default();
        build
            .get_or_create(&Build {
                version: env!("CARGO_PKG_VERSION"),
            })
            .set(1);
        registry.register(
            "build_info",
            "The running flowgate's version (always 1)",
            build,
        );
        Metrics {
            registry,
            engine_calls,
            engine_call_duration,
            engine_retries,
            engine_throttles,
            tasks_started,
            tasks_answered,
            tasks_cancelled,
            tasks_finished,
            tasks_get,
            poll_interval,
            auth_refusals,
            requests,
            request_duration,
            reloads,
            last_reload_successful,
            last_reload_success_time,
            tools,
            listeners,
            notifications_pushed,
            engines: RwLock::default(),
            requests_ok: Default::default(),
            request_durations: Default::default(),
        }
    }

    /// The exposition (OpenMetrics text, which Prometheus scrapes natively).
    pub fn encode(&self) -> String {
        let mut text = String::with_capacity(8192);
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }

    /// One engine call (one attempt) and how long it took.
    pub fn engine_call(
        &self,
        tool: &ToolName,
        engine: &'static str,
        operation: &'static str,
        outcome: &'static str,
        took: Duration,
    ) {
        self.engine_calls
            .get_or_create(&EngineCall {
                tool: Arc::clone(tool),
                engine,
                operation,
                outcome,
            })
            .inc();
        self.engine_call_duration
            .get_or_create(&EngineOperation {
                tool: Arc::clone(tool),
                engine,
                operation,
            })
            .observe(took.as_secs_f64());
    }

    /// An engine call that retried one that failed for a passing reason.
    pub fn engine_retry(&self, tool: &ToolName, engine: &'static str, operation: &'static str) {
        self.engine_retries
            .get_or_create(&EngineOperation {
                tool: Arc::clone(tool),
                engine,
                operation,
            })
            .inc();
    }

    /// A throttled answer of an engine's API.
    pub fn engine_throttled(&self, engine: &'static str) {
        self.engine_throttles
            .get_or_create(&EngineKind { engine })
            .inc();
    }

    /// `tool` runs on `engine` (the task events name only the tool). A tool a reload removed
    /// keeps its engine: its tasks still answer.
    pub fn tool_engine(&self, tool: &str, engine: &'static str) {
        let mut engines = self.engines.write().unwrap_or_else(|p| p.into_inner());
        if engines.get(tool) != Some(&engine) {
            engines.insert(tool.into(), engine);
        }
    }

    /// `tool`, shared, and its engine.
    fn task_of(&self, tool: &str) -> TaskOf {
        let engines = self.engines.read().unwrap_or_else(|p| p.into_inner());
        match engines.get_key_value(tool) {
            Some((name, engine)) => TaskOf {
                tool: Arc::clone(name),
                engine,
            },
            None => TaskOf {
                tool: tool.into(),
                engine: "unknown",
            },
        }
    }

    /// An execution started for `tool`.
    pub fn task_started(&self, tool: &str) {
        self.tasks_started.get_or_create(&self.task_of(tool)).inc();
    }

    /// Answers delivered to an execution of `tool`.
    pub fn task_answered(&self, tool: &str) {
        self.tasks_answered.get_or_create(&self.task_of(tool)).inc();
    }

    /// A cancellation the engine accepted (`reason`: `client`, `hung_up`, `sync_wait`).
    pub fn task_cancelled(&self, tool: &str, reason: &'static str) {
        let TaskOf { tool, engine } = self.task_of(tool);
        self.tasks_cancelled
            .get_or_create(&TaskCancelled {
                tool,
                engine,
                reason,
            })
            .inc();
    }

    /// An execution of `tool` seen in a terminal `state` for the first time.
    pub fn task_finished(&self, tool: &str, state: &'static str) {
        let TaskOf { tool, engine } = self.task_of(tool);
        self.tasks_finished
            .get_or_create(&TaskFinished {
                tool,
                engine,
                state,
            })
            .inc();
    }

    /// A `subscriptions/listen` stream opened.
    pub fn listener_opened(&self) {
        self.listeners.inc();
    }

    /// A `subscriptions/listen` stream ended, however it ended.
    pub fn listener_closed(&self) {
        self.listeners.dec();
    }

    /// A notification pushed on a listen stream (`kind`: `tasks`, `tools_list_changed`).
    pub fn notification_pushed(&self, kind: &'static str) {
        self.notifications_pushed
            .get_or_create(&Pushed { kind })
            .inc();
    }

    /// A request refused before it reached a tool (`unauthenticated`, `insufficient_scope`, ...).
    pub fn auth_refused(&self, reason: &'static str) {
        self.auth_refusals.get_or_create(&Reason { reason }).inc();
    }

    /// An MCP request answered (`outcome`: `ok`, `error` with its JSON-RPC `code`, `refused`),
    /// after `took`. `index` is `method`'s position among the methods flowgate serves
    /// (`request::method_index`), `None` for `other`.
    pub(crate) fn request(
        &self,
        method: &'static str,
        index: Option<usize>,
        outcome: &'static str,
        code: Option<i64>,
        took: Duration,
    ) {
        let took = took.as_secs_f64();
        // An answered request's series are kept (see `ToolSeries`); the rest go through the
        // families, out of line (the answered ones are most requests, and code they jump over
        // still fills the instruction cache lines they run through).
        match index {
            Some(i) if outcome == "ok" && code.is_none() => {
                self.requests_ok[i]
                    .get_or_init(|| self.requests_series(method, outcome, code))
                    .inc();
                self.request_durations[i]
                    .get_or_init(|| self.request_duration_series(method))
                    .observe(took);
            }
            _ => self.request_other(method, index, outcome, code, took),
        }
    }

    /// A request [`Metrics::request`] keeps no series of its own for: an error or refusal, or
    /// a method outside the list.
    #[cold]
    #[inline(never)]
    fn request_other(
        &self,
        method: &'static str,
        index: Option<usize>,
        outcome: &'static str,
        code: Option<i64>,
        took: f64,
    ) {
        self.requests_series(method, outcome, code).inc();
        match index {
            Some(i) => self.request_durations[i]
                .get_or_init(|| self.request_duration_series(method))
                .observe(took),
            None => self.request_duration_series(method).observe(took),
        }
    }

    fn requests_series(
        &self,
        method: &'static str,
        outcome: &'static str,
        code: Option<i64>,
    ) -> Counter {
        self.requests
            .get_or_create(&Request {
                method,
                outcome,
                code,
            })
            .clone()
    }

    fn request_duration_series(&self, method: &'static str) -> Histogram {
        self.request_duration
            .get_or_create(&Method { method })
            .clone()
    }

    /// The tool set being served: `tools` tools, loaded now.
    pub fn loaded(&self, tools: usize) {
        self.tools.set(i64::try_from(tools).unwrap_or(i64::MAX));
        self.last_reload_success_time.set(unix_now());
    }

    /// A manifest reload: the new tools are served (`Ok`: how many), or the old ones are kept.
    pub fn reloaded(&self, result: Result<usize, ()>) {
        match result {
            Ok(tools) => {
                self.reloads
                    .get_or_create(&ReloadResult { result: "ok" })
                    .inc();
                self.last_reload_successful.set(1);
                self.loaded(tools);
            }
            Err(()) => {
                self.reloads
                    .get_or_create(&ReloadResult { result: "error" })
                    .inc();
                self.last_reload_successful.set(0);
            }
        }
    }
}

/// The engine operations [`crate::Instrumented`] counts, as label values.
pub(crate) const OPERATIONS: [&str; 6] = ["run_sync", "start", "get", "respond", "cancel", "list"];

/// The outcomes of an engine call, as label values (what [`crate::outcome`] answers).
pub(crate) const OUTCOMES: [&str; 10] = [
    "ok",
    "not_found",
    "invalid_input",
    "denied",
    "throttled",
    "unavailable",
    "timeout",
    "misconfigured",
    "unsupported",
    "error",
];

/// The position of `value` in `list`.
fn slot(list: &[&str], value: &str) -> Option<usize> {
    list.iter().position(|v| *v == value)
}

/// The series one tool counts in on every poll (its engine calls, its `tasks/get`, its
/// advertised interval), each found in its family the first time it is used and kept: counting
/// a poll then takes an atomic add, where a family's look-up takes its lock, hashes the labels
/// and copies the tool's shared name, six times a poll (docs/benchmarks.md has what it cost).
/// The kept series are the family's own (a scrape shows one series either way).
#[derive(Debug)]
pub struct ToolSeries {
    metrics: &'static Metrics,
    tool: ToolName,
    engine: &'static str,
    calls: [[OnceLock<Counter>; OUTCOMES.len()]; OPERATIONS.len()],
    durations: [OnceLock<Histogram>; OPERATIONS.len()],
    tasks_get: OnceLock<Counter>,
    poll_interval: OnceLock<Gauge<f64, AtomicU64>>,
}

impl ToolSeries {
    /// The series of `tool`, which runs on `engine`, in `metrics`.
    pub fn new(metrics: &'static Metrics, tool: &str, engine: &'static str) -> ToolSeries {
        ToolSeries {
            metrics,
            tool: tool.into(),
            engine,
            calls: Default::default(),
            durations: Default::default(),
            tasks_get: OnceLock::new(),
            poll_interval: OnceLock::new(),
        }
    }

    /// One engine call (one attempt) and how long it took. An operation or outcome outside the
    /// fixed lists is counted through its family.
    pub(crate) fn engine_call(
        &self,
        operation: &'static str,
        outcome: &'static str,
        took: Duration,
    ) {
        let (Some(op), Some(out)) = (slot(&OPERATIONS, operation), slot(&OUTCOMES, outcome)) else {
            self.metrics
                .engine_call(&self.tool, self.engine, operation, outcome, took);
            return;
        };
        self.calls[op][out]
            .get_or_init(|| {
                self.metrics
                    .engine_calls
                    .get_or_create(&EngineCall {
                        tool: Arc::clone(&self.tool),
                        engine: self.engine,
                        operation,
                        outcome,
                    })
                    .clone()
            })
            .inc();
        self.durations[op]
            .get_or_init(|| {
                self.metrics
                    .engine_call_duration
                    .get_or_create(&EngineOperation {
                        tool: Arc::clone(&self.tool),
                        engine: self.engine,
                        operation,
                    })
                    .clone()
            })
            .observe(took.as_secs_f64());
    }

    /// An engine call that retried one that failed for a passing reason.
    pub(crate) fn engine_retry(&self, operation: &'static str) {
        self.metrics
            .engine_retry(&self.tool, self.engine, operation);
    }

    /// A `tasks/get` answered for a task of this tool, advertising `poll_interval`.
    pub fn task_get(&self, poll_interval: Duration) {
        self.poll_interval(poll_interval);
        self.tasks_get
            .get_or_init(|| {
                self.metrics
                    .tasks_get
                    .get_or_create(&self.tool_only())
                    .clone()
            })
            .inc();
    }

    /// The `pollIntervalMs` advertised for a task of this tool (a new one, or on a poll).
    pub fn poll_interval(&self, interval: Duration) {
        self.poll_interval
            .get_or_init(|| {
                self.metrics
                    .poll_interval
                    .get_or_create(&self.tool_only())
                    .clone()
            })
            .set(interval.as_secs_f64());
    }

    fn tool_only(&self) -> ToolOnly {
        ToolOnly {
            tool: Arc::clone(&self.tool),
        }
    }
}

fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS)
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

static METRICS: OnceLock<Metrics> = OnceLock::new();

/// Turns metrics on for the process (idempotent) and returns them.
pub fn enable() -> &'static Metrics {
    METRICS.get_or_init(Metrics::new)
}

/// The process's metrics, when they are on.
pub fn get() -> Option<&'static Metrics> {
    METRICS.get()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_conventions_and_series_carry_their_labels() {
        let metrics = Metrics::new();
        let tool: ToolName = "etl".into();
        metrics.engine_call(&tool, "local", "get", "ok", Duration::from_millis(3));
        metrics.engine_retry(&tool, "local", "start");
        metrics.engine_throttled("stepfunctions");
        metrics.tool_engine("etl", "local");
        metrics.task_started("etl");
        metrics.task_finished("etl", "completed");
        let metrics: &'static Metrics = Box::leak(Box::new(metrics));
        let series = ToolSeries::new(metrics, "etl", "local");
        series.task_get(Duration::from_millis(1500));
        series.engine_call("get", "ok", Duration::from_millis(3));
        series.engine_call("get", "made_up", Duration::from_millis(3));
        metrics.auth_refused("invalid_token");
        metrics.reloaded(Err(()));
        let get = crate::request::method_index("tasks/get");
        metrics.request(
            "tasks/get",
            get,
            "error",
            Some(-32602),
            Duration::from_millis(2),
        );
        metrics.request("tasks/get", get, "ok", None, Duration::from_millis(2));
        metrics.request("tasks/get", get, "ok", None, Duration::from_millis(2));
        metrics.request("other", None, "ok", None, Duration::from_millis(2));
        let text = metrics.encode();
        for line in [
            // The family's series and the tool's kept ones are the same series.
            "flowgate_engine_calls_total{tool=\"etl\",engine=\"local\",operation=\"get\",outcome=\"ok\"} 2",
            "flowgate_engine_calls_total{tool=\"etl\",engine=\"local\",operation=\"get\",outcome=\"made_up\"} 1",
            "flowgate_engine_call_duration_seconds_count{tool=\"etl\",engine=\"local\",operation=\"get\"} 3",
            "flowgate_engine_call_duration_seconds_bucket{le=\"0.005\",tool=\"etl\",engine=\"local\",operation=\"get\"} 3",
            "flowgate_engine_retries_total{tool=\"etl\",engine=\"local\",operation=\"start\"} 1",
            "flowgate_engine_throttles_total{engine=\"stepfunctions\"} 1",
            "flowgate_tasks_started_total{tool=\"etl\",engine=\"local\"} 1",
            "flowgate_tasks_finished_total{tool=\"etl\",engine=\"local\",state=\"completed\"} 1",
            "flowgate_tasks_get_total{tool=\"etl\"} 1",
            "flowgate_poll_interval_seconds{tool=\"etl\"} 1.5",
            "flowgate_auth_refusals_total{reason=\"invalid_token\"} 1",
            "flowgate_manifest_reloads_total{result=\"error\"} 1",
            "flowgate_manifest_last_reload_successful 0",
            "flowgate_mcp_requests_total{method=\"tasks/get\",outcome=\"error\",code=\"-32602\"} 1",
            "flowgate_mcp_requests_total{method=\"tasks/get\",outcome=\"ok\",code=\"\"} 2",
            "flowgate_mcp_requests_total{method=\"other\",outcome=\"ok\",code=\"\"} 1",
            "flowgate_mcp_request_duration_seconds_count{method=\"tasks/get\"} 3",
            "# UNIT flowgate_engine_call_duration_seconds seconds",
            "# TYPE flowgate_engine_calls counter",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
        assert!(
            text.contains(&format!(
                "flowgate_build_info{{version=\"{}\"}} 1",
                env!("CARGO_PKG_VERSION")
            )),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"), "{text}");
    }
}
