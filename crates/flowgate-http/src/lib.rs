//! The shared machinery of flowgate's engines that speak REST (Google Cloud Workflows'
//! callbacks, GitHub Actions, GitLab CI), in one place, as object_store's `client/` is:
//!
//! - [`HttpClient`]: every request has a connect and a per-attempt deadline; every failure is
//!   sorted into an [`EngineError`](flowgate_core::EngineError) kind once, here: a refused
//!   connection is `Unavailable` (nothing reached the engine), a request that got no answer is
//!   `Timeout` (it may have taken effect), statuses map through
//!   [`kind_for_status`](flowgate_core::kind_for_status), and rate limits (429, a 403 that says
//!   so, `Retry-After`) are `Throttled` with the wait the engine asked for.
//! - [`RateLimits`]: what the rate-limit headers said (GitHub's `x-ratelimit-*`, GitLab's and
//!   the IETF draft's `RateLimit-*`), turned into the poll interval the engine can afford
//!   ([`Engine::pacing`](flowgate_core::Engine::pacing)).
//! - [`EtagCache`]: conditional GETs (`If-None-Match`), so an unchanged resource costs a 304,
//!   which GitHub does not count against the limit. An optimisation only: dropping it at any
//!   moment changes no answer.
//! - [`paging`]: following pages (`Link: rel="next"`, `X-Next-Page`, `nextPageToken`) to the
//!   end, bounded; and encoding path segments and query values.
//! - [`Secret`]: a token that prints as `***` in every `Debug` and log line.
//!
//! Nothing here retries: adapters classify, the server retries with backoff (one policy for
//! every engine).

mod client;
mod etag;
pub mod paging;
mod rate_limit;
mod secret;

pub use client::{Conditional, HttpClient, HttpConfig};
pub use etag::EtagCache;
pub use rate_limit::RateLimits;
pub use reqwest::{Method, RequestBuilder, Response, StatusCode, Url, header};
pub use secret::Secret;
