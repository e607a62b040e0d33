//! `flowgate policy MANIFEST`: the least-privilege permissions a manifest's tools need, as JSON.

use std::path::Path;
use std::process::ExitCode;

use serde_json::{Map, Value};

use crate::setup;

pub(crate) fn print(path: &Path) -> ExitCode {
    let manifest = match setup::load(Some(path)) {
        Ok(m) => m,
        Err(errors) => {
            for e in &errors {
                eprintln!("{e}");
            }
            return ExitCode::FAILURE;
        }
    };
    let mut out = Map::new();
    #[cfg(feature = "stepfunctions")]
    {
        let mut targets = Vec::new();
        for tool in manifest
            .tools
            .iter()
            .filter(|t| t.target.engine == flowgate_stepfunctions::KIND)
        {
            match flowgate_stepfunctions::SfnTarget::from_manifest(&tool.target.config) {
                Ok(t) => targets.push(t),
                Err(e) => {
                    eprintln!("{}", tool.target.location.error(e));
                    return ExitCode::FAILURE;
                }
            }
        }
        if !targets.is_empty() {
            out.insert("aws".into(), flowgate_stepfunctions::policies(&targets));
        }
    }
    #[cfg(feature = "google-workflows")]
    {
        let mut targets = Vec::new();
        for tool in manifest
            .tools
            .iter()
            .filter(|t| t.target.engine == flowgate_google_workflows::KIND)
        {
            match flowgate_google_workflows::GcwTarget::from_manifest(&tool.target.config) {
                Ok(t) => targets.push(t),
                Err(e) => {
                    eprintln!("{}", tool.target.location.error(e));
                    return ExitCode::FAILURE;
                }
            }
        }
        if !targets.is_empty() {
            out.insert("gcp".into(), flowgate_google_workflows::roles(&targets));
        }
    }
    let engines: Vec<&str> = manifest
        .tools
        .iter()
        .map(|t| t.target.engine.as_str())
        .collect();
    if engines.contains(&"local") {
        out.insert(
            "local".into(),
            Value::from("local tools run commands on the flowgate host: no cloud permissions"),
        );
    }
    println!(
        "{}",
        serde_json::to_string_pretty(&Value::Object(out)).unwrap_or_default()
    );
    ExitCode::SUCCESS
}
