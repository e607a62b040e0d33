//! Helpers for tests against a real Airflow, which `scripts/test` starts
//! (`scripts/lib/airflow.sh`) and names in `FLOWGATE_TEST_AIRFLOW_URL`, with the user and
//! password of its test account in `FLOWGATE_TEST_AIRFLOW_USERNAME` and
//! `FLOWGATE_TEST_AIRFLOW_PASSWORD`. Without them the helpers fail saying how to start one:
//! never a silent skip.
//!
//! [`FaultProxy`] stands between an engine and Airflow for what Airflow alone cannot stage: a
//! read that fails the way a busy server's does (503), and a trigger whose answer is lost
//! after Airflow took it. It forwards everything else as it is.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::Response;
use flowgate_http::{HttpConfig, Secret};
use serde_json::{Value, json};

use crate::{AirflowEngine, AirflowTarget};

/// The environment variable naming the running Airflow's URL.
pub const URL_ENV: &str = "FLOWGATE_TEST_AIRFLOW_URL";
/// The environment variable naming its test user.
pub const USERNAME_ENV: &str = "FLOWGATE_TEST_AIRFLOW_USERNAME";
/// The environment variable naming the test user's password.
pub const PASSWORD_ENV: &str = "FLOWGATE_TEST_AIRFLOW_PASSWORD";

/// The Airflow scripts/test started.
#[derive(Debug, Clone)]
pub struct TestAirflow {
    /// Its base URL.
    pub url: String,
    username: String,
    password: String,
}

impl TestAirflow {
    /// The running Airflow.
    ///
    /// # Panics
    /// When the variables are missing, saying how to start one.
    pub fn get() -> Self {
        let var = |name: &str| {
            std::env::var(name).ok().filter(|v| !v.is_empty()).unwrap_or_else(|| {
                panic!(
                    "{name} is not set: these tests run against a real Airflow. Run scripts/test, or \
                     `. scripts/lib/airflow.sh && start_airflow` in a shell (it installs Airflow into \
                     .venv-airflow and exports {URL_ENV}, {USERNAME_ENV} and {PASSWORD_ENV})"
                )
            })
        };
        TestAirflow {
            url: var(URL_ENV),
            username: var(USERNAME_ENV),
            password: var(PASSWORD_ENV),
        }
    }

    /// The test user's name and password.
    pub fn credentials(&self) -> (Secret, Secret) {
        (
            Secret::new(self.username.clone()),
            Secret::new(self.password.clone()),
        )
    }

    /// A target on DAG `dag` of the Airflow at `base` (this one, or a proxy in front of it),
    /// with extra keys, for a tool whose input schema declares `name`, `day`, `service` and
    /// `seconds`.
    ///
    /// # Panics
    /// On a broken fixture.
    pub fn target_at(base: &str, dag: &str, extra: Value) -> AirflowTarget {
        let mut v = json!({"base_url": base, "dag_id": dag});
        if let (Some(m), Value::Object(e)) = (v.as_object_mut(), extra) {
            m.extend(e);
        }
        let schema = json!({"type": "object", "properties": {
            "name": {}, "day": {}, "service": {}, "seconds": {}}});
        AirflowTarget::from_config(
            v.as_object().expect("object"),
            schema.as_object().expect("object"),
        )
        .expect("target")
    }

    /// An engine on DAG `dag` of this Airflow with the test user's credentials.
    ///
    /// # Panics
    /// On a broken fixture.
    pub fn engine(&self, dag: &str, extra: Value) -> AirflowEngine {
        self.engine_at(&self.url, dag, extra)
    }

    /// As [`TestAirflow::engine`], reaching Airflow at `base` (a [`FaultProxy`]).
    ///
    /// # Panics
    /// On a broken fixture.
    pub fn engine_at(&self, base: &str, dag: &str, extra: Value) -> AirflowEngine {
        let (user, password) = self.credentials();
        AirflowEngine::with_password(
            Self::target_at(base, dag, extra),
            &HttpConfig::default(),
            user,
            password,
        )
        .expect("engine")
    }

    /// A bearer token for the test user, for tests that call Airflow themselves.
    ///
    /// # Panics
    /// When Airflow refuses.
    pub async fn token(&self) -> String {
        let answer: Value = reqwest::Client::new()
            .post(format!("{}/auth/token", self.url))
            .json(&json!({"username": self.username, "password": self.password}))
            .send()
            .await
            .expect("POST /auth/token")
            .json()
            .await
            .expect("a token");
        answer["access_token"]
            .as_str()
            .expect("access_token")
            .to_owned()
    }

    /// Calls Airflow's REST API directly (`method` on `path`, e.g. `/api/v2/dags/x`): status
    /// and JSON body.
    ///
    /// # Panics
    /// When Airflow cannot be reached.
    pub async fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let token = self.token().await;
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        let mut req = reqwest::Client::new()
            .request(method, format!("{}{path}", self.url))
            .bearer_auth(token);
        if let Some(body) = body {
            req = req.json(&body);
        }
        let response = req.send().await.expect("Airflow answers");
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }
}

#[derive(Debug)]
struct ProxyState {
    upstream: String,
    client: reqwest::Client,
    lose_next_trigger: AtomicBool,
    /// `Some(n)`: let `n` more reads through, then fail one.
    read_fault: Mutex<Option<u32>>,
    faults: AtomicU64,
    lost: AtomicU64,
    /// Answer every request 401 while its token is the one refused (a token that expired).
    refuse_token: Mutex<Option<String>>,
    /// Answer everything 503 (Airflow down).
    down: AtomicBool,
}

/// A proxy in front of Airflow that stages transient faults; stops with the test's runtime.
#[derive(Debug, Clone)]
pub struct FaultProxy {
    /// The URL to give an engine as its `base_url`.
    pub url: String,
    state: Arc<ProxyState>,
}

