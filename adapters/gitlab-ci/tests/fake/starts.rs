//! Starting pipelines on projects that restrict pipeline variables: the call's name and its
//! arguments as spec:inputs, found again by name in one request, values byte for byte, pipeline
//! variables only where the manifest asks (and the project allows them).

use flowgate_core::{
    Action, Engine, EngineError, ExecutionRef, InputResponse, ListFilter, StartRequest, TaskState,
};
use flowgate_gitlab_ci::GitLabEngine;
use flowgate_gitlab_ci::testing::FakeGitLab;
use serde_json::{Value, json};

use crate::{api, count, hello, start, wait};

/// Text that GitLab's variable expansion and a shell would each mangle.
fn awkward_text() -> String {
    "price: $5 and $$ and ${HOME} and $CI_JOB_ID\\ back\\\\slash 'single' \"double\" `tick`\n\
     second line\ttab; rm -rf / # not really | héllo wörld ✓ 日本語 %PATH% $[[ inputs.x ]]"
        .to_owned()
}

#[tokio::test]
async fn a_restricted_project_refuses_pipeline_variables_with_gitlabs_own_error() {
    let fake = FakeGitLab::start();
    let (status, body) = api(&fake, "GET", "projects/flowgate%2Fhello", None).await;
    assert_eq!(status, 200);
    assert_eq!(
        body["ci_pipeline_variables_minimum_override_role"],
        "no_one_allowed"
    );
    let (status, body) = api(
        &fake,
        "POST",
        "projects/flowgate%2Fhello/pipeline",
        Some(json!({"ref": "main", "variables": [{"key": "NAME", "value": "x"}]})),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(
        body,
        json!({"message": {"base": ["Insufficient permissions to set pipeline variables"]}})
    );
    // A tool that asks for pipeline variables there is told what to change, as an operator
    // matter (never "check the arguments").
    let e = fake.engine_for(
        "hello",
        json!({"variables": {"NAME": "{name}"}}),
        json!({"type": "object", "properties": {"name": {"type": "string"}}}),
    );
    let err = e
        .start(StartRequest::new("t", json!({"name": "x"}), "p"))
        .await
        .expect_err("variables are refused");
    assert!(matches!(err, EngineError::Misconfigured { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("tell an operator"), "{text}");
    assert!(
        text.contains("ci_pipeline_variables_minimum_override_role"),
        "{text}"
    );
    // The same tool with its arguments as inputs runs there.
    let done = {
        let e = hello(&fake);
        let x = start(&e, json!({"NAME": "Ada"})).await;
        wait(&e, &x, |r| r.state.is_terminal()).await
    };
    assert_eq!(done.output, Some(json!({"greeting": "hello Ada"})));
}

#[tokio::test]
async fn a_start_costs_one_lookup_by_name_and_reads_no_variables() {
    let fake = FakeGitLab::start();
    // A project of its own: the counts are per project.
    let e = fake.engine(
        "counted",
        json!({"result_artifact": {"job": "build", "path": "result.json"}}),
    );
    let request = StartRequest::new("greet", json!({"NAME": "Cy"}), "principal-1");
    let before = fake.requests("counted");
    let started = e.start(request.clone()).await.expect("start");
    let after = fake.requests("counted");
    assert_eq!(count(&after, "pipelines") - count(&before, "pipelines"), 1);
    assert_eq!(
        count(&after, "POST pipeline") - count(&before, "POST pipeline"),
        1
    );
    assert_eq!(count(&after, "variables"), 0, "no variables read: {after}");
    // The pipeline is named after the call, and a retry finds it with the same one request.
    let (_, pipeline) = api(
        &fake,
        "GET",
        &format!(
            "projects/flowgate%2Fcounted/pipelines/{}",
            started.execution
        ),
        None,
    )
    .await;
    let name = pipeline["name"].as_str().expect("named").to_owned();
    assert!(
        name.starts_with("greet fg-") && name.contains(request.idempotency_key.as_str()),
        "{name}"
    );
    let again = e.start(request.clone()).await.expect("retried start");
    assert_eq!(again.execution, started.execution);
    let last = fake.requests("counted");
    assert_eq!(count(&last, "pipelines") - count(&after, "pipelines"), 1);
    assert_eq!(
        count(&last, "POST pipeline"),
        count(&after, "POST pipeline")
    );
    // `list` finds the principal's pipelines by their names too.
    let listed = e
        .list(ListFilter::for_principal("principal-1", None))
        .await
        .expect("list");
    assert!(
        listed.iter().any(|s| s.execution == started.execution),
        "{listed:?}"
    );
    let others = e
        .list(ListFilter::for_principal("principal-2", None))
        .await
        .expect("list");
    assert!(others.iter().all(|s| s.execution != started.execution));
    e.cancel(&started.execution).await.ok();
}

#[tokio::test]
async fn inputs_arrive_byte_for_byte() {
    let fake = FakeGitLab::start();
    let e = fake.engine(
        "bytes",
        json!({"result_artifact": {"job": "echo", "path": "result.json"}}),
    );
    let text = awkward_text();
    let x = start(&e, json!({"TEXT": text})).await;
    let done = wait(&e, &x, |r| r.state.is_terminal()).await;
    assert_eq!(done.state, TaskState::Completed, "{done:?}");
    let output = done.output.expect("output");
    assert_eq!(output["text"], json!(text), "as a raw variable");
    assert_eq!(output["escaped"], json!(text), "through posix_escape");
}

#[tokio::test]
async fn pipeline_variables_where_the_manifest_asks_arrive_byte_for_byte() {
    let fake = FakeGitLab::start();
    let e = fake.engine_for(
        "vars",
        json!({
            "variables": {"MESSAGE": "{message}"},
            "key_variable": "FLOWGATE_CALL",
            "questions": {"confirm": {
                "message": "Confirm?",
                "requested_schema": {"type": "object", "properties": {"who": {"type": "string"}}},
                "variables": {"who": "CONFIRMED_BY"}
            }},
            "result_artifact": {"job": "report", "path": "result.json"}
        }),
        json!({"type": "object", "properties": {"message": {"type": "string"}}}),
    );
    let text = awkward_text();
    let request = StartRequest::new("vars", json!({"message": text}), "p");
    let first = e.start(request.clone()).await.expect("start");
    // Exactly once through the key variable as well.
    let again = e.start(request).await.expect("retried start");
    assert_eq!(first.execution, again.execution);
    let x = first.execution;
    let r = wait(&e, &x, |r| r.state == TaskState::InputRequired).await;
    let who = "ops $USER ${HOME} $$ \"q\" é";
    e.respond(
        &x,
        &r.input_requests[0].key,
        InputResponse {
            action: Action::Accept,
            content: Some(json!({"who": who})),
        },
    )
    .await
    .expect("answer as a job variable, which this project allows");
    let done = wait(&e, &x, |r| r.state.is_terminal()).await;
    assert_eq!(done.state, TaskState::Completed, "{done:?}");
    assert_eq!(
        done.output,
        Some(json!({"message": text, "confirmed_by": who}))
    );
}

fn scale_schema(replicas: Value) -> Value {
    json!({"type": "object", "properties": {"env": {"type": "string"}, "replicas": replicas},
           "required": ["env"]})
}

#[tokio::test]
async fn pipeline_inputs_keep_their_types_and_bad_ones_are_refused() {
    let fake = FakeGitLab::start();
    let target = json!({
        "inputs": {"environment": "{env}", "replicas": "{replicas}"},
        "result_artifact": {"job": "scale", "path": "result.json"}
    });
    let e = fake.engine_for("inputs", target, scale_schema(json!({"type": "integer"})));
    let x = start(&e, json!({"env": "staging", "replicas": 3})).await;
    let done = wait(&e, &x, |r| r.state.is_terminal()).await;
    assert_eq!(
        done.output,
        Some(json!({"environment": "staging", "replicas": 3}))
    );
    let request = StartRequest::new("t", json!({"env": "moon", "replicas": 1}), "p");
    let err = e.start(request).await.expect_err("bad option");
    assert!(matches!(err, EngineError::InvalidInput { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains("`moon` cannot be used because it is not in the list of allowed options"),
        "{err}"
    );
    // An argument the pipeline does not declare is the setup's fault, not the caller's.
    let every = fake.engine("inputs", json!({}));
    let request = StartRequest::new("t", json!({"environment": "staging", "colour": "red"}), "p");
    let err = every.start(request).await.expect_err("undeclared input");
    assert!(matches!(err, EngineError::Misconfigured { .. }), "{err:?}");
    assert!(
        err.to_string().contains("unknown input arguments: colour"),
        "{err}"
    );
}

#[tokio::test]
async fn a_left_out_optional_argument_leaves_the_input_unset_or_takes_the_schema_default() {
    let fake = FakeGitLab::start();
    let target = json!({
        "inputs": {"environment": "{env}", "replicas": "{replicas}"},
        "result_artifact": {"job": "scale", "path": "result.json"}
    });
    // No schema default: the input is not sent, and the pipeline's own default (1) applies.
    let e = fake.engine_for(
        "inputs",
        target.clone(),
        scale_schema(json!({"type": "integer"})),
    );
    let x = start(&e, json!({"env": "production"})).await;
    let done = wait(&e, &x, |r| r.state.is_terminal()).await;
    assert_eq!(
        done.output,
        Some(json!({"environment": "production", "replicas": 1})),
        "{done:?}"
    );
    // A schema default is sent, with its type.
    let e = fake.engine_for(
        "inputs",
        target,
        scale_schema(json!({"type": "integer", "default": 4})),
    );
    let x = start(&e, json!({"env": "staging"})).await;
    let done = wait(&e, &x, |r| r.state.is_terminal()).await;
    assert_eq!(
        done.output,
        Some(json!({"environment": "staging", "replicas": 4}))
    );
}

#[tokio::test]
async fn bad_credentials_and_unknown_projects_are_told_apart() {
    let fake = FakeGitLab::start();
    let nobody = GitLabEngine::with_token(
        fake.target("hello", json!({})),
        &flowgate_http::HttpConfig::default(),
        Some(flowgate_http::Secret::new("wrong")),
    )
    .expect("engine");
    let err = nobody
        .start(StartRequest::new("t", json!({"NAME": "x"}), "p"))
        .await
        .expect_err("wrong token");
    assert!(matches!(err, EngineError::Denied { .. }), "{err:?}");
    assert!(
        !err.to_string().contains("wrong"),
        "the token never shows: {err}"
    );
    let missing = fake.engine("no-such-project", json!({}));
    let err = missing
        .get(&ExecutionRef("1001".into()))
        .await
        .expect_err("no project");
    assert!(err.is_not_found(), "{err:?}");
    assert!(err.to_string().contains("404 Project Not Found"), "{err}");
}

#[tokio::test]
async fn a_trigger_token_starts_the_pipeline() {
    let fake = FakeGitLab::start();
    let e = hello(&fake).with_trigger_token(Some(flowgate_http::Secret::new(
        flowgate_gitlab_ci::testing::TEST_TRIGGER_TOKEN,
    )));
    let x = start(&e, json!({"NAME": "Eve"})).await;
    let done = wait(&e, &x, |r| r.state.is_terminal()).await;
    assert_eq!(done.output, Some(json!({"greeting": "hello Eve"})));
    // The trigger's own TRIGGER_PAYLOAD is the pipeline's only variable (GitLab lets it
    // through a restricted project).
    let (_, vars) = api(
        &fake,
        "GET",
        &format!("projects/flowgate%2Fhello/pipelines/{x}/variables"),
        None,
    )
    .await;
    let keys: Vec<&Value> = vars
        .as_array()
        .expect("list")
        .iter()
        .map(|v| &v["key"])
        .collect();
    assert_eq!(keys, vec![&json!("TRIGGER_PAYLOAD")]);
    let bad = hello(&fake).with_trigger_token(Some(flowgate_http::Secret::new("nope")));
    let err = bad
        .start(StartRequest::new("t", json!({"NAME": "x"}), "p"))
        .await
        .expect_err("bad trigger token");
    assert!(
        matches!(err, EngineError::Denied { .. }),
        "GitLab answers 404 for a bad trigger token; a start reports it as denied: {err:?}"
    );
}
