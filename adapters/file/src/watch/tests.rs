use std::fs;
use std::time::Duration;

use super::*;

const DEADLINE: Duration = Duration::from_secs(10);

async fn next(watch: &mut Watch) -> WatchEvent {
    match tokio::time::timeout(DEADLINE, watch.next()).await {
        Ok(Some(event)) => event,
        Ok(None) => panic!("the watch ended"),
        Err(_) => panic!("no event within {DEADLINE:?}"),
    }
}

/// Collects reported paths until `path` is among them; fails on an `Unavailable`.
async fn changed_until(watch: &mut Watch, path: &Path) -> BTreeSet<PathBuf> {
    let mut seen = BTreeSet::new();
    while !seen.contains(path) {
        match next(watch).await {
            WatchEvent::Changed(paths) => seen.extend(paths),
            other => panic!("unexpected {other:?} while waiting for {}", path.display()),
        }
    }
    seen
}

/// Writes a file the way editors save: a hidden temporary file renamed over the target.
fn save(path: &Path, text: &str) {
    let name = path.file_name().unwrap().to_string_lossy();
    let tmp = path.with_file_name(format!(".{name}.tmp"));
    fs::write(&tmp, text).unwrap();
    fs::rename(&tmp, path).unwrap();
}

#[test]
fn config_file_names() {
    for name in ["a.yaml", "a.yml", "a.json", "A.YAML", "a.b.yaml"] {
        assert!(is_config_file(OsStr::new(name)), "{name}");
    }
    for name in [
        ".a.yaml",
        "a.yaml~",
        "a.yaml.swp",
        ".a.yaml.swp",
        "a.txt",
        "yaml",
        ".yaml",
        "a.yaml.bak",
    ] {
        assert!(!is_config_file(OsStr::new(name)), "{name}");
    }
}

#[tokio::test]
async fn the_first_event_lists_the_config_files_present() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    for name in ["b.yaml", "a.json", ".hidden.yaml", "c.yaml~", "notes.txt"] {
        fs::write(root.join(name), "x").unwrap();
    }
    fs::create_dir(root.join("sub.yaml")).unwrap();
    fs::write(root.join("sub.yaml/inner.yaml"), "x").unwrap();
    let mut watch = Watch::new(&[Target::Dir(root.to_path_buf())], CancellationToken::new());
    assert_eq!(
        next(&mut watch).await,
        WatchEvent::Changed(vec![root.join("a.json"), root.join("b.yaml")])
    );
}

#[tokio::test]
async fn fifos_and_devices_are_reported_for_the_reader_to_refuse() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let fifo = root.join("fifo.yaml");
    let status = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(status.success());
    let zero = root.join("zero.yaml");
    std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
    std::os::unix::fs::symlink(root.join("missing"), root.join("dangling.yaml")).unwrap();
    let mut watch = Watch::new(&[Target::Dir(root.to_path_buf())], CancellationToken::new());
    assert_eq!(
        next(&mut watch).await,
        WatchEvent::Changed(vec![fifo.clone(), zero.clone()]),
        "listed (never opened) at start, so that the reader says what they are"
    );

    // Created later, too.
    let late = root.join("late.yaml");
    let status = std::process::Command::new("mkfifo")
        .arg(&late)
        .status()
        .unwrap();
    assert!(status.success());
    changed_until(&mut watch, &late).await;
}

#[tokio::test]
async fn creates_saves_renames_and_deletes_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let mut watch = Watch::new(&[Target::Dir(root.to_path_buf())], CancellationToken::new());
    assert_eq!(next(&mut watch).await, WatchEvent::Changed(vec![]));

    let a = root.join("a.yaml");
    fs::write(&a, "one").unwrap();
    changed_until(&mut watch, &a).await;

    save(&a, "two");
    let seen = changed_until(&mut watch, &a).await;
    assert_eq!(
        seen,
        BTreeSet::from([a.clone()]),
        "hidden temp files are not reported"
    );

    let b = root.join("b.yml");
    fs::rename(&a, &b).unwrap();
    let seen = changed_until(&mut watch, &b).await;
    if !seen.contains(&a) {
        changed_until(&mut watch, &a).await;
    }
    assert!(!a.exists());

    fs::remove_file(&b).unwrap();
    changed_until(&mut watch, &b).await;
}

