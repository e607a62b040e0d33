//! `flowgate policy MANIFEST`: the least-privilege permissions a manifest's tools need, as JSON.

use std::path::Path;
use std::process::ExitCode;

use flowgate_manifest::{Manifest, ManifestError};
use serde_json::{Map, Value};

use crate::setup;

/// The targets of every tool of engine `kind`, parsed by that engine's own target reader.
#[cfg_attr(
    not(any(
        feature = "stepfunctions",
        feature = "google-workflows",
        feature = "gitlab-ci",
        feature = "github-actions",
        feature = "airflow"
    )),
    allow(dead_code)
)]
fn targets<T>(
    manifest: &Manifest,
    kind: &str,
    parse: impl Fn(flowgate_core::TargetSpec<'_>) -> Result<T, flowgate_core::TargetError>,
) -> Result<Vec<T>, ManifestError> {
    manifest
        .tools
        .iter()
        .filter(|t| t.target.engine == kind)
        .map(|t| {
            let base_dir = t.location.file.parent().unwrap_or(Path::new(""));
            let spec = flowgate_core::TargetSpec {
                config: &t.target.config,
                base_dir,
                input_schema: &t.input_schema,
            };
            parse(spec).map_err(|e| t.target.locate(e.key.as_deref()).error(e.message))
        })
        .collect()
}

fn permissions(manifest: &Manifest) -> Result<Map<String, Value>, ManifestError> {
    let mut out = Map::new();
    #[cfg(feature = "stepfunctions")]
    {
        let sfn = targets(
            manifest,
            flowgate_stepfunctions::KIND,
            flowgate_stepfunctions::SfnTarget::from_manifest,
        )?;
        if !sfn.is_empty() {
            out.insert("aws".into(), flowgate_stepfunctions::policies(&sfn));
        }
    }
    #[cfg(feature = "google-workflows")]
    {
        let gcw = targets(manifest, flowgate_google_workflows::KIND, |spec| {
            flowgate_google_workflows::GcwTarget::from_manifest(spec.config)
        })?;
        if !gcw.is_empty() {
            out.insert("gcp".into(), flowgate_google_workflows::roles(&gcw));
        }
    }
    #[cfg(feature = "gitlab-ci")]
    {
        let gitlab = targets(manifest, flowgate_gitlab_ci::KIND, |spec| {
            flowgate_gitlab_ci::GitLabTarget::from_manifest(spec)
        })?;
        if !gitlab.is_empty() {
            out.insert("gitlab".into(), flowgate_gitlab_ci::scopes(&gitlab));
        }
    }
    #[cfg(feature = "github-actions")]
    {
        let gh = targets(
            manifest,
            flowgate_github_actions::KIND,
            flowgate_github_actions::GhTarget::from_manifest,
        )?;
        if !gh.is_empty() {
            out.insert("github".into(), flowgate_github_actions::permissions(&gh));
        }
    }
    #[cfg(feature = "airflow")]
    {
        let af = targets(
            manifest,
            flowgate_airflow::KIND,
            flowgate_airflow::AirflowTarget::from_manifest,
        )?;
        if !af.is_empty() {
            out.insert("airflow".into(), flowgate_airflow::permissions(&af));
        }
    }
    if manifest.tools.iter().any(|t| t.target.engine == "local") {
        out.insert(
            "local".into(),
            Value::from("local tools run commands on the flowgate host: no cloud permissions"),
        );
    }
    Ok(out)
}

pub(crate) fn print(path: &Path) -> ExitCode {
    let result = setup::load(Some(path)).and_then(|m| permissions(&m).map_err(|e| vec![e]));
    match result {
        Ok(out) => {
            crate::out!(
                "{}",
                serde_json::to_string_pretty(&Value::Object(out)).unwrap_or_default()
            );
            ExitCode::SUCCESS
        }
        Err(errors) => {
            for e in &errors {
                eprintln!("{e}");
            }
            ExitCode::FAILURE
        }
    }
}
