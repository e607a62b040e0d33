//! Starting a run exactly once per call, whatever GitHub answers.
//!
//! A dispatch names no idempotency key of its own: flowgate's key travels as the workflow
//! input `key_input` and comes back in the run's title (`run-name`), so a start first looks for
//! a run whose title carries it. Run lists lag behind a dispatch, though, so a retry after a
//! dispatch whose answer was lost, or that GitHub accepted with a bare 204, could miss the run
//! and dispatch a second one. The [`Ledger`] remembers, for this process, every key it has
//! dispatched (or may have): such a key is never dispatched again, only looked for until the
//! call's deadline.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use flowgate_core::EngineError;

use crate::KIND;

/// How long after its first dispatch a call keeps looking for its run: inside the server's
/// 20 s start deadline, so the answer is flowgate's own advice rather than a bare timeout.
pub(crate) const FIND_WITHIN: Duration = Duration::from_secs(14);
/// Between two looks at the run list (each a conditional GET: an unchanged list costs a 304).
pub(crate) const LOOK_EVERY: Duration = Duration::from_millis(700);
/// How long the ledger remembers a key: far longer than any retry of one call.
const REMEMBER: Duration = Duration::from_secs(3600);
/// The most keys remembered (the oldest go first).
const CAPACITY: usize = 10_000;

/// What this process knows of a key it dispatched.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Dispatch {
    /// When the first dispatch of the key was sent.
    pub sent: Instant,
    /// The run's id, once known (GitHub named it, or a look found it).
    pub run_id: Option<u64>,
    /// The run, once read.
    pub run: Option<(u64, DateTime<Utc>)>,
    /// Whether GitHub certainly accepted it (an answer came) or may have (the answer was lost).
    pub accepted: bool,
}

impl Dispatch {
    /// Until when the call keeps looking for its run.
    pub(crate) fn look_until(&self) -> Instant {
        self.sent + FIND_WITHIN
    }
}

/// The keys this process has dispatched.
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    keys: Mutex<HashMap<String, Dispatch>>,
}

impl Ledger {
    fn keys(&self) -> std::sync::MutexGuard<'_, HashMap<String, Dispatch>> {
        self.keys.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What is known of `key`, if it was dispatched.
    pub(crate) fn get(&self, key: &str) -> Option<Dispatch> {
        self.keys().get(key).copied()
    }

    /// Records that `key` is about to be dispatched (before the request leaves: an answer lost
    /// on the way back must still count).
    pub(crate) fn sending(&self, key: &str) {
        let mut keys = self.keys();
        keys.retain(|_, d| d.sent.elapsed() < REMEMBER);
        if keys.len() >= CAPACITY
            && let Some(oldest) = keys
                .iter()
                .min_by_key(|(_, d)| d.sent)
                .map(|(k, _)| k.clone())
        {
            keys.remove(&oldest);
        }
        keys.insert(
            key.to_owned(),
            Dispatch {
                sent: Instant::now(),
                run_id: None,
                run: None,
                accepted: false,
            },
        );
    }

    /// GitHub answered the dispatch: with the run's id, or a bare 204 (`None`).
    pub(crate) fn accepted(&self, key: &str, run_id: Option<u64>) {
        if let Some(d) = self.keys().get_mut(key) {
            d.accepted = true;
            d.run_id = run_id.or(d.run_id);
        }
    }

    /// The run of `key` was found (or read).
    pub(crate) fn found(&self, key: &str, run: (u64, DateTime<Utc>)) {
        if let Some(d) = self.keys().get_mut(key) {
            d.run_id = Some(run.0);
            d.run = Some(run);
        }
    }

    /// The dispatch certainly did not happen (refused, or never sent): the key may be
    /// dispatched again.
    pub(crate) fn not_sent(&self, key: &str) {
        self.keys().remove(key);
    }
}

/// Whether a failed dispatch may still have started a run: its answer was lost (a timeout, a
/// connection closed after sending) or GitHub failed on its side after receiving it (a 5xx).
/// A connection never made, a throttle, or a refusal (4xx) started nothing.
pub(crate) fn may_have_started(e: &EngineError) -> bool {
    match e {
        EngineError::Timeout { .. } => true,
        // flowgate-http gives a transport failure (nothing sent) its cause, a 5xx none.
        EngineError::Unavailable { source, .. } => source.is_none(),
        _ => false,
    }
}

/// The answer when the run of a dispatched key is not listed by its deadline.
pub(crate) fn not_found_in_time(
    dispatch: &Dispatch,
    workflow: &str,
    key_input: &str,
) -> EngineError {
    let fix = format!(
        "flowgate finds a run by the call's key in the run's title: the workflow {workflow} must \
         set `run-name` with ${{{{ inputs.{key_input} }}}} in it"
    );
    if dispatch.accepted {
        EngineError::Misconfigured {
            engine: KIND,
            message: format!(
                "GitHub accepted the dispatch, but no run of it is listed after {} s. {fix} \
                 (if it does, GitHub is slow to list runs). The run may be going: look at the \
                 workflow's runs before calling again",
                FIND_WITHIN.as_secs()
            ),
        }
    } else {
        EngineError::Timeout {
            engine: KIND,
            message: format!(
                "the dispatch's answer was lost and no run of it is listed after {} s: it may \
                 not have started, or {fix}",
                FIND_WITHIN.as_secs()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_remembered_until_refused_and_its_run_once_found() {
        let ledger = Ledger::default();
        assert!(ledger.get("k").is_none());
        ledger.sending("k");
        let d = ledger.get("k").expect("remembered before the answer");
        assert!(!d.accepted && d.run.is_none());
        let at = Utc::now();
        ledger.accepted("k", Some(7));
        assert_eq!(
            ledger.get("k").map(|d| (d.run_id, d.run)),
            Some((Some(7), None))
        );
        ledger.found("k", (7, at));
        let d = ledger.get("k").expect("still remembered");
        assert!(d.accepted);
        assert_eq!(d.run, Some((7, at)));
        ledger.sending("r");
        ledger.not_sent("r");
        assert!(
            ledger.get("r").is_none(),
            "a refused dispatch may be sent again"
        );
    }

    #[test]
    fn only_lost_answers_and_server_failures_may_have_started_a_run() {
        let lost = EngineError::Timeout {
            engine: KIND,
            message: "x".into(),
        };
        let server = EngineError::Unavailable {
            engine: KIND,
            message: "HTTP 502".into(),
            source: None,
        };
        let unreachable = EngineError::unavailable(KIND, "no route", std::io::Error::other("x"));
        let refused = EngineError::InvalidInput {
            engine: KIND,
            message: "422".into(),
        };
        assert!(may_have_started(&lost) && may_have_started(&server));
        assert!(!may_have_started(&unreachable) && !may_have_started(&refused));
    }

    #[test]
    fn a_run_not_found_after_a_204_tells_how_to_fix_the_workflow() {
        let ledger = Ledger::default();
        ledger.sending("k");
        ledger.accepted("k", None);
        let e = not_found_in_time(
            &ledger.get("k").expect("known"),
            "release.yml",
            "flowgate_call",
        );
        let text = e.to_string();
        assert!(matches!(e, EngineError::Misconfigured { .. }), "{e:?}");
        assert!(
            text.contains("run-name") && text.contains("${{ inputs.flowgate_call }}"),
            "{text}"
        );
    }
}
