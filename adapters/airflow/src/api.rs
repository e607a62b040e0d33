//! The Airflow REST API (v2) calls the engine makes, through flowgate-http (deadlines, error
//! kinds, rate limits), with the bearer token Airflow's clients use.

use std::sync::Mutex;
use std::time::SystemTime;

use chrono::{DateTime, Utc};
use flowgate_core::EngineError;
use flowgate_http::{HttpClient, Method, RequestBuilder, Response, Secret};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use crate::KIND;

/// Airflow's largest page (`[api] maximum_page_limit`, 100 by default).
pub(crate) const PAGE: usize = 100;
/// Pages of task instances read at most (a run of more than this many tasks is read in part).
const MAX_PAGES: usize = 10;

/// A DAG run, as `GET /api/v2/dags/{dag}/dagRuns/{run}` (and the list) answers.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct DagRun {
    pub(crate) dag_run_id: String,
    /// queued, running, success, failed.
    pub(crate) state: String,
    #[serde(default)]
    pub(crate) queued_at: Option<DateTime<Utc>>,
    pub(crate) run_after: DateTime<Utc>,
    #[serde(default)]
    pub(crate) start_date: Option<DateTime<Utc>>,
    #[serde(default)]
    pub(crate) end_date: Option<DateTime<Utc>>,
    #[serde(default)]
    pub(crate) conf: Option<Value>,
    #[serde(default)]
    pub(crate) note: Option<String>,
}

impl DagRun {
    /// When the run was created: its queueing (Airflow sets `run_after` to the trigger time).
    pub(crate) fn created_at(&self) -> DateTime<Utc> {
        self.queued_at.unwrap_or(self.run_after).min(self.run_after)
    }
}

/// A task instance, as the run's `taskInstances` list and `hitlDetails` answer.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct TaskInstance {
    pub(crate) task_id: String,
    #[serde(default = "no_map_index")]
    pub(crate) map_index: i64,
    /// None before the scheduler has looked at it.
    #[serde(default)]
    pub(crate) state: Option<String>,
    #[serde(default)]
    pub(crate) try_number: u32,
    #[serde(default)]
    pub(crate) end_date: Option<DateTime<Utc>>,
}

fn no_map_index() -> i64 {
    -1
}

impl TaskInstance {
    pub(crate) fn state(&self) -> &str {
        self.state.as_deref().unwrap_or("none")
    }
}

/// One human-in-the-loop step (`hitlDetails`).
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct HitlDetail {
    pub(crate) options: Vec<String>,
    pub(crate) subject: String,
    #[serde(default)]
    pub(crate) body: Option<String>,
    #[serde(default)]
    pub(crate) defaults: Option<Vec<String>>,
    #[serde(default)]
    pub(crate) multiple: bool,
    /// name -> `{"value", "schema", "description", ...}` (a serialized `Param`).
    #[serde(default)]
    pub(crate) params: Map<String, Value>,
    pub(crate) created_at: DateTime<Utc>,
    #[serde(default)]
    pub(crate) responded_by_user: Option<Value>,
    #[serde(default)]
    pub(crate) chosen_options: Option<Vec<String>>,
    #[serde(default)]
    pub(crate) response_received: bool,
    pub(crate) task_instance: TaskInstance,
}

#[derive(Deserialize)]
struct HitlList {
    hitl_details: Vec<HitlDetail>,
}

#[derive(Deserialize)]
struct TaskList {
    task_instances: Vec<TaskInstance>,
    #[serde(default)]
    total_entries: usize,
}

#[derive(Deserialize)]
struct RunList {
    dag_runs: Vec<DagRun>,
}

/// The DAG itself (`GET /api/v2/dags/{dag}`).
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Dag {
    #[serde(default)]
    pub(crate) is_paused: bool,
}

#[derive(Deserialize)]
struct ImportErrors {
    import_errors: Vec<ImportError>,
}

/// A DAG file Airflow could not import.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct ImportError {
    pub(crate) filename: String,
    pub(crate) stack_trace: String,
}

/// How flowgate authenticates.
#[derive(Debug)]
pub(crate) enum Credentials {
    /// A ready token, sent as it is.
    Token(Secret),
    /// A user and password, exchanged at `/auth/token` for a token that is renewed on a 401.
    Password { username: Secret, password: Secret },
    /// Nothing configured: every call is refused, naming the variables to set.
    Missing(String),
}

/// The API of one DAG, with its credentials.
#[derive(Debug)]
pub(crate) struct Api {
    pub(crate) http: HttpClient,
    pub(crate) base_url: String,
    pub(crate) dag_url: String,
    pub(crate) credentials: Credentials,
    /// The token exchanged for the password, until Airflow refuses it.
    token: Mutex<Option<Secret>>,
}

