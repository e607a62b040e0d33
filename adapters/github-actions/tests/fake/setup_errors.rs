//! Refused starts, sorted by who can fix them: the tool's setup (the workflow, the repository,
//! the credentials) is an operator's (`Misconfigured`, `Denied`), the call's arguments the
//! caller's (`InvalidInput`).

use flowgate_core::{Engine, EngineError, StartRequest};
use flowgate_github_actions::GitHubActionsEngine;
use flowgate_github_actions::testing::Fake;
use flowgate_http::Secret;
use serde_json::{Value, json};

use crate::support::{engine, greet};

async fn refusal(e: &GitHubActionsEngine, arguments: Value) -> EngineError {
    e.start(StartRequest::new("t", arguments, "tests"))
        .await
        .expect_err("refused")
}

fn operator(e: &EngineError, wanted: &[&str]) {
    match e {
        EngineError::Misconfigured { message, .. } | EngineError::Denied { message, .. } => {
            for w in wanted {
                assert!(message.contains(w), "{message:?} lacks {w:?}");
            }
        }
        other => panic!("an operator's problem, got {other:?}"),
    }
}

fn arguments(e: &EngineError, wanted: &str) {
    match e {
        EngineError::InvalidInput { message, .. } => {
            assert!(message.contains(wanted), "{message:?} lacks {wanted:?}");
        }
        other => panic!("an argument fault, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workflow_flowgate_cannot_start_is_an_operators_problem() {
    let fake = Fake::shared();
    let e = engine(&fake, "nodispatch.yml", json!({}));
    operator(
        &refusal(&e, json!({})).await,
        &["nodispatch.yml", "workflow_dispatch:"],
    );
    let e = engine(&fake, "nokey.yml", json!({}));
    operator(
        &refusal(&e, json!({"version": "1"})).await,
        &["does not declare the input flowgate_call", "run-name"],
    );
    let e = engine(&fake, "missing.yml", json!({}));
    operator(
        &refusal(&e, json!({})).await,
        &["there is no workflow missing.yml in acme/app"],
    );
    let e = engine(&fake, "greet.yml", json!({"repo": "secret"}));
    operator(
        &refusal(&e, json!({"name": "x"})).await,
        &["acme/secret", "cannot see it"],
    );
    let e = engine(&fake, "greet.yml", json!({"ref": "trunk"}));
    operator(
        &refusal(&e, json!({"name": "x"})).await,
        &["the tool's ref \"trunk\" is not a branch or tag of acme/app"],
    );
    let e = engine(
        &fake,
        "greet.yml",
        json!({"inputs": {"name": "{who}", "colour": "red"}}),
    );
    operator(
        &refusal(&e, json!({"who": "x"})).await,
        &["the tool sends the inputs", "colour"],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_without_access_is_an_operators_problem() {
    let fake = Fake::shared();
    let mut target = fake.target("greet.yml", json!({}));
    target.token = Some(Secret::new(fake.readonly_token()));
    let e = GitHubActionsEngine::new(target).expect("engine");
    operator(
        &refusal(&e, json!({"name": "x"})).await,
        &["Actions: write"],
    );
    let mut target = fake.target("greet.yml", json!({}));
    target.token = Some(Secret::new("ghs_not_a_token"));
    let e = GitHubActionsEngine::new(target).expect("engine");
    operator(
        &refusal(&e, json!({"name": "x"})).await,
        &["refused flowgate's credentials"],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_of_the_arguments_stay_the_callers() {
    let fake = Fake::shared();
    arguments(
        &refusal(&greet(&fake), json!({"name": "x", "colour": "red"})).await,
        "colour",
    );
    let e = engine(&fake, "greet.yml", json!({"ref": "{branch}"}));
    arguments(
        &refusal(&e, json!({"name": "x", "branch": "nope"})).await,
        "no branch or tag \"nope\" in acme/app",
    );
    let typed = engine(&fake, "typed.yml", json!({}));
    arguments(
        &refusal(&typed, json!({"level": "trace"})).await,
        "Provided value 'trace' for input 'level' not in the list of allowed values",
    );
    arguments(
        &refusal(&typed, json!({"dry_run": "maybe"})).await,
        "for input 'dry_run'",
    );
    arguments(
        &refusal(&typed, json!({"note": "x".repeat(70_000)})).await,
        "65535",
    );
}
