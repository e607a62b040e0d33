//! The GitHub Actions engine: a tool names a workflow, a call dispatches a run, the run is the
//! task, and an environment waiting for a decision is a question.
//!
//! | flowgate | GitHub REST |
//! |---|---|
//! | start | `POST .../workflows/{workflow}/dispatches` with `return_run_details` (the run id, no guessing); refusals sorted by who can fix them (module `diagnose`) |
//! | get | `GET .../runs/{id}` (conditional), `.../jobs` (the running job and step), while waiting `.../pending_deployments`, `.../approvals` and the environment's protection rules (module `gates`); at the end the result artifact, the rejection or the failing job's log (module `outcome`) |
//! | respond | as a required reviewer `POST .../runs/{id}/pending_deployments`; as a GitHub App its own rule, `POST .../runs/{id}/deployment_protection_rule` |
//! | cancel | `POST .../cancel`, then `.../force-cancel` only for a step still running after `cancel_grace_ms` (cleanup steps are left to finish) |
//! | list | `GET .../workflows/{workflow}/runs` (runs whose `run-name` carries a flowgate key) |
//!
//! Status mapping: queued, requested, pending -> submitted; in_progress -> working; waiting ->
//! input_required while an environment waits for a decision (else working: a wait timer);
//! completed with success, neutral, skipped -> completed; failure, timed_out, startup_failure,
//! action_required -> failed (or completed, with `on_failure: completed`); cancelled ->
//! cancelled; stale and anything new -> unknown.
//!
//! **Exactly once.** The call's idempotency key travels as the workflow input `key_input`
//! (default `flowgate_call`, value `fg-<key>.<principal>`); the workflow puts it in its
//! `run-name`. A start first looks for a run whose title carries the key; a key this process
//! dispatched (or may have) is never dispatched again, only looked for (module `start`).
//!
//! **Self-review.** With a token, flowgate both starts the run and approves it as the token's
//! user. An environment with "Prevent self-review" on lets nobody approve a run they started,
//! so that user's approval is refused: the question and a refused answer say so and name the
//! other reviewers, and `flowgate policy` says it for every token target.
//!
//! **A terminal answer is final.** A passing fault while reading the run's parts stays an
//! `EngineError` (the task stays working); only GitHub's own word is a failure.
//!
//! **Rate limits.** Every poll is a conditional GET (an unchanged run costs a 304, which GitHub
//! does not count, and neither does flowgate), and [`Engine::pacing`](flowgate_core::Engine::pacing)
//! follows `x-ratelimit-remaining`/`-reset` and `retry-after`, through flowgate-http: a running
//! task advertises that interval as its `pollIntervalMs`.

mod api;
mod auth;
mod config;
mod diagnose;
mod engine;
mod gates;
mod mapping;
mod outcome;
mod permissions;
mod start;
mod zip;

pub use config::{AppConfig, AppId, GhTarget, MAX_INPUTS, OnFailure, ResultArtifact};
pub use engine::GitHubActionsEngine;

use serde_json::Value;

/// The engine kind manifests name: `engine: github-actions`.
pub const KIND: &str = "github-actions";

/// Registers the GitHub Actions engine under [`KIND`].
pub fn register(registry: &mut flowgate_core::Registry) {
    registry.register(
        KIND,
        Box::new(|spec| {
            let target = GhTarget::from_manifest(spec)?;
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
/// repository, each traced to the calls that need it (module `permissions`):
/// `actions: write` to dispatch and cancel runs (and read them, their jobs, reviews, artifacts
/// and logs), `deployments: write` to answer environment reviews, `metadata: read`.
pub fn permissions(targets: &[GhTarget]) -> Value {
    permissions::permissions(targets)
}

#[cfg(feature = "testing")]
pub mod testing;
