//! The GitLab CI engine: a tool names a project and a ref, a call creates a pipeline, and the
//! pipeline is the task.
//!
//! | flowgate | GitLab REST API (v4) |
//! |---|---|
//! | start | `GET /projects/:id/pipelines?name=<the call's name>` (one request), else `POST /projects/:id/pipeline` (or `/trigger/pipeline` with a trigger token) with the arguments as `inputs` and the call's name in the key input; pipeline variables only where the manifest lists them |
//! | get | `GET /pipelines/:id` and `/pipelines/:id/jobs` (every page); on success the result artifact (`/jobs/:id/artifacts/*path`), on failure the end of the failing job's `/trace`; an ended pipeline's record is kept and never read again |
//! | respond | accept: `POST /jobs/:id/play` with the answers as `job_inputs` (or `job_variables_attributes`); decline: `PUT /pipelines/:id/metadata` (the name records who declined), then `POST /pipelines/:id/cancel` |
//! | cancel | `POST /pipelines/:id/cancel` |
//! | list | recent pipelines whose name marks a flowgate call for the principal |
//!
//! Status mapping: created, waiting_for_resource, preparing, pending, scheduled -> submitted;
//! running, canceling -> working; manual -> input_required when a blocking manual job the
//! manifest names waits (otherwise working, waiting on someone in GitLab); success, skipped ->
//! completed; failed -> failed (the job and the end of its log, or the configuration errors);
//! canceled -> cancelled (failed, "declined", when flowgate declined a question); anything
//! else -> unknown.
//!
//! **Exactly-once starts without pipeline variables.** GitLab has no idempotency header, and
//! GitLab.com refuses pipeline variables on most projects
//! (`ci_pipeline_variables_minimum_override_role: no_one_allowed`), so the call's name
//! (`<tool> fg-<key>.<principal tag>`) travels as the input `key_input` and the pipeline makes it
//! its name (`workflow: name: $[[ inputs.flowgate_call ]]`). Every start first asks GitLab for the
//! pipeline of that name: a retry after a lost answer, from any server process, finds the
//! pipeline the first attempt created.

mod api;
mod config;
mod engine;
mod mapping;
mod naming;
mod policy;
mod trace;

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
            let target = GitLabTarget::from_manifest(spec)?;
            let engine = GitLabEngine::new(target)
                .map_err(|e| flowgate_core::TargetError::whole(e.to_string()))?;
            Ok(std::sync::Arc::new(engine) as std::sync::Arc<dyn flowgate_core::Engine>)
        }),
    );
}

#[cfg(feature = "testing")]
pub mod testing;