#[tokio::test]
async fn a_file_target_reports_only_that_file() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let target = root.join("services.conf");
    fs::write(&target, "x").unwrap();
    let mut watch = Watch::new(&[Target::File(target.clone())], CancellationToken::new());
    assert_eq!(
        next(&mut watch).await,
        WatchEvent::Changed(vec![target.clone()])
    );

    fs::write(root.join("sibling.yaml"), "x").unwrap();
    save(&target, "y");
    let seen = changed_until(&mut watch, &target).await;
    assert_eq!(seen, BTreeSet::from([target.clone()]));

    fs::remove_file(&target).unwrap();
    changed_until(&mut watch, &target).await;
    fs::write(&target, "again").unwrap();
    changed_until(&mut watch, &target).await;
}

#[tokio::test]
async fn a_vanished_directory_is_reported_and_picked_up_when_back() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("config");
    fs::create_dir(&root).unwrap();
    let (a, b) = (root.join("a.yaml"), root.join("b.yaml"));
    fs::write(&a, "x").unwrap();
    let mut watch = Watch::new(&[Target::Dir(root.clone())], CancellationToken::new());
    assert_eq!(next(&mut watch).await, WatchEvent::Changed(vec![a.clone()]));

    fs::remove_dir_all(&root).unwrap();
    match next(&mut watch).await {
        WatchEvent::Unavailable { path, reason } => {
            assert_eq!(path, root);
            assert!(reason.contains("gone"), "{reason}");
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }

    // The directory comes back whole, as a renamed staging directory.
    let staging = dir.path().join("staging");
    fs::create_dir(&staging).unwrap();
    fs::write(staging.join("b.yaml"), "x").unwrap();
    fs::rename(&staging, &root).unwrap();
    match next(&mut watch).await {
        WatchEvent::Restored { path, changed } => {
            assert_eq!(path, root);
            // `a` was deleted while the directory was away: it is reported too.
            assert_eq!(changed, vec![a.clone(), b.clone()]);
        }
        other => panic!("expected Restored, got {other:?}"),
    }

    // Watched again: new changes are seen.
    save(&a, "y");
    changed_until(&mut watch, &a).await;
}

#[tokio::test]
async fn shutdown_ends_the_watch() {
    let dir = tempfile::tempdir().unwrap();
    let shutdown = CancellationToken::new();
    let mut watch = Watch::new(&[Target::Dir(dir.path().to_path_buf())], shutdown.clone());
    next(&mut watch).await;
    shutdown.cancel();
    let end = tokio::time::timeout(DEADLINE, watch.next()).await;
    assert_eq!(end, Ok(None));
}

#[cfg(unix)]
#[tokio::test]
async fn a_config_map_volume_swap_reports_its_files() {
    use std::os::unix::fs::symlink;

    // The layout kubelet writes: files are symlinks through `..data` to a timestamped
    // directory, and an update swaps `..data` by renaming a new symlink over it.
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    fs::create_dir(root.join("..2024_01")).unwrap();
    fs::write(root.join("..2024_01/svc.yaml"), "one").unwrap();
    symlink("..2024_01", root.join("..data")).unwrap();
    symlink("..data/svc.yaml", root.join("svc.yaml")).unwrap();
    let svc = root.join("svc.yaml");
    let mut watch = Watch::new(&[Target::Dir(root.to_path_buf())], CancellationToken::new());
    assert_eq!(
        next(&mut watch).await,
        WatchEvent::Changed(vec![svc.clone()])
    );

    fs::create_dir(root.join("..2024_02")).unwrap();
    fs::write(root.join("..2024_02/svc.yaml"), "two").unwrap();
    symlink("..2024_02", root.join("..data_tmp")).unwrap();
    fs::rename(root.join("..data_tmp"), root.join("..data")).unwrap();
    changed_until(&mut watch, &svc).await;
    assert_eq!(fs::read_to_string(&svc).unwrap(), "two");
}
