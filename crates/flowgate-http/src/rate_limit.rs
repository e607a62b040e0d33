//! Rate limits as the engine's API reports them, turned into a poll interval it can afford.
//!
//! GitHub sends `x-ratelimit-limit`, `-remaining`, `-reset` (epoch seconds) on every answer;
//! GitLab sends `RateLimit-Limit`, `-Remaining`, `-Reset` (epoch seconds) and `Retry-After`;
//! the IETF draft's `RateLimit-Reset` is a number of seconds. A quota is shared by every task
//! this instance polls with the same credentials, so the affordable interval grows with the
//! number of executions being polled and with the quota one poll spends.
//!
//! What one poll spends is measured, not assumed: the requests sent inside a
//! [`RateLimits::polling`] scope are the poll's, and a conditional request answered 304 spends
//! nothing where the engine says so (GitHub). Starts, answers and cancels are left to the
//! share of the quota polling does not use.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use flowgate_core::{EngineError, ExecutionRecord};
use reqwest::StatusCode;
use reqwest::header::HeaderMap;

/// Polls older than this no longer count as "being polled".
const WINDOW: Duration = Duration::from_secs(120);
/// The share of the remaining quota that polling may use; the rest is for starts, answers
/// and cancels.
const POLL_SHARE: f64 = 0.8;
/// Reset values above this are epoch seconds, below it a number of seconds from now.
const EPOCH_THRESHOLD: u64 = 1_000_000_000;
/// Keep the window's bookkeeping bounded however many executions are polled.
const MAX_TRACKED: usize = 10_000;

tokio::task_local! {
    /// The rate limits (by address) whose poll the current task is making.
    static POLLING: usize;
}

/// The rate-limit state one set of credentials has seen. Cheap to share behind an `Arc`.
#[derive(Debug, Default)]
pub struct RateLimits {
    inner: Mutex<State>,
    /// A conditional request answered 304 does not count against the quota (GitHub's rule).
    free_revalidation: bool,
}

#[derive(Debug, Default)]
struct State {
    remaining: Option<u64>,
    reset_at: Option<Instant>,
    /// Until when the engine asked us to stop (Retry-After, a secondary limit).
    blocked_until: Option<Instant>,
    /// When each execution was last polled.
    polled: HashMap<String, Instant>,
    /// Polls and the requests they spent, per second of the window (bounded by its length).
    seconds: VecDeque<Second>,
    /// What `Second::at` counts from.
    origin: Option<Instant>,
}

/// One second's polls and the quota they spent.
#[derive(Debug)]
struct Second {
    at: u64,
    polls: u64,
    spent: u64,
}

impl State {
    /// Adds `polls` and `spent` to the current second, dropping seconds out of the window.
    fn tally(&mut self, now: Instant, polls: u64, spent: u64) {
        let origin = *self.origin.get_or_insert(now);
        let at = now.duration_since(origin).as_secs();
        self.forget_before(at);
        match self.seconds.back_mut() {
            Some(second) if second.at == at => {
                second.polls += polls;
                second.spent += spent;
            }
            _ => self.seconds.push_back(Second { at, polls, spent }),
        }
    }

    fn forget_before(&mut self, at: u64) {
        let oldest = at.saturating_sub(WINDOW.as_secs());
        while self.seconds.front().is_some_and(|s| s.at < oldest) {
            self.seconds.pop_front();
        }
    }

    /// The requests one poll spent on average in the window; `None` before the first poll.
    fn per_poll(&mut self, now: Instant) -> Option<f64> {
        if let Some(origin) = self.origin {
            self.forget_before(now.duration_since(origin).as_secs());
        }
        let (polls, spent) = self.seconds.iter().fold((0, 0), |(p, s), second| {
            (p + second.polls, s + second.spent)
        });
        (polls > 0).then(|| spent as f64 / polls as f64)
    }
}

impl RateLimits {
    /// No limits seen yet; every answer spends quota.
    pub fn new() -> Self {
        Self::default()
    }

