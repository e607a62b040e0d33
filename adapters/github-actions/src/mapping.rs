//! A run's `status` and `conclusion` as one of the seven task states, and the words shown
//! while it runs.

use flowgate_core::TaskState;

use crate::api::{Job, Run};
use crate::config::OnFailure;

/// The state of a run; `waiting_for_review` when its pending deployments are not empty.
pub(crate) fn state(run: &Run, waiting_for_review: bool, on_failure: OnFailure) -> TaskState {
    match run.status.as_deref() {
        Some("queued" | "requested" | "pending") => TaskState::Submitted,
        Some("in_progress") => TaskState::Working,
        Some("waiting") if waiting_for_review => TaskState::InputRequired,
        // Waiting on a wait timer or a concurrency group: nothing to answer.
        Some("waiting") => TaskState::Working,
        Some("completed") => match run.conclusion.as_deref() {
            Some("success" | "neutral" | "skipped") => TaskState::Completed,
            Some("failure" | "timed_out" | "startup_failure" | "action_required") => {
                match on_failure {
                    OnFailure::Failed => TaskState::Failed,
                    OnFailure::Completed => TaskState::Completed,
                }
            }
            Some("cancelled") => TaskState::Cancelled,
            // stale, or a conclusion GitHub adds later: never a guess.
            _ => TaskState::Unknown,
        },
        _ => TaskState::Unknown,
    }
}

/// Whether a completed run concluded as a failure (reported as failed, or as completed with
/// the failure in the output under `on_failure: completed`).
pub(crate) fn concluded_in_failure(run: &Run) -> bool {
    run.status.as_deref() == Some("completed")
        && matches!(
            run.conclusion.as_deref(),
            Some("failure" | "timed_out" | "startup_failure" | "action_required")
        )
}

/// The engine's own words: `in_progress`, `completed/failure`.
pub(crate) fn engine_status(run: &Run) -> String {
    match (&run.status, &run.conclusion) {
        (Some(s), Some(c)) => format!("{s}/{c}"),
        (Some(s), None) => s.clone(),
        (None, _) => "unknown".to_owned(),
    }
}

/// What is running now: `build: Run tests (step 3 of 5); deploy: waiting`.
pub(crate) fn progress(jobs: &[Job]) -> Option<String> {
    let parts: Vec<String> = jobs
        .iter()
        .filter(|j| matches!(j.status.as_deref(), Some("in_progress" | "waiting")))
        .map(|j| {
            let running = j
                .steps
                .iter()
                .position(|s| s.status.as_deref() == Some("in_progress"));
            match (j.status.as_deref(), running) {
                (Some("waiting"), _) => {
                    format!("{}: waiting for its environment's protection rules", j.name)
                }
                (_, Some(i)) => format!(
                    "{}: {} (step {} of {})",
                    j.name,
                    j.steps[i].name,
                    i + 1,
                    j.steps.len()
                ),
                _ => format!("{}: starting", j.name),
            }
        })
        .collect();
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// The first job that failed and its first failed step.
pub(crate) fn failing(jobs: &[Job]) -> Option<(&Job, Option<&str>)> {
    let job = jobs.iter().find(|j| {
        matches!(
            j.conclusion.as_deref(),
            Some("failure" | "timed_out" | "startup_failure")
        )
    })?;
    let step = job
        .steps
        .iter()
        .find(|s| s.conclusion.as_deref() == Some("failure"))
        .map(|s| s.name.as_str());
    Some((job, step))
}

/// The last `lines` lines of a job log, without GitHub's timestamp prefix.
pub(crate) fn log_tail(log: &str, lines: usize) -> String {
    let all: Vec<&str> = log.lines().collect();
    let from = all.len().saturating_sub(lines);
    all[from..]
        .iter()
        .map(|l| strip_timestamp(l))
        .collect::<Vec<_>>()
        .join("\n")
}

fn strip_timestamp(line: &str) -> &str {
    match line.split_once(' ') {
        Some((stamp, rest))
            if stamp.len() >= 20
                && stamp.ends_with('Z')
                && stamp.as_bytes().get(4) == Some(&b'-')
                && stamp.contains('T') =>
        {
            rest
        }
        _ => line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Step;

    fn run(status: &str, conclusion: Option<&str>) -> Run {
        Run {
            id: 1,
            status: Some(status.into()),
            conclusion: conclusion.map(Into::into),
            display_title: None,
            created_at: chrono::Utc::now(),
            updated_at: chrono::Utc::now(),
            html_url: None,
            triggering_actor: None,
        }
    }

    #[test]
    fn every_status_and_conclusion_has_its_state() {
        let f = OnFailure::Failed;
        for (s, c, want) in [
            ("queued", None, TaskState::Submitted),
            ("requested", None, TaskState::Submitted),
            ("pending", None, TaskState::Submitted),
            ("in_progress", None, TaskState::Working),
            ("completed", Some("success"), TaskState::Completed),
            ("completed", Some("neutral"), TaskState::Completed),
            ("completed", Some("skipped"), TaskState::Completed),
            ("completed", Some("failure"), TaskState::Failed),
            ("completed", Some("timed_out"), TaskState::Failed),
            ("completed", Some("startup_failure"), TaskState::Failed),
            ("completed", Some("action_required"), TaskState::Failed),
            ("completed", Some("cancelled"), TaskState::Cancelled),
            ("completed", Some("stale"), TaskState::Unknown),
            ("exploded", None, TaskState::Unknown),
        ] {
            assert_eq!(state(&run(s, c), false, f), want, "{s}/{c:?}");
        }
        assert_eq!(
            state(&run("waiting", None), true, f),
            TaskState::InputRequired
        );
        assert_eq!(state(&run("waiting", None), false, f), TaskState::Working);
        assert_eq!(
            state(
                &run("completed", Some("failure")),
                false,
                OnFailure::Completed
            ),
            TaskState::Completed
        );
    }

    #[test]
    fn progress_names_the_running_step_and_tails_drop_timestamps() {
        let step = |n: &str, s: &str| Step {
            name: n.into(),
            status: Some(s.into()),
            conclusion: None,
        };
        let jobs = vec![Job {
            id: 1,
            name: "build".into(),
            status: Some("in_progress".into()),
            conclusion: None,
            steps: vec![
                step("Set up job", "completed"),
                step("Compile", "in_progress"),
            ],
        }];
        assert_eq!(
            progress(&jobs).as_deref(),
            Some("build: Compile (step 2 of 2)")
        );
        let log = "2026-01-01T00:00:00.1234567Z a\n2026-01-01T00:00:01Z b\nplain";
        assert_eq!(log_tail(log, 2), "b\nplain");
    }
}
