use std::os::unix::fs::symlink;
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::process::Command;

use super::*;

fn mkfifo(path: &Path) {
    let status = Command::new("mkfifo").arg(path).status().unwrap();
    assert!(status.success(), "mkfifo {}", path.display());
}

fn kind(result: Result<Option<Vec<u8>>, ReadError>) -> &'static str {
    match result {
        Err(ReadError::NotRegular { kind }) => kind,
        other => panic!("expected NotRegular, got {other:?}"),
    }
}

#[test]
fn a_regular_file_is_read_whole_up_to_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.yaml");
    fs::write(&path, b"12345").unwrap();
    assert_eq!(read(&path, 5).unwrap().as_deref(), Some(&b"12345"[..]));
    match read(&path, 4) {
        Err(ReadError::TooLarge { size: 5, limit: 4 }) => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_fifo_is_refused_without_waiting_for_a_writer() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.yaml");
    mkfifo(&path);
    assert_eq!(kind(read(&path, 1024)), "a FIFO");
    // Through a symlink too: what counts is what the path leads to.
    let link = dir.path().join("link.yaml");
    symlink(&path, &link).unwrap();
    assert_eq!(kind(read(&link, 1024)), "a FIFO");
}

#[test]
fn devices_and_sockets_are_refused_unread() {
    let dir = tempfile::tempdir().unwrap();
    let zero = dir.path().join("zero.yaml");
    symlink("/dev/zero", &zero).unwrap();
    assert_eq!(kind(read(&zero, u64::MAX)), "a character device");
    let socket = dir.path().join("s.yaml");
    let _listener = UnixListener::bind(&socket).unwrap();
    assert_eq!(kind(read(&socket, 1024)), "a socket");
}

#[test]
fn a_sparse_file_over_the_limit_is_refused_by_its_size() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.yaml");
    let file = File::create(&path).unwrap();
    file.set_len(2 << 30).unwrap();
    match read(&path, DEFAULT_MAX_FILE_BYTES) {
        Err(err @ ReadError::TooLarge { .. }) => {
            let message = err.to_string();
            assert!(
                message.contains("2147483648 bytes") && message.contains("--max-file-bytes"),
                "{message}"
            );
            assert!(matches!(err.at(&path), RegistryError::Invalid { .. }));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_path_without_a_file_reads_as_none() {
    let dir = tempfile::tempdir().unwrap();
    let gone: PathBuf = dir.path().join("gone.yaml");
    assert_eq!(read(&gone, 1024).unwrap(), None);
    let sub = dir.path().join("sub.yaml");
    fs::create_dir(&sub).unwrap();
    assert_eq!(read(&sub, 1024).unwrap(), None);
    let dangling = dir.path().join("dangling.yaml");
    symlink(&gone, &dangling).unwrap();
    assert_eq!(read(&dangling, 1024).unwrap(), None);
}

#[test]
fn errors_name_the_path_and_keep_the_last_good_state() {
    let path = Path::new("/etc/wayfinder/x.yaml");
    let err = ReadError::NotRegular { kind: "a FIFO" }.at(path);
    assert_eq!(
        err.to_string(),
        "/etc/wayfinder/x.yaml: invalid: not a regular file (a FIFO); only regular files are \
         read; its last good contents stay"
    );
    let denied = io::Error::from(ErrorKind::PermissionDenied);
    assert!(matches!(
        ReadError::Io(denied).at(path),
        RegistryError::Unavailable { .. }
    ));
}