    /// No limits seen yet; a conditional request answered 304 Not Modified spends no quota
    /// (GitHub: "does not count against your primary rate limit").
    pub fn with_free_revalidation() -> Self {
        RateLimits {
            free_revalidation: true,
            ..Self::default()
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn address(&self) -> usize {
        std::ptr::from_ref(self) as usize
    }

    /// Records an answer's rate-limit headers (any status); a request sent inside
    /// [`RateLimits::polling`] is counted as the poll's spending.
    pub fn observe(&self, status: StatusCode, headers: &HeaderMap) {
        let now = Instant::now();
        let number = |names: &[&str]| {
            names.iter().find_map(|n| {
                headers
                    .get(*n)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.trim().parse::<u64>().ok())
            })
        };
        let polling = POLLING.try_with(|at| *at == self.address()) == Ok(true);
        let free = self.free_revalidation && status == StatusCode::NOT_MODIFIED;
        let mut s = self.state();
        if polling && !free {
            s.tally(now, 0, 1);
        }
        if let Some(remaining) = number(&["x-ratelimit-remaining", "ratelimit-remaining"]) {
            s.remaining = Some(remaining);
        }
        if let Some(reset) = number(&["x-ratelimit-reset", "ratelimit-reset"]) {
            s.reset_at = Some(now + until(reset));
        }
        if let Some(wait) = retry_after(headers) {
            s.blocked_until = Some(now + wait);
        }
    }

    /// Runs `read`, one poll of the execution `key` (however many requests it sends): the
    /// requests it sends are what the poll spends. An execution it finds ended is no longer
    /// counted among those being polled; one still running carries the interval the quota
    /// affords as its `min_poll_interval`, so every answer advertises it (as the first one
    /// does) and a client polling at the advertised pace stays inside the quota.
    pub async fn polling<F>(&self, key: &str, read: F) -> Result<ExecutionRecord, EngineError>
    where
        F: Future<Output = Result<ExecutionRecord, EngineError>>,
    {
        self.note_poll(key);
        let mut read = POLLING.scope(self.address(), read).await;
        match &mut read {
            Ok(record) if record.state.is_terminal() => {
                self.state().polled.remove(key);
            }
            Ok(record) => {
                if let Some(paced) = self.pacing() {
                    let floor = record.min_poll_interval.unwrap_or_default().max(paced);
                    record.min_poll_interval = Some(floor);
                }
            }
            Err(_) => {}
        }
        read
    }

    /// Records that the execution `key` was polled now.
    fn note_poll(&self, key: &str) {
        let now = Instant::now();
        let mut s = self.state();
        s.tally(now, 1, 0);
        if s.polled.len() >= MAX_TRACKED && !s.polled.contains_key(key) {
            s.polled.retain(|_, at| now.duration_since(*at) < WINDOW);
            if s.polled.len() >= MAX_TRACKED {
                return;
            }
        }
        s.polled.insert(key.to_owned(), now);
    }

    /// How long to wait before the next request when the engine asked for a pause, if it did.
    pub fn blocked_for(&self) -> Option<Duration> {
        let now = Instant::now();
        self.state()
            .blocked_until
            .and_then(|until| until.checked_duration_since(now))
            .filter(|d| !d.is_zero())
    }

    /// The least interval between polls of one execution that keeps every execution polled
    /// in the last two minutes within the remaining quota, or `None` when no limit was seen.
    pub fn pacing(&self) -> Option<Duration> {
        let now = Instant::now();
        let mut s = self.state();
        s.polled.retain(|_, at| now.duration_since(*at) < WINDOW);
        // Before the first poll is measured, assume it sends one request.
        let per_poll = s.per_poll(now).unwrap_or(1.0);
        let blocked = s
            .blocked_until
            .and_then(|until| until.checked_duration_since(now));
        let budget = match (s.remaining, s.reset_at) {
            (Some(remaining), Some(reset_at)) => {
                let left = reset_at
                    .checked_duration_since(now)
                    .unwrap_or(Duration::ZERO)
                    .max(Duration::from_secs(1));
                let executions = s.polled.len().max(1) as f64;
                if remaining == 0 {
                    Some(left)
                } else {
                    let affordable_per_sec = remaining as f64 * POLL_SHARE / left.as_secs_f64();
                    let needed = executions * per_poll / affordable_per_sec;
                    Some(Duration::from_secs_f64(needed.min(3600.0)))
                }
            }
            _ => None,
        };
        match (blocked, budget) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        }
    }
}