impl FaultProxy {
    /// A proxy to `upstream` on a free loopback port.
    ///
    /// # Panics
    /// When no port is free.
    pub async fn start(upstream: &str) -> Self {
        let state = Arc::new(ProxyState {
            upstream: upstream.trim_end_matches('/').to_owned(),
            client: reqwest::Client::new(),
            lose_next_trigger: AtomicBool::new(false),
            read_fault: Mutex::new(None),
            faults: AtomicU64::new(0),
            lost: AtomicU64::new(0),
            refuse_token: Mutex::new(None),
            down: AtomicBool::new(false),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a free port");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        let app = axum::Router::new()
            .fallback(forward)
            .with_state(state.clone());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FaultProxy { url, state }
    }

    /// How many reads it failed, and how many trigger answers it lost.
    pub fn staged(&self) -> (u64, u64) {
        (
            self.state.faults.load(Ordering::SeqCst),
            self.state.lost.load(Ordering::SeqCst),
        )
    }

    /// From now on answers 401 to every request bearing the token of the next request that
    /// bears one, as Airflow does once a token expires.
    pub fn expire_next_token(&self) {
        *self
            .state
            .refuse_token
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(String::new());
    }

    /// Takes Airflow down (every request answers 503) or brings it back.
    pub fn set_down(&self, down: bool) {
        self.state.down.store(down, Ordering::SeqCst);
    }

    /// The conformance suite's lost-answer hook: the next trigger reaches Airflow and its
    /// answer is replaced by a 502.
    pub fn lose_next_start_answer(&self) -> flowgate_core::conformance::LoseNextStartAnswer {
        let state = self.state.clone();
        flowgate_core::conformance::LoseNextStartAnswer(Arc::new(move || {
            state.lose_next_trigger.store(true, Ordering::SeqCst);
        }))
    }

    /// The conformance suite's read-fault hook: after `skip` reads (GETs) the next one answers
    /// 503 without reaching Airflow.
    pub fn transient_read_fault(&self) -> flowgate_core::conformance::TransientReadFault {
        let state = self.state.clone();
        flowgate_core::conformance::TransientReadFault(Arc::new(move |skip| {
            *state.read_fault.lock().unwrap_or_else(|e| e.into_inner()) = skip;
        }))
    }
}

fn plain(status: StatusCode, text: &str) -> Response {
    let mut r = Response::new(Body::from(json!({"detail": text}).to_string()));
    *r.status_mut() = status;
    r.headers_mut()
        .insert("content-type", HeaderValue::from_static("application/json"));
    r
}

async fn forward(State(state): State<Arc<ProxyState>>, request: Request) -> Response {
    let method = request.method().clone();
    let path = request
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_default();
    if state.down.load(Ordering::SeqCst) {
        return plain(StatusCode::SERVICE_UNAVAILABLE, "Airflow is down (staged)");
    }
    if let Some(token) = request
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
    {
        let mut refused = state.refuse_token.lock().unwrap_or_else(|e| e.into_inner());
        if refused.as_deref() == Some("") {
            *refused = Some(token.to_owned());
        }
        if refused.as_deref() == Some(token) {
            return plain(
                StatusCode::UNAUTHORIZED,
                "Invalid JWT token (staged: expired)",
            );
        }
    }
    if method == axum::http::Method::GET {
        let mut armed = state.read_fault.lock().unwrap_or_else(|e| e.into_inner());
        match *armed {
            Some(0) => {
                *armed = None;
                state.faults.fetch_add(1, Ordering::SeqCst);
                return plain(StatusCode::SERVICE_UNAVAILABLE, "staged by the fault proxy");
            }
            Some(n) => *armed = Some(n - 1),
            None => {}
        }
    }
    let lose = method == axum::http::Method::POST
        && path.ends_with("/dagRuns")
        && state.lose_next_trigger.swap(false, Ordering::SeqCst);
    let headers = request.headers().clone();
    let Ok(body) = axum::body::to_bytes(request.into_body(), 16 << 20).await else {
        return plain(StatusCode::BAD_REQUEST, "unreadable request body");
    };
    let Ok(m) = reqwest::Method::from_bytes(method.as_str().as_bytes()) else {
        return plain(StatusCode::METHOD_NOT_ALLOWED, "method");
    };
    let mut req = state
        .client
        .request(m, format!("{}{path}", state.upstream))
        .body(body.to_vec());
    for name in ["authorization", "content-type", "accept"] {
        if let Some(v) = headers.get(name).and_then(|v| v.to_str().ok()) {
            req = req.header(name, v);
        }
    }
    let Ok(answer) = req.send().await else {
        return plain(StatusCode::BAD_GATEWAY, "Airflow did not answer");
    };
    if lose {
        state.lost.fetch_add(1, Ordering::SeqCst);
        return plain(StatusCode::BAD_GATEWAY, "the answer was lost (staged)");
    }
    let status = StatusCode::from_u16(answer.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let kept: Vec<(String, String)> = ["content-type", "date"]
        .iter()
        .filter_map(|n| {
            answer
                .headers()
                .get(*n)
                .and_then(|v| v.to_str().ok())
                .map(|v| ((*n).to_owned(), v.to_owned()))
        })
        .collect();
    let bytes = answer.bytes().await.unwrap_or_default();
    let mut r = Response::new(Body::from(bytes));
    *r.status_mut() = status;
    for (n, v) in kept {
        if let (Ok(name), Ok(value)) = (
            axum::http::HeaderName::from_bytes(n.as_bytes()),
            HeaderValue::from_str(&v),
        ) {
            r.headers_mut().insert(name, value);
        }
    }
    r
}
