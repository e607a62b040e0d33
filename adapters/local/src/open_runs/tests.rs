use std::time::{Duration, SystemTime};

use chrono::Utc;
use flowgate_core::TaskState;

use super::*;
use crate::run_dir::write_atomic;

/// The record kept for the folder at `path`, if nothing in it has changed since it was read.
fn unchanged(path: &Path) -> Option<ExecutionRecord> {
    look(path).1
}

fn record(tool: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "tool": tool,
        "command": ["/bin/true"],
        "created_at": "2026-12-04T00:00:00Z",
        "principal_digest": "p",
        "boot_id": "b",
    }))
    .expect("json")
}

/// A folder is opened and read once, then held; a folder removed and made again under the
/// same name is the new one (with its own record), and a removed folder is not found.
#[test]
fn a_held_folder_serves_only_while_its_path_names_it() {
    let root = tempfile::tempdir().expect("dir");
    let dir = root.path().join("run1");
    std::fs::create_dir(&dir).expect("mkdir");
    write_atomic(&dir.join("meta.json"), &record("first")).expect("write");
    // Held only on a local file system (as the test's folder is on this machine).
    let local = rustix::fs::statfs(root.path()).is_ok_and(|s| local_file_system(s.f_type));
    let (_, first) = open(dir.clone()).expect("open");
    assert_eq!(first.tool, "first");
    let (run, again) = open(dir.clone()).expect("again");
    assert_eq!(Arc::ptr_eq(&first, &again), local, "the held record serves");
    assert!(run.seen("meta.json").expect("look").is_some());
    std::fs::remove_dir_all(&dir).expect("rm");
    assert_eq!(
        open(dir.clone()).expect_err("gone").kind(),
        io::ErrorKind::NotFound
    );
    std::fs::create_dir(&dir).expect("mkdir");
    assert_eq!(
        open(dir.clone()).expect_err("no record").kind(),
        io::ErrorKind::NotFound
    );
    write_atomic(&dir.join("meta.json"), &record("second")).expect("write");
    let (run, second) = open(dir.clone()).expect("new folder");
    assert_eq!(second.tool, "second");
    std::fs::write(dir.join("status"), b"x\n").expect("write");
    assert!(
        run.seen("status").expect("look").is_some(),
        "files are looked up in the new folder"
    );
    // Made again while the old one is held: the held one is let go for the new.
    let (_, held_before) = open(dir.clone()).expect("held");
    assert_eq!(Arc::ptr_eq(&second, &held_before), local);
    std::fs::rename(&dir, root.path().join("old")).expect("move away");
    std::fs::create_dir(&dir).expect("mkdir");
    write_atomic(&dir.join("meta.json"), &record("third")).expect("write");
    assert_eq!(open(dir.clone()).expect("newer").1.tool, "third");
}

/// A kept record is answered again only while nothing in its folder has changed: a file
/// replaced by a rename, written to, given another time or made (a `questions` folder), and
/// a folder made again under the same name, each end it. On a file system that is not
/// watched nothing is kept.
#[test]
fn a_kept_record_is_answered_only_while_nothing_in_its_folder_changed() {
    let root = tempfile::tempdir().expect("dir");
    let dir = root.path().join("run2");
    std::fs::create_dir(&dir).expect("mkdir");
    write_atomic(&dir.join("meta.json"), &record("t")).expect("write");
    std::fs::write(dir.join("stdout"), b"").expect("write");
    let watched = folders().inotify.is_some()
        && rustix::fs::statfs(root.path()).is_ok_and(|s| local_file_system(s.f_type));
    let working = ExecutionRecord::new(TaskState::Working, "running", Utc::now());
    // Opens the folder, reads it (after a look) and keeps what was read.
    let read_and_keep = || {
        open(dir.clone()).expect("open");
        let look = look(&dir).0;
        assert_eq!(
            look.is_some(),
            watched,
            "watched only on a local file system"
        );
        if let Some(look) = look {
            keep(&dir, look, &working);
        }
    };
    read_and_keep();
    if !watched {
        assert_eq!(unchanged(&dir), None);
        return;
    }
    assert_eq!(unchanged(&dir).as_ref(), Some(&working));
    assert_eq!(
        unchanged(&dir).as_ref(),
        Some(&working),
        "still nothing changed"
    );
    type Change<'a> = (&'a str, Box<dyn Fn() + 'a>);
    let changes: [Change; 4] = [
        (
            "a status replaced by a rename",
            Box::new(|| write_atomic(&dir.join("status"), b"step 2\n").expect("status")),
        ),
        (
            "output written",
            Box::new(|| {
                use std::io::Write as _;
                let mut out = std::fs::OpenOptions::new()
                    .append(true)
                    .open(dir.join("stdout"))
                    .expect("stdout");
                out.write_all(b"{}").expect("append");
            }),
        ),
        (
            "a changed time",
            Box::new(|| {
                std::fs::File::options()
                    .write(true)
                    .open(dir.join("stdout"))
                    .expect("stdout")
                    .set_modified(SystemTime::now() - Duration::from_secs(60))
                    .expect("touch");
            }),
        ),
        (
            "a questions folder",
            Box::new(|| std::fs::create_dir(dir.join("questions")).expect("mkdir")),
        ),
    ];
    for (what, change) in changes {
        change();
        assert_eq!(
            unchanged(&dir),
            None,
            "{what}: the kept record was answered"
        );
        read_and_keep();
        assert_eq!(
            unchanged(&dir).as_ref(),
            Some(&working),
            "{what}: read again"
        );
    }
    // The folder made again: the new one has nothing kept until it is read.
    std::fs::rename(&dir, root.path().join("old")).expect("move away");
    std::fs::create_dir(&dir).expect("mkdir");
    write_atomic(&dir.join("meta.json"), &record("t")).expect("write");
    open(dir.clone()).expect("open the new folder");
    assert_eq!(
        unchanged(&dir),
        None,
        "the old folder's record was answered"
    );
}

#[test]
fn only_file_systems_whose_changes_pass_through_this_kernel_are_watched() {
    for local in [0xEF53, 0x0102_1994, 0x794C_7630, 0x5846_5342] {
        assert!(local_file_system(local), "{local:#x}");
    }
    // NFS, SMB, FUSE (a network or user-space file system), and an unknown one.
    for other in [0x6969, 0xFE53_4D42, 0x6573_5546, 0] {
        assert!(!local_file_system(other), "{other:#x}");
    }
}

/// Past the most folders held, one held folder makes room for each new one: the newest is
/// held, and no more than the most are.
#[test]
fn past_the_most_held_each_new_folder_takes_the_place_of_one() {
    let root = tempfile::tempdir().expect("dir");
    let local = rustix::fs::statfs(root.path()).is_ok_and(|s| local_file_system(s.f_type));
    let mut last = None;
    for n in 0..MAX_HELD + 20 {
        let dir = root.path().join(format!("run{n}"));
        std::fs::create_dir(&dir).expect("mkdir");
        write_atomic(&dir.join("meta.json"), &record("t")).expect("write");
        let (_, meta) = open(dir.clone()).expect("open");
        last = Some((dir, meta));
        assert!(folders().held.len() <= MAX_HELD);
    }
    let (dir, meta) = last.expect("opened");
    let (_, again) = open(dir).expect("again");
    assert_eq!(
        Arc::ptr_eq(&meta, &again),
        local,
        "the newest folder is held"
    );
}
