//! The shared engine conformance suite, in a repository of its own whose run list lags two
//! seconds behind a dispatch (as GitHub's does), with lost dispatch answers and transient read
//! faults staged by the fake.

use std::sync::Arc;

use flowgate_core::conformance::{Case, Fixture, LoseNextStartAnswer, run_all};
use flowgate_github_actions::testing::Fake;
use serde_json::{Value, json};

use crate::support::{WAIT, engine, greet_in};

const REPO: &str = "conformance";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn github_engine_passes_the_conformance_suite_on_the_fake() {
    let fake = Arc::new(Fake::shared());
    fake.hook(
        "list-lag",
        json!({"repo": format!("acme/{REPO}"), "ms": 2000}),
    );
    let case = |e, arguments: Value| Case {
        engine: e,
        arguments,
    };
    let fixture = Fixture {
        success: case(greet_in(&fake, REPO), json!({"name": "Ada", "seconds": 1})),
        expected_output: json!({"greeting": "hello Ada"}),
        failure: case(
            engine(&fake, "fails.yml", json!({"repo": REPO})),
            json!({"day": "2026-12-01"}),
        ),
        expected_failure: "no rows for 2026-12-01".into(),
        slow: case(greet_in(&fake, REPO), json!({"name": "Bo", "seconds": 600})),
        asks: Some(case(
            engine(&fake, "release.yml", json!({"repo": REPO})),
            json!({"version": "1.2"}),
        )),
        answer: json!({"comment": "ship it"}),
        timeout: WAIT,
        lose_next_start_answer: Some(LoseNextStartAnswer(Arc::new({
            let fake = fake.clone();
            move || {
                fake.hook(
                    "lose-next-dispatch-answer",
                    json!({"repo": format!("acme/{REPO}")}),
                );
            }
        }))),
        transient_read_fault: Some(fake.transient_read_fault(&format!("acme/{REPO}"))),
    };
    run_all(&fixture).await;
}
