//! The [`Engine`] implementation over the Step Functions API.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use aws_config::{BehaviorVersion, Region};
use aws_sdk_sfn::Client;
use aws_sdk_sfn::config::retry::RetryConfig;
use aws_sdk_sfn::config::timeout::TimeoutConfig;
use aws_sdk_sfn::types::SyncExecutionStatus;
use chrono::Utc;
use flowgate_core::{
    Action, Capabilities, Engine, EngineError, EngineFailure, ExecutionRecord, ExecutionRef,
    ExecutionSummary, InputRequest, InputResponse, ListFilter, StartRequest, Started, TaskState,
};
use tokio::sync::OnceCell;

use crate::error::{already_exists, classify};
use crate::history::{End, Scan};
use crate::quota::Quota;
use crate::{KIND, SfnTarget, WorkflowType, mapping};

/// The first page of a history read (newest first): enough for the events since the last
/// poll in the steady state, small enough to be cheap.
const FIRST_PAGE: i32 = 100;
/// Later pages, when the events since the last read (or a first read) need more: AWS's most.
const NEXT_PAGE: i32 = 1000;
/// Pages the first read of an execution's history takes per call (up to 25,000 events: a
/// history that long is read across a few polls).
const FIRST_READ_PAGES: usize = 4;
/// How long a running execution's record answers further polls on this instance without a
/// new API call: polls of one task from many clients (or one client's retries) within this
/// window cost one call. Short enough that no client notices.
pub(crate) const REUSE: Duration = Duration::from_secs(1);
/// How long a finished execution's record is kept: it can no longer change.
const FINISHED_KEEP: Duration = Duration::from_secs(600);
/// Executions whose state this instance keeps at most (beyond it, the least recently used
/// idle ones are dropped; a dropped one costs a full history read on its next poll).
const MAX_TRACKED: usize = 10_000;

/// Connection set-up, per call.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// One attempt of one call (the SDK's own retries are off: the server's policy retries).
const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// StartSyncExecution runs an express workflow to its end: at most five minutes.
const SYNC_CALL_TIMEOUT: Duration = Duration::from_secs(5 * 60 + 10);

/// Listings never run more often than this, whatever the ListExecutions budget allows: a
/// state machine of up to 1,000 running executions then costs one call a second, a fifth of
/// what the large regions refill and half of the 2/s elsewhere, leaving the rest of that
/// budget to the account's other programs (consoles, dashboards).
const SWEEP_MIN: Duration = Duration::from_secs(1);
/// The shortest interval advertised while listings tell ends apart: a client polling this
/// often sees an end within about a sweep and a poll of it.
const END_POLL: Duration = Duration::from_secs(2);

/// What this instance knows of one execution: the history read so far and the last record.
/// A process-local cache of what the engine said (never task state: any instance can rebuild
/// it from the engine, and a lost one costs one longer read).
#[derive(Debug)]
struct Tracked {
    scan: Option<Scan>,
    record: Option<(Instant, ExecutionRecord)>,
    used: Instant,
    /// When the execution started, once known (its start here, or its history).
    started: Option<chrono::DateTime<Utc>>,
    /// Something changed it that its record does not show yet (an answer, a cancel): the
    /// next poll reads it whatever its turn.
    must_read: bool,
}

/// The executions this instance polls; one async lock each, so concurrent polls of one
/// execution make one engine call (single flight) and polls of different ones do not wait.
#[derive(Debug, Default)]
struct Executions {
    map: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Tracked>>>>,
}

impl Executions {
    fn of(&self, execution: &ExecutionRef) -> Arc<tokio::sync::Mutex<Tracked>> {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= MAX_TRACKED && !map.contains_key(&execution.0) {
            // Drop the idle ones nobody is polling right now, oldest first.
            let mut idle: Vec<(String, Instant)> = map
                .iter()
                .filter(|(_, t)| Arc::strong_count(t) == 1)
                .filter_map(|(k, t)| t.try_lock().ok().map(|t| (k.clone(), t.used)))
                .collect();
            idle.sort_by_key(|(_, used)| *used);
            for (k, _) in idle.iter().take(MAX_TRACKED / 10 + 1) {
                map.remove(k);
            }
        }
        map.entry(execution.0.clone())
            .or_insert_with(|| {
                Arc::new(tokio::sync::Mutex::new(Tracked {
                    scan: None,
                    record: None,
                    used: Instant::now(),
                    started: None,
                    must_read: false,
                }))
            })
            .clone()
    }
}

