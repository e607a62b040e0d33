//! The shared engine conformance suite, with lost start answers and transient read faults
//! staged by the fake, on projects of the suite's own (hooks are per project).

use std::sync::Arc;
use std::time::Duration;

use flowgate_core::conformance::{Case, Fixture, run_all};
use flowgate_gitlab_ci::GitLabEngine;
use flowgate_gitlab_ci::testing::FakeGitLab;
use serde_json::{Value, json};

use crate::gated_on;

#[tokio::test]
async fn gitlab_engine_passes_the_conformance_suite_on_the_fake() {
    let fake = FakeGitLab::start();
    let case = |e: GitLabEngine, args: Value| Case {
        engine: Arc::new(e),
        arguments: args,
    };
    let result = json!({"result_artifact": {"job": "build", "path": "result.json"}});
    let fixture = Fixture {
        success: case(
            fake.engine("conformance-ok", result.clone()),
            json!({"NAME": "Ada"}),
        ),
        expected_output: json!({"greeting": "hello Ada"}),
        failure: case(
            fake.engine("conformance-fails", json!({})),
            json!({"DAY": "2026-12-01"}),
        ),
        expected_failure: "no rows for 2026-12-01".into(),
        // A project of its own: the lost-answer hook applies to it only.
        slow: case(
            fake.engine("slow", result),
            json!({"NAME": "Bo", "SECONDS_TO_SLEEP": "600"}),
        ),
        asks: Some(case(gated_on(&fake, "gated"), json!({"SERVICE": "web"}))),
        answer: json!({"approver": "Alice"}),
        timeout: Duration::from_secs(60),
        lose_next_start_answer: Some(fake.lose_next_start_answer("slow")),
        transient_read_fault: Some(
            fake.transient_read_fault(&["conformance-ok", "conformance-fails"]),
        ),
    };
    run_all(&fixture).await;
    let created = fake.hook("counts", json!({}))["pipelines_created"]
        .as_u64()
        .expect("count");
    assert!(created > 0);
}