/// The HTTP status an error of flowgate-http names (`"...: HTTP 409: ..."`).
pub(crate) fn status_of(e: &EngineError) -> Option<u16> {
    let text = e.to_string();
    let at = text.find(": HTTP ")?;
    text[at + 7..].get(..3)?.parse().ok()
}

impl Api {
    pub(crate) fn new(
        http: HttpClient,
        base_url: String,
        dag_url: String,
        credentials: Credentials,
    ) -> Self {
        Api {
            http,
            base_url,
            dag_url,
            credentials,
            token: Mutex::new(None),
        }
    }

    /// The bearer token; `renew` drops the exchanged one and asks for a new one.
    async fn token(&self, renew: bool) -> Result<String, EngineError> {
        let (username, password) = match &self.credentials {
            Credentials::Token(t) => return Ok(t.expose().to_owned()),
            Credentials::Missing(why) => {
                return Err(EngineError::Denied {
                    engine: KIND,
                    message: why.clone(),
                });
            }
            Credentials::Password { username, password } => (username, password),
        };
        {
            let mut cached = self.token.lock().unwrap_or_else(|e| e.into_inner());
            if renew {
                *cached = None;
            }
            if let Some(t) = cached.as_ref() {
                return Ok(t.expose().to_owned());
            }
        }
        #[derive(Deserialize)]
        struct Token {
            access_token: String,
        }
        let req = self
            .http
            .request(Method::POST, &format!("{}/auth/token", self.base_url))
            .json(&json!({"username": username.expose(), "password": password.expose()}));
        let token: Token = self.http.json(req, "get an API token").await?;
        let mut cached = self.token.lock().unwrap_or_else(|e| e.into_inner());
        *cached = Some(Secret::new(token.access_token.clone()));
        Ok(token.access_token)
    }

    /// Sends the request `build` makes (given the bare request), with the token; a 401 to an
    /// exchanged token (it expired, or Airflow's secret changed) renews it once.
    async fn send(
        &self,
        method: Method,
        url: &str,
        what: &str,
        build: impl Fn(RequestBuilder) -> RequestBuilder,
    ) -> Result<Response, EngineError> {
        let token = self.token(false).await?;
        let req = build(self.http.request(method.clone(), url).bearer_auth(&token));
        match self.http.send(req, what).await {
            Err(e)
                if status_of(&e) == Some(401)
                    && matches!(self.credentials, Credentials::Password { .. }) =>
            {
                let token = self.token(true).await?;
                let req = build(self.http.request(method, url).bearer_auth(&token));
                self.http.send(req, what).await
            }
            other => other,
        }
    }

    async fn json<T: DeserializeOwned>(
        &self,
        method: Method,
        url: &str,
        what: &str,
        build: impl Fn(RequestBuilder) -> RequestBuilder,
    ) -> Result<T, EngineError> {
        let response = self.send(method, url, what, build).await?;
        let bytes = response.bytes().await.map_err(|e| {
            EngineError::unavailable(KIND, format!("{what}: the answer broke off"), e)
        })?;
        self.http.decode(what, &bytes)
    }

    fn run_url(&self, run: &str) -> String {
        format!("{}/dagRuns/{run}", self.dag_url)
    }

    /// `POST /dags/{dag}/dagRuns`: a manual run named `run` with `conf`.
    pub(crate) async fn trigger(&self, run: &str, conf: &Value) -> Result<DagRun, EngineError> {
        let body = json!({"dag_run_id": run, "logical_date": null, "conf": conf});
        let url = format!("{}/dagRuns", self.dag_url);
        self.json(Method::POST, &url, "trigger DAG run", |r| r.json(&body))
            .await
    }

    pub(crate) async fn run(&self, run: &str) -> Result<DagRun, EngineError> {
        self.json(Method::GET, &self.run_url(run), "get DAG run", |r| r)
            .await
    }

    /// The newest runs of the DAG whose id starts with `prefix`, at most `limit`.
    pub(crate) async fn runs(
        &self,
        prefix: &str,
        limit: usize,
    ) -> Result<Vec<DagRun>, EngineError> {
        let url = format!(
            "{}/dagRuns?order_by=-run_after&limit={}&run_id_pattern={}%25",
            self.dag_url,
            limit.min(PAGE),
            flowgate_http::paging::encode(prefix)
        );
        let list: RunList = self.json(Method::GET, &url, "list DAG runs", |r| r).await?;
        Ok(list.dag_runs)
    }

