//! The GitHub Actions engine: a tool names a workflow, a call dispatches a run, the run is the
//! task, and an environment waiting for review is a question.
//!
//! | flowgate | GitHub REST |
//! |---|---|
//! | start | `POST .../workflows/{workflow}/dispatches` with `return_run_details` (the run id, no guessing) |
//! | get | `GET .../runs/{id}` (conditional), `.../jobs` (the running job and step), `.../pending_deployments` while waiting; at the end the result artifact or the failing job's log |
//! | respond | `POST .../runs/{id}/pending_deployments` (approve or reject, with a comment) |
//! | cancel | `POST .../cancel`, then `.../force-cancel` when the run is still going after `cancel_grace_ms` |
//! | list | `GET .../workflows/{workflow}/runs` (runs whose `run-name` carries a flowgate key) |
//!
//! Status mapping: queued, requested, pending -> submitted; in_progress -> working; waiting ->
//! input_required while a deployment awaits review (else working); completed with success,
//! neutral, skipped -> completed; failure, timed_out, startup_failure, action_required ->
//! failed (or completed, with `on_failure: completed`); cancelled -> cancelled; stale and
//! anything new -> unknown.
//!
//! **Exactly once.** The call's idempotency key travels as the workflow input `key_input`
//! (default `flowgate_call`, value `fg-<key>.<principal>`); the workflow puts it in its
//! `run-name`. Every start first looks for a run whose title carries the key (a retry after a
//! lost answer finds it), and only then dispatches.
//!
//! **Rate limits.** Every poll is a conditional GET (an unchanged run costs a 304, which GitHub
//! does not count), and [`Engine::pacing`](flowgate_core::Engine::pacing) follows
//! `x-ratelimit-remaining`/`-reset` and `retry-after`, through flowgate-http.

mod api;
mod auth;
mod config;
mod engine;
mod mapping;
mod template;
mod zip;

pub use config::{AppConfig, AppId, GhTarget, MAX_INPUTS, OnFailure, ResultArtifact};
pub use engine::GitHubActionsEngine;

use serde_json::{Value, json};

/// The engine kind manifests name: `engine: github-actions`.
pub const KIND: &str = "github-actions";

/// Registers the GitHub Actions engine under [`KIND`].
pub fn register(registry: &mut flowgate_core::Registry) {
    registry.register(
        KIND,
        Box::new(|spec| {
            let target = GhTarget::from_manifest(spec.config)?;
            if let Some((key, message)) = target.missing_credentials() {
                return Err(flowgate_core::TargetError::at(key, message));
            }
            let engine = GitHubActionsEngine::new(target)
                .map_err(|e| flowgate_core::TargetError::at("app", e.to_string()))?;
            Ok(std::sync::Arc::new(engine) as std::sync::Arc<dyn flowgate_core::Engine>)
        }),
    );
}

/// The repository permissions each target's token (or GitHub App installation) needs, per
/// repository: `actions: write` to dispatch, read and cancel runs and read artifacts and logs;
/// `deployments: write` to review environments; `contents: read` for the workflow file.
pub fn permissions(targets: &[GhTarget]) -> Value {
    let mut repos = serde_json::Map::new();
    for t in targets {
        repos.insert(
            format!("{}/{}", t.owner, t.repo),
            json!({"actions": "write", "deployments": "write", "contents": "read", "metadata": "read"}),
        );
    }
    json!({
        "note": "fine-grained token or GitHub App installation permissions, per repository",
        "repositories": repos,
    })
}

#[cfg(feature = "testing")]
pub mod testing;
