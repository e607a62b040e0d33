//! The [`Engine`] implementation over run folders.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use flowgate_core::{
    Capabilities, Engine, EngineError, EngineFailure, ExecutionRecord, ExecutionRef,
    ExecutionSummary, InputRequest, InputResponse, ListFilter, StartRequest, Started, TaskState,
};
use nix::errno::Errno;
use nix::sys::signal::killpg;
use nix::unistd::Pid;
use serde_json::Value;

use crate::ask::{RUN_DIR_ENV, STATUS_FILE_ENV};
use crate::config::BASE_ENV;
use crate::run_dir::{Meta, RunDir, boot_id, read_small, write_atomic, write_private};
use crate::state_dir::create_private_dir;
use crate::{KIND, LocalConfig, LocalTarget};

/// The local engine bound to one tool's command.
#[derive(Debug, Clone)]
pub struct LocalEngine {
    config: Arc<LocalConfig>,
    target: LocalTarget,
}

impl LocalEngine {
    /// An engine that runs `target` with runs under `config.state_dir`.
    pub fn new(config: Arc<LocalConfig>, target: LocalTarget) -> Self {
        LocalEngine { config, target }
    }

    fn runs_dir(&self) -> PathBuf {
        self.config.state_dir.join("runs")
    }

    /// The run folder of a reference with its `meta.json`, or not-found for anything that is not
    /// a run id this engine could have made (so no reference can point outside the state folder)
    /// or whose record is not there. The record is read once (or was kept with the folder by
    /// an earlier call: module `open_runs`): it is what a poll needs first. The folder is
    /// opened (or held), so that every file the call looks at after is one lookup in it.
    fn open_run(&self, execution: &ExecutionRef) -> Result<(RunDir, Arc<Meta>), EngineError> {
        use std::io::ErrorKind;
        let id = &execution.0;
        let well_formed =
            (8..=64).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-');
        if !well_formed {
            return Err(not_found(id));
        }
        let opened = crate::open_runs::open(self.runs_dir().join(id));
        let (run, meta) = match opened {
            Ok(opened) => opened,
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::NotFound | ErrorKind::IsADirectory | ErrorKind::NotADirectory
                ) =>
            {
                return Err(not_found(id));
            }
            Err(e) => return Err(io_error("cannot read the run record", e)),
        };
        // A finished run past its ttl is gone, whether or not the sweep has come by yet.
        if expired(&run, &meta, Utc::now()) {
            let _ = std::fs::remove_dir_all(&run.0);
            crate::open_runs::forget(&run.0);
            return Err(not_found(id));
        }
        Ok((run, meta))
    }
}

/// Whether a run may be removed: its ttl has run out and it has finished (exited, or its
/// recorded process group is gone). A run still going is kept past its ttl until it ends, so
/// a command never loses its folder under it.
pub(crate) fn expired(run: &RunDir, meta: &Meta, now: DateTime<Utc>) -> bool {
    if meta.expires_at.is_none_or(|at| at > now) {
        return false;
    }
    matches!(run.exit_code(None), Ok(Some(_)))
        || (run.process().is_some() && !group_is_ours(run, meta).is_some_and(group_alive))
}

/// The files whose changes make a run's `lastUpdatedAt`, in the order a poll looks at them.
const RECORD_FILES: [&str; 6] = [
    "status",
    "stdout",
    "stderr",
    "exit",
    "cancelled",
    "questions",
];
/// Where `status`, `exit`, `cancelled` and `questions` are in [`RECORD_FILES`].
const STATUS: usize = 0;
const EXIT: usize = 3;
const CANCELLED: usize = 4;
const QUESTIONS: usize = 5;

fn not_found(what: &str) -> EngineError {
    EngineError::NotFound {
        engine: KIND,
        what: what.chars().take(80).collect(),
    }
}

/// How long a run folder without a record may be another start's work in progress (a start
/// writes the record within milliseconds of making the folder); older, it was left by a start
/// that stopped before writing it (a crash), and is taken over.
const ABANDONED_AFTER: Duration = Duration::from_secs(30);

/// How long a start waits for another start of the same call to write the record.
const CLAIM_WAIT: Duration = Duration::from_secs(2);

/// Who starts the command of a run: this start, or another start of the same call that made
/// the run's folder first (with what it started).
enum Claim {
    Ours,
    Theirs(Started),
}

