//! The GitLab CI engine: a tool names a project and a ref, a call creates a pipeline, and the
//! pipeline is the task.
//!
//! | flowgate | GitLab REST API (v4) |
//! |---|---|
//! | start | look the call's key up among recent pipelines (`GET /projects/:id/pipelines`, then `/variables`), else `POST /projects/:id/pipeline` (or `/trigger/pipeline` with a trigger token) with the arguments as variables or `inputs`, plus `FLOWGATE_IDEMPOTENCY_KEY`, `FLOWGATE_PRINCIPAL`, `FLOWGATE_TOOL` |
//! | get | `GET /pipelines/:id` and `/pipelines/:id/jobs` (every page); on success the result artifact (`/jobs/:id/artifacts/*path`), on failure the failing job's `/trace` |
//! | respond | accept: `POST /jobs/:id/play` with the answers as `job_variables_attributes`; decline: `POST /pipelines/:id/cancel` |
//! | cancel | `POST /pipelines/:id/cancel` |
//! | list | recent pipelines of the ref whose `FLOWGATE_PRINCIPAL` variable matches |
//!
//! Status mapping: created, waiting_for_resource, preparing, pending, scheduled -> submitted;
//! running -> working; manual -> input_required when a blocking manual job the manifest names
//! waits (otherwise working, waiting on someone in GitLab); success, skipped -> completed;
//! failed -> failed (the job and its trace tail); canceled, canceling -> cancelled; anything
//! else -> unknown.
//!
//! **Exactly-once starts.** GitLab has no idempotency header, so the call's key travels as the
//! pipeline variable `FLOWGATE_IDEMPOTENCY_KEY`, and every start first looks for a pipeline
//! created in the last `dedupe_window_s` seconds that carries it. A retry after a lost answer
//! therefore finds the pipeline the first attempt created, from any server process.

mod api;
mod config;
mod engine;
mod mapping;
mod policy;

pub use config::{GitLabTarget, OnDecline, Question, ResultFile, TokenKind};
pub use engine::GitLabEngine;
pub use policy::scopes;

/// The engine kind manifests name: `engine: gitlab-ci`.
pub const KIND: &str = "gitlab-ci";

/// Registers the GitLab CI engine under [`KIND`].
pub fn register(registry: &mut flowgate_core::Registry) {
    registry.register(
        KIND,
        Box::new(|spec| {
            let target = GitLabTarget::from_manifest(spec.config)?;
            let engine = GitLabEngine::new(target)
                .map_err(|e| flowgate_core::TargetError::whole(e.to_string()))?;
            Ok(std::sync::Arc::new(engine) as std::sync::Arc<dyn flowgate_core::Engine>)
        }),
    );
}

#[cfg(feature = "testing")]
pub mod testing;
