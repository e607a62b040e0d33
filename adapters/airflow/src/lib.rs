//! The Apache Airflow 3 engine: a tool names a DAG, a call is a DAG run, and the run is the
//! task; a human-in-the-loop step (`ApprovalOperator`, `HITLOperator`, `HITLEntryOperator`,
//! `HITLBranchOperator`) waiting for its answer is a question.
//!
//! | flowgate | Airflow REST API (v2) |
//! |---|---|
//! | start | `POST /dags/{dag}/dagRuns` with `dag_run_id` `flowgate-<the call's key>` and the arguments as `conf` (with the call's marker under `conf.flowgate`); a 409 reads the run of that id and takes it only when its marker is this call's |
//! | get | `GET /dags/{dag}/dagRuns/{run}`; while it runs `.../taskInstances` (the current task is the status message) and, when a step waits, `.../hitlDetails`; on success the XCom of the result task (`.../xcomEntries/{key}?deserialize=true`); on failure the failing task's exception and the end of its log (`.../logs/{try}`); a paused DAG is named while a run stays queued; an ended run's record is kept and never read again |
//! | respond | `PATCH .../taskInstances/{task}/{map_index}/hitlDetails` with the chosen options and params, checked against the step first and held back until the step has waited `answer_guard_ms`; a decline chooses `Reject` where the step offers it, otherwise marks the run failed with a note saying so |
//! | cancel | `PATCH /dags/{dag}/dagRuns/{run}` `{"state": "failed", "note": "flowgate: cancelled"}` (Airflow stops the running task at its next heartbeat) |
//! | list | `GET /dags/{dag}/dagRuns?run_id_pattern=flowgate-%` whose marker names the principal |
//!
//! Status mapping: queued -> submitted (the status message names a paused DAG); running ->
//! working, input_required while a step awaits its answer; success -> completed (failed when
//! the result task was skipped because a step was answered `Reject`, naming who answered);
//! failed -> failed (the failing task, its exception and its log's end), cancelled when
//! flowgate's note says it cancelled the run; anything else -> unknown.
//!
//! **Task ids.** The tool's scope is the Airflow URL and the DAG id; a task id carries the call
//! key of the run id (32 hex digits, 17 packed bytes), and `flowgate-` is put back.
//!
//! **Exactly-once starts.** The call's key names the run, so a retried start, from any server
//! process, meets Airflow's 409 for that id. Airflow does not compare `conf` then, so the run
//! it finds is this call's only if its `conf.flowgate.key` is the call's key.
//!
//! **Answers never land too early.** Airflow 3.3 fails a step answered within about half a
//! second of the step starting to wait. A client can answer that fast, so `respond` holds an
//! answer back until the step has waited `answer_guard_ms` (1.5 s by default) by Airflow's own
//! clock.

mod api;
mod config;
mod engine;
mod mapping;
mod policy;

pub use config::AirflowTarget;
pub use engine::AirflowEngine;
pub use policy::permissions;

/// The engine kind manifests name: `engine: airflow`.
pub const KIND: &str = "airflow";

/// Registers the Airflow engine under [`KIND`].
pub fn register(registry: &mut flowgate_core::Registry) {
    registry.register(
        KIND,
        Box::new(|spec| {
            let target = AirflowTarget::from_manifest(spec)?;
            let engine = AirflowEngine::new(target)
                .map_err(|e| flowgate_core::TargetError::whole(e.to_string()))?;
            Ok(std::sync::Arc::new(engine) as std::sync::Arc<dyn flowgate_core::Engine>)
        }),
    );
}

#[cfg(feature = "testing")]
pub mod testing;
