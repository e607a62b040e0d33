//! Choosing a poll interval an engine's API quota can afford, and which reads it affords now.
//!
//! Engines whose quota is a token bucket per account (Step Functions) cannot read their
//! remaining quota from answers the way HTTP engines read rate-limit headers: they know the
//! published refill rate and see throttling when it runs out. A [`Pacer`] turns both into
//! two answers:
//!
//! - the *cycle* ([`Pacer::interval`]): every execution polled in the last [`WINDOW`] is read
//!   once per cycle, so reading `n` of them every `t` seconds costs `n / t` calls a second;
//!   the cycle keeps that within [`POLL_SHARE`] of the refill rate (the rest is for starts,
//!   answers and cancels, and for other programs on the account);
//! - *admission* ([`Pacer::admit`]): polls may come more often than the cycle (an engine that
//!   learns of ends another, cheaper way asks clients to come back sooner), so not every poll
//!   reads. A local token bucket refilled at that same share of the rate admits reads, and
//!   among the executions polled lately the least recently read go first: each is read once
//!   per cycle, in turn, whoever polls most. Reads that cannot wait ([`Pacer::spend`]: an
//!   execution known to have ended, one a client just answered) are taken out of the same
//!   bucket, even into debt, so they delay the others instead of exceeding the budget; a first
//!   read of an execution the caller has nothing to show for ([`Pacer::admit_first`]) may
//!   borrow up to one bucket;
//! - the *feedback*: a throttled call doubles a multiplier on the cycle and divides the
//!   bucket's rate by it (up to [`MAX_BACKOFF`]), at most once per [`BURST`] (a burst of
//!   throttled calls is one signal, not many); it halves again for every [`CALM`] without
//!   throttling. Other instances and other programs share the account, so the budget alone
//!   cannot be trusted.
//!
//! The cycle is bounded by [`MAX_INTERVAL`], so a task is never left unpolled for long; the
//! server advertises the larger of what the engine asks for and the tool's own
//! `poll_interval_ms`.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Polls older than this no longer count as "being polled".
pub const WINDOW: Duration = Duration::from_secs(120);
/// The share of the refill rate polling may use.
pub const POLL_SHARE: f64 = 0.8;
/// The largest multiplier throttling can put on the interval.
pub const MAX_BACKOFF: u32 = 16;
/// Throttled calls within this long of the last doubling do not double again.
pub const BURST: Duration = Duration::from_secs(2);
/// How long without throttling halves the multiplier.
pub const CALM: Duration = Duration::from_secs(20);
/// The longest interval ever advertised.
pub const MAX_INTERVAL: Duration = Duration::from_secs(60);
/// An execution not polled for this long keeps no place in the queue of reads: one whose
/// client went away must not hold back the others.
pub const LIVE: Duration = Duration::from_secs(10);
/// How many seconds of reads the local bucket holds: small bursts, never the account's.
const BUCKET_SECONDS: f64 = 2.0;
/// Keep the bookkeeping bounded however many executions are polled.
const MAX_TRACKED: usize = 20_000;

/// The pacing state of one quota (one account and region): cheap to share behind an `Arc`.
#[derive(Debug)]
pub struct Pacer {
    /// Calls a second the quota refills (this instance's part of it).
    refill_per_second: f64,
    state: Mutex<State>,
}

/// What the pacer knows of one execution.
#[derive(Debug, Clone, Copy)]
struct Polled {
    /// The last poll.
    polled: Instant,
    /// The last read (`None`: never read here, first in line).
    read: Option<Instant>,
}

#[derive(Debug, Default)]
struct State {
    executions: HashMap<String, Polled>,
    /// The local bucket of reads; `None` until first used (then full).
    tokens: Option<(f64, Instant)>,
    /// log2 of the throttling multiplier.
    backoff: u32,
    last_change: Option<Instant>,
    last_doubled: Option<Instant>,
    throttled: u64,
}