/// The Step Functions engine bound to one tool's state machine.
#[derive(Debug)]
pub struct StepFunctionsEngine {
    target: SfnTarget,
    /// Built on first use (loading AWS configuration is async and may reach the network for
    /// credentials); a process-local cache of a client, never of task state.
    client: OnceCell<Client>,
    executions: Executions,
    quota: Quota,
}

impl StepFunctionsEngine {
    /// An engine for `target`; no AWS call is made until the first operation. Its calls find
    /// their share of the account's quota from throttling (see [`flowgate_core::pacing`]), up
    /// to the share [`crate::QUOTA_SHARE_ENV`] allows (all of it when unset;
    /// [`crate::register`] refuses a bad value before any engine is made).
    pub fn new(target: SfnTarget) -> Self {
        Self::with_quota_share(target, crate::quota::share().unwrap_or(1.0))
    }

    /// An engine for `target` that takes at most `share` (in (0, 1]) of the account's API
    /// quota: for an account shared with other software.
    pub fn with_quota_share(target: SfnTarget, share: f64) -> Self {
        let quota = Quota::of(&target, share.clamp(f64::MIN_POSITIVE, 1.0));
        StepFunctionsEngine {
            target,
            client: OnceCell::new(),
            executions: Executions::default(),
            quota,
        }
    }

    async fn client(&self) -> &Client {
        self.client.get_or_init(|| build_client(&self.target)).await
    }

    /// How many throttled answers this engine's quota has seen (for tests and benchmarks).
    pub fn throttled_count(&self) -> u64 {
        self.quota.reads.throttled_count() + self.quota.lists.throttled_count()
    }

    /// How often the listings that learn of ends may run now (for tests and benchmarks): the
    /// ListExecutions budget shared with `tasks/list`, slowed by throttling.
    pub fn listing_interval(&self) -> Duration {
        self.quota.lists.interval()
    }

    /// What to advertise for a running execution now, and how often listings run when they
    /// are worth it. Reading every execution's history once a cycle shows its end within the
    /// cycle; while the cycle is longer than a listing and a poll, listings show ends sooner,
    /// and that shorter interval is what a poll can learn something from.
    ///
    /// When several instances share the account, each lists it only as often as its share of
    /// the ListExecutions rate allows, but a client's polls reach whichever instance a load
    /// balancer picks: what a poll can show changes as often as the instances together list
    /// the account, which is this instance's listing interval times its share of the account
    /// (the rate it found, over its ceiling). Polls cost the account nothing unless they read,
    /// and reads stay within each instance's budget whatever the clients do.
    fn intervals(&self) -> (Duration, Option<Duration>) {
        let cycle = self.quota.reads.interval();
        let sweep_every = self.quota.lists.interval().max(SWEEP_MIN);
        let together = sweep_every.mul_f64(self.quota.lists.share().clamp(0.0, 1.0));
        let ends_within = together.max(SWEEP_MIN).max(END_POLL);
        if cycle <= ends_within {
            (cycle, None)
        } else {
            (ends_within, Some(sweep_every))
        }
    }

    /// Starts a listing in the background when one is due.
    async fn sweep_if_due(&self, every: Duration) {
        if let Some(plan) = self.quota.ends.begin(every) {
            let client = self.client().await.clone();
            tokio::spawn(crate::ends::sweep(
                client,
                self.quota.ends.clone(),
                self.quota.lists.clone(),
                plan,
            ));
        }
    }

    /// Follows a started execution: it counts against the quota from its start, and listings
    /// watch for its end.
    async fn follow_start(&self, execution: &ExecutionRef, created: chrono::DateTime<Utc>) {
        self.quota.reads.polled(&execution.0);
        self.quota.ends.watch(&execution.0, Some(created));
        self.executions.of(execution).lock().await.started = Some(created);
    }

    /// What a poll that does not read shows: the task as last read, else running since its
    /// start (a start here or a listing says it runs), else nothing.
    fn unread(&self, execution: &ExecutionRef, tracked: &Tracked) -> Option<ExecutionRecord> {
        if let Some((_, record)) = &tracked.record {
            return Some(record.clone());
        }
        let started = tracked
            .started
            .or_else(|| self.quota.ends.listed_start(&execution.0))?;
        let mut record = ExecutionRecord::new(TaskState::Working, "RUNNING", started);
        record.status_message = Some("Running".into());
        record.console_url = Some(self.console_url(execution));
        Some(record)
    }

