//! Helpers for tests against the executions-API fake (`tests/fakes/workflows`), which
//! `scripts/test` starts and names in `FLOWGATE_TEST_WORKFLOWS_URL`. A test that needs the
//! fake fails, saying how to start it, when the variable is not set: it never passes unrun.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::{Value, json};

use crate::GcwTarget;

/// The environment variable naming the fake's URL.
pub const FAKE_ENV: &str = "FLOWGATE_TEST_WORKFLOWS_URL";

/// The fake's URL.
///
/// # Panics
/// When the variable is not set, with how to start the fake.
pub fn fake_url() -> String {
    match std::env::var(FAKE_ENV) {
        Ok(url) if !url.is_empty() => url.trim_end_matches('/').to_owned(),
        _ => panic!(
            "{FAKE_ENV} is not set: run the tests with scripts/test, which starts the Workflows \
             fake, or start it yourself (python tests/fakes/workflows/fake_executions.py --port PORT \
             --workflows tests/fakes/workflows/workflows, in a venv with workflows-emulator) and set \
             {FAKE_ENV}=http://127.0.0.1:PORT"
        ),
    }
}

/// Makes `execution` read as UNAVAILABLE with `details` in its `stateError` (`None`
/// restores it), as the real API reports e.g. a revoked KMS key.
///
/// # Panics
/// When the fake cannot be reached or refuses.
pub fn make_unavailable(url: &str, execution: &str, details: Option<&str>) {
    fake_control(
        url,
        "/fake/unavailable",
        &json!({"execution": execution, "details": details}),
    );
}

/// Gives `workflow` a concurrency limit in the fake (`None` lifts it): executions beyond it
/// wait QUEUED in a backlog, with no start time, as the real service's do.
///
/// # Panics
/// When the fake cannot be reached or refuses.
pub fn set_backlog(url: &str, workflow: &str, limit: Option<u32>) {
    fake_control(
        url,
        "/fake/backlog",
        &json!({"workflow": workflow, "limit": limit}),
    );
}

/// POSTs `body` to one of the fake's test-control paths (blocking, with a deadline).
fn fake_control(url: &str, path: &str, body: &Value) {
    let authority = url
        .strip_prefix("http://")
        .unwrap_or(url)
        .split('/')
        .next()
        .unwrap_or_default();
    let mut stream = TcpStream::connect(authority).expect("connect to the Workflows fake");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("read timeout");
    let body = body.to_string();
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("write to the Workflows fake");
    let mut answer = String::new();
    stream
        .read_to_string(&mut answer)
        .expect("read from the Workflows fake");
    assert!(
        answer.starts_with("HTTP/1.1 200") || answer.starts_with("HTTP/1.0 200"),
        "the Workflows fake refused {path}: {answer}"
    );
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

/// A hook for the engine conformance suite: transient read faults (503 UNAVAILABLE) the fake
/// stages for the reads of one project's executions and callbacks.
///
/// # Panics
/// When the fake cannot be reached.
pub fn transient_read_fault(
    url: &str,
    project: &str,
) -> flowgate_core::conformance::TransientReadFault {
    let (url, project) = (url.to_owned(), project.to_owned());
    flowgate_core::conformance::TransientReadFault(std::sync::Arc::new(move |skip| {
        fake_control(
            &url,
            "/fake/read-fault",
            &json!({"project": project, "skip": skip}),
        );
    }))
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
