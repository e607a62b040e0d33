//! Property-based tests of the parsers in flowgate-core that read what clients and manifests
//! send: the task-handle opener and the template language. Every input either parses or is
//! refused with an error; nothing panics, and nothing allocates more than the input's size.
//!
//! The number of cases per property is bounded for CI; `PROPTEST_CASES=N` runs a longer
//! campaign (see "Property tests" in docs/testing.md).

mod handles;
mod templates;

/// The cases a property runs: `PROPTEST_CASES` when set, else `default` (sized so that the
/// whole suite stays within seconds on a small CI machine).
pub(crate) fn cases(default: u32) -> proptest::test_runner::Config {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default);
    proptest::test_runner::Config {
        cases,
        // Failures are reported with their shrunk input; no regression files are written
        // next to the sources by a CI run.
        failure_persistence: None,
        ..proptest::test_runner::Config::default()
    }
}
