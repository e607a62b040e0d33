//! Loading a manifest and binding it to the engines this build has.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use flowgate_core::Registry;
use flowgate_manifest::{Manifest, ManifestError};
use flowgate_server::ToolSet;

/// The bundled example manifest, served when no manifest is given.
pub(crate) const BUNDLED_MANIFEST: &str = include_str!("../../../examples/flowgate.yaml");

/// Every engine this build was compiled with.
#[cfg_attr(
    not(any(
        feature = "local",
        feature = "stepfunctions",
        feature = "google-workflows",
        feature = "gitlab-ci",
        feature = "github-actions",
        feature = "airflow"
    )),
    allow(unused_mut)
)]
pub(crate) fn registry(state_dir: &Path) -> Registry {
    let mut registry = Registry::new();
    #[cfg(feature = "local")]
    flowgate_local::register(
        &mut registry,
        flowgate_local::LocalConfig {
            state_dir: state_dir.to_owned(),
            flowgate_bin: std::env::current_exe().ok(),
            // This very binary, as the kernel holds it: still there, and the same version,
            // when the file it was started from has been replaced or removed since (an upgrade
            // in place) and `current_exe` names another program or nothing.
            supervisor: Some("/proc/self/exe".into()),
        },
    );
    #[cfg(feature = "stepfunctions")]
    flowgate_stepfunctions::register(&mut registry);
    #[cfg(feature = "google-workflows")]
    flowgate_google_workflows::register(&mut registry);
    #[cfg(feature = "gitlab-ci")]
    flowgate_gitlab_ci::register(&mut registry);
    #[cfg(feature = "github-actions")]
    flowgate_github_actions::register(&mut registry);
    #[cfg(feature = "airflow")]
    flowgate_airflow::register(&mut registry);
    #[cfg(not(feature = "local"))]
    let _ = state_dir;
    registry
}

/// The local engine's state folder: the given one, else `$XDG_STATE_HOME/flowgate`, else
/// `~/.local/state/flowgate`. Never a shared temporary folder, where another local user could
/// create it first; with none of these, `serve` asks for `--state-dir` when a tool needs it.
pub(crate) fn state_dir(given: Option<PathBuf>) -> Option<PathBuf> {
    given
        .or_else(|| {
            std::env::var_os(crate::env_vars::XDG_STATE_HOME)
                .filter(|d| !d.is_empty())
                .map(|d| PathBuf::from(d).join("flowgate"))
        })
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|h| !h.is_empty())
                .map(|h| PathBuf::from(h).join(".local/state/flowgate"))
        })
}

/// Checks the state folder when a tool runs on the local engine: it must be named, and private.
#[cfg(feature = "local")]
pub(crate) fn check_state_dir(state_dir: Option<&Path>, tools: &ToolSet) -> Result<(), String> {
    if !tools
        .iter()
        .any(|t| t.spec.target.engine == flowgate_local::KIND)
    {
        return Ok(());
    }
    let Some(dir) = state_dir else {
        return Err(
            "the local engine needs a state folder, and neither HOME nor XDG_STATE_HOME \
                    is set: pass --state-dir DIR (or set FLOWGATE_STATE_DIR)"
                .into(),
        );
    };
    flowgate_local::prepare_state_dir(dir)
}

/// Loads `path`, else an inline manifest from `FLOWGATE_MANIFEST_YAML`, else the bundled
/// example.
pub(crate) fn load(path: Option<&Path>) -> Result<Manifest, Vec<ManifestError>> {
    let (manifest, errors) = load_all(path);
    if errors.is_empty() {
        Ok(manifest)
    } else {
        Err(errors)
    }
}

/// [`load`]'s tools that loaded, and every problem found (for [`tool_set`], which binds the
/// tools that loaded too, so that one run reports every error).
fn load_all(path: Option<&Path>) -> (Manifest, Vec<ManifestError>) {
    if let Some(p) = path {
        return flowgate_manifest::load_path_all(p);
    }
    // Inline and bundled manifests use no relative paths; their folder is the temp folder.
    let base = std::env::temp_dir();
    match std::env::var(crate::env_vars::MANIFEST_YAML) {
        Ok(text) if !text.trim().is_empty() => {
            flowgate_manifest::parse_str_all(&text, &base.join(crate::env_vars::MANIFEST_YAML))
        }
        _ => {
            flowgate_manifest::parse_str_all(BUNDLED_MANIFEST, &base.join("flowgate-bundled.yaml"))
        }
    }
}

/// Refuses two manifest sources at once: with a path (`FLOWGATE_MANIFEST` or `--manifest`)
/// the inline `FLOWGATE_MANIFEST_YAML` would be ignored without a word, and a deployment that
/// sets both (an image's default path, an inline manifest in the service) would serve the one
/// its author did not mean.
pub(crate) fn one_manifest_source(path: Option<&Path>) -> Result<(), String> {
    let inline =
        std::env::var(crate::env_vars::MANIFEST_YAML).is_ok_and(|text| !text.trim().is_empty());
    let Some(path) = path.filter(|_| inline) else {
        return Ok(());
    };
    let from_env = std::env::var_os(crate::env_vars::MANIFEST).is_some_and(|p| p == path);
    let path_source = if from_env {
        format!("{}={}", crate::env_vars::MANIFEST, path.display())
    } else {
        format!("--manifest {}", path.display())
    };
    Err(format!(
        "{path_source} and {inline} are both set: flowgate serves one manifest and would \
         ignore the inline one; unset {inline} to serve the path, or {} (and --manifest) to \
         serve the inline manifest",
        crate::env_vars::MANIFEST,
        inline = crate::env_vars::MANIFEST_YAML,
    ))
}

/// Loads and binds a manifest, printing every error.
///
/// Every error found is printed in one run, in file, line and column order: the manifest's own,
/// and the engines' complaints about the targets of the tools that loaded.
pub(crate) fn tool_set(path: Option<&Path>, registry: &Registry) -> Option<ToolSet> {
    let (manifest, mut errors) = load_all(path);
    let set = match ToolSet::build(&manifest, registry) {
        Ok(set) => Some(set),
        Err(bound) => {
            errors.extend(bound);
            None
        }
    };
    if errors.is_empty() {
        return set;
    }
    errors.sort_by(|a, b| (&a.file, a.line, a.column).cmp(&(&b.file, b.line, b.column)));
    errors.dedup();
    for e in &errors {
        eprintln!("{e}");
    }
    eprintln!("{} error(s) in the manifest", errors.len());
    None
}

pub(crate) fn check(path: &Path) -> ExitCode {
    let registry = registry(&state_dir(None).unwrap_or_default());
    match tool_set(Some(path), &registry) {
        Some(set) => {
            crate::out!("{}: {} tool(s), ok", path.display(), set.iter().count());
            ExitCode::SUCCESS
        }
        None => ExitCode::FAILURE,
    }
}

pub(crate) fn tools(path: &Path) -> ExitCode {
    let registry = registry(&state_dir(None).unwrap_or_default());
    let Some(set) = tool_set(Some(path), &registry) else {
        return ExitCode::FAILURE;
    };
    for entry in set.iter() {
        let task = match entry.spec.task {
            flowgate_manifest::TaskSupport::Required => "task required",
            flowgate_manifest::TaskSupport::Optional => "task optional",
            flowgate_manifest::TaskSupport::Forbidden => "synchronous",
        };
        let summary = entry.spec.description.lines().next().unwrap_or("");
        crate::out!(
            "{:<24} {:<14} {:<6} {summary}",
            entry.spec.name,
            task,
            entry.spec.target.engine
        );
    }
    ExitCode::SUCCESS
}
