//! Helpers for tests against moto running real state machines (`execute_state_machine` on).
//!
//! Tests find moto through `FLOWGATE_TEST_MOTO_URL` (`scripts/test` starts it and sets the
//! variable, together with static `AWS_*` test credentials). Without it a test fails, saying
//! how to run moto: it never passes without running.

use aws_sdk_sfn::Client;
use aws_sdk_sfn::config::{BehaviorVersion, Credentials, Region};
use serde_json::{Value, json};

/// The environment variable naming moto's URL.
pub const MOTO_ENV: &str = "FLOWGATE_TEST_MOTO_URL";

/// An account id moto accepts.
pub const ACCOUNT: &str = "123456789012";

/// moto's URL.
///
/// # Panics
/// When the variable is missing, saying how to run moto: a test that needs moto never passes
/// without it.
pub fn moto_url() -> String {
    match std::env::var(MOTO_ENV) {
        Ok(url) if !url.is_empty() => url,
        _ => panic!(
            "{MOTO_ENV} is not set: this test needs moto running real state machines. Run \
             scripts/test (it starts moto and sets the variable), or start moto yourself \
             (`moto_server -p 5000`, then POST {{\"stepfunctions\": {{\"execute_state_machine\": \
             true}}}} to /moto-api/config) and set {MOTO_ENV}=http://127.0.0.1:5000 with \
             AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1"
        ),
    }
}

/// A Step Functions client for setting up fixtures in moto.
pub fn admin_client(url: &str) -> Client {
    let conf = aws_sdk_sfn::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(url)
        .credentials_provider(Credentials::new(
            "test",
            "test",
            None,
            None,
            "flowgate-tests",
        ))
        .build();
    Client::from_conf(conf)
}

/// A unique suffix for fixture names, so runs and tests never collide.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{:016x}", rand::random::<u64>())
}

/// Creates a state machine and returns its ARN.
///
/// # Panics
/// When moto refuses it (a broken fixture).
pub async fn create_machine(client: &Client, name: &str, definition: &Value) -> String {
    client
        .create_state_machine()
        .name(name)
        .definition(definition.to_string())
        .role_arn(format!("arn:aws:iam::{ACCOUNT}:role/flowgate-tests"))
        .send()
        .await
        .expect("create state machine in moto")
        .state_machine_arn
}

/// Creates an SQS queue (for `.waitForTaskToken` states) and returns its URL.
///
/// # Panics
/// When moto refuses it.
pub async fn create_queue(url: &str, name: &str) -> String {
    let body = format!("Action=CreateQueue&QueueName={name}&Version=2012-11-05");
    let response = reqwest::Client::new()
        .post(format!("{}/", url.trim_end_matches('/')))
        .header("content-type", "application/x-www-form-urlencoded")
        .header("authorization", "AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/sqs/aws4_request, SignedHeaders=host, Signature=0")
        .body(body)
        .send()
        .await
        .expect("create queue in moto");
    assert!(
        response.status().is_success(),
        "CreateQueue: HTTP {}",
        response.status()
    );
    format!("{}/{ACCOUNT}/{name}", url.trim_end_matches('/'))
}

/// Pass -> Wait `seconds` -> Pass, ending with `{"greeting": "hello <name>", "waited": seconds}`.
pub fn pass_wait_pass(seconds: u64) -> Value {
    json!({
        "StartAt": "Prepare",
        "States": {
            "Prepare": {"Type": "Pass", "Parameters": {"greeting.$": "States.Format('hello {}', $.name)"}, "Next": "Wait"},
            "Wait": {"Type": "Wait", "Seconds": seconds, "Next": "Finish"},
            "Finish": {"Type": "Pass", "Parameters": {"greeting.$": "$.greeting", "waited": seconds}, "End": true}
        }
    })
}

/// A single Wait of `$.seconds` (the input's): one machine for short and long executions.
pub fn waits_for_input_seconds() -> Value {
    json!({
        "StartAt": "Wait",
        "States": {"Wait": {"Type": "Wait", "SecondsPath": "$.seconds", "End": true}}
    })
}

/// A machine that fails with `error` and `cause` after a short Pass.
pub fn failing(error: &str, cause: &str) -> Value {
    json!({
        "StartAt": "Check",
        "States": {
            "Check": {"Type": "Pass", "Next": "Fail"},
            "Fail": {"Type": "Fail", "Error": error, "Cause": cause}
        }
    })
}

/// A machine that asks the client through a flowgate input state, then ends with the answer
/// at `$.approval`.
pub fn asks(queue_url: &str, message: &str) -> Value {
    json!({
        "StartAt": "Approve",
        "States": {
            "Approve": {
                "Type": "Task",
                "Resource": "arn:aws:states:::sqs:sendMessage.waitForTaskToken",
                "Parameters": {
                    "QueueUrl": queue_url,
                    "MessageBody": {
                        "TaskToken.$": "$$.Task.Token",
                        "flowgate": {
                            "message": message,
                            "requestedSchema": {
                                "type": "object",
                                "properties": {"answer": {"type": "string"}},
                                "required": ["answer"]
                            }
                        }
                    }
                },
                "ResultPath": "$.approval",
                "Next": "Done"
            },
            "Done": {"Type": "Pass", "End": true}
        }
    })
}