    /// Names a call for messages: the call and the state machine's name, never its ARN.
    fn what(&self, call: &str) -> String {
        format!(
            "{call} for state machine {}",
            self.target.state_machine_name()
        )
    }

    fn check_owned(&self, execution: &ExecutionRef) -> Result<(), EngineError> {
        if self.target.owns(&execution.0) {
            Ok(())
        } else {
            Err(EngineError::NotFound {
                engine: KIND,
                what: "an execution of another state machine".into(),
            })
        }
    }

    async fn describe(
        &self,
        execution: &ExecutionRef,
    ) -> Result<aws_sdk_sfn::operation::describe_execution::DescribeExecutionOutput, EngineError>
    {
        self.client()
            .await
            .describe_execution()
            .execution_arn(&execution.0)
            .send()
            .await
            .map_err(|e| classify(e, &self.what("DescribeExecution")))
    }

    /// Brings `scan` up to the newest event.
    ///
    /// The first read goes oldest first, at most [`FIRST_READ_PAGES`] pages a call, folding
    /// each page as it comes and keeping where it stopped: a history of thousands of events is
    /// read across a few polls, each within its deadline, instead of never. From then on, it
    /// reads newest first until it reaches the events already folded in: one call in the
    /// steady state, however long the history.
    async fn catch_up(&self, execution: &ExecutionRef, scan: &mut Scan) -> Result<(), EngineError> {
        let client = self.client().await;
        if !scan.complete {
            for _ in 0..FIRST_READ_PAGES {
                let resuming = scan.resume.is_some();
                let sent = client
                    .get_execution_history()
                    .execution_arn(&execution.0)
                    .reverse_order(false)
                    .max_results(NEXT_PAGE)
                    .include_execution_data(true)
                    .set_next_token(scan.resume.take())
                    .send()
                    .await;
                let page = match sent {
                    Ok(page) => page,
                    // A page token lives 24 hours: an old one means reading again from the start.
                    Err(e)
                        if resuming
                            && e.as_service_error().is_some_and(|e| e.is_invalid_token()) =>
                    {
                        *scan = Scan::default();
                        continue;
                    }
                    Err(e) => return Err(classify(e, &self.what("GetExecutionHistory"))),
                };
                scan.fold(page.events());
                match page.next_token {
                    Some(token) => scan.resume = Some(token),
                    None => {
                        scan.complete = true;
                        return Ok(());
                    }
                }
            }
            return Ok(());
        }
        let mut events = Vec::new();
        let mut token: Option<String> = None;
        let mut page_size = FIRST_PAGE;
        loop {
            let page = client
                .get_execution_history()
                .execution_arn(&execution.0)
                .reverse_order(true)
                .max_results(page_size)
                .include_execution_data(true)
                .set_next_token(token.take())
                .send()
                .await
                .map_err(|e| classify(e, &self.what("GetExecutionHistory")))?;
            let reached = page.events().iter().any(|e| e.id <= scan.last_id + 1);
            token = page.next_token;
            events.extend(page.events);
            if reached || token.is_none() {
                break;
            }
            page_size = NEXT_PAGE;
        }
        scan.fold(&events);
        Ok(())
    }

    fn console_url(&self, execution: &ExecutionRef) -> String {
        let region = self.target.region();
        format!(
            "https://{region}.console.aws.amazon.com/states/home?region={region}#/v2/executions/details/{}",
            execution.0
        )
    }

    fn name_for(&self, request: &StartRequest) -> Result<String, EngineError> {
        let rendered = self
            .target
            .execution_name
            .as_ref()
            .and_then(|template| template.render(&request.arguments));
        match rendered {
            Some(rendered) => {
                mapping::execution_name(&rendered).map_err(|message| EngineError::InvalidInput {
                    engine: KIND,
                    message,
                })
            }
            // No template, or one naming an optional argument the call left out (with no
            // default): the call's key as the name. A retried start is the same named start,
            // which Step Functions answers with the execution the first attempt made. The
            // principal's tag in front is what `list` filters by (executions cannot be tagged).
            None => Ok(format!(
                "{}{}",
                principal_prefix(&request.principal_tag),
                request.idempotency_key
            )),
        }
    }

