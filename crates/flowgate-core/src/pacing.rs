//! Choosing a poll interval an engine's API quota can afford.
//!
//! Engines whose quota is a token bucket per account (Step Functions) cannot read their
//! remaining quota from answers the way HTTP engines read rate-limit headers: they know the
//! published refill rate and see throttling when it runs out. A [`Pacer`] turns both into the
//! `pollIntervalMs` the server advertises:
//!
//! - the *budget*: every execution polled in the last [`WINDOW`] costs one call per poll, so
//!   polling `n` of them every `t` seconds costs `n / t` calls a second; the interval is chosen
//!   so that this stays within [`POLL_SHARE`] of the refill rate (the rest is for starts,
//!   answers and cancels, and for other instances);
//! - the *feedback*: a throttled call doubles a multiplier on that interval (up to
//!   [`MAX_BACKOFF`]), at most once per [`BURST`] (a burst of throttled calls is one signal,
//!   not many); it halves again for every [`CALM`] without throttling. Other instances
//!   and other programs share the account, so the budget alone cannot be trusted.
//!
//! The result is bounded by [`MAX_INTERVAL`], so a task is never left unpolled for long; the
//! server advertises the larger of it and the tool's own `poll_interval_ms`.

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
/// Keep the bookkeeping bounded however many executions are polled.
const MAX_TRACKED: usize = 20_000;

/// The pacing state of one quota (one account and region): cheap to share behind an `Arc`.
#[derive(Debug)]
pub struct Pacer {
    /// Calls a second the quota refills.
    refill_per_second: f64,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    polled: HashMap<String, Instant>,
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

    /// Records a poll of `execution` (one call against the quota).
    pub fn polled(&self, execution: &str) {
        let now = Instant::now();
        let mut s = self.state();
        if s.polled.len() >= MAX_TRACKED && !s.polled.contains_key(execution) {
            s.polled.retain(|_, at| now.duration_since(*at) < WINDOW);
            if s.polled.len() >= MAX_TRACKED {
                return;
            }
        }
        s.polled.insert(execution.to_owned(), now);
    }

    /// Forgets `execution` (it finished: nobody will poll it again).
    pub fn forget(&self, execution: &str) {
        self.state().polled.remove(execution);
    }

    /// Records a throttled call: the interval grows.
    pub fn throttled(&self) {
        let now = Instant::now();
        let mut s = self.state();
        s.throttled += 1;
        calm_down(&mut s, now);
        let fresh = s
            .last_doubled
            .is_none_or(|at| now.duration_since(at) >= BURST);
        if fresh && (1u32 << s.backoff) < MAX_BACKOFF {
            s.backoff += 1;
            s.last_doubled = Some(now);
        }
        s.last_change = Some(now);
    }

    /// How many throttled calls this pacer has seen.
    pub fn throttled_count(&self) -> u64 {
        self.state().throttled
    }

    /// The least interval between polls of one execution that the quota affords now.
    pub fn interval(&self) -> Duration {
        let now = Instant::now();
        let mut s = self.state();
        calm_down(&mut s, now);
        let active = s
            .polled
            .values()
            .filter(|at| now.duration_since(**at) < WINDOW)
            .count();
        let budget = Duration::from_secs_f64(active as f64 / (self.refill_per_second * POLL_SHARE));
        // Unthrottled, the budget alone (the tool's own interval is the floor the server
        // applies); throttled, at least a second, doubled per signal.
        let interval = if s.backoff == 0 {
            budget
        } else {
            budget.max(Duration::from_secs(1)) * (1u32 << s.backoff)
        };
        interval.min(MAX_INTERVAL)
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
}