/// A reset value as a duration from now: epoch seconds or a number of seconds.
fn until(reset: u64) -> Duration {
    if reset > EPOCH_THRESHOLD {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or_default();
        Duration::from_secs(reset.saturating_sub(now))
    } else {
        Duration::from_secs(reset)
    }
}

/// The `Retry-After` header as a duration: seconds or an HTTP date.
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let value = headers
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(
        at.duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

/// When the primary limit resets, from the headers, as a duration from now.
pub(crate) fn reset_in(headers: &HeaderMap) -> Option<Duration> {
    ["x-ratelimit-reset", "ratelimit-reset"]
        .iter()
        .find_map(|n| {
            headers
                .get(*n)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(until)
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use flowgate_core::TaskState;
    use reqwest::header::{HeaderName, HeaderValue};

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(
                HeaderName::from_bytes(k.as_bytes()).expect("name"),
                HeaderValue::from_str(v).expect("value"),
            );
        }
        h
    }

    #[test]
    fn no_headers_no_opinion() {
        let r = RateLimits::new();
        r.observe(StatusCode::OK, &HeaderMap::new());
        assert_eq!(r.pacing(), None);
    }

    const OK: StatusCode = StatusCode::OK;

    /// One poll of `key` that sends `requests` (each answered with 1,000 requests left for
    /// 1,000 s) and finds the execution `found`: the record it answers.
    async fn poll_finding(
        r: &RateLimits,
        key: &str,
        requests: &[StatusCode],
        found: TaskState,
    ) -> ExecutionRecord {
        r.polling(key, async {
            for status in requests {
                r.observe(*status, &quota("1000", "1000"));
            }
            Ok(record(found))
        })
        .await
        .expect("a record")
    }

    async fn poll(r: &RateLimits, key: &str, requests: &[StatusCode]) -> ExecutionRecord {
        poll_finding(r, key, requests, TaskState::Working).await
    }

    fn record(state: TaskState) -> ExecutionRecord {
        ExecutionRecord::new(state, "x", chrono::Utc::now())
    }

    fn quota(remaining: &str, reset: &str) -> HeaderMap {
        headers(&[
            ("x-ratelimit-remaining", remaining),
            ("x-ratelimit-reset", reset),
        ])
    }

    #[tokio::test]
    async fn interval_grows_with_executions_and_shrinking_quota() {
        let r = RateLimits::new();
        // 1000 requests left for 1000 s: 0.8 request/s for polling, one request a poll.
        poll(&r, "a", &[OK]).await;
        let one = r.pacing().expect("pacing");
        assert!((1.2..1.3).contains(&one.as_secs_f64()), "{one:?}");
        for k in ["b", "c", "d"] {
            poll(&r, k, &[OK]).await;
        }
        let four = r.pacing().expect("pacing");
        assert!(
            (4.9..5.1).contains(&four.as_secs_f64()),
            "{four:?} vs {one:?}"
        );
        r.observe(OK, &quota("100", "1000"));
        assert!(r.pacing().expect("pacing") > four * 5);
    }

    #[tokio::test]
    async fn a_poll_costs_what_it_spent_not_what_the_execution_spent_before() {
        let r = RateLimits::new();
        // A start's requests are not a poll's.
        for _ in 0..50 {
            r.observe(OK, &quota("1000", "1000"));
        }
        assert_eq!(
            r.pacing().map(|d| d.as_secs_f64().round()),
            Some(1.0),
            "one request a poll assumed before the first"
        );
        // One execution polled a hundred times, two requests each: 2 / 0.8 per second.
        for _ in 0..100 {
            poll(&r, "a", &[OK, OK]).await;
        }
        let paced = r.pacing().expect("pacing").as_secs_f64();
        assert!((2.4..2.6).contains(&paced), "{paced}");
    }

    #[tokio::test]
    async fn an_ended_execution_no_longer_shares_the_quota() {
        let r = RateLimits::new();
        poll(&r, "a", &[OK]).await;
        poll(&r, "b", &[OK]).await;
        let two = r.pacing().expect("pacing").as_secs_f64();
        assert!((2.4..2.6).contains(&two), "{two}");
        let ended = poll_finding(&r, "b", &[OK], TaskState::Completed).await;
        assert_eq!(
            ended.min_poll_interval, None,
            "an ended task is not polled again"
        );
        let one = r.pacing().expect("pacing").as_secs_f64();
        assert!((1.2..1.3).contains(&one), "{one}");
    }

    #[tokio::test]
    async fn a_running_execution_carries_the_interval_the_quota_affords() {
        let r = RateLimits::new();
        let read = poll(&r, "a", &[OK]).await;
        let floor = read.min_poll_interval.expect("an interval").as_secs_f64();
        assert!((1.2..1.3).contains(&floor), "{floor}");
        // An engine's own, longer floor stands.
        let slow = r
            .polling("a", async {
                let mut record = record(TaskState::Working);
                record.min_poll_interval = Some(Duration::from_secs(30));
                Ok(record)
            })
            .await
            .expect("a record");
        assert_eq!(slow.min_poll_interval, Some(Duration::from_secs(30)));
        // Without rate-limit headers there is nothing to advertise.
        let silent = RateLimits::new();
        let read = silent
            .polling("a", async { Ok(record(TaskState::Working)) })
            .await
            .expect("a record");
        assert_eq!(read.min_poll_interval, None);
    }

    #[tokio::test]
    async fn a_revalidated_answer_is_free_only_where_the_engine_says_so() {
        let free = RateLimits::with_free_revalidation();
        let counted = RateLimits::new();
        for r in [&free, &counted] {
            poll(r, "a", &[OK, OK]).await;
            for _ in 0..9 {
                poll(r, "a", &[StatusCode::NOT_MODIFIED; 2]).await;
            }
        }
        // Ten polls spent two requests (GitHub) or twenty.
        let free = free.pacing().expect("pacing").as_secs_f64();
        let counted = counted.pacing().expect("pacing").as_secs_f64();
        assert!((0.2..0.3).contains(&free), "{free}");
        assert!((2.4..2.6).contains(&counted), "{counted}");
    }

    #[tokio::test]
    async fn another_clients_poll_is_not_this_ones() {
        let mine = RateLimits::new();
        let other = RateLimits::new();
        poll(&mine, "a", &[]).await;
        let read = other
            .polling("x", async {
                mine.observe(OK, &quota("1000", "1000"));
                Ok(record(TaskState::Working))
            })
            .await;
        assert!(read.is_ok());
        assert_eq!(mine.state().per_poll(Instant::now()), Some(0.0));
    }

    #[test]
    fn exhausted_quota_waits_for_the_reset_and_retry_after_blocks() {
        let r = RateLimits::new();
        r.observe(
            StatusCode::TOO_MANY_REQUESTS,
            &headers(&[("RateLimit-Remaining", "0"), ("RateLimit-Reset", "30")]),
        );
        let p = r.pacing().expect("pacing");
        assert!(
            p > Duration::from_secs(28) && p <= Duration::from_secs(30),
            "{p:?}"
        );
        let r = RateLimits::new();
        r.observe(StatusCode::FORBIDDEN, &headers(&[("retry-after", "7")]));
        assert!(r.blocked_for().expect("blocked") > Duration::from_secs(6));
        assert!(r.pacing().expect("pacing") > Duration::from_secs(6));
    }

    #[test]
    fn reset_as_epoch_seconds_or_delta_and_retry_after_as_date() {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("clock")
            .as_secs();
        let h = headers(&[("x-ratelimit-reset", &(now + 60).to_string())]);
        let d = reset_in(&h).expect("reset");
        assert!(
            d > Duration::from_secs(58) && d <= Duration::from_secs(60),
            "{d:?}"
        );
        let date = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(90));
        let d = retry_after(&headers(&[("retry-after", &date)])).expect("date");
        assert!(d > Duration::from_secs(80), "{d:?}");
    }
}