    /// The record DescribeExecution gives (tools that do not read history: one call a poll).
    async fn described_record(
        &self,
        execution: &ExecutionRef,
    ) -> Result<ExecutionRecord, EngineError> {
        let d = self.describe(execution).await?;
        let created = mapping::time(&d.start_date);
        let mut record =
            ExecutionRecord::new(mapping::state(&d.status), d.status.as_str(), created);
        record.updated_at = d.stop_date.as_ref().map(mapping::time).unwrap_or(created);
        match record.state {
            TaskState::Completed => {
                record.output = Some(mapping::output(
                    d.output(),
                    self.target.output_pointer.as_deref(),
                ));
            }
            TaskState::Failed => {
                let default = if d.status.as_str() == "TIMED_OUT" {
                    "States.Timeout"
                } else {
                    "States.Failed"
                };
                record.failure = Some(EngineFailure {
                    error: d.error().unwrap_or(default).to_owned(),
                    cause: d.cause().map(str::to_owned),
                });
            }
            TaskState::Working if d.status.as_str() == "PENDING_REDRIVE" => {
                record.status_message = Some("Redrive pending".into());
            }
            _ => {}
        }
        Ok(record)
    }

    /// The record a history scan gives: the state, the open questions and, once the execution
    /// has ended, its result from the closing event (DescribeExecution only when that event's
    /// copy of the output was truncated).
    async fn scanned_record(
        &self,
        execution: &ExecutionRef,
        scan: &Scan,
    ) -> Result<ExecutionRecord, EngineError> {
        let created = scan.started.as_ref().map(mapping::time).unwrap_or_default();
        let updated = scan
            .last_event
            .as_ref()
            .map(mapping::time)
            .unwrap_or(created)
            .max(created);
        let failed =
            |status: &str, default: &str, error: &Option<String>, cause: &Option<String>| {
                let mut r = ExecutionRecord::new(TaskState::Failed, status, created);
                r.failure = Some(EngineFailure {
                    error: error.clone().unwrap_or_else(|| default.to_owned()),
                    cause: cause.clone(),
                });
                r
            };
        let mut record = match &scan.end {
            Some(End::Succeeded { output }) => {
                let output = match output {
                    Some(o) => Some(o.clone()),
                    None => self.describe(execution).await?.output,
                };
                let mut r = ExecutionRecord::new(TaskState::Completed, "SUCCEEDED", created);
                r.output = Some(mapping::output(
                    output.as_deref(),
                    self.target.output_pointer.as_deref(),
                ));
                r
            }
            Some(End::Failed { error, cause }) => failed("FAILED", "States.Failed", error, cause),
            Some(End::TimedOut { error, cause }) => {
                failed("TIMED_OUT", "States.Timeout", error, cause)
            }
            Some(End::Aborted) => ExecutionRecord::new(TaskState::Cancelled, "ABORTED", created),
            // Part of a long history read so far: nothing about its waits is certain yet.
            None if !scan.complete => {
                let mut r = ExecutionRecord::new(TaskState::Working, "RUNNING", created);
                r.status_message = Some(format!(
                    "Reading the execution's history (events 1 to {} so far)",
                    scan.last_id
                ));
                r
            }
            None => {
                let mut r = ExecutionRecord::new(TaskState::Working, "RUNNING", created);
                r.status_message = scan.status_message();
                r.input_requests = scan
                    .pending()
                    .map(|p| InputRequest {
                        key: p.key.clone(),
                        message: p.message.clone(),
                        requested_schema: p.requested_schema.clone(),
                    })
                    .collect();
                if !r.input_requests.is_empty() {
                    r.state = TaskState::InputRequired;
                }
                r
            }
        };
        record.updated_at = updated;
        Ok(record)
    }

    /// Reads the execution afresh: one call in the steady state.
    async fn read(
        &self,
        execution: &ExecutionRef,
        tracked: &mut Tracked,
    ) -> Result<ExecutionRecord, EngineError> {
        let mut record = if self.target.history {
            let mut scan = tracked.scan.clone().unwrap_or_default();
            self.catch_up(execution, &mut scan).await?;
            let record = self.scanned_record(execution, &scan).await?;
            tracked.scan = Some(scan);
            record
        } else {
            self.described_record(execution).await?
        };
        record.console_url = Some(self.console_url(execution));
        Ok(record)
    }
}

