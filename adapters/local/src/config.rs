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
    /// The program each run is supervised by: the flowgate binary, which acts as a supervisor
    /// when given [`crate::SUPERVISE_ARG`] first (module `supervisor`). Without one the engine
    /// cannot start commands, and says so.
    pub supervisor: Option<PathBuf>,
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
    /// Names of the server's environment variables the command also gets. A command starts
    /// with a cleared environment (see [`BASE_ENV`]); nothing else of the server's reaches it.
    #[serde(default)]
    pub env_passthrough: Vec<String>,
    /// The working folder (relative to the manifest's folder); the manifest's folder by default.
    #[serde(default)]
    pub working_dir: Option<PathBuf>,
    /// What happens to processes the command started that are still running when it ends by
    /// itself (a daemon it detached, a child it did not wait for): `kill` (the default) ends
    /// them before the run reads finished; `leave` lets them run on, for a tool whose job is to
    /// start a service. A cancel ends them either way.
    #[serde(default)]
    pub leftover_processes: LeftoverProcesses,
}

/// The manifest's `leftover_processes`: whether a run that ends by itself ends what it leaves.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LeftoverProcesses {
    /// Every process the run started is ended when the command ends (the default).
    #[default]
    Kill,
    /// Processes the command leaves running when it ends by itself run on.
    Leave,
}

impl LeftoverProcesses {
    /// The word the supervisor is given (module `supervisor`).
    pub(crate) fn as_arg(self) -> &'static str {
        match self {
            LeftoverProcesses::Kill => "kill",
            LeftoverProcesses::Leave => "leave",
        }
    }

    /// The setting named by [`Self::as_arg`].
    pub(crate) fn from_arg(arg: &str) -> Option<Self> {
        match arg {
            "kill" => Some(LeftoverProcesses::Kill),
            "leave" => Some(LeftoverProcesses::Leave),
            _ => None,
        }
    }
}

/// The server's variables every command gets (when the server has them): enough to find
/// programs and format text, nothing that grants access to anything.
pub const BASE_ENV: [&str; 4] = ["PATH", "HOME", "LANG", "TZ"];

/// Variables no command may get, whatever its manifest says: the handle sealing keys.
const NEVER_PASSED: &str = "FLOWGATE_HANDLE_KEYS";

/// Whether `name` is a usable environment variable name.
fn valid_env_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
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
        for name in t.env.keys() {
            check_env_name("env", name)?;
        }
        for name in &t.env_passthrough {
            check_env_name("env_passthrough", name)?;
        }
        // A manifest given as a bare file name has an empty folder: that is the current one.
        let base_dir = absolute(base_dir);
        let base_dir = base_dir.as_path();
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

fn check_env_name(key: &str, name: &str) -> Result<(), TargetError> {
    if !valid_env_name(name) {
        return Err(TargetError::at(
            key,
            format!(
                "local target: `{name}` is not an environment variable name (letters, digits and _)"
            ),
        ));
    }
    if name.starts_with(NEVER_PASSED) {
        return Err(TargetError::at(
            key,
            format!(
                "local target: `{name}` holds the server's handle keys and is never given to a command"
            ),
        ));
    }
    Ok(())
}

/// `dir` made absolute against the current folder (an empty path is the current folder).
fn absolute(dir: &Path) -> PathBuf {
    if dir.is_absolute() {
        return dir.to_owned();
    }
    match std::env::current_dir() {
        Ok(cwd) => cwd.join(dir),
        Err(_) if dir.as_os_str().is_empty() => PathBuf::from("."),
        Err(_) => dir.to_owned(),
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
    fn a_bare_manifest_file_name_means_the_current_folder() {
        let t = LocalTarget::from_manifest(
            json!({"command": ["./run.sh"]})
                .as_object()
                .expect("object"),
            Path::new(""),
        )
        .expect("ok");
        let cwd = std::env::current_dir().expect("cwd");
        assert_eq!(t.working_dir, Some(cwd.clone()));
        assert_eq!(t.command[0], cwd.join("./run.sh").to_string_lossy());
    }

    #[test]
    fn handle_keys_can_never_be_given_to_a_command() {
        let e = parse(json!({"command": ["x"], "env_passthrough": ["FLOWGATE_HANDLE_KEYS"]}))
            .expect_err("passthrough of the keys");
        assert!(e.contains("never given"), "{e}");
        let e = parse(json!({"command": ["x"], "env": {"FLOWGATE_HANDLE_KEYS_FILE": "/k"}}))
            .expect_err("env of the keys");
        assert!(e.contains("never given"), "{e}");
        let e = parse(json!({"command": ["x"], "env_passthrough": ["A-B"]})).expect_err("name");
        assert!(e.contains("A-B"), "{e}");
        let t = parse(json!({"command": ["x"], "env_passthrough": ["AWS_PROFILE"]})).expect("ok");
        assert_eq!(t.env_passthrough, ["AWS_PROFILE"]);
    }

    #[test]
    fn unknown_keys_and_empty_commands_are_named() {
        let e = parse(json!({"comand": ["x"]})).expect_err("unknown");
        assert!(e.contains("comand"), "{e}");
        let e = parse(json!({"command": []})).expect_err("empty");
        assert!(e.contains("command"), "{e}");
    }

    #[test]
    fn leftover_processes_are_killed_unless_the_tool_says_leave() {
        let t = parse(json!({"command": ["x"]})).expect("ok");
        assert_eq!(t.leftover_processes, LeftoverProcesses::Kill);
        let t = parse(json!({"command": ["x"], "leftover_processes": "leave"})).expect("ok");
        assert_eq!(t.leftover_processes, LeftoverProcesses::Leave);
        let e = parse(json!({"command": ["x"], "leftover_processes": "keep"})).expect_err("bad");
        assert!(
            e.contains("leftover_processes") || e.contains("keep"),
            "{e}"
        );
        for setting in [LeftoverProcesses::Kill, LeftoverProcesses::Leave] {
            assert_eq!(LeftoverProcesses::from_arg(setting.as_arg()), Some(setting));
        }
    }
}
