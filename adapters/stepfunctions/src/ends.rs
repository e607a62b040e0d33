//! Which executions ended, learned from ListExecutions between history reads.
//!
//! The GetExecutionHistory budget (20 calls/s per account) reads 500 running executions once
//! every 31 s at best, so a poll that waits for its history read learns of an end half a
//! minute late. One ListExecutions call (statusFilter RUNNING, up to 1,000 executions a page,
//! newest first) comes out of a bucket of its own and shows every running execution of a
//! state machine. An execution this instance follows that a listing no longer shows has most
//! likely ended: it becomes *suspected*, and its next poll reads its history at once (the
//! history says how it ended, with its output). ListExecutions is eventually consistent, so
//! absence is only a hint: nothing is reported before the history confirms it, an execution
//! is suspected only once it has been known for a while ([`SETTLE`]), and one found still
//! running waits twice as long before it can be suspected again.
//!
//! A sweep runs in the background when a poll finds one due, at most one at a time per state
//! machine, and pages only as far back as the oldest execution it follows was started (or
//! [`MAX_PAGES`] pages: executions beyond them are left to their history reads).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_sfn::Client;
use aws_sdk_sfn::types::ExecutionStatus;
use chrono::{DateTime, Utc};
use flowgate_core::EngineError;
use flowgate_core::pacing::{Pacer, WINDOW};

use crate::error::classify;
use crate::mapping;

/// How long an execution must have been known before a listing's silence about it counts:
/// longer than a listing plausibly lags behind a start, so that a burst of starts does not
/// turn into a burst of reads. An execution that ends sooner than this is seen by its first
/// read (never-read executions are read first) or by the first listing after it.
pub(crate) const SETTLE: Duration = Duration::from_secs(5);
/// The longest wait before a falsely suspected execution can be suspected again.
const MAX_SETTLE: Duration = Duration::from_secs(60);
/// The most pages one sweep reads (1,000 running executions each).
pub(crate) const MAX_PAGES: usize = 10;
/// A whole sweep's deadline (each call has its own, too).
const SWEEP_DEADLINE: Duration = Duration::from_secs(20);

/// An execution this instance follows.
#[derive(Debug, Clone, Copy)]
struct Watched {
    /// When it started (from its start, its history or a listing), if known.
    start: Option<DateTime<Utc>>,
    /// The last poll.
    polled: Instant,
    /// Since when it is known to be running (first seen, or last found running after a
    /// suspicion).
    clear_since: Instant,
    /// How long after `clear_since` a listing's silence counts.
    settle: Duration,
}

#[derive(Debug, Default)]
struct State {
    watched: HashMap<String, Watched>,
    /// The running executions the last sweep listed, with their start dates.
    running: HashMap<String, DateTime<Utc>>,
    suspected: HashSet<String>,
    last_sweep: Option<Instant>,
    in_flight: bool,
    /// Pages the last sweep read.
    pages: usize,
}

/// What is known of the ends of one state machine's executions (shared by its tools).
#[derive(Debug)]
pub(crate) struct Ends {
    /// The unqualified state machine ARN, which lists the executions of all its versions.
    state_machine: String,
    state: Mutex<State>,
}

/// A sweep about to run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Plan {
    began: Instant,
    /// Page back until executions started before this; `None`: to the end.
    oldest: Option<DateTime<Utc>>,
}

/// What a sweep listed.
#[derive(Debug, Default)]
pub(crate) struct Listing {
    pub(crate) running: HashMap<String, DateTime<Utc>>,
    /// `None`: the listing reached its end (every running execution is in it); else it holds
    /// every running execution started after this.
    pub(crate) covered_after: Option<DateTime<Utc>>,
    pub(crate) pages: usize,
}