impl Pacer {
    /// A pacer for a quota that refills `refill_per_second` calls a second.
    pub fn new(refill_per_second: f64) -> Self {
        Pacer {
            refill_per_second: refill_per_second.max(0.001),
            state: Mutex::new(State::default()),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a poll of `execution` (it is being polled: it counts against the budget).
    pub fn polled(&self, execution: &str) {
        let now = Instant::now();
        let mut s = self.state();
        if let Some(p) = s.executions.get_mut(execution) {
            p.polled = now;
            return;
        }
        if s.executions.len() >= MAX_TRACKED {
            s.executions
                .retain(|_, p| now.duration_since(p.polled) < WINDOW);
            if s.executions.len() >= MAX_TRACKED {
                return;
            }
        }
        s.executions.insert(
            execution.to_owned(),
            Polled {
                polled: now,
                read: None,
            },
        );
    }

    /// Forgets `execution` (it finished: nobody will poll it again).
    pub fn forget(&self, execution: &str) {
        self.state().executions.remove(execution);
    }

    /// Records a throttled call: the interval grows and reads slow down.
    pub fn throttled(&self) {
        let now = Instant::now();
        let mut s = self.state();
        s.throttled += 1;
        calm_down(&mut s, now);
        let fresh = s
            .last_doubled
            .is_none_or(|at| now.duration_since(at) >= BURST);
        if fresh && (1u32 << s.backoff) < MAX_BACKOFF {
            refill(&mut s, self.refill_per_second, now);
            s.backoff += 1;
            s.last_doubled = Some(now);
        }
        s.last_change = Some(now);
    }

    /// How many throttled calls this pacer has seen.
    pub fn throttled_count(&self) -> u64 {
        self.state().throttled
    }

    /// How many executions are being polled (polled within [`WINDOW`]).
    pub fn active(&self) -> usize {
        let now = Instant::now();
        active(&self.state(), now)
    }

    /// The cycle: the least interval between reads of one execution that the quota affords
    /// for every execution being polled.
    pub fn interval(&self) -> Duration {
        let now = Instant::now();
        let mut s = self.state();
        calm_down(&mut s, now);
        let budget =
            Duration::from_secs_f64(active(&s, now) as f64 / (self.refill_per_second * POLL_SHARE));
        // Unthrottled, the budget alone (the tool's own interval is the floor the server
        // applies); throttled, at least a second, doubled per signal.
        let interval = if s.backoff == 0 {
            budget
        } else {
            budget.max(Duration::from_secs(1)) * (1u32 << s.backoff)
        };
        interval.min(MAX_INTERVAL)
    }

    /// Whether `execution` may be read now: the budget has a call to spare and no execution
    /// polled lately waits longer for its read than this one (least recently read first; a
    /// never-read one is first in line). An admitted read is counted as made.
    pub fn admit(&self, execution: &str) -> bool {
        let now = Instant::now();
        let mut s = self.state();
        calm_down(&mut s, now);
        let tokens = refill(&mut s, self.refill_per_second, now);
        if tokens < 1.0 {
            return false;
        }
        let mine = s.executions.get(execution).and_then(|p| p.read);
        // Reads one token each: the `tokens` executions waiting longest may go now.
        let ahead = s
            .executions
            .iter()
            .filter(|(name, p)| {
                name.as_str() != execution
                    && now.duration_since(p.polled) < LIVE
                    && waits_longer(p.read, mine)
            })
            .count();
        if ahead as f64 >= tokens.floor() {
            return false;
        }
        take(&mut s, self.refill_per_second, execution, now);
        true
    }

    /// Whether a first read of `execution` may go now when [`Pacer::admit`] said no: the
    /// caller has nothing at all to show for it yet, so it may take the budget up to one
    /// bucket into debt (the reads after it wait; AWS's own bucket is far deeper), never
    /// further. An admitted read is counted as made.
    pub fn admit_first(&self, execution: &str) -> bool {
        let now = Instant::now();
        let mut s = self.state();
        calm_down(&mut s, now);
        let tokens = refill(&mut s, self.refill_per_second, now);
        let size = (read_rate(&s, self.refill_per_second) * BUCKET_SECONDS).max(1.0);
        if tokens - 1.0 < -size {
            return false;
        }
        take(&mut s, self.refill_per_second, execution, now);
        true
    }

    /// Counts a read of `execution` that cannot wait for its turn: it comes out of the same
    /// budget (into debt, so the reads after it wait instead of exceeding the budget).
    pub fn spend(&self, execution: &str) {
        let now = Instant::now();
        let mut s = self.state();
        calm_down(&mut s, now);
        refill(&mut s, self.refill_per_second, now);
        take(&mut s, self.refill_per_second, execution, now);
    }
}

/// Whether a read at `theirs` is older than one at `mine` (never read is oldest of all).
fn waits_longer(theirs: Option<Instant>, mine: Option<Instant>) -> bool {
    match (theirs, mine) {
        (None, _) => mine.is_some(),
        (Some(_), None) => false,
        (Some(t), Some(m)) => t < m,
    }
}

fn active(s: &State, now: Instant) -> usize {
    s.executions
        .values()
        .filter(|p| now.duration_since(p.polled) < WINDOW)
        .count()
}

/// The rate the local bucket refills at: the polling share, divided by the throttling
/// multiplier.
fn read_rate(s: &State, refill_per_second: f64) -> f64 {
    refill_per_second * POLL_SHARE / f64::from(1u32 << s.backoff)
}

/// Brings the local bucket up to `now` and returns its tokens.
fn refill(s: &mut State, refill_per_second: f64, now: Instant) -> f64 {
    let rate = read_rate(s, refill_per_second);
    let size = (rate * BUCKET_SECONDS).max(1.0);
    let tokens = match s.tokens {
        None => size,
        Some((tokens, at)) => (tokens + now.duration_since(at).as_secs_f64() * rate).min(size),
    };
    s.tokens = Some((tokens, now));
    tokens
}

/// Takes one token for a read of `execution`. Debt is bounded by [`MAX_INTERVAL`] of reads:
/// however many reads could not wait, the others are never held back longer than that.
fn take(s: &mut State, refill_per_second: f64, execution: &str, now: Instant) {
    let floor = -read_rate(s, refill_per_second) * MAX_INTERVAL.as_secs_f64();
    if let Some((tokens, at)) = s.tokens {
        s.tokens = Some(((tokens - 1.0).max(floor), at));
    }
    let room = s.executions.len() < MAX_TRACKED;
    if let Some(p) = s.executions.get_mut(execution) {
        p.read = Some(now);
        p.polled = now;
    } else if room {
        s.executions.insert(
            execution.to_owned(),
            Polled {
                polled: now,
                read: Some(now),
            },
        );
    }
}

/// Halves the multiplier once for every [`CALM`] since it last changed.
fn calm_down(s: &mut State, now: Instant) {
    let Some(since) = s.last_change else {
        return;
    };
    let calm = now.duration_since(since);
    if s.backoff > 0 && calm >= CALM {
        let steps = (calm.as_secs_f64() / CALM.as_secs_f64()) as u32;
        s.backoff = s.backoff.saturating_sub(steps.max(1));
        s.last_change = Some(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interval_grows_with_the_executions_polled() {
        let p = Pacer::new(20.0);
        assert_eq!(p.interval(), Duration::ZERO);
        for i in 0..500 {
            p.polled(&format!("x{i}"));
        }
        // 500 polls per interval within 80% of 20/s: 31.25 s.
        let i = p.interval();
        assert!(
            i >= Duration::from_millis(31_000) && i <= Duration::from_millis(31_500),
            "{i:?}"
        );
        // Polling the same execution again costs nothing more.
        p.polled("x1");
        assert_eq!(p.interval(), i);
        // A finished one no longer counts.
        p.forget("x1");
        assert!(p.interval() < i);
    }

    #[test]
    fn throttling_doubles_the_interval_up_to_the_cap() {
        let p = Pacer::new(20.0);
        p.polled("a");
        let again = |p: &Pacer| {
            p.throttled();
            // The next throttle is a new signal, not part of this burst.
            p.state().last_doubled = Instant::now().checked_sub(BURST);
        };
        again(&p);
        assert_eq!(p.interval(), Duration::from_secs(2));
        again(&p);
        assert_eq!(p.interval(), Duration::from_secs(4));
        for _ in 0..10 {
            again(&p);
        }
        assert_eq!(p.interval(), Duration::from_secs(16));
        assert_eq!(p.throttled_count(), 12);
        for i in 0..5000 {
            p.polled(&format!("x{i}"));
        }
        assert_eq!(p.interval(), MAX_INTERVAL);
    }

    #[test]
    fn a_burst_of_throttled_calls_doubles_once() {
        let p = Pacer::new(20.0);
        for _ in 0..100 {
            p.throttled();
        }
        assert_eq!(p.interval(), Duration::from_secs(2));
        assert_eq!(p.throttled_count(), 100);
    }

    #[test]
    fn the_multiplier_calms_down() {
        let p = Pacer::new(20.0);
        p.throttled();
        p.state().last_doubled = None;
        p.throttled();
        {
            let mut s = p.state();
            s.last_change = Instant::now().checked_sub(CALM + Duration::from_millis(10));
        }
        assert_eq!(p.interval(), Duration::from_secs(2));
    }

    /// Moves the local bucket's clock back by `by`, as if that long had passed.
    fn later(p: &Pacer, by: Duration) {
        let mut s = p.state();
        if let Some((tokens, at)) = s.tokens {
            s.tokens = Some((tokens, at.checked_sub(by).expect("instant")));
        }
    }

    #[test]
    fn reads_go_least_recently_read_first_within_the_budget() {
        // 1 call/s: 0.8 reads a second, a bucket of 1.6.
        let p = Pacer::new(1.0);
        for x in ["a", "b", "c"] {
            p.polled(x);
        }
        assert!(p.admit("a"), "never read, and a token to spare");
        assert!(!p.admit("b"), "the budget is spent");
        later(&p, Duration::from_millis(1300));
        // b and c were never read: a, read a moment ago, waits for them.
        assert!(!p.admit("a"));
        assert!(p.admit("c"));
        later(&p, Duration::from_millis(1300));
        assert!(!p.admit("a"), "b still waits longer than a");
        assert!(p.admit("b"));
        later(&p, Duration::from_millis(1300));
        // Now a has waited longest.
        assert!(!p.admit("c"));
        assert!(p.admit("a"));
    }

    #[test]
    fn an_execution_nobody_polls_holds_nobody_back() {
        let p = Pacer::new(1.0);
        p.polled("gone");
        p.polled("here");
        assert!(p.admit("here"));
        later(&p, Duration::from_millis(1300));
        // "gone" was never read, but its client stopped polling.
        p.state().executions.get_mut("gone").expect("gone").polled =
            Instant::now().checked_sub(LIVE).expect("instant");
        assert!(p.admit("here"));
    }

    #[test]
    fn reads_that_cannot_wait_come_out_of_the_same_budget() {
        let p = Pacer::new(10.0);
        p.polled("a");
        // 8 reads a second, a bucket of 16: 20 urgent reads leave a debt of 4.
        for i in 0..20 {
            p.spend(&format!("urgent{i}"));
        }
        assert!(!p.admit("a"));
        later(&p, Duration::from_millis(400));
        assert!(!p.admit("a"), "still in debt");
        later(&p, Duration::from_millis(300));
        assert!(p.admit("a"));
        // The debt is bounded: a minute of reads at most.
        for i in 0..10_000 {
            p.spend(&format!("more{i}"));
        }
        let tokens = p.state().tokens.expect("bucket").0;
        assert!(tokens >= -8.0 * 60.0 - 1e-9, "{tokens}");
    }

    #[test]
    fn throttling_slows_the_reads_down() {
        let p = Pacer::new(10.0);
        p.polled("a");
        p.polled("b");
        assert!(p.admit("a"));
        assert!(p.admit("b"));
        // Drain the bucket, then a throttled call: the refill rate halves.
        p.state().tokens = Some((0.0, Instant::now()));
        p.throttled();
        later(&p, Duration::from_millis(200));
        // 8/s would have refilled 1.6 tokens; 4/s refills 0.8.
        assert!(!p.admit("a"));
        later(&p, Duration::from_millis(100));
        assert!(p.admit("a"));
    }

    #[test]
    fn a_first_read_may_borrow_one_bucket_and_no_more() {
        // 8 reads a second, a bucket of 16.
        let p = Pacer::new(10.0);
        let first: Vec<bool> = (0..40).map(|i| p.admit_first(&format!("x{i}"))).collect();
        assert_eq!(
            first.iter().filter(|ok| **ok).count(),
            32,
            "16 tokens and 16 of debt"
        );
        assert!(!p.admit("y"), "the others wait for the debt to be paid");
    }
}
