//! Helpers for tests against the GitLab API fake (`tests/fakes/gitlab/fake_gitlab.py`).
//! `scripts/test` starts it and names it in `FLOWGATE_TEST_GITLAB_URL`; without that variable
//! [`FakeGitLab::start`] starts one itself (it needs `python3` with PyYAML, or
//! `FLOWGATE_TEST_GITLAB_PYTHON`), and fails saying so when it cannot: never a silent skip.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use flowgate_http::{HttpConfig, Secret};
use serde_json::{Value, json};

use crate::{GitLabEngine, GitLabTarget};

/// The environment variable naming a running fake's URL.
pub const FAKE_ENV: &str = "FLOWGATE_TEST_GITLAB_URL";
/// The environment variable naming the command that runs gitlab-ci-local (the fake's runner):
/// `NODE SCRIPT`, as `scripts/lib/gitlab-ci-local.sh` sets it.
pub const RUNNER_ENV: &str = "FLOWGATE_TEST_GITLAB_CI_LOCAL";
/// The API token the fake accepts (scripts/test starts it with this one too).
pub const TEST_TOKEN: &str = "glpat-flowgate-fake-token";
/// The trigger token the fake accepts.
pub const TEST_TRIGGER_TOKEN: &str = "glptt-flowgate-fake-trigger";

/// A fake GitLab: the one scripts/test started, or one this process started (stopped on drop).
#[derive(Debug)]
pub struct FakeGitLab {
    /// Its base URL.
    pub url: String,
    child: Option<Child>,
}

impl FakeGitLab {
    /// The running fake, or a new one.
    ///
    /// # Panics
    /// When no fake runs and none can be started, saying how to run one.
    pub fn start() -> Self {
        if let Ok(url) = std::env::var(FAKE_ENV)
            && !url.is_empty()
        {
            return FakeGitLab { url, child: None };
        }
        Self::start_with(&[])
    }