/// Claims the run folder `run` (id `id`) for this start: making it (not as part of a path:
/// exactly one start makes it) claims it. A folder another start made answers with its record
/// once that is written; a record that cannot be read now (a full file table, an I/O error)
/// may be that start's, so it is a retryable error, never a second run of the command. A
/// folder without a record past [`ABANDONED_AFTER`] is moved aside (one start wins the rename),
/// removed and claimed again; a start in progress past [`CLAIM_WAIT`] is a retryable error.
async fn claim(run: &RunDir, id: &str) -> Result<Claim, EngineError> {
    use std::io::ErrorKind;
    use std::os::unix::fs::DirBuilderExt;
    let waited = tokio::time::Instant::now();
    let make = || std::fs::DirBuilder::new().mode(0o700).create(&run.0);
    loop {
        let made = match make() {
            // The folder of runs is made with the state folder; made here if it is gone.
            Err(e) if e.kind() == ErrorKind::NotFound => run
                .0
                .parent()
                .map_or(Err(e), create_private_dir)
                .and_then(|()| make()),
            made => made,
        };
        match made {
            Ok(()) => return Ok(Claim::Ours),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io_error("cannot create the run folder", e)),
        }
        match run.meta() {
            Ok(meta) => {
                return Ok(Claim::Theirs(Started {
                    execution: ExecutionRef(id.to_owned()),
                    created_at: meta.created_at,
                }));
            }
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(io_error("cannot read the run record", e)),
        }
        let age = std::fs::metadata(&run.0)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|changed| SystemTime::now().duration_since(changed).ok());
        if age.is_some_and(|age| age > ABANDONED_AFTER) {
            let aside = run.0.with_extension(format!(
                "abandoned-{}-{}",
                std::process::id(),
                Utc::now().timestamp_nanos_opt().unwrap_or_default()
            ));
            if std::fs::rename(&run.0, &aside).is_ok() {
                let _ = std::fs::remove_dir_all(&aside);
            }
            continue;
        }
        if waited.elapsed() >= CLAIM_WAIT {
            return Err(io_error(
                "another start of this call is in progress",
                std::io::Error::from(ErrorKind::WouldBlock),
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn io_error(what: &str, e: std::io::Error) -> EngineError {
    EngineError::unavailable(KIND, what.to_owned(), e)
}

fn env_name(key: &str) -> String {
    key.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect()
}

fn to_utc(t: SystemTime) -> DateTime<Utc> {
    DateTime::<Utc>::from(t)
}

/// The start time (clock ticks after boot) of process `pid`, from `/proc/<pid>/stat`.
fn process_start_time(pid: i32) -> Option<u64> {
    let bytes = read_small(std::path::Path::new(&format!("/proc/{pid}/stat"))).ok()?;
    let stat = std::str::from_utf8(&bytes).ok()?;
    // Fields after the command name (which may hold spaces and parentheses); the start time
    // is field 22 of the line, the 20th after the name.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// The run's process group id when it provably still belongs to the run: same boot, and its
/// leader is the process recorded at spawn (same start time).
fn group_is_ours(run: &RunDir, meta: &Meta) -> Option<i32> {
    if meta.boot_id != boot_id() {
        return None;
    }
    let (pgid, started) = run.process()?;
    (process_start_time(pgid) == Some(started)).then_some(pgid)
}

/// Whether the run's process group is alive and still its own: [`group_is_ours`] and
/// [`group_alive`], answered from a held pidfd of its leader when a poll already proved it
/// (module `leaders`: one system call instead of nine while the leader runs).
fn run_alive(run: &RunDir, meta: &Meta) -> bool {
    if meta.boot_id != boot_id() {
        return false;
    }
    if crate::leaders::alive(&run.0) {
        return true;
    }
    let Some((pgid, started)) = run.process() else {
        return false;
    };
    let pidfd = crate::leaders::open(pgid);
    if process_start_time(pgid) != Some(started) || !group_alive(pgid) {
        return false;
    }
    if let Some(pidfd) = pidfd {
        crate::leaders::hold(&run.0, pidfd);
    }
    true
}

/// Whether any process of the group is alive.
fn group_alive(pgid: i32) -> bool {
    !matches!(killpg(Pid::from_raw(pgid), None), Err(Errno::ESRCH))
}

/// The longest value given to a command through its environment. Linux refuses any single
/// environment string over 128 KiB (and the whole block over a share of the stack limit), so
/// larger arguments reach the command only on stdin and in `input.json`.
const MAX_ENV_VALUE: usize = 32 << 10;

/// The server's `PATH`, or a conventional one when the server has none.
fn server_path() -> std::ffi::OsString {
    std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into())
}

impl LocalEngine {
    /// The command's whole environment: cleared, then the fixed base, the manifest's
    /// passthrough names and `env:`, then the run's `FLOWGATE_*` variables.
    fn set_environment(
        &self,
        command: &mut tokio::process::Command,
        run: &RunDir,
        request: &StartRequest,
        args: &[u8],
    ) {
        command.env_clear().env("PATH", server_path());
        for name in BASE_ENV
            .iter()
            .copied()
            .chain(self.target.env_passthrough.iter().map(String::as_str))
        {
            if let Some(value) = std::env::var_os(name) {
                command.env(name, value);
            }
        }
        command
            .envs(&self.target.env)
            .env(RUN_DIR_ENV, &run.0)
            .env(STATUS_FILE_ENV, run.path("status"))
            .env("FLOWGATE_TOOL", &request.tool);
        if args.len() <= MAX_ENV_VALUE {
            command.env("FLOWGATE_ARGS", String::from_utf8_lossy(args).as_ref());
        }
        if let Value::Object(map) = &request.arguments {
            for (key, value) in map {
                let text = match value {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                if !text.contains('\0') && text.len() <= MAX_ENV_VALUE {
                    command.env(format!("FLOWGATE_ARG_{}", env_name(key)), text);
                }
            }
        }
        if let Some(bin) = &self.config.flowgate_bin {
            command.env("FLOWGATE_BIN", bin);
            if let Some(dir) = bin.parent() {
                let mut path = dir.as_os_str().to_owned();
                path.push(":");
                path.push(server_path());
                command.env("PATH", path);
            }
        }
    }
}

/// A command that could not be started is the call's or the manifest's problem (retrying
/// cannot help), except when the machine is short of processes or memory.
fn spawn_error(target: &LocalTarget, e: std::io::Error) -> EngineError {
    use std::io::ErrorKind;
    let dir = target
        .working_dir
        .as_deref()
        .map(|d| d.display().to_string())
        .unwrap_or_default();
    match e.raw_os_error().map(Errno::from_raw) {
        Some(Errno::E2BIG) => EngineError::InvalidInput {
            engine: KIND,
            message: "the arguments are too large to start the command with".into(),
        },
        Some(Errno::EAGAIN | Errno::ENOMEM) => {
            io_error("the machine cannot start another process now", e)
        }
        _ if e.kind() == ErrorKind::NotFound => EngineError::Denied {
            engine: KIND,
            message: format!("the command cannot start: its working folder {dir} does not exist"),
        },
        _ => EngineError::Denied {
            engine: KIND,
            message: format!("the command cannot start in {dir}: {e}"),
        },
    }
}

#[async_trait]
impl Engine for LocalEngine {
    fn kind(&self) -> &'static str {
        KIND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::all()
    }

    /// Runs live in the state folder; a run's id (its locator, whole) is a call's key.
    fn reference_scope(&self) -> String {
        self.config.state_dir.display().to_string()
    }

    async fn start(&self, request: StartRequest) -> Result<Started, EngineError> {
        // The run is named by the call's idempotency key: a retried start finds the run the
        // first attempt recorded instead of starting the command again.
        let id = request.idempotency_key.to_string();
        let run = RunDir::new(self.runs_dir().join(&id));
        // The start that makes the run's folder runs the command; any other start of the call
        // (a retry, or one made while the first is still in flight) answers with its record.
        if let Claim::Theirs(started) = claim(&run, &id).await? {
            return Ok(started);
        }
        let created_at = Utc::now();
        let meta = Meta {
            tool: request.tool.clone(),
            command: self.target.command.clone(),
            created_at,
            principal_tag: request.principal_tag.clone(),
            boot_id: boot_id().to_owned(),
            expires_at: request
                .ttl_ms
                .and_then(|ms| i64::try_from(ms).ok())
                .and_then(chrono::TimeDelta::try_milliseconds)
                .and_then(|ttl| created_at.checked_add_signed(ttl)),
        };
        let args = serde_json::to_vec(&request.arguments).unwrap_or_default();
        write_private(&run.path("input.json"), &args)
            .and_then(|()| {
                write_atomic(
                    &run.path("meta.json"),
                    &serde_json::to_vec(&meta).unwrap_or_default(),
                )
            })
            .map_err(|e| io_error("cannot write the run record", e))?;

        let Some(supervisor) = &self.config.supervisor else {
            let _ = std::fs::remove_dir_all(&run.0);
            return Err(EngineError::Denied {
                engine: KIND,
                message: "the local engine has no supervisor program to run commands under \
                          (the flowgate binary could not be found)"
                    .into(),
            });
        };
        let mut command = crate::supervisor::command(
            supervisor,
            &run.0,
            self.target.leftover_processes,
            &self.target.command,
        );
        self.set_environment(&mut command, &run, &request, &args);
        if let Some(dir) = &self.target.working_dir {
            command.current_dir(dir);
        }
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(e) => {
                // A run that never started leaves nothing behind.
                let _ = std::fs::remove_dir_all(&run.0);
                return Err(spawn_error(&self.target, e));
            }
        };
        let pgid = child.id().unwrap_or_default();
        // The group id with its leader's start time: a later signal goes to this group only
        // if the process with that id is still the one started here (ids are reused).
        let started = process_start_time(pgid as i32).unwrap_or_default();
        write_atomic(&run.path("pid"), format!("{pgid} {started}").as_bytes())
            .map_err(|e| io_error("cannot write the run record", e))?;
        // Reap the supervisor when it ends; if this server stops first, init reaps it.
        tokio::spawn(async move {
            let _ = child.wait().await;
        });
        Ok(Started {
            execution: ExecutionRef(id),
            created_at,
        })
    }

    async fn get(&self, execution: &ExecutionRef) -> Result<ExecutionRecord, EngineError> {
        let (run, meta) = self.open_run(execution)?;
        // What the folder's watch has counted before it is read (a working record read after
        // it may be kept for the next poll), and the record a poll read before while nothing in
        // the folder has changed since: with the group still alive, what reading the folder
        // again would find (module `open_runs`).
        let (look, kept) = crate::open_runs::look(&run.0);
        if let Some(record) = kept
            && run_alive(&run, &meta)
        {
            return Ok(record);
        }
        let mut record = ExecutionRecord::new(TaskState::Working, "running", meta.created_at);
        let read = |e| io_error("cannot read the run record", e);
        // When each file of the record last changed (and how long it was): the latest change
        // is the task's lastUpdatedAt.
        let mut seen = [None; RECORD_FILES.len()];
        for (at, f) in seen.iter_mut().zip(RECORD_FILES) {
            *at = run.seen(f).map_err(read)?;
        }
        let changed = seen.map(|s| s.map(|s| s.modified));
        record.updated_at = changed
            .iter()
            .flatten()
            .max()
            .copied()
            .map(to_utc)
            .unwrap_or(meta.created_at)
            .max(meta.created_at);
        // A file the pass above found missing (or empty, for the status) is not opened again
        // (a poll is mostly these calls): the record is the run as that pass saw it. A file
        // that appeared since is read by the next poll, and an exit that lands before the
        // group is found gone is read again below.
        record.status_message = match seen[STATUS] {
            Some(status) => run.status_line(status).map_err(read)?,
            None => None,
        };

        let exit = match seen[EXIT] {
            Some(exit) => run.exit_code(Some(exit)).map_err(read)?,
            None => None,
        };
        // Once the exit is known, which of it and a cancel came first decides the state: both
        // are looked at again after the exit was read. Without an exit, the times above serve.
        let (exit_at, cancelled_at) = if exit.is_some() {
            let modified = |name| Ok(run.seen(name)?.map(|s| s.modified));
            (
                modified("exit").map_err(read)?,
                modified("cancelled").map_err(read)?,
            )
        } else {
            (changed[EXIT], changed[CANCELLED])
        };
        // A cancel is recorded only while the run has no exit status, so an exit in the same
        // clock tick as the cancel (file times are as coarse as the kernel's tick) is the
        // supervisor ending the command for it: cancelled. Only an exit strictly earlier won.
        let finished_first = match (exit_at, cancelled_at) {
            (Some(exit_at), Some(cancel_at)) => exit_at < cancel_at,
            (Some(_), None) => true,
            _ => false,
        };
        if let (Some(code), true) = (exit, finished_first) {
            if code == 0 {
                record.state = TaskState::Completed;
                record.engine_status = "exited 0".into();
                record.output = Some(run.output().map_err(read)?);
            } else {
                record.state = TaskState::Failed;
                record.engine_status = format!("exited {code}");
                let error = if code > 128 {
                    format!("killed by signal {}", code - 128)
                } else {
                    format!("exit status {code}")
                };
                let tail = run.stderr_tail().map_err(read)?;
                record.failure = Some(EngineFailure {
                    error,
                    cause: (!tail.is_empty()).then_some(tail),
                });
            }
            return Ok(record);
        }
        if cancelled_at.is_some() {
            record.state = TaskState::Cancelled;
            record.engine_status = "cancelled".into();
            return Ok(record);
        }
        let alive = run_alive(&run, &meta);
        if !alive {
            // Gone without an exit status and without a cancel, both looked at after the group
            // was found gone: vanished. Otherwise one of them landed meanwhile: read again.
            let ended = run.has_ended().map_err(read)?;
            if !ended {
                record.state = TaskState::Failed;
                record.engine_status = "vanished".into();
                record.failure = Some(EngineFailure {
                    error: "the command ended without reporting an exit status".into(),
                    cause: Some(
                        "its supervisor was killed from outside flowgate, or the machine restarted; \
                         processes it left are ended by the server"
                            .into(),
                    ),
                });
                crate::sweep::end_orphans_of(&run.0);
                return Ok(record);
            }
            return Box::pin(self.get(execution)).await;
        }
        let asked = if seen[QUESTIONS].is_some() {
            run.questions().map_err(read)?
        } else {
            Vec::new()
        };
        let open: Vec<_> = asked
            .into_iter()
            .filter(|(_, _, answered)| !answered)
            .collect();
        if !open.is_empty() {
            record.state = TaskState::InputRequired;
            record.engine_status = "waiting for input".into();
            record.input_requests = open
                .into_iter()
                .map(|(n, q, _)| InputRequest {
                    key: format!("q{n}"),
                    message: q.message,
                    requested_schema: q.requested_schema,
                })
                .collect();
        }
        // A working run without questions (their files are a folder down, out of the watch's
        // sight) is kept as read.
        if let Some(look) = look
            && record.state == TaskState::Working
            && seen[QUESTIONS].is_none()
        {
            crate::open_runs::keep(&run.0, look, &record);
        }
        Ok(record)
    }

    async fn respond(
        &self,
        execution: &ExecutionRef,
        key: &str,
        response: InputResponse,
    ) -> Result<(), EngineError> {
        let (run, _) = self.open_run(execution)?;
        let n: u64 = key
            .strip_prefix('q')
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| not_found(key))?;
        if run
            .has_ended()
            .map_err(|e| io_error("cannot read the run record", e))?
        {
            return Err(not_found(key));
        }
        match run.answer(n, &response) {
            Ok(true) => Ok(()),
            Ok(false) => Err(not_found(key)),
            Err(e) => Err(io_error("cannot record the answer", e)),
        }
    }

    async fn cancel(&self, execution: &ExecutionRef) -> Result<(), EngineError> {
        let (run, meta) = self.open_run(execution)?;
        if run
            .has_ended()
            .map_err(|e| io_error("cannot read the run record", e))?
        {
            return Ok(());
        }
        write_atomic(&run.path("cancelled"), Utc::now().to_rfc3339().as_bytes())
            .map_err(|e| io_error("cannot record the cancel", e))?;
        // Never signal a group that is not provably this run's.
        let Some(pgid) = group_is_ours(&run, &meta) else {
            return Ok(());
        };
        crate::supervisor::cancel(pgid, run.0.clone());
        Ok(())
    }

    async fn list(&self, filter: ListFilter) -> Result<Vec<ExecutionSummary>, EngineError> {
        let entries = match std::fs::read_dir(self.runs_dir()) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_error("cannot list runs", e)),
        };
        let mut runs: Vec<(ExecutionRef, Arc<Meta>)> = entries
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter_map(|id| {
                let execution = ExecutionRef(id);
                let (_, meta) = self.open_run(&execution).ok()?;
                Some((execution, meta))
            })
            .collect();
        runs.sort_by_key(|(_, meta)| std::cmp::Reverse(meta.created_at));
        let mut out = Vec::new();
        for (execution, meta) in runs {
            if out.len() >= filter.limit.unwrap_or(usize::MAX) {
                break;
            }
            if meta.command != self.target.command
                || filter
                    .principal_tag
                    .as_ref()
                    .is_some_and(|p| *p != meta.principal_tag)
            {
                continue;
            }
            if let Ok(record) = self.get(&execution).await {
                out.push(ExecutionSummary {
                    execution,
                    state: record.state,
                    created_at: meta.created_at,
                });
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests;
