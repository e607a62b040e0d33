//! Cancelling: GitHub interrupts the running step (SIGINT, then SIGTERM, then its process tree
//! is killed), runs the `always()` and `cancelled()` steps, and the run ends cancelled; a step
//! that ignores the signals past the grace period gets the run force-cancelled.

use std::time::{Duration, Instant};

use flowgate_core::{Engine, TaskState};
use flowgate_github_actions::testing::Fake;
use serde_json::{Value, json};

use crate::support::{engine, greet, jobs, start, steps, wait_for};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_the_long_step_and_force_cancel_ends_a_stubborn_one() {
    let fake = Fake::shared();
    let e = greet(&fake);
    let x = start(&e, json!({"name": "Di", "seconds": 600})).await;
    wait_for(&e, &x, |r| {
        r.status_message
            .as_deref()
            .is_some_and(|m| m.contains("Wait"))
    })
    .await;
    let pids = fake.hook(&format!("runs/{}/processes", x.0), Value::Null);
    assert!(
        pids["pids"].as_array().is_some_and(|p| !p.is_empty()),
        "{pids}"
    );
    e.cancel(&x).await.expect("cancel");
    let done = wait_for(&e, &x, |r| r.state.is_terminal()).await;
    assert_eq!(done.state, TaskState::Cancelled, "{done:?}");
    let pids = fake.hook(&format!("runs/{}/processes", x.0), Value::Null);
    assert_eq!(pids["pids"], json!([]), "the step's processes are gone");

    let stubborn = engine(&fake, "stubborn.yml", json!({"cancel_grace_ms": 1500}));
    let y = start(&stubborn, json!({})).await;
    wait_for(&stubborn, &y, |r| {
        r.status_message
            .as_deref()
            .is_some_and(|m| m.contains("Ignore SIGTERM"))
    })
    .await;
    let began = Instant::now();
    stubborn
        .cancel(&y)
        .await
        .expect("cancel, then force-cancel");
    assert!(
        began.elapsed() >= Duration::from_millis(1500),
        "force-cancel came after the grace period"
    );
    let done = wait_for(&stubborn, &y, |r| r.state.is_terminal()).await;
    assert_eq!(done.state, TaskState::Cancelled, "{done:?}");
    assert!(
        began.elapsed() < Duration::from_secs(7),
        "force-cancelled, not left to GitHub's own 10 s escalation"
    );
    let pids = fake.hook(&format!("runs/{}/processes", y.0), Value::Null);
    assert_eq!(pids["pids"], json!([]));
}

/// A step that stops on SIGINT lets the cleanup run: the cancel returns without forcing
/// anything, the `always()` and `cancelled()` steps run, the step after the interrupted one
/// and the `failure()` one do not, and the run ends cancelled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_lets_the_cleanup_steps_run_then_the_run_is_cancelled() {
    let fake = Fake::shared();
    let e = engine(&fake, "cleanup.yml", json!({"cancel_grace_ms": 5000}));
    let x = start(&e, json!({})).await;
    wait_for(&e, &x, |r| {
        r.status_message
            .as_deref()
            .is_some_and(|m| m.contains("work: Work"))
    })
    .await;
    e.cancel(&x).await.expect("cancel");
    let done = wait_for(&e, &x, |r| r.state.is_terminal()).await;
    assert_eq!(done.state, TaskState::Cancelled, "{done:?}");
    let jobs = jobs(&fake, "app", &x);
    let work = steps(&jobs["work"]);
    let conclusion = |name: &str| work.iter().find(|(n, _)| n == name).map(|(_, c)| c.clone());
    assert_eq!(conclusion("Work").as_deref(), Some("cancelled"), "{work:?}");
    assert_eq!(
        conclusion("Clean up").as_deref(),
        Some("success"),
        "the cleanup was not force-cancelled: {work:?}"
    );
    assert_eq!(
        conclusion("On cancel").as_deref(),
        Some("success"),
        "{work:?}"
    );
    assert_eq!(conclusion("Report"), None, "{work:?}");
    assert_eq!(conclusion("On failure"), None, "{work:?}");
    assert_eq!(jobs["work"]["conclusion"], "cancelled");
}