    /// A new fake of this process's own, started with extra options (`--trace-limit N`,
    /// `--pending-seconds S`, `--pipeline-variables-role R`), stopped on drop.
    ///
    /// # Panics
    /// When it cannot be started, saying how to run one.
    pub fn start_with(options: &[&str]) -> Self {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fakes/gitlab");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        let python =
            std::env::var("FLOWGATE_TEST_GITLAB_PYTHON").unwrap_or_else(|_| "python3".into());
        let runner = std::env::var(RUNNER_ENV).unwrap_or_else(|_| {
            panic!(
                "{RUNNER_ENV} is not set: the GitLab fake runs jobs with gitlab-ci-local. Run \
                 scripts/test (it installs it into .tools/gitlab), or set {RUNNER_ENV} to \
                 \"NODE22 .../gitlab-ci-local/dist/index.js\" (or set {FAKE_ENV} to a running fake)"
            )
        });
        let child = Command::new(&python)
            .arg(root.join("fake_gitlab.py"))
            .args(["--port", &port.to_string(), "--token", TEST_TOKEN])
            .args(["--trigger-token", TEST_TRIGGER_TOKEN])
            .arg("--projects")
            .arg(root.join("projects"))
            .args(options)
            .arg("--gitlab-ci-local")
            .args(runner.split_whitespace())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start the GitLab fake with {python} ({e}): run scripts/test, or set {FAKE_ENV} to a running tests/fakes/gitlab/fake_gitlab.py")
            });
        let fake = FakeGitLab {
            url: format!("http://127.0.0.1:{port}"),
            child: Some(child),
        };
        let deadline = Instant::now() + Duration::from_secs(15);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "the GitLab fake did not listen on {port} (needs python3 with PyYAML; see its stderr above)"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        fake
    }

    /// A target on project `flowgate/<name>` of the fake, with extra keys, for a tool
    /// without templates (its input schema declares nothing).
    ///
    /// # Panics
    /// On a broken fixture.
    pub fn target(&self, name: &str, extra: Value) -> GitLabTarget {
        self.target_for(name, extra, json!({"type": "object"}))
    }

    /// A target on project `flowgate/<name>` of the fake for a tool with `input_schema`.
    ///
    /// # Panics
    /// On a broken fixture.
    pub fn target_for(&self, name: &str, extra: Value, input_schema: Value) -> GitLabTarget {
        let mut v =
            json!({"base_url": self.url, "project": format!("flowgate/{name}"), "ref": "main"});
        if let (Some(m), Value::Object(e)) = (v.as_object_mut(), extra) {
            m.extend(e);
        }
        GitLabTarget::from_config(
            v.as_object().expect("object"),
            input_schema.as_object().expect("a schema object"),
        )
        .expect("target")
    }

    /// An engine for [`FakeGitLab::target`] with the fake's token.
    ///
    /// # Panics
    /// On a broken fixture.
    pub fn engine(&self, name: &str, extra: Value) -> GitLabEngine {
        self.engine_for(name, extra, json!({"type": "object"}))
    }

    /// An engine for [`FakeGitLab::target_for`] with the fake's token.
    ///
    /// # Panics
    /// On a broken fixture.
    pub fn engine_for(&self, name: &str, extra: Value, input_schema: Value) -> GitLabEngine {
        GitLabEngine::with_token(
            self.target_for(name, extra, input_schema),
            &HttpConfig::default(),
            Some(Secret::new(TEST_TOKEN)),
        )
        .expect("engine")
    }

    /// Calls a test hook of the fake (`lose_next_create`, `throttle_next`, `fault_next`,
    /// `expire_artifacts`, `counts`).
    ///
    /// # Panics
    /// When the fake does not answer.
    pub fn hook(&self, name: &str, body: Value) -> Value {
        hook(&self.url, name, &body)
    }

    /// The requests the fake answered for project `flowgate/<name>`, by kind (`pipelines`,
    /// `pipeline`, `jobs`, `trace`, `artifacts`, `variables`, `POST pipeline`, ...).
    ///
    /// # Panics
    /// When the fake does not answer.
    pub fn requests(&self, name: &str) -> Value {
        self.hook("counts", json!({"project": format!("flowgate/{name}")}))["project_requests"]
            .clone()
    }

    /// The conformance suite's read-fault hook for projects `flowgate/<name>` (each case's
    /// own): `Some(skip)` fails the read after the next `skip` reads of each with a 503.
    pub fn transient_read_fault(
        &self,
        names: &[&str],
    ) -> flowgate_core::conformance::TransientReadFault {
        let url = self.url.clone();
        let projects: Vec<String> = names.iter().map(|n| format!("flowgate/{n}")).collect();
        flowgate_core::conformance::TransientReadFault(std::sync::Arc::new(move |skip| {
            for project in &projects {
                let body = match skip {
                    Some(skip) => json!({"project": project, "skip": skip, "fault": 503}),
                    None => json!({"project": project, "disarm": true}),
                };
                hook(&url, "fault_next", &body);
            }
        }))
    }

    /// The conformance suite's lost-answer hook for project `flowgate/<name>`.
    pub fn lose_next_start_answer(
        &self,
        name: &str,
    ) -> flowgate_core::conformance::LoseNextStartAnswer {
        let url = self.url.clone();
        let project = format!("flowgate/{name}");
        flowgate_core::conformance::LoseNextStartAnswer(std::sync::Arc::new(move || {
            hook(&url, "lose_next_create", &json!({"project": project}));
        }))
    }
}

/// Calls a test hook of the fake at `url` over a plain blocking connection (usable from any
/// thread, inside a runtime or not).
fn hook(url: &str, name: &str, body: &Value) -> Value {
    let addr = url.trim_start_matches("http://");
    let mut s = TcpStream::connect(addr).expect("connect to the fake");
    let body = body.to_string();
    let req = format!(
        "POST /__fake/{name} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).expect("write");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("read");
    assert!(
        out.starts_with("HTTP/1.1 200") || out.starts_with("HTTP/1.0 200"),
        "the fake refused hook {name}: {out}"
    );
    let json = out.split("\r\n\r\n").nth(1).unwrap_or("null");
    serde_json::from_str(json).unwrap_or(Value::Null)
}

impl Drop for FakeGitLab {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
