//! What a finished run answers: its output (the result artifact's JSON, or the conclusions),
//! or its failure (a rejected deployment, the failing job and step with the log tail).
//!
//! A terminal answer is final, so nothing passing may shape it: an error while reading the
//! artifact, the reviews, the jobs or a log stays an [`EngineError`] (the task stays `working`
//! and the read is retried), and only what GitHub says for good becomes part of the answer: the
//! artifact does not exist, the file is not in it, the file is not JSON, a job has no log.

use flowgate_core::{EngineError, EngineFailure};
use serde_json::{Map, Value, json};

use crate::api::{Api, Approval, Job, Run};
use crate::config::{GhTarget, ResultArtifact};
use crate::{gates, mapping};

/// The run's output, or why there is none.
pub(crate) async fn output(
    api: &Api,
    target: &GhTarget,
    run: &Run,
    jobs: &[Job],
) -> Result<Result<Value, EngineFailure>, EngineError> {
    match &target.result_artifact {
        Some(spec) => result_artifact(api, run, spec).await,
        None => {
            let approvals = api.approvals(run.id).await?;
            Ok(Ok(summary(run, jobs, &approvals)))
        }
    }
}

async fn result_artifact(
    api: &Api,
    run: &Run,
    spec: &ResultArtifact,
) -> Result<Result<Value, EngineFailure>, EngineError> {
    let missing = |cause: String| EngineFailure {
        error: format!("ResultArtifact: {}/{}", spec.name, spec.path),
        cause: Some(cause),
    };
    let artifacts = api.artifacts(run.id, &spec.name).await?;
    let Some(artifact) = artifacts.iter().find(|a| a.name == spec.name) else {
        return Ok(Err(missing(format!(
            "the run uploaded no artifact {}",
            spec.name
        ))));
    };
    if artifact.expired {
        return Ok(Err(missing(format!(
            "the artifact {} has expired",
            spec.name
        ))));
    }
    let Some(zip) = api.artifact_zip(artifact.id).await? else {
        return Ok(Err(missing(format!(
            "the artifact {} is gone (expired or deleted)",
            spec.name
        ))));
    };
    let bytes = match crate::zip::read_entry(&zip, &spec.path) {
        Ok(bytes) => bytes,
        Err(e) => return Ok(Err(missing(e))),
    };
    Ok(serde_json::from_slice(&bytes)
        .map_err(|e| missing(format!("{} is not JSON: {e}", spec.path))))
}

/// Why a run concluded in failure: a rejected deployment (from the run's reviews), else the
/// first failing job, its failing step and the tail of its log.
pub(crate) async fn failure(
    api: &Api,
    target: &GhTarget,
    run: &Run,
    jobs: &[Job],
) -> Result<EngineFailure, EngineError> {
    let conclusion = run.conclusion.as_deref().unwrap_or("failure");
    let approvals = api.approvals(run.id).await?;
    if let Some((rejected, comment)) = gates::rejections(&approvals) {
        // A rejected job never ran: it has no steps and no log to read.
        return Ok(EngineFailure {
            error: format!("run {conclusion}: {rejected}"),
            cause: comment.map(|c| format!("the reviewer's comment: {c}")),
        });
    }
    let Some((job, step)) = mapping::failing(jobs) else {
        return Ok(EngineFailure {
            error: format!("run {conclusion}"),
            cause: None,
        });
    };
    let error = match step {
        Some(step) => format!(
            "run {conclusion}: job {:?} failed at step {step:?}",
            job.name
        ),
        None => format!("run {conclusion}: job {:?} failed", job.name),
    };
    let cause = if job.steps.is_empty() {
        Some("the job never started, so it has no log".to_owned())
    } else {
        match api.job_log(job.id).await? {
            Some(log) => Some(mapping::log_tail(&log, target.log_tail_lines)),
            None => Some("GitHub has no log of the job (expired or never written)".to_owned()),
        }
    };
    Ok(EngineFailure { error, cause })
}

/// Conclusions and reviews of a run with no result artifact.
pub(crate) fn summary(run: &Run, jobs: &[Job], approvals: &[Approval]) -> Value {
    json!({
        "run_id": run.id,
        "conclusion": run.conclusion,
        "jobs": job_conclusions(jobs),
        "reviews": approvals.iter().map(review).collect::<Vec<_>>(),
    })
}

pub(crate) fn job_conclusions(jobs: &[Job]) -> Value {
    Value::Object(
        jobs.iter()
            .map(|j| (j.name.clone(), json!(j.conclusion)))
            .collect::<Map<String, Value>>(),
    )
}

fn review(a: &Approval) -> Value {
    json!({
        "environments": a.environments.iter().filter_map(|e| e.name.clone()).collect::<Vec<_>>(),
        "state": a.state,
        "comment": a.comment,
        "user": a.user.as_ref().map(|u| u.login.clone()),
    })
}
