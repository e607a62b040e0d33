//! The state folder's safety: private to the user the server runs as.
//!
//! Run folders hold call arguments, outputs and answers, and a `pid` file that `tasks/cancel`
//! signals; a folder another local user can read or plant files in leaks the first and turns
//! the second into a way to make the server signal someone else's processes.

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::Path;

/// Creates `path` (and missing parents) readable by this user only.
pub(crate) fn create_private_dir(path: &Path) -> io::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
}

/// Makes `dir` ready to hold runs: creates it private if missing, and refuses one owned by
/// another user or writable by group or others, with an error that says how to fix it.
///
/// # Errors
/// A message naming the folder, what is wrong and the fix.
pub fn prepare_state_dir(dir: &Path) -> Result<(), String> {
    let runs = dir.join("runs");
    create_private_dir(&runs)
        .map_err(|e| format!("cannot create the state folder {}: {e}", runs.display()))?;
    let me = nix::unistd::geteuid().as_raw();
    for folder in [dir, runs.as_path()] {
        let meta = fs::metadata(folder)
            .map_err(|e| format!("cannot read the state folder {}: {e}", folder.display()))?;
        if meta.uid() != me {
            return Err(format!(
                "the state folder {} belongs to uid {}, not to this user (uid {me}): another user \
                 could read the runs or plant files in it; choose a folder of your own with \
                 --state-dir (or FLOWGATE_STATE_DIR)",
                folder.display(),
                meta.uid()
            ));
        }
        if meta.permissions().mode() & 0o022 != 0 {
            return Err(format!(
                "the state folder {} is writable by group or others (mode {:o}); run \
                 `chmod 700 {}` or choose another folder with --state-dir",
                folder.display(),
                meta.permissions().mode() & 0o777,
                folder.display()
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_state_folder_is_private() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("state");
        prepare_state_dir(&dir).expect("prepare");
        for d in [&dir, &dir.join("runs")] {
            let mode = fs::metadata(d).expect("meta").permissions().mode() & 0o777;
            assert_eq!(mode, 0o700, "{}", d.display());
        }
    }

    #[test]
    fn a_folder_others_can_write_is_refused_with_the_fix() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("state");
        fs::create_dir(&dir).expect("mkdir");
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o777)).expect("chmod");
        let e = prepare_state_dir(&dir).expect_err("world-writable");
        assert!(e.contains("chmod 700"), "{e}");
        assert!(e.contains("--state-dir"), "{e}");
    }

    #[test]
    fn a_folder_of_another_user_is_refused() {
        // /proc/1 exists on Linux and belongs to root; as root, use a folder given away.
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("theirs");
        fs::create_dir_all(dir.join("runs")).expect("mkdir");
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).expect("chmod");
        fs::set_permissions(dir.join("runs"), fs::Permissions::from_mode(0o700)).expect("chmod");
        if nix::unistd::geteuid().is_root() {
            std::os::unix::fs::chown(&dir, Some(65534), Some(65534)).expect("chown");
        } else {
            // Not root: the only folders of another user we can name are the system's.
            let e = prepare_state_dir(Path::new("/")).expect_err("root's folder");
            assert!(
                e.contains("belongs to uid 0") || e.contains("cannot create"),
                "{e}"
            );
            return;
        }
        let e = prepare_state_dir(&dir).expect_err("another user's folder");
        assert!(e.contains("belongs to uid 65534"), "{e}");
    }
}
