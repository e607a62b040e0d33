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

/// A hook that makes the fake's next `executions.create` take effect and lose its answer.
///
/// # Panics
/// When the fake cannot be reached.
pub fn lose_next_start_answer(url: &str) -> flowgate_core::conformance::LoseNextStartAnswer {
    let url = url.to_owned();
    flowgate_core::conformance::LoseNextStartAnswer(std::sync::Arc::new(move || {
        use std::io::{Read, Write};
        let authority = url.trim_start_matches("http://").trim_end_matches('/');
        let mut stream = std::net::TcpStream::connect(authority).expect("the fake is reachable");
        write!(
            stream,
            "POST /fake/lose-next-create HTTP/1.1\r\nHost: {authority}\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}"
        )
        .expect("write to the fake");
        let mut answer = String::new();
        stream
            .read_to_string(&mut answer)
            .expect("read the fake's answer");
        assert!(
            answer.starts_with("HTTP/1.0 200") || answer.starts_with("HTTP/1.1 200"),
            "{answer}"
        );
    }))
}
