//! The engine conformance suite against the local engine, with the real `flowgate ask`.

use std::sync::Arc;
use std::time::Duration;

use flowgate_core::conformance::{Case, Fixture, run_all};
use flowgate_local::{LocalConfig, LocalEngine, LocalTarget};
use serde_json::{Value, json};

use crate::support::bin;

#[tokio::test]
async fn local_engine_passes_the_conformance_suite_with_questions() {
    let state = tempfile::tempdir().expect("tempdir");
    let config = Arc::new(LocalConfig {
        state_dir: state.path().to_owned(),
        flowgate_bin: Some(bin()),
        supervisor: Some(bin()),
    });
    let case = |script: &str| Case {
        engine: Arc::new(LocalEngine::new(
            config.clone(),
            LocalTarget {
                command: vec!["/bin/sh".into(), "-c".into(), script.into()],
                env: Default::default(),
                env_passthrough: Vec::new(),
                working_dir: None,
                leftover_processes: Default::default(),
            },
        )),
        arguments: json!({}),
    };
    let fixture = Fixture {
        success: case(r#"flowgate status one; echo '{"n": 1}'"#),
        expected_output: json!({"n": 1}),
        failure: case("echo 'quota exceeded' >&2; exit 1"),
        expected_failure: "quota exceeded".into(),
        slow: case("sleep 60"),
        asks: Some(case(
            r#"name=$(flowgate ask --message "Name?" --field answer) || exit 3; echo "hello $name""#,
        )),
        answer: json!({"answer": "Alice"}),
        timeout: Duration::from_secs(15),
        lose_next_start_answer: None,
        transient_read_fault: None,
    };
    run_all(&fixture).await;
    let _: Value = Value::Null;
}
