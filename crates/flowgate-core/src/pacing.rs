//! Choosing a poll interval an engine's API quota can afford, and which calls it affords now.
//!
//! An engine's quota is a token bucket per account (Step Functions: per API action, account
//! and region; GitHub: per token; GitLab: per user), and every flowgate instance that polls
//! the account draws from it. How many instances do is the platform's choice (Lambda runs one
//! per concurrent request, Cloud Run from zero to its maximum), so no instance can be told its
//! share. A [`Pacer`] finds it from the engine's own answers, the way the AWS SDKs' adaptive
//! retry mode does: a local token bucket whose rate falls when the engine throttles a call and
//! climbs back when it stops. Instances that share an account converge on its rate between
//! them; a lone instance climbs to all of it (up to its *ceiling*: the published refill rate,
//! times [`POLL_SHARE`], times the share an operator keeps for other software).
//!
//! - *The rate.* A new pacer starts at [`START_SHARE`] of its ceiling (at least
//!   [`START_FLOOR`]) and doubles every
//!   [`SLOW_START`] until the engine first throttles it or it reaches the ceiling (an instance
//!   that joins a busy account must not take the whole bucket at once). A throttled call cuts
//!   the rate to [`BETA`] of what was being used, at most once per [`BURST`] (a burst of
//!   throttled calls is one signal). The rate then climbs along a concave curve to [`SETTLE`]
//!   of the rate that met throttling (after [`RECOVERY`]), stays there for [`HOLD`], and
//!   probes beyond it, doubling first after [`PROBE`] and then ever sooner, up to the
//!   ceiling. Settling below the rate that met throttling lets the account's own (deep) bucket
//!   fill again, so that the next instance's start is absorbed instead of throttled; probing
//!   ever faster gives a lone survivor of a large fleet its whole ceiling back within minutes,
//!   while a contended instance is throttled early in its first doubling. The instances' shares
//!   need not come out equal: what the account gives them together is what counts.
//! - *The cycle* ([`Pacer::interval`]): every execution polled in the last [`WINDOW`] is read
//!   once per cycle, so reading `n` of them at the pacer's rate takes `n / rate` seconds.
//! - *Admission by priority* ([`Priority`]): a poll's read goes only when the local bucket has
//!   a token ([`Pacer::admit`], least recently read first among the executions polled lately:
//!   each is read once per cycle, in turn, whoever polls most). A call that cannot wait (a
//!   start, an answer, a cancel, a read of an execution known to have ended: [`Pacer::spend`],
//!   [`Pacer::acquire`] with [`Priority::Urgent`]) always goes and is taken out of the same
//!   bucket, even into debt, so polling waits behind it instead of exceeding the budget; a
//!   first read of an execution the caller has nothing to show for ([`Pacer::admit_first`])
//!   may borrow up to one bucket.
//!
//! The cycle is bounded by [`MAX_INTERVAL`], so a task is never left unpolled for long; the
//! server advertises the larger of what the engine asks for and the tool's own
//! `poll_interval_ms`. Every method has an `_at` twin taking the time, so that simulations
//! and tests run on a clock of their own.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Polls older than this no longer count as "being polled".
pub const WINDOW: Duration = Duration::from_secs(120);
/// The share of the refill rate polling may use: the ceiling of a lone instance's rate (the
/// rest is for starts, answers and cancels, and for other programs on the account).
pub const POLL_SHARE: f64 = 0.8;
/// Throttled calls within this long of the last cut do not cut again.
pub const BURST: Duration = Duration::from_secs(2);
/// What a cut keeps of the rate in use (the AWS SDKs' adaptive mode keeps 0.7 too).
pub const BETA: f64 = 0.5;
/// How long after a cut the rate takes to climb back to [`SETTLE`] of the rate that was cut,
/// where it stays a while: below the rate that met throttling, so that the account's own
/// bucket fills again and absorbs the next instance's start.
pub const RECOVERY: Duration = Duration::from_secs(30);
/// The share of the rate that met throttling the rate climbs back to first.
pub const SETTLE: f64 = 0.6;
/// How long the rate stays at [`SETTLE`] before it probes for more.
pub const HOLD: Duration = Duration::from_secs(30);
/// Probing beyond [`SETTLE`] doubles the rate first after this long, then ever sooner (each
/// doubling in half the time of the one before) while calls keep going through: a contended
/// instance is throttled early in its first doubling, one left alone reaches its ceiling
/// within twice this.
pub const PROBE: Duration = Duration::from_secs(120);
/// The share of its ceiling a new pacer starts at ...
pub const START_SHARE: f64 = 0.03125;
/// ... but at least this many calls a second (up to the ceiling): a new instance lists its
/// executions once a second from the start, as one alone would.
pub const START_FLOOR: f64 = 1.0;
/// How often a pacer never throttled doubles its rate, until the ceiling.
pub const SLOW_START: Duration = Duration::from_secs(4);
/// The lowest rate, as a share of the ceiling: however many instances, each still reads now
/// and then and so learns when the others have gone.
pub const MIN_SHARE: f64 = 0.001;
/// The longest interval ever advertised.
pub const MAX_INTERVAL: Duration = Duration::from_secs(60);
/// An execution not polled for this long keeps no place in the queue of reads: one whose
/// client went away must not hold back the others.
pub const LIVE: Duration = Duration::from_secs(10);
/// How many seconds of calls the local bucket holds: small bursts, never the account's.
const BUCKET_SECONDS: f64 = 2.0;
/// Keep the bookkeeping bounded however many executions are polled.
const MAX_TRACKED: usize = 20_000;
/// The calls made in this long measure the rate in use (what a cut starts from).
const MEASURE: Duration = Duration::from_secs(10);
/// Keep the measure bounded whatever the rate.
const MAX_MEASURED: usize = 4096;

