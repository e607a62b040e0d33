//! Property-based tests of flowgate-server's entry points, driven in process: the axum router
//! of the HTTP transport (bodies, headers, both task dialects, with and without OAuth) through
//! tower's `oneshot`, and manifests bound to engines whose targets hold templates. Every input
//! gets an answer, never a panic or a 5xx; every refusal says what is wrong.
//!
//! Case counts are bounded for CI; `PROPTEST_CASES=N` runs a longer campaign (docs/testing.md,
//! "Property tests").

mod answers;
mod http_entry;
mod manifests;

/// The cases a property runs: `PROPTEST_CASES` when set, else `default`.
pub(crate) fn cases(default: u32) -> proptest::test_runner::Config {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default);
    proptest::test_runner::Config {
        cases,
        failure_persistence: None,
        ..proptest::test_runner::Config::default()
    }
}
