//! Rate limits as the engine's API reports them, turned into a poll interval it can afford.
//!
//! GitHub sends `x-ratelimit-limit`, `-remaining`, `-reset` (epoch seconds) on every answer;
//! GitLab sends `RateLimit-Limit`, `-Remaining`, `-Reset` (epoch seconds) and `Retry-After`;
//! the IETF draft's `RateLimit-Reset` is a number of seconds. A quota is shared by every task
//! this instance polls with the same credentials, so the affordable interval grows with the
//! number of executions being polled and with the requests one poll costs.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

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

/// The rate-limit state one set of credentials has seen. Cheap to share behind an `Arc`.
#[derive(Debug, Default)]
pub struct RateLimits {
    inner: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    remaining: Option<u64>,
    reset_at: Option<Instant>,
    /// Until when the engine asked us to stop (Retry-After, a secondary limit).
    blocked_until: Option<Instant>,
    /// When each execution was last polled.
    polled: HashMap<String, Instant>,
    /// Requests sent in the window, with their times (bounded).
    requests: Vec<Instant>,
}

impl RateLimits {
    /// No limits seen yet.
    pub fn new() -> Self {
        Self::default()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records the rate-limit headers of an answer (any status).
    pub fn observe(&self, headers: &HeaderMap) {
        let now = Instant::now();
        let number = |names: &[&str]| {
            names.iter().find_map(|n| {
                headers
                    .get(*n)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.trim().parse::<u64>().ok())
            })
        };
        let mut s = self.state();
        s.requests.push(now);
        if s.requests.len() > MAX_TRACKED {
            let drop = s.requests.len() - MAX_TRACKED;
            s.requests.drain(..drop);
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

    /// Records that the execution `key` was polled now (one `get`, however many requests).
    pub fn note_poll(&self, key: &str) {
        let now = Instant::now();
        let mut s = self.state();
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
        s.requests.retain(|at| now.duration_since(*at) < WINDOW);
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
                // Requests one poll costs, as seen in the window (at least one).
                let per_poll = (s.requests.len() as f64 / executions).max(1.0);
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
        r.observe(&HeaderMap::new());
        assert_eq!(r.pacing(), None);
    }

    #[test]
    fn interval_grows_with_executions_and_shrinking_quota() {
        let r = RateLimits::new();
        // 1000 requests left for 1000 s: 0.8 request/s for polling.
        r.observe(&headers(&[
            ("x-ratelimit-remaining", "1000"),
            ("x-ratelimit-reset", "1000"),
        ]));
        r.note_poll("a");
        let one = r.pacing().expect("pacing");
        assert!((1.2..1.3).contains(&one.as_secs_f64()), "{one:?}");
        for k in ["b", "c", "d"] {
            r.note_poll(k);
        }
        let four = r.pacing().expect("pacing");
        assert!(four > one * 3, "{four:?} vs {one:?}");
        r.observe(&headers(&[
            ("x-ratelimit-remaining", "100"),
            ("x-ratelimit-reset", "1000"),
        ]));
        assert!(r.pacing().expect("pacing") > four * 5);
    }

    #[test]
    fn exhausted_quota_waits_for_the_reset_and_retry_after_blocks() {
        let r = RateLimits::new();
        r.observe(&headers(&[
            ("RateLimit-Remaining", "0"),
            ("RateLimit-Reset", "30"),
        ]));
        let p = r.pacing().expect("pacing");
        assert!(
            p > Duration::from_secs(28) && p <= Duration::from_secs(30),
            "{p:?}"
        );
        let r = RateLimits::new();
        r.observe(&headers(&[("retry-after", "7")]));
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