/// The environment variable naming the AWS-faithful proxy in front of moto
/// (`tests/fakes/aws/sfn_proxy.py`: paging, throttling, stalls, dropped answers, call counts).
pub const PROXY_ENV: &str = "FLOWGATE_TEST_SFN_PROXY_URL";

/// The proxy's URL.
///
/// # Panics
/// When the variable is missing, saying how to run the proxy.
pub fn proxy_url() -> String {
    match std::env::var(PROXY_ENV) {
        Ok(url) if !url.is_empty() => url,
        _ => panic!(
            "{PROXY_ENV} is not set: this test needs the AWS-faithful proxy in front of moto. Run \
             scripts/test (it starts both), or start moto (see {MOTO_ENV}) and then \
             `python3 tests/fakes/aws/sfn_proxy.py --port 5001 --upstream $FLOWGATE_TEST_MOTO_URL` \
             and set {PROXY_ENV}=http://127.0.0.1:5001"
        ),
    }
}

/// One scope of the proxy: an account of its own (buckets, counters, stalls, drops).
#[derive(Debug, Clone)]
pub struct ProxyScope {
    /// The endpoint URL a client of this scope uses.
    pub endpoint: String,
    control: String,
}

impl ProxyScope {
    /// A fresh scope named after `prefix`, configured with `config` (see the proxy's
    /// docstring: `scale`, `buckets`, `stall`, `drop`).
    ///
    /// # Panics
    /// When the proxy does not take the configuration.
    pub async fn new(prefix: &str, config: Value) -> Self {
        let proxy = proxy_url();
        let proxy = proxy.trim_end_matches('/');
        let name = unique(prefix);
        let control = format!("{proxy}/_proxy/scopes/{name}");
        let response = reqwest::Client::new()
            .post(&control)
            .json(&config)
            .send()
            .await
            .expect("configure the proxy scope");
        assert!(
            response.status().is_success(),
            "proxy scope: HTTP {}",
            response.status()
        );
        ProxyScope {
            endpoint: format!("{proxy}/scope/{name}"),
            control,
        }
    }

    /// What the proxy has seen of this scope: `{"calls": {op: n}, "throttled": ..., ...}`.
    ///
    /// # Panics
    /// When the proxy does not answer.
    pub async fn report(&self) -> Value {
        reqwest::Client::new()
            .get(&self.control)
            .send()
            .await
            .expect("proxy report")
            .json()
            .await
            .expect("proxy report JSON")
    }

    /// A hook for the engine conformance suite: the scope's next StartExecution reaches moto
    /// and its answer is lost.
    pub fn lose_next_start_answer(&self) -> flowgate_core::conformance::LoseNextStartAnswer {
        let arm = format!("{}/drop/StartExecution", self.control);
        flowgate_core::conformance::LoseNextStartAnswer(std::sync::Arc::new(move || {
            let answer = post_blocking(&arm, "");
            assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        }))
    }

    /// A hook for the engine conformance suite: transient read faults (HTTP 503
    /// `ServiceUnavailable`) staged by the proxy for this scope's reads.
    pub fn transient_read_fault(&self) -> flowgate_core::conformance::TransientReadFault {
        let arm = format!("{}/read_fault", self.control);
        flowgate_core::conformance::TransientReadFault(std::sync::Arc::new(move |skip| {
            let body = serde_json::json!({ "skip": skip }).to_string();
            let answer = post_blocking(&arm, &body);
            assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        }))
    }

    /// How many calls of `operation` the proxy has seen (answered or not).
    pub async fn calls(&self, operation: &str) -> u64 {
        self.report().await["calls"][operation]
            .as_u64()
            .unwrap_or(0)
    }
}

/// A blocking POST to the proxy's control API (hooks run outside any runtime's reach), its
/// whole answer.
fn post_blocking(url: &str, body: &str) -> String {
    use std::io::{Read, Write};
    let rest = url.trim_start_matches("http://");
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let mut stream = std::net::TcpStream::connect(authority).expect("the proxy is reachable");
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("write to the proxy");
    let mut answer = String::new();
    stream
        .read_to_string(&mut answer)
        .expect("read the proxy's answer");
    answer
}

/// A Parallel: one branch asks the client (as [`asks`]) while the other loops through
/// `rounds` Pass/Choice rounds, writing four history events a round.
pub fn asks_beside_a_chatty_branch(queue_url: &str, rounds: u32) -> Value {
    let ask = asks(queue_url, "Ship it?");
    json!({
        "StartAt": "Both",
        "States": {
            "Both": {
                "Type": "Parallel",
                "End": true,
                "Branches": [
                    ask,
                    {
                        "StartAt": "Init",
                        "States": {
                            "Init": {"Type": "Pass", "Result": {"i": 0}, "Next": "Step"},
                            "Step": {"Type": "Pass", "Parameters": {"i.$": "States.MathAdd($.i, 1)"}, "Next": "More"},
                            "More": {
                                "Type": "Choice",
                                "Choices": [{"Variable": "$.i", "NumericLessThan": rounds, "Next": "Step"}],
                                "Default": "Done"
                            },
                            "Done": {"Type": "Pass", "End": true}
                        }
                    }
                ]
            }
        }
    })
}