/// The X-Ray trace header of the engine call being made, when flowgate records traces: the
/// execution joins the caller's trace in X-Ray (`StartExecution`'s `traceHeader`).
fn xray_trace_header() -> Option<String> {
    flowgate_core::observe::trace_context().map(|context| context.xray_header())
}

/// The name prefix of the unnamed executions started for a principal: `fg-<tag>-` (the tag
/// verbatim: 52 characters with the key, within the 80 a name may have).
fn principal_prefix(principal_tag: &str) -> String {
    format!("fg-{principal_tag}-")
}

/// How many executions `list` reads at most while looking for a principal's (ListExecutions
/// has no name filter, so a principal's executions are found by scanning newest first).
const LIST_SCAN_LIMIT: usize = 10_000;

async fn build_client(target: &SfnTarget) -> Client {
    // Every call has a deadline, and the SDK does not retry on its own: the server's policy
    // retries (with the call's idempotency key for starts), so attempts never multiply.
    let timeouts = TimeoutConfig::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .operation_attempt_timeout(CALL_TIMEOUT)
        .operation_timeout(CALL_TIMEOUT)
        .build();
    let mut loader = aws_config::defaults(BehaviorVersion::latest())
        .region(Region::new(target.region()))
        .timeout_config(timeouts)
        .retry_config(RetryConfig::disabled());
    if let Some(url) = &target.endpoint_url {
        loader = loader.endpoint_url(url);
    }
    let mut conf = loader.load().await;
    if let Some(role) = &target.role_arn {
        let provider = aws_config::sts::AssumeRoleProvider::builder(role)
            .session_name("flowgate")
            .configure(&conf)
            .build()
            .await;
        conf = conf
            .to_builder()
            .credentials_provider(aws_sdk_sfn::config::SharedCredentialsProvider::new(
                provider,
            ))
            .build();
    }
    let mut builder = aws_sdk_sfn::config::Builder::from(&conf);
    if target.endpoint_url.is_some() {
        builder = builder.interceptor(crate::sync_host::SameHostForSync);
    }
    Client::from_conf(builder.build())
}

