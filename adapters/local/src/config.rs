//! Settings of the local engine: where runs live (per server) and what to run (per tool).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use flowgate_core::{TargetError, parse_target};
use serde::Deserialize;
use serde_json::{Map, Value};

/// Server-wide settings.
#[derive(Debug, Clone)]
pub struct LocalConfig {
    /// The folder that holds one folder per run. Servers that share it share tasks.
    pub state_dir: PathBuf,
    /// The `flowgate` binary, put first on the command's `PATH` so `flowgate ask` and
    /// `flowgate status` work inside scripts.
    pub flowgate_bin: Option<PathBuf>,
}

/// One tool's command, from its manifest `target` block.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LocalTarget {
    /// The argv. The first element is looked up on `PATH` unless it contains a `/`; a relative
    /// path with a `/` is relative to the manifest's folder.
    pub command: Vec<String>,
    /// Extra environment variables.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The working folder (relative to the manifest's folder); the manifest's folder by default.
    #[serde(default)]
    pub working_dir: Option<PathBuf>,
}

impl LocalTarget {
    /// Reads a manifest `target` block (without its `engine` key).
    ///
    /// # Errors
    /// A [`TargetError`] that names the offending key.
    pub fn from_manifest(
        target: &Map<String, Value>,
        base_dir: &Path,
    ) -> Result<Self, TargetError> {
        let mut t: LocalTarget = parse_target(crate::KIND, target)?;
        if t.command.is_empty() || t.command[0].is_empty() {
            return Err(TargetError::at(
                "command",
                "local target: `command` must name a program",
            ));
        }
        if t.command[0].contains('/') && Path::new(&t.command[0]).is_relative() {
            t.command[0] = base_dir.join(&t.command[0]).to_string_lossy().into_owned();
        }
        t.working_dir = Some(match t.working_dir {
            Some(dir) if dir.is_relative() => base_dir.join(dir),
            Some(dir) => dir,
            None => base_dir.to_owned(),
        });
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<LocalTarget, String> {
        LocalTarget::from_manifest(v.as_object().expect("object"), Path::new("/srv/m"))
            .map_err(|e| e.message)
    }

    #[test]
    fn relative_paths_are_relative_to_the_manifest() {
        let t = parse(json!({"command": ["./run.sh", "x"], "working_dir": "work"})).expect("ok");
        assert_eq!(t.command, ["/srv/m/./run.sh", "x"]);
        assert_eq!(t.working_dir, Some(PathBuf::from("/srv/m/work")));
        let t = parse(json!({"command": ["sh"]})).expect("ok");
        assert_eq!(t.command, ["sh"]);
    }

    #[test]
    fn unknown_keys_and_empty_commands_are_named() {
        let e = parse(json!({"comand": ["x"]})).expect_err("unknown");
        assert!(e.contains("comand"), "{e}");
        let e = parse(json!({"command": []})).expect_err("empty");
        assert!(e.contains("command"), "{e}");
    }
}