    /// Every task instance of a run (paged by offset).
    pub(crate) async fn tasks(&self, run: &str) -> Result<Vec<TaskInstance>, EngineError> {
        let mut out = Vec::new();
        for page in 0..MAX_PAGES {
            let url = format!(
                "{}/taskInstances?limit={PAGE}&offset={}",
                self.run_url(run),
                page * PAGE
            );
            let list: TaskList = self
                .json(Method::GET, &url, "list task instances", |r| r)
                .await?;
            let n = list.task_instances.len();
            out.extend(list.task_instances);
            if n < PAGE || out.len() >= list.total_entries {
                break;
            }
        }
        Ok(out)
    }

    /// The run's human-in-the-loop steps, and Airflow's clock when it answered (its `Date`).
    pub(crate) async fn hitl(
        &self,
        run: &str,
    ) -> Result<(Vec<HitlDetail>, Option<SystemTime>), EngineError> {
        let url = format!("{}/hitlDetails", self.run_url(run));
        let what = "list human-in-the-loop details";
        let response = self.send(Method::GET, &url, what, |r| r).await?;
        let date = response
            .headers()
            .get(flowgate_http::header::DATE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| httpdate::parse_http_date(v).ok());
        let bytes = response.bytes().await.map_err(|e| {
            EngineError::unavailable(KIND, format!("{what}: the answer broke off"), e)
        })?;
        let list: HitlList = self.http.decode(what, &bytes)?;
        Ok((list.hitl_details, date))
    }

    /// `PATCH .../taskInstances/{task}/{map_index}/hitlDetails`: the answer to a step.
    pub(crate) async fn answer(
        &self,
        run: &str,
        task: &str,
        map_index: i64,
        chosen: &[String],
        params: &Map<String, Value>,
    ) -> Result<(), EngineError> {
        let url = format!(
            "{}/taskInstances/{task}/{map_index}/hitlDetails",
            self.run_url(run)
        );
        let body = json!({"chosen_options": chosen, "params_input": params});
        self.send(Method::PATCH, &url, "answer human-in-the-loop step", |r| {
            r.json(&body)
        })
        .await
        .map(|_| ())
    }

    /// The XCom `key` of a task of the run, deserialized.
    pub(crate) async fn xcom(
        &self,
        run: &str,
        task: &str,
        key: &str,
    ) -> Result<Value, EngineError> {
        let url = format!(
            "{}/taskInstances/{task}/xcomEntries/{}?deserialize=true",
            self.run_url(run),
            flowgate_http::paging::encode(key)
        );
        let entry: Value = self
            .json(Method::GET, &url, "get XCom entry", |r| r)
            .await?;
        Ok(entry.get("value").cloned().unwrap_or(Value::Null))
    }

    /// The log of one try of a task, as Airflow's structured entries.
    pub(crate) async fn log(
        &self,
        run: &str,
        task: &TaskInstance,
    ) -> Result<Vec<Value>, EngineError> {
        let url = format!(
            "{}/taskInstances/{}/logs/{}?full_content=true&map_index={}",
            self.run_url(run),
            task.task_id,
            task.try_number.max(1),
            task.map_index
        );
        let log: Value = self
            .json(Method::GET, &url, "get task log", |r| {
                r.header(flowgate_http::header::ACCEPT, "application/json")
            })
            .await?;
        Ok(match log.get("content") {
            Some(Value::Array(entries)) => entries.clone(),
            Some(Value::String(text)) => text.lines().map(|l| Value::String(l.into())).collect(),
            _ => Vec::new(),
        })
    }

    /// `PATCH /dags/{dag}/dagRuns/{run}`: marks the run failed with `note` (Airflow stops its
    /// running tasks at their next heartbeat).
    pub(crate) async fn fail_run(&self, run: &str, note: &str) -> Result<(), EngineError> {
        let body = json!({"state": "failed", "note": note});
        self.send(
            Method::PATCH,
            &self.run_url(run),
            "mark DAG run failed",
            |r| r.json(&body),
        )
        .await
        .map(|_| ())
    }

    /// The DAG's `dagrun_timeout` (an ISO 8601 duration such as `PT4S`), if it has one.
    pub(crate) async fn run_timeout(&self) -> Result<Option<String>, EngineError> {
        let url = format!("{}/details", self.dag_url);
        let details: Value = self
            .json(Method::GET, &url, "get DAG details", |r| r)
            .await?;
        Ok(details
            .get("dag_run_timeout")
            .and_then(Value::as_str)
            .map(str::to_owned))
    }

    pub(crate) async fn dag(&self) -> Result<Dag, EngineError> {
        self.json(Method::GET, &self.dag_url, "get DAG", |r| r)
            .await
    }

    /// The DAG files Airflow could not import.
    pub(crate) async fn import_errors(&self) -> Result<Vec<ImportError>, EngineError> {
        let url = format!("{}/api/v2/importErrors?limit={PAGE}", self.base_url);
        let list: ImportErrors = self
            .json(Method::GET, &url, "list import errors", |r| r)
            .await?;
        Ok(list.import_errors)
    }
}