#[async_trait]
impl Engine for StepFunctionsEngine {
    fn kind(&self) -> &'static str {
        KIND
    }

    fn capabilities(&self) -> Capabilities {
        let mut c = Capabilities::all();
        if self.target.workflow_type == WorkflowType::Express {
            c = Capabilities::default();
            c.synchronous_only = true;
        }
        c
    }

    /// The state machine: an execution's ARN is its ARN's with the execution's name.
    fn reference_scope(&self) -> String {
        self.target.unqualified_arn().to_owned()
    }

    /// The execution's name (at most 80 characters; flowgate's own names are of
    /// `[A-Za-z0-9_-]`, which task ids pack in 6 bits a character).
    fn locator<'a>(&self, execution: &'a ExecutionRef) -> Option<&'a str> {
        self.target.execution_name_of(&execution.0)
    }

    fn reference_at(&self, locator: &str) -> ExecutionRef {
        ExecutionRef(self.target.execution_arn(locator))
    }

    fn retention_ms(&self) -> Option<u64> {
        // Step Functions keeps a standard execution's history for 90 days after it closes.
        Some(90 * 24 * 3600 * 1000)
    }

    async fn start(&self, request: StartRequest) -> Result<Started, EngineError> {
        if self.target.workflow_type == WorkflowType::Express {
            return Err(EngineError::Unsupported {
                engine: KIND,
                operation: "start (express workflows run synchronously)",
            });
        }
        let name = self.name_for(&request)?;
        let input = mapping::input(&request.arguments, self.target.input_key.as_deref());
        let sent = self
            .client()
            .await
            .start_execution()
            .state_machine_arn(&self.target.state_machine_arn)
            .name(&name)
            .input(&input)
            .set_trace_header(xray_trace_header())
            .send()
            .await;
        match sent {
            Ok(out) => {
                // A new task: it will be polled, so it counts against the quota from now.
                let started = Started {
                    execution: ExecutionRef(out.execution_arn),
                    created_at: mapping::time(&out.start_date),
                };
                self.follow_start(&started.execution, started.created_at)
                    .await;
                Ok(started)
            }
            // AWS says this both for a retry of this call (the same name and input) and for a
            // different call whose name renders the same, or an execution of that name that
            // has closed: only the same input is the same call.
            Err(e) if already_exists(&e) => {
                let execution = ExecutionRef(self.target.execution_arn(&name));
                let d = self.describe(&execution).await?;
                if d.input().is_some_and(|i| mapping::same_input(i, &input)) {
                    tracing::info!(execution = %execution, "start reached the execution an earlier attempt started");
                    let created_at = mapping::time(&d.start_date);
                    self.follow_start(&execution, created_at).await;
                    Ok(Started {
                        execution,
                        created_at,
                    })
                } else {
                    Err(EngineError::InvalidInput {
                        engine: KIND,
                        message: format!(
                            "state machine {} already has an execution named {name}, started \
                             {} with other arguments; a call with different arguments needs an \
                             execution name of its own (the tool's execution_name template)",
                            self.target.state_machine_name(),
                            mapping::time(&d.start_date).to_rfc3339(),
                        ),
                    })
                }
            }
            Err(e) => Err(classify(e, &self.what("StartExecution"))),
        }
    }

    fn pacing(&self) -> Option<Duration> {
        Some(self.intervals().0)
    }

    fn execution_for(&self, request: &StartRequest) -> Option<ExecutionRef> {
        if self.target.workflow_type == WorkflowType::Express {
            return None;
        }
        let name = self.name_for(request).ok()?;
        Some(ExecutionRef(self.target.execution_arn(&name)))
    }

    async fn run_sync(&self, request: StartRequest) -> Result<ExecutionRecord, EngineError> {
        let name = self.name_for(&request)?;
        let input = mapping::input(&request.arguments, self.target.input_key.as_deref());
        let out = self
            .client()
            .await
            .start_sync_execution()
            .state_machine_arn(&self.target.state_machine_arn)
            .name(name)
            .input(input)
            .set_trace_header(xray_trace_header())
            .customize()
            .config_override(
                aws_sdk_sfn::config::Builder::default().timeout_config(
                    TimeoutConfig::builder()
                        .connect_timeout(CONNECT_TIMEOUT)
                        .operation_attempt_timeout(SYNC_CALL_TIMEOUT)
                        .operation_timeout(SYNC_CALL_TIMEOUT)
                        .build(),
                ),
            )
            .send()
            .await
            .map_err(|e| classify(e, &self.what("StartSyncExecution")))?;
        let (state, error) = match out.status() {
            SyncExecutionStatus::Succeeded => (TaskState::Completed, None),
            SyncExecutionStatus::Failed => {
                (TaskState::Failed, out.error().or(Some("States.Failed")))
            }
            SyncExecutionStatus::TimedOut => {
                (TaskState::Failed, out.error().or(Some("States.Timeout")))
            }
            other => {
                tracing::warn!(status = other.as_str(), "unknown StartSyncExecution status");
                (TaskState::Unknown, None)
            }
        };
        let mut record =
            ExecutionRecord::new(state, out.status().as_str(), mapping::time(&out.start_date));
        record.updated_at = mapping::time(&out.stop_date);
        match state {
            TaskState::Completed => {
                record.output = Some(mapping::output(
                    out.output(),
                    self.target.output_pointer.as_deref(),
                ))
            }
            TaskState::Failed => {
                record.failure = Some(EngineFailure {
                    error: error.unwrap_or("States.Failed").to_owned(),
                    cause: out.cause().map(str::to_owned),
                });
            }
            _ => {}
        }
        Ok(record)
    }

    async fn get(&self, execution: &ExecutionRef) -> Result<ExecutionRecord, EngineError> {
        self.check_owned(execution)?;
        let tracked = self.executions.of(execution);
        let mut tracked = tracked.lock().await;
        tracked.used = Instant::now();
        if let Some((at, record)) = &tracked.record {
            let keep = if record.state.is_terminal() {
                FINISHED_KEEP
            } else {
                REUSE
            };
            if at.elapsed() < keep && !tracked.must_read {
                return Ok(record.clone());
            }
        }
        let arn = execution.0.as_str();
        self.quota.reads.polled(arn);
        let started = tracked.started.or_else(|| {
            tracked
                .scan
                .as_ref()
                .and_then(|s| s.started.as_ref())
                .map(mapping::time)
        });
        self.quota.ends.watch(arn, started);
        let (interval, sweep_every) = self.intervals();
        if let Some(every) = sweep_every {
            self.sweep_if_due(every).await;
        }
        // A read that cannot wait (a listing says the execution ended, a client changed it)
        // goes now, out of the same budget; the others take their turn, least recently read
        // first, and meanwhile the task is shown as last seen.
        let suspected = self.quota.ends.suspected(arn);
        if tracked.must_read || suspected {
            self.quota.reads.spend(arn);
        } else if !self.quota.reads.admit(arn) {
            match self.unread(execution, &tracked) {
                Some(mut record) => {
                    record.min_poll_interval = Some(interval);
                    return Ok(record);
                }
                // Nothing known of it yet: a first read may borrow from the budget, up to a
                // point; beyond it, come back later.
                None if self.quota.reads.admit_first(arn) => {}
                None => {
                    return Err(EngineError::Throttled {
                        engine: KIND,
                        retry_after: Some(interval),
                    });
                }
            }
        }
        match self.read(execution, &mut tracked).await {
            Ok(mut record) => {
                tracked.must_read = false;
                if record.state.is_terminal() {
                    self.quota.reads.forget(arn);
                    self.quota.ends.forget(arn);
                } else {
                    if suspected {
                        self.quota.ends.cleared(arn);
                    }
                    record.min_poll_interval = Some(self.intervals().0);
                }
                if tracked.started.is_none() {
                    tracked.started = Some(record.created_at);
                }
                tracked.record = Some((Instant::now(), record.clone()));
                Ok(record)
            }
            // Throttled: the account's quota is spent. The task is as last seen (a throttled
            // read changes nothing), and clients are asked to come back later.
            Err(EngineError::Throttled { .. }) => {
                self.quota.reads.throttled();
                let interval = self.intervals().0;
                match self.unread(execution, &tracked) {
                    Some(mut record) => {
                        record.min_poll_interval = Some(interval);
                        Ok(record)
                    }
                    None => Err(EngineError::Throttled {
                        engine: KIND,
                        retry_after: Some(interval),
                    }),
                }
            }
            Err(e) => {
                if e.is_not_found() {
                    self.quota.reads.forget(arn);
                    self.quota.ends.forget(arn);
                }
                Err(e)
            }
        }
    }

    async fn respond(
        &self,
        execution: &ExecutionRef,
        key: &str,
        response: InputResponse,
    ) -> Result<(), EngineError> {
        self.check_owned(execution)?;
        let tracked = self.executions.of(execution);
        let mut tracked = tracked.lock().await;
        // Only a wait the whole history shows open is answered: a key that is not (or no
        // longer) outstanding is NotFound, never reported as delivered.
        let mut scan = tracked.scan.clone().unwrap_or_default();
        self.quota.reads.spend(&execution.0);
        self.catch_up(execution, &mut scan).await?;
        let complete = scan.complete;
        let pending = scan.pending().find(|p| p.key == key).cloned();
        tracked.scan = Some(scan);
        tracked.record = None;
        tracked.must_read = true;
        if !complete {
            return Err(EngineError::Unavailable {
                engine: KIND,
                message: format!(
                    "{}: the execution's history is still being read; answer again shortly",
                    self.what("GetExecutionHistory")
                ),
                source: None,
            });
        }
        let Some(pending) = pending else {
            return Err(EngineError::NotFound {
                engine: KIND,
                what: format!("no open input state {key}"),
            });
        };
        let client = self.client().await;
        match response.action {
            Action::Accept => {
                let output = response
                    .content
                    .unwrap_or_else(|| serde_json::json!({}))
                    .to_string();
                client
                    .send_task_success()
                    .task_token(&pending.token)
                    .output(output)
                    .send()
                    .await
                    .map(|_| ())
                    .map_err(|e| classify(e, &self.what("SendTaskSuccess")))
            }
            Action::Decline | Action::Cancel => {
                let (error, verb) = match response.action {
                    Action::Decline => ("flowgate.Declined", "declined"),
                    _ => ("flowgate.Cancelled", "dismissed"),
                };
                client
                    .send_task_failure()
                    .task_token(&pending.token)
                    .error(error)
                    .cause(format!(
                        "The MCP client {verb} the question: {}",
                        pending.message
                    ))
                    .send()
                    .await
                    .map(|_| ())
                    .map_err(|e| classify(e, &self.what("SendTaskFailure")))
            }
        }
    }

    async fn cancel(&self, execution: &ExecutionRef) -> Result<(), EngineError> {
        self.check_owned(execution)?;
        let tracked = self.executions.of(execution);
        {
            let mut tracked = tracked.lock().await;
            tracked.record = None;
            tracked.must_read = true;
        }
        self.client()
            .await
            .stop_execution()
            .execution_arn(&execution.0)
            .error("flowgate.Cancelled")
            .cause(format!(
                "Cancelled through MCP tasks/cancel at {}",
                Utc::now().to_rfc3339()
            ))
            .send()
            .await
            .map(|_| ())
            .map_err(|e| classify(e, &self.what("StopExecution")))
    }

    async fn list(&self, filter: ListFilter) -> Result<Vec<ExecutionSummary>, EngineError> {
        let limit = filter.limit.unwrap_or(100).clamp(1, 1000);
        // Only unnamed executions carry their principal (in the name); a templated name does
        // not, so a principal's listing leaves those out rather than guess.
        let prefix = filter.principal_tag.as_deref().map(principal_prefix);
        let mut found = Vec::new();
        let mut scanned = 0;
        let mut token: Option<String> = None;
        let mut page = 0;
        loop {
            // A listing page spends the ListExecutions budget as one page of a sweep does (one
            // call each cycle: a client lists now and then, as it polls), so the sweeps that
            // learn of ends make room for it; its throttling slows them down too.
            page += 1;
            self.quota.lists.spend(&format!(
                "{}#tasks/list#{page}",
                self.target.unqualified_arn()
            ));
            let out = self
                .client()
                .await
                .list_executions()
                .state_machine_arn(self.target.unqualified_arn())
                .max_results(1000)
                .set_next_token(token.take())
                .send()
                .await
                .map_err(|e| classify(e, &self.what("ListExecutions")))
                .inspect_err(|e| {
                    if matches!(e, EngineError::Throttled { .. }) {
                        self.quota.lists.throttled();
                    }
                })?;
            scanned += out.executions().len();
            found.extend(
                out.executions()
                    .iter()
                    .filter(|e| prefix.as_ref().is_none_or(|p| e.name.starts_with(p)))
                    .map(|e| ExecutionSummary {
                        execution: ExecutionRef(e.execution_arn.clone()),
                        state: mapping::state(&e.status),
                        created_at: mapping::time(&e.start_date),
                    }),
            );
            token = out.next_token().map(str::to_owned);
            if found.len() >= limit || token.is_none() || scanned >= LIST_SCAN_LIMIT {
                break;
            }
        }
        found.truncate(limit);
        Ok(found)
    }
}