/// Who waits when the budget is short.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Priority {
    /// A call a user waits on (a start, an answer, a cancel) or a read that cannot wait: it
    /// always goes, and polling waits behind it.
    Urgent,
    /// A poll's read: it goes only when the budget has a call to spare.
    Poll,
}

/// The pacing state of one quota (one account's bucket): cheap to share behind an `Arc`.
#[derive(Debug)]
pub struct Pacer {
    /// The most calls a second this instance ever makes.
    ceiling: f64,
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

/// Where the rate is on its curve.
#[derive(Debug, Clone, Copy)]
enum Phase {
    /// Never throttled: doubling every [`SLOW_START`] since `since`.
    Starting { since: Instant },
    /// Cut at `at` from the rate `before`.
    Recovering { at: Instant, before: f64 },
}

#[derive(Debug, Default)]
struct State {
    executions: HashMap<String, Polled>,
    /// The local bucket; `None` until first used (then full).
    tokens: Option<(f64, Instant)>,
    /// `None` until first used (then starting).
    phase: Option<Phase>,
    /// The calls made lately (bounded), which measure the rate in use.
    made: VecDeque<Instant>,
    throttled: u64,
}

impl Pacer {
    /// A pacer for a quota that refills `refill_per_second` calls a second (this instance's
    /// ceiling: the operator's share of it, when other software shares the account). Its
    /// ceiling is [`POLL_SHARE`] of that.
    pub fn new(refill_per_second: f64) -> Self {
        Pacer {
            ceiling: (refill_per_second * POLL_SHARE).max(0.001),
            state: Mutex::new(State::default()),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The most calls a second this pacer ever allows.
    pub fn ceiling(&self) -> f64 {
        self.ceiling
    }

    /// The calls a second this pacer allows now.
    pub fn rate(&self) -> f64 {
        self.rate_at(Instant::now())
    }

    /// [`Pacer::rate`] at `now`.
    pub fn rate_at(&self, now: Instant) -> f64 {
        let mut s = self.state();
        rate(&mut s, self.ceiling, now)
    }

    /// The share of its ceiling this pacer allows now: about 1/N when N instances share the
    /// account, 1 alone.
    pub fn share(&self) -> f64 {
        self.rate() / self.ceiling
    }

    /// Records a poll of `execution` (it is being polled: it counts against the budget).
    pub fn polled(&self, execution: &str) {
        self.polled_at(execution, Instant::now());
    }

    /// [`Pacer::polled`] at `now`.
    pub fn polled_at(&self, execution: &str, now: Instant) {
        let mut s = self.state();
        if let Some(p) = s.executions.get_mut(execution) {
            p.polled = now;
            return;
        }
        if s.executions.len() >= MAX_TRACKED {
            s.executions
                .retain(|_, p| now.saturating_duration_since(p.polled) < WINDOW);
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

    /// Records a throttled call: the rate is cut (once per burst of them).
    pub fn throttled(&self) {
        self.throttled_at(Instant::now());
    }

    /// [`Pacer::throttled`] at `now`.
    pub fn throttled_at(&self, now: Instant) {
        let mut s = self.state();
        s.throttled += 1;
        let current = rate(&mut s, self.ceiling, now);
        if let Some(Phase::Recovering { at, .. }) = s.phase
            && now.saturating_duration_since(at) < BURST
        {
            return;
        }
        // Cut from the rate in use: a pacer allowed more than it uses (listings that run
        // once a second against a larger budget) must slow down what it does, not what it
        // could.
        refill(&mut s, self.ceiling, now);
        let used = measured(&mut s, now);
        let before = current.min(used.max(self.ceiling * MIN_SHARE / BETA));
        s.phase = Some(Phase::Recovering { at: now, before });
    }

    /// How many throttled calls this pacer has seen.
    pub fn throttled_count(&self) -> u64 {
        self.state().throttled
    }

    /// How many executions are being polled (polled within [`WINDOW`]).
    pub fn active(&self) -> usize {
        active(&self.state(), Instant::now())
    }

    /// The cycle: the least interval between reads of one execution that the rate affords
    /// for every execution being polled.
    pub fn interval(&self) -> Duration {
        self.interval_at(Instant::now())
    }

    /// [`Pacer::interval`] at `now`.
    pub fn interval_at(&self, now: Instant) -> Duration {
        let mut s = self.state();
        let rate = rate(&mut s, self.ceiling, now);
        Duration::from_secs_f64((active(&s, now) as f64 / rate).min(MAX_INTERVAL.as_secs_f64()))
    }

    /// Whether a call of `priority` may go now; an admitted call is counted as made. An
    /// urgent call always may (into debt); a poll needs a token.
    pub fn acquire(&self, priority: Priority) -> bool {
        self.acquire_at(priority, Instant::now())
    }

    /// [`Pacer::acquire`] at `now`.
    pub fn acquire_at(&self, priority: Priority, now: Instant) -> bool {
        let mut s = self.state();
        let tokens = refill(&mut s, self.ceiling, now);
        if priority == Priority::Poll && tokens < 1.0 {
            return false;
        }
        take(&mut s, self.ceiling, None, now);
        true
    }

    /// Whether `execution` may be read now: the budget has a call to spare and no execution
    /// polled lately waits longer for its read than this one (least recently read first; a
    /// never-read one is first in line). An admitted read is counted as made.
    pub fn admit(&self, execution: &str) -> bool {
        self.admit_at(execution, Instant::now())
    }

    /// [`Pacer::admit`] at `now`.
    pub fn admit_at(&self, execution: &str, now: Instant) -> bool {
        let mut s = self.state();
        let tokens = refill(&mut s, self.ceiling, now);
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
                    && now.saturating_duration_since(p.polled) < LIVE
                    && waits_longer(p.read, mine)
            })
            .count();
        if ahead as f64 >= tokens.floor() {
            return false;
        }
        take(&mut s, self.ceiling, Some(execution), now);
        true
    }

    /// Whether a first read of `execution` may go now when [`Pacer::admit`] said no: the
    /// caller has nothing at all to show for it yet, so it may take the budget up to one
    /// bucket into debt (the reads after it wait; the engine's own bucket is far deeper),
    /// never further. An admitted read is counted as made.
    pub fn admit_first(&self, execution: &str) -> bool {
        self.admit_first_at(execution, Instant::now())
    }

    /// [`Pacer::admit_first`] at `now`.
    pub fn admit_first_at(&self, execution: &str, now: Instant) -> bool {
        let mut s = self.state();
        let tokens = refill(&mut s, self.ceiling, now);
        let size = bucket_size(rate(&mut s, self.ceiling, now));
        if tokens - 1.0 < -size {
            return false;
        }
        take(&mut s, self.ceiling, Some(execution), now);
        true
    }

    /// Counts a read of `execution` that cannot wait for its turn ([`Priority::Urgent`]): it
    /// comes out of the same budget (into debt, so the reads after it wait instead of
    /// exceeding the budget).
    pub fn spend(&self, execution: &str) {
        self.spend_at(execution, Instant::now());
    }

    /// [`Pacer::spend`] at `now`.
    pub fn spend_at(&self, execution: &str, now: Instant) {
        let mut s = self.state();
        refill(&mut s, self.ceiling, now);
        take(&mut s, self.ceiling, Some(execution), now);
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
        .filter(|p| now.saturating_duration_since(p.polled) < WINDOW)
        .count()
}

/// The rate allowed at `now`: doubling from [`START_SHARE`] of the ceiling until the first
/// throttled call; after a cut, [`BETA`] of the rate cut, back to it after [`RECOVERY`]
/// along CUBIC's curve (`before * (1 + c (t - K)^3)`, `c` such that it starts at `BETA`),
/// and on beyond it; never above the ceiling nor below [`MIN_SHARE`] of it.
fn rate(s: &mut State, ceiling: f64, now: Instant) -> f64 {
    let phase = *s.phase.get_or_insert(Phase::Starting { since: now });
    let rate = match phase {
        Phase::Starting { since } => {
            let doublings =
                now.saturating_duration_since(since).as_secs_f64() / SLOW_START.as_secs_f64();
            (ceiling * START_SHARE).max(START_FLOOR) * 2f64.powf(doublings.min(64.0))
        }
        Phase::Recovering { at, before } => {
            let k = RECOVERY.as_secs_f64();
            let t = now.saturating_duration_since(at).as_secs_f64();
            if t < k {
                let d = t - k;
                before * (SETTLE + (SETTLE - BETA) / (k * k * k) * d * d * d)
            } else if t < k + HOLD.as_secs_f64() {
                before * SETTLE
            } else {
                // Each doubling takes half as long as the one before (PROBE, PROBE / 2, ...):
                // `2 P / (2 P - e)` after `e` seconds of probing, the ceiling after `2 P`.
                let p = 2.0 * PROBE.as_secs_f64();
                let e = t - k - HOLD.as_secs_f64();
                if e >= p {
                    ceiling
                } else {
                    before * SETTLE * p / (p - e)
                }
            }
        }
    };
    rate.clamp(ceiling * MIN_SHARE, ceiling)
}

fn bucket_size(rate: f64) -> f64 {
    (rate * BUCKET_SECONDS).max(1.0)
}

/// The calls a second made over the last [`MEASURE`] (or since the first, if sooner).
fn measured(s: &mut State, now: Instant) -> f64 {
    while s
        .made
        .front()
        .is_some_and(|at| now.saturating_duration_since(*at) > MEASURE)
    {
        s.made.pop_front();
    }
    let span = match (&s.phase, s.made.front()) {
        (Some(Phase::Starting { since }), _) => now.saturating_duration_since(*since).min(MEASURE),
        _ => MEASURE,
    };
    s.made.len() as f64 / span.as_secs_f64().max(1.0)
}

/// Brings the local bucket up to `now` and returns its tokens.
fn refill(s: &mut State, ceiling: f64, now: Instant) -> f64 {
    let rate = rate(s, ceiling, now);
    let size = bucket_size(rate);
    let tokens = match s.tokens {
        None => size,
        Some((tokens, at)) => {
            (tokens + now.saturating_duration_since(at).as_secs_f64() * rate).min(size)
        }
    };
    s.tokens = Some((tokens, now));
    tokens
}

/// Takes one token for a call (a read of `execution`, if it is one). Debt is bounded by
/// [`MAX_INTERVAL`] of calls: however many could not wait, the others are never held back
/// longer than that.
fn take(s: &mut State, ceiling: f64, execution: Option<&str>, now: Instant) {
    let floor = -rate(s, ceiling, now) * MAX_INTERVAL.as_secs_f64();
    if let Some((tokens, at)) = s.tokens {
        s.tokens = Some(((tokens - 1.0).max(floor), at));
    }
    if s.made.len() >= MAX_MEASURED {
        s.made.pop_front();
    }
    s.made.push_back(now);
    let Some(execution) = execution else {
        return;
    };
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

#[cfg(test)]
pub(crate) mod tests_support {
    //! A simulated account and fleet, for the convergence tests.
    use super::*;

    /// One account's bucket, as the engine keeps it.
    pub(crate) struct Account {
        tokens: f64,
        size: f64,
        refill: f64,
        at: Instant,
    }

    impl Account {
        fn new(size: f64, refill: f64, at: Instant) -> Self {
            Account {
                tokens: size,
                size,
                refill,
                at,
            }
        }

        fn take(&mut self, now: Instant) -> bool {
            self.tokens = (self.tokens
                + now.saturating_duration_since(self.at).as_secs_f64() * self.refill)
                .min(self.size);
            self.at = now;
            if self.tokens >= 1.0 {
                self.tokens -= 1.0;
                true
            } else {
                false
            }
        }
    }

    /// What a stretch of a simulation saw.
    #[derive(Debug, Default, Clone, Copy)]
    pub(crate) struct Seen {
        pub(crate) answered: u64,
        pub(crate) throttled: u64,
        pub(crate) seconds: f64,
    }

    impl Seen {
        pub(crate) fn rate(&self) -> f64 {
            self.answered as f64 / self.seconds
        }
        pub(crate) fn throttled_share(&self) -> f64 {
            self.throttled as f64 / (self.answered + self.throttled).max(1) as f64
        }
    }

    /// Instances polling one account as fast as their pacers allow, every 20 ms of a clock of
    /// their own. `phases`: (seconds, instances); `life`: each instance is replaced by a new
    /// one after a lifetime drawn from this range (seconds), as Lambda replaces them; each
    /// phase's second half is measured.
    pub(crate) fn simulate(
        account: (f64, f64),
        phases: &[(u64, usize)],
        life: Option<(u64, u64)>,
    ) -> (Vec<Seen>, Vec<f64>) {
        let t0 = Instant::now();
        let mut bank = Account::new(account.0, account.1, t0);
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut draw = |lo: u64, hi: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            lo + seed % (hi - lo + 1)
        };
        let step = secs(0.02);
        let mut live: Vec<(Pacer, Option<Instant>)> = Vec::new();
        let mut seen = Vec::new();
        let mut now = t0;
        for &(seconds, instances) in phases {
            live.truncate(instances);
            let end = now + Duration::from_secs(seconds);
            let measure_from = now + Duration::from_secs(seconds / 2);
            let mut phase = Seen::default();
            while now < end {
                for slot in live.iter_mut() {
                    if slot.1.is_some_and(|dies| now >= dies) {
                        *slot = (Pacer::new(account.1), None);
                    }
                }
                while live.len() < instances {
                    live.push((Pacer::new(account.1), None));
                }
                for (pacer, dies) in live.iter_mut() {
                    if dies.is_none() {
                        *dies = life.map(|(lo, hi)| now + Duration::from_secs(draw(lo, hi)));
                    }
                    while pacer.acquire_at(Priority::Poll, now) {
                        let ok = bank.take(now);
                        if !ok {
                            pacer.throttled_at(now);
                        }
                        if now >= measure_from {
                            if ok {
                                phase.answered += 1;
                            } else {
                                phase.throttled += 1;
                            }
                        }
                    }
                }
                now += step;
            }
            phase.seconds = (end - measure_from).as_secs_f64();
            seen.push(phase);
        }
        let rates = live.iter().map(|(p, _)| p.rate_at(now)).collect();
        (seen, rates)
    }

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }
}

#[cfg(test)]
mod tests {
    use super::tests_support::*;
    use super::*;

    /// Long enough for a new pacer to reach its ceiling (doubling from a 32nd, or 1/s).
    const WARM: Duration = Duration::from_secs(60);

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    /// A pacer first used at some instant, and an instant [`WARM`] later.
    fn warmed(refill: f64) -> (Pacer, Instant) {
        let t0 = Instant::now();
        let p = Pacer::new(refill);
        p.rate_at(t0);
        (p, t0 + WARM)
    }

    #[test]
    fn a_new_pacer_starts_low_and_doubles_up_to_its_ceiling() {
        let t0 = Instant::now();
        let p = Pacer::new(20.0);
        assert_eq!(p.ceiling(), 16.0);
        assert_eq!(p.rate_at(t0), 1.0);
        assert!((p.rate_at(t0 + SLOW_START) - 2.0).abs() < 1e-9);
        // A 32nd of a ceiling of 80/s.
        let q = Pacer::new(100.0);
        assert_eq!(q.rate_at(t0), 2.5);
        // Never above the ceiling.
        let r = Pacer::new(1.0);
        assert_eq!(r.rate_at(t0), 0.8);
        assert_eq!(p.rate_at(t0 + WARM), 16.0);
        assert_eq!(p.rate_at(t0 + Duration::from_secs(3600)), 16.0);
    }

    #[test]
    fn the_interval_grows_with_the_executions_polled() {
        let (p, now) = warmed(20.0);
        assert_eq!(p.interval_at(now), Duration::ZERO);
        for i in 0..500 {
            p.polled_at(&format!("x{i}"), now);
        }
        // 500 reads per cycle at 16/s (80% of 20/s): 31.25 s.
        let i = p.interval_at(now);
        assert_eq!(i.as_millis(), 31_250, "{i:?}");
        // Polling the same execution again costs nothing more.
        p.polled_at("x1", now);
        assert_eq!(p.interval_at(now), i);
        // A finished one no longer counts.
        p.forget("x1");
        assert!(p.interval_at(now) < i);
        // Before the rate has climbed, the cycle is as long as the rate makes it (capped).
        let t0 = Instant::now();
        let q = Pacer::new(20.0);
        q.polled_at("a", t0);
        assert_eq!(q.interval_at(t0).as_millis(), 1000, "1/s to start with");
        for i in 0..5000 {
            q.polled_at(&format!("x{i}"), t0);
        }
        assert_eq!(q.interval_at(t0), MAX_INTERVAL);
    }

    #[test]
    fn a_throttled_call_cuts_the_rate_once_per_burst_and_it_climbs_back() {
        let (p, mut now) = warmed(20.0);
        // Used at 16/s for ten seconds, then throttled.
        for _ in 0..160 {
            assert!(p.acquire_at(Priority::Urgent, now));
            now += secs(1.0 / 16.0);
        }
        for _ in 0..100 {
            p.throttled_at(now);
        }
        assert_eq!(p.throttled_count(), 100);
        let cut = p.rate_at(now);
        assert!((cut - 16.0 * BETA).abs() < 0.5, "{cut}");
        // Within the burst, no second cut: the rate goes on climbing.
        p.throttled_at(now + secs(1.9));
        assert!(p.rate_at(now + secs(1.9)) > cut);
        // Up to SETTLE of the rate cut after RECOVERY, held there, then probing for more up
        // to the ceiling.
        let settled = p.rate_at(now + RECOVERY);
        assert!((settled - 16.0 * SETTLE).abs() < 0.5, "{settled}");
        assert!((p.rate_at(now + RECOVERY + HOLD) - settled).abs() < 1e-9);
        // Half-way to the first doubling: 2 P / (2 P - P / 2) = 4/3.
        let probing = p.rate_at(now + RECOVERY + HOLD + PROBE / 2);
        assert!((probing - settled * 4.0 / 3.0).abs() < 0.01, "{probing}");
        assert_eq!(p.rate_at(now + RECOVERY + HOLD + PROBE * 2), 16.0);
    }

    #[test]
    fn a_cut_starts_from_the_rate_in_use_not_the_rate_allowed() {
        // Allowed 4/s, used once a second (a listing).
        let (p, mut now) = warmed(5.0);
        for _ in 0..10 {
            assert!(p.acquire_at(Priority::Poll, now));
            now += secs(1.0);
        }
        p.throttled_at(now);
        let cut = p.rate_at(now);
        assert!(cut < 1.0, "{cut}");
    }

    #[test]
    fn an_urgent_call_goes_while_polls_wait() {
        let (p, now) = warmed(10.0);
        // 8/s, a bucket of 16: polls drain it.
        let polls = (0..100)
            .filter(|_| p.acquire_at(Priority::Poll, now))
            .count();
        assert_eq!(polls, 16);
        assert!(!p.acquire_at(Priority::Poll, now));
        // A start (or an answer, a cancel) goes at once, and polls wait the longer for it.
        assert!(p.acquire_at(Priority::Urgent, now));
        assert!(!p.acquire_at(Priority::Poll, now + secs(0.125)));
        assert!(p.acquire_at(Priority::Poll, now + secs(0.25)));
    }

    #[test]
    fn reads_go_least_recently_read_first_within_the_budget() {
        // 1 call/s: 0.8 reads a second, a bucket of 1.6.
        let (p, mut now) = warmed(1.0);
        for x in ["a", "b", "c"] {
            p.polled_at(x, now);
        }
        assert!(p.admit_at("a", now), "never read, and a token to spare");
        assert!(!p.admit_at("b", now), "the budget is spent");
        now += secs(1.3);
        // b and c were never read: a, read a moment ago, waits for them.
        assert!(!p.admit_at("a", now));
        assert!(p.admit_at("c", now));
        now += secs(1.3);
        assert!(!p.admit_at("a", now), "b still waits longer than a");
        assert!(p.admit_at("b", now));
        now += secs(1.3);
        // Now a has waited longest.
        assert!(!p.admit_at("c", now));
        assert!(p.admit_at("a", now));
    }

    #[test]
    fn an_execution_nobody_polls_holds_nobody_back() {
        let (p, now) = warmed(1.0);
        p.polled_at("gone", now);
        p.polled_at("here", now);
        assert!(p.admit_at("here", now));
        // "gone" was never read, but its client stopped polling.
        let later = now + LIVE + secs(0.3);
        p.polled_at("here", later);
        assert!(p.admit_at("here", later));
    }

    #[test]
    fn reads_that_cannot_wait_come_out_of_the_same_budget() {
        let (p, now) = warmed(10.0);
        p.polled_at("a", now);
        // 8 reads a second, a bucket of 16: 20 urgent reads leave a debt of 4.
        for i in 0..20 {
            p.spend_at(&format!("urgent{i}"), now);
        }
        assert!(!p.admit_at("a", now));
        assert!(!p.admit_at("a", now + secs(0.4)), "still in debt");
        assert!(p.admit_at("a", now + secs(0.7)));
        // The debt is bounded: a minute of reads at most.
        for i in 0..10_000 {
            p.spend_at(&format!("more{i}"), now + secs(0.7));
        }
        let tokens = p.state().tokens.expect("bucket").0;
        assert!(tokens >= -8.0 * 60.0 - 1e-9, "{tokens}");
    }

    #[test]
    fn a_first_read_may_borrow_one_bucket_and_no_more() {
        // 8 reads a second, a bucket of 16.
        let (p, now) = warmed(10.0);
        let first: Vec<bool> = (0..40)
            .map(|i| p.admit_first_at(&format!("x{i}"), now))
            .collect();
        assert_eq!(
            first.iter().filter(|ok| **ok).count(),
            32,
            "16 tokens and 16 of debt"
        );
        assert!(
            !p.admit_at("y", now),
            "the others wait for the debt to be paid"
        );
    }

    #[test]
    fn a_lone_instance_gets_the_whole_ceiling_and_is_never_throttled() {
        // GetExecutionHistory: a bucket of 400, 20 a second.
        let (seen, _) = simulate((400.0, 20.0), &[(120, 1)], None);
        assert_eq!(seen[0].throttled, 0);
        assert!((seen[0].rate() - 16.0).abs() < 0.2, "{:?}", seen[0]);
    }

    #[test]
    fn instances_converge_on_the_account_s_rate_between_them() {
        let (seen, rates) = simulate((400.0, 20.0), &[(1200, 10)], None);
        let s = seen[0];
        assert!(s.rate() > 18.0 && s.rate() <= 20.5, "{s:?}");
        assert!(s.throttled_share() < 0.01, "{s:?}");
        // Their shares need not be equal (what the account gives them together is what
        // counts), but each keeps one.
        assert!(rates.iter().all(|r| *r > 0.1), "{rates:?}");
    }

    #[test]
    fn a_fleet_that_grows_and_shrinks_like_lambda_s_stays_within_the_account() {
        // 1 -> 40 -> 5 instances, each living two to five minutes, then replaced by a new one
        // that knows nothing.
        let (seen, _) = simulate(
            (400.0, 20.0),
            &[(300, 1), (900, 40), (900, 5)],
            Some((120, 300)),
        );
        // Alone, even restarting every few minutes: most of the ceiling, never throttled.
        assert_eq!(seen[0].throttled, 0, "{seen:?}");
        assert!(seen[0].rate() > 12.0, "{seen:?}");
        // Forty, each new one finding its share by being throttled: the account's rate, a
        // few percent throttled (each of the ten new instances a minute needs at least one
        // throttled call to learn it is not alone).
        assert!(seen[1].rate() > 19.0 && seen[1].rate() <= 20.5, "{seen:?}");
        assert!(seen[1].throttled_share() < 0.05, "{seen:?}");
        // Five: the account's rate, under 1% throttled.
        assert!(seen[2].rate() > 18.0 && seen[2].rate() <= 20.5, "{seen:?}");
        assert!(seen[2].throttled_share() < 0.01, "{seen:?}");
    }

    #[test]
    fn a_survivor_regains_the_whole_ceiling() {
        // Forty for ten minutes, then one alone: within ten minutes it has all of its ceiling
        // again (from a fortieth of the account).
        let (seen, rates) = simulate((400.0, 20.0), &[(600, 40), (600, 1)], None);
        assert_eq!(rates.len(), 1);
        assert_eq!(rates[0], 16.0, "{seen:?}");
        assert_eq!(seen[1].throttled, 0, "{seen:?}");
    }

    /// The scale the benchmark machine cannot run as processes: 500 instances on one account,
    /// each living two to five minutes. A measurement, not a check (docs/benchmarks.md):
    /// `cargo test -p flowgate-core --release --lib pacing::tests::fleet_of_500 -- --ignored --nocapture`.
    #[test]
    #[ignore = "a benchmark: prints figures"]
    fn fleet_of_500() {
        for (name, account) in [
            ("GetExecutionHistory", (400.0, 20.0)),
            ("ListExecutions", (200.0, 5.0)),
        ] {
            let (seen, rates) = simulate(
                account,
                &[(600, 1), (1800, 500), (1200, 1)],
                Some((120, 300)),
            );
            for (phase, s) in seen.iter().enumerate() {
                println!(
                    "{name} phase {}: {:.2} calls/s answered (refill {}), {:.2}% throttled",
                    phase + 1,
                    s.rate(),
                    account.1,
                    100.0 * s.throttled_share()
                );
            }
            println!("{name}: the last instance's rate {:.2}/s", rates[0]);
        }
    }
}