impl Ends {
    pub(crate) fn new(state_machine: &str) -> Self {
        Ends {
            state_machine: state_machine.to_owned(),
            state: Mutex::new(State::default()),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Follows `execution` (polled now), started at `start` if known.
    pub(crate) fn watch(&self, execution: &str, start: Option<DateTime<Utc>>) {
        let now = Instant::now();
        let mut s = self.state();
        let listed = s.running.get(execution).copied();
        let w = s
            .watched
            .entry(execution.to_owned())
            .or_insert_with(|| Watched {
                start: None,
                polled: now,
                clear_since: now,
                settle: SETTLE,
            });
        w.polled = now;
        if w.start.is_none() {
            w.start = start.or(listed);
        }
    }

    /// Stops following `execution` (it ended, or does not exist).
    pub(crate) fn forget(&self, execution: &str) {
        let mut s = self.state();
        s.watched.remove(execution);
        s.suspected.remove(execution);
    }

    /// Whether a listing suggests `execution` ended (its history has not said so yet).
    pub(crate) fn suspected(&self, execution: &str) -> bool {
        self.state().suspected.contains(execution)
    }

    /// A read found `execution` running after all: it is suspected again only after twice
    /// the wait.
    pub(crate) fn cleared(&self, execution: &str) {
        let mut s = self.state();
        if s.suspected.remove(execution)
            && let Some(w) = s.watched.get_mut(execution)
        {
            w.clear_since = Instant::now();
            w.settle = (w.settle * 2).min(MAX_SETTLE);
        }
    }

    /// When `execution` started, per the last listing that showed it running.
    pub(crate) fn listed_start(&self, execution: &str) -> Option<DateTime<Utc>> {
        self.state().running.get(execution).copied()
    }

    /// Claims the next sweep when one is due (`every` since the last, none running, someone
    /// to follow).
    pub(crate) fn begin(&self, every: Duration) -> Option<Plan> {
        let now = Instant::now();
        let mut s = self.state();
        if s.in_flight
            || s.last_sweep
                .is_some_and(|at| now.duration_since(at) < every)
        {
            return None;
        }
        s.watched
            .retain(|_, w| now.duration_since(w.polled) < WINDOW);
        if s.watched.is_empty() {
            return None;
        }
        let oldest = s
            .watched
            .values()
            .map(|w| w.start)
            .try_fold(None::<DateTime<Utc>>, |oldest, start| {
                start.map(|s| Some(oldest.map_or(s, |o| o.min(s))))
            })
            .flatten();
        s.in_flight = true;
        Some(Plan { began: now, oldest })
    }

    /// Takes in a sweep's listing: each followed execution it should show and does not is
    /// suspected. Returns how many pages the sweep before it read.
    pub(crate) fn finish(&self, plan: &Plan, listing: Listing) -> usize {
        let mut s = self.state();
        s.in_flight = false;
        s.last_sweep = Some(plan.began);
        let State {
            watched, suspected, ..
        } = &mut *s;
        for (execution, w) in watched.iter_mut() {
            if let Some(start) = listing.running.get(execution) {
                w.start.get_or_insert(*start);
                continue;
            }
            let covered = listing
                .covered_after
                .is_none_or(|after| w.start.is_some_and(|start| start > after));
            let settled = plan
                .began
                .checked_duration_since(w.clear_since)
                .is_some_and(|known| known >= w.settle);
            if covered && settled {
                suspected.insert(execution.clone());
            }
        }
        s.running = listing.running;
        std::mem::replace(&mut s.pages, listing.pages)
    }

    /// A sweep that failed: the next one waits its turn like any other.
    fn abort(&self, plan: &Plan) {
        let mut s = self.state();
        s.in_flight = false;
        s.last_sweep = Some(plan.began);
    }
}

/// The key a sweep's `page`th call has in the ListExecutions pacer (each page of each state
/// machine is one call per sweep).
fn page_key(state_machine: &str, page: usize) -> String {
    format!("{state_machine}#{page}")
}

/// Releases the sweep's claim however it ends (an error, the deadline, a dropped task).
struct Claim {
    ends: Arc<Ends>,
    plan: Plan,
    done: bool,
}

impl Drop for Claim {
    fn drop(&mut self) {
        if !self.done {
            self.ends.abort(&self.plan);
        }
    }
}

/// Runs the sweep `plan` claimed: lists the running executions and marks the followed ones
/// missing from the listing. Throttling slows the next sweeps down; any failure just leaves
/// the ends to the history reads until the next sweep.
pub(crate) async fn sweep(client: Client, ends: Arc<Ends>, lists: Arc<Pacer>, plan: Plan) {
    let mut claim = Claim {
        ends: ends.clone(),
        plan,
        done: false,
    };
    let what = format!(
        "ListExecutions for state machine {}",
        ends.state_machine.rsplit(':').next().unwrap_or("")
    );
    let listed = tokio::time::timeout(
        SWEEP_DEADLINE,
        list_running(&client, &ends.state_machine, &lists, plan.oldest, &what),
    )
    .await;
    match listed {
        Ok(Ok(listing)) => {
            let pages = listing.pages;
            let before = ends.finish(&plan, listing);
            claim.done = true;
            for page in pages + 1..=before {
                lists.forget(&page_key(&ends.state_machine, page));
            }
        }
        Ok(Err(EngineError::Throttled { .. })) => {
            lists.throttled();
            tracing::info!(call = %what, "throttled: ends are left to history reads until the next sweep");
        }
        Ok(Err(e)) => tracing::warn!(call = %what, error = %e, "listing running executions failed"),
        Err(_) => tracing::warn!(call = %what, "listing running executions ran out of time"),
    }
}

/// Lists the running executions of `state_machine`, newest first, back to `oldest` (or to
/// the end, at most [`MAX_PAGES`] pages).
async fn list_running(
    client: &Client,
    state_machine: &str,
    lists: &Pacer,
    oldest: Option<DateTime<Utc>>,
    what: &str,
) -> Result<Listing, EngineError> {
    let mut listing = Listing::default();
    let mut token: Option<String> = None;
    loop {
        listing.pages += 1;
        // Each page is a call out of the ListExecutions budget (measured: a throttled
        // listing cuts the rate from what listings used).
        lists.spend(&page_key(state_machine, listing.pages));
        let out = client
            .list_executions()
            .state_machine_arn(state_machine)
            .status_filter(ExecutionStatus::Running)
            .max_results(1000)
            .set_next_token(token.take())
            .send()
            .await
            .map_err(|e| classify(e, what))?;
        for e in out.executions() {
            let start = mapping::time(&e.start_date);
            listing.covered_after = Some(listing.covered_after.map_or(start, |c| c.min(start)));
            listing.running.insert(e.execution_arn.clone(), start);
        }
        token = out.next_token;
        if token.is_none() {
            listing.covered_after = None;
            return Ok(listing);
        }
        // Newest first: once a page reaches back past the oldest execution followed, every
        // followed one that still runs has been listed.
        let reached = matches!((oldest, listing.covered_after), (Some(o), Some(c)) if c < o);
        if reached || listing.pages >= MAX_PAGES {
            return Ok(listing);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + secs, 0).expect("time")
    }

    /// Makes every followed execution known for longer than it must be.
    fn settle_all(ends: &Ends) {
        let mut s = ends.state();
        for w in s.watched.values_mut() {
            w.clear_since = Instant::now().checked_sub(MAX_SETTLE * 2).expect("instant");
        }
    }

    fn listing(running: &[(&str, i64)], covered_after: Option<i64>) -> Listing {
        Listing {
            running: running
                .iter()
                .map(|(arn, start)| ((*arn).to_owned(), at(*start)))
                .collect(),
            covered_after: covered_after.map(at),
            pages: 1,
        }
    }

    #[test]
    fn a_followed_execution_missing_from_a_whole_listing_is_suspected() {
        let ends = Ends::new("sm");
        ends.watch("a", Some(at(1)));
        ends.watch("b", Some(at(2)));
        ends.watch("c", None);
        settle_all(&ends);
        let plan = ends.begin(Duration::ZERO).expect("due");
        assert_eq!(plan.oldest, None, "c's start is unknown: page to the end");
        ends.finish(&plan, listing(&[("a", 1), ("c", 3), ("other", 9)], None));
        assert!(!ends.suspected("a"));
        assert!(ends.suspected("b"));
        assert!(!ends.suspected("c"));
        assert_eq!(ends.listed_start("c"), Some(at(3)));
        // c's start came from the listing: the next sweep pages back to a's.
        let plan = ends.begin(Duration::ZERO).expect("due");
        assert_eq!(plan.oldest, Some(at(1)));
    }

    #[test]
    fn a_partial_listing_suspects_only_what_it_covers() {
        let ends = Ends::new("sm");
        ends.watch("new", Some(at(50)));
        ends.watch("old", Some(at(5)));
        settle_all(&ends);
        let plan = ends.begin(Duration::ZERO).expect("due");
        // The pages held executions started after 20 only.
        ends.finish(&plan, listing(&[("x", 30)], Some(20)));
        assert!(ends.suspected("new"));
        assert!(!ends.suspected("old"), "older than the pages reached");
    }

    #[test]
    fn silence_counts_only_once_an_execution_has_settled_and_less_after_a_false_alarm() {
        let ends = Ends::new("sm");
        ends.watch("young", Some(at(1)));
        let plan = ends.begin(Duration::ZERO).expect("due");
        ends.finish(&plan, listing(&[], None));
        assert!(
            !ends.suspected("young"),
            "just started: the listing may lag"
        );
        settle_all(&ends);
        let plan = ends.begin(Duration::ZERO).expect("due");
        ends.finish(&plan, listing(&[], None));
        assert!(ends.suspected("young"));
        // Its history says it runs: the listing lagged. The next silence does not count
        // until twice the wait has passed.
        ends.cleared("young");
        assert!(!ends.suspected("young"));
        let plan = ends.begin(Duration::ZERO).expect("due");
        ends.finish(&plan, listing(&[], None));
        assert!(!ends.suspected("young"));
        assert_eq!(ends.state().watched["young"].settle, SETTLE * 2);
        ends.forget("young");
        assert!(
            ends.begin(Duration::ZERO).is_none(),
            "nothing left to follow"
        );
    }

    #[test]
    fn one_sweep_at_a_time_and_no_sooner_than_asked() {
        let ends = Ends::new("sm");
        ends.watch("a", Some(at(1)));
        let plan = ends.begin(Duration::from_secs(1)).expect("due");
        assert!(ends.begin(Duration::ZERO).is_none(), "one is running");
        ends.abort(&plan);
        assert!(ends.begin(Duration::from_secs(60)).is_none(), "too soon");
        assert!(ends.begin(Duration::ZERO).is_some());
    }
}