#[cfg(test)]
mod task_ids {
    use super::*;
    use serde_json::json;

    /// The longest execution a tool can have: an 80-character state machine name in the
    /// longest partition and region, and an 80-character execution name (Step Functions' most;
    /// flowgate's names are of `[A-Za-z0-9_-]`, `mapping::execution_name`). Only the name
    /// reaches the task id: the ARN is the tool's scope.
    #[test]
    fn the_longest_execution_gets_a_task_id_a_client_takes() {
        let machine = "m".repeat(80);
        let arn =
            format!("arn:aws-iso-b:states:us-isob-east-1:123456789012:stateMachine:{machine}");
        let config = json!({"state_machine_arn": arn});
        let target = SfnTarget::from_config(
            config.as_object().expect("object"),
            json!({"type": "object"}).as_object().expect("object"),
        )
        .expect("target");
        let engine = StepFunctionsEngine::with_quota_share(target, 1.0);
        let name = mapping::execution_name(&"Z_-9 ".repeat(40)).expect("name");
        assert_eq!(name.len(), 80);
        let execution = ExecutionRef(format!(
            "arn:aws-iso-b:states:us-isob-east-1:123456789012:execution:{machine}:{name}"
        ));
        let locator = engine.locator(&execution).expect("the tool's execution");
        assert_eq!(locator, name);
        assert_eq!(engine.reference_at(locator), execution);
        let length = flowgate_core::handle::task_id_fits(locator).expect("fits");
        assert!(length <= flowgate_core::handle::ID_MAX, "{length}");
        // Another state machine's execution is not this tool's.
        let other = ExecutionRef(execution.0.replace(":m", ":n"));
        assert_eq!(engine.locator(&other), None);
    }
}
