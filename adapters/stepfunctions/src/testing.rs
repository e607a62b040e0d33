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
