//! Helpers for tests against the executions-API fake (`tests/fakes/workflows`), which
//! `scripts/test` starts and names in `FLOWGATE_TEST_WORKFLOWS_URL`. Without it a test skips
//! with a message, except under CI (`CI` set), where a missing fake is a failure.

use serde_json::{Value, json};

use crate::GcwTarget;

/// The environment variable naming the fake's URL.
pub const FAKE_ENV: &str = "FLOWGATE_TEST_WORKFLOWS_URL";

/// The fake's URL, or `None` (after saying why) when the test should skip.
///
/// # Panics
/// Under CI when the variable is missing.
pub fn fake_url() -> Option<String> {
    match std::env::var(FAKE_ENV) {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var_os("CI").is_some() => {
            panic!("{FAKE_ENV} is not set under CI: scripts/test starts the fake and sets it")
        }
        _ => {
            eprintln!("skipped: {FAKE_ENV} is not set (scripts/test starts the fake and sets it)");
            None
        }
    }
}

/// A target for one of the fake's workflows (`sleepy`, `raises`, `approval`), with extra keys.
///
/// # Panics
/// On a broken fixture.
pub fn target(url: &str, workflow: &str, extra: Value) -> GcwTarget {
    let mut v = json!({"project": "flowgate-tests", "location": "us-central1", "workflow": workflow, "endpoint": url});
    if let (Some(m), Value::Object(e)) = (v.as_object_mut(), extra) {
        m.extend(e);
    }
    GcwTarget::from_manifest(v.as_object().expect("object")).expect("target")
}
