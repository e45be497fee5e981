//! What sits in a watched directory cannot wedge, exhaust or blank the server: FIFOs,
//! devices, oversized and unreadable files are reported with their path, the last good state
//! stays, and the server keeps answering and following the other files.

use std::path::Path;
use std::process::Command;

use serde_json::Value;
use wayfinder::xds::TypeUrl;

use crate::support::ads::{Ads, names_of, sidecar};
use crate::support::binary::Wayfinder;
use crate::support::fixtures::{service_entry, write};

const HOST: &str = "echo.default.svc.cluster.local";

fn echo(port: u16) -> String {
    service_entry("echo", HOST, ("http", 8080, "HTTP"), &[port])
}

fn mkfifo(path: &Path) {
    let status = Command::new("mkfifo").arg(path).status().unwrap();
    assert!(status.success(), "mkfifo {}", path.display());
}

/// Waits for the WARN line that reports a source error naming `file` and saying `what`.
async fn reported(w: &Wayfinder, file: &Path, what: &str) -> Value {
    let file = file.display().to_string();
    w.wait_log(&format!("the error for {file} ({what})"), |l| {
        l["level"] == "WARN"
            && l["error"]
                .as_str()
                .is_some_and(|e| e.starts_with(&file) && e.contains(what))
    })
    .await
}

/// Waits until registry `name` is degraded by an error about `file` and returns that error.
async fn degraded_by(w: &Wayfinder, name: &str, file: &Path) -> Value {
    let status = w.wait_health(name, "degraded").await;
    let error = status["last_error"]["error"].clone();
    assert_eq!(error["origin"], file.display().to_string(), "{status}");
    error
}

/// Waits until the endpoints of `HOST` are `127.0.0.1:PORT`.
async fn serves(w: &Wayfinder, port: u16) {
    let want = [format!("127.0.0.1:{port}")];
    crate::support::eventually(&format!("{HOST} served at port {port}"), || async {
        (w.endpoints(HOST).await == want).then_some(())
    })
    .await;
}

/// Peak resident memory of the server, in MiB.
fn peak_rss_mib(w: &Wayfinder) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", w.pid())).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("VmHWM in /proc/PID/status");
    kib / 1024
}

#[tokio::test]
async fn a_fifo_is_reported_without_wedging_the_file_registry() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "echo.yaml", &echo(9001));
    let w = Wayfinder::with_files("", dir.path()).await;
    w.ready().await;
    serves(&w, 9001).await;

    // Opening a FIFO for reading waits for a writer: it used to block the registry for ever.
    let fifo = dir.path().join("x.yaml");
    mkfifo(&fifo);
    let line = reported(&w, &fifo, "not a regular file (a FIFO)").await;
    assert!(
        line["error"].as_str().unwrap().contains("invalid"),
        "{line}"
    );
    let error = degraded_by(&w, "File", &fifo).await;
    assert_eq!(error["kind"], "invalid");
    assert_eq!(
        w.get("/ready").await.0,
        200,
        "the last good state is served"
    );
    serves(&w, 9001).await;

    // The registry still follows the other files, and the FIFO's removal is a recovery.
    write(dir.path(), "echo.yaml", &echo(9002));
    serves(&w, 9002).await;
    std::fs::remove_file(&fifo).unwrap();
    w.wait_health("File", "healthy").await;
    serves(&w, 9002).await;
}

#[tokio::test]
async fn a_symlink_to_dev_zero_is_not_read() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "echo.yaml", &echo(9001));
    let w = Wayfinder::with_files("", dir.path()).await;
    w.ready().await;
    serves(&w, 9001).await;

    // It used to be read without limit: 6 GB in 9 s.
    let zero = dir.path().join("zero.yaml");
    std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
    reported(&w, &zero, "not a regular file (a character device)").await;
    degraded_by(&w, "File", &zero).await;
    let peak = peak_rss_mib(&w);
    assert!(peak < 256, "peak RSS {peak} MiB: /dev/zero was read");

    write(dir.path(), "echo.yaml", &echo(9002));
    serves(&w, 9002).await;
    std::fs::remove_file(&zero).unwrap();
    w.wait_health("File", "healthy").await;
}

#[tokio::test]
async fn a_file_over_the_default_limit_is_refused_unread_and_the_last_good_state_stays() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "echo.yaml", &echo(9001));
    let w = Wayfinder::with_files("", dir.path()).await;
    w.ready().await;
    serves(&w, 9001).await;

    // A sparse file of 2 GiB costs nothing to make; reading it cost 2 GB of RSS. It replaces
    // the good file, as an editor's save would.
    let tmp = dir.path().join(".echo.yaml.tmp");
    std::fs::File::create(&tmp)
        .unwrap()
        .set_len(2 << 30)
        .unwrap();
    let echo_path = dir.path().join("echo.yaml");
    std::fs::rename(&tmp, &echo_path).unwrap();
    reported(
        &w,
        &echo_path,
        "the file is 2147483648 bytes, over the limit of 67108864 bytes (--max-file-bytes)",
    )
    .await;
    degraded_by(&w, "File", &echo_path).await;
    serves(&w, 9001).await;
    let peak = peak_rss_mib(&w);
    assert!(peak < 256, "peak RSS {peak} MiB: the sparse file was read");
    assert_eq!(w.get("/ready").await.0, 200);

    write(dir.path(), "echo.yaml", &echo(9002));
    w.wait_health("File", "healthy").await;
    serves(&w, 9002).await;
}

#[tokio::test]
async fn max_file_bytes_limits_config_dir_files_and_their_objects_keep_their_last_good_version() {
    let dir = tempfile::tempdir().unwrap();
    let rule = |subset: &str, padding: usize| {
        format!(
            "# {}\napiVersion: networking.istio.io/v1\nkind: DestinationRule\n\
             metadata: {{name: echo, namespace: default}}\n\
             spec:\n  host: {HOST}\n  subsets:\n  - {{name: {subset}, labels: {{version: {subset}}}}}\n",
            "x".repeat(padding)
        )
    };
    write(dir.path(), "dr.yaml", &rule("v1", 0));
    write(dir.path(), "echo.yaml", &echo(9001));
    let dir_arg = dir.path().to_str().unwrap();
    let w = Wayfinder::start(&[
        "--config-dir",
        dir_arg,
        "--debounce-after",
        "10ms",
        "--max-file-bytes",
        "4096",
    ])
    .await;
    w.ready().await;
    serves(&w, 9001).await;

    // The same rule with another subset, padded past the limit: refused before it is read.
    let dr = dir.path().join("dr.yaml");
    let padded = rule("v2", 5000);
    write(dir.path(), "dr.yaml", &padded);
    let over = format!(
        "the file is {} bytes, over the limit of 4096 bytes",
        padded.len()
    );
    reported(&w, &dr, &over).await;
    let source = crate::support::eventually("config-dir degraded", || async {
        let z = w.json("/debug/configz").await;
        let source = z["sources"][0].clone();
        (source["health"] == "degraded").then_some(source)
    })
    .await;
    assert_eq!(
        source["last_error"]["error"]["origin"],
        dr.display().to_string(),
        "{source}"
    );
    // The `Config` registry reads the same directory with the same limit.
    degraded_by(&w, "Config", &dr).await;
    // The last good version of the rule is served: its subset's cluster, not the new one's.
    let mut ads = Ads::connect(w.grpc, sidecar("10.9.0.1", "default")).await;
    ads.subscribe(TypeUrl::Cluster, &[]).await;
    let cds = ads.recv_type(TypeUrl::Cluster).await;
    let clusters = names_of(&cds);
    assert!(clusters.contains(&subset_cluster("v1")), "{clusters:?}");
    assert!(!clusters.contains(&subset_cluster("v2")), "{clusters:?}");
    ads.ack(&cds, &[]).await;

    // Files under the limit are read as before.
    write(dir.path(), "echo.yaml", &echo(9002));
    serves(&w, 9002).await;
    write(dir.path(), "dr.yaml", &rule("v2", 0));
    loop {
        let cds = ads.recv_type(TypeUrl::Cluster).await;
        ads.ack(&cds, &[]).await;
        let clusters = names_of(&cds);
        if clusters.contains(&subset_cluster("v2")) {
            assert!(!clusters.contains(&subset_cluster("v1")), "{clusters:?}");
            break;
        }
    }
    crate::support::eventually("config-dir healthy", || async {
        let z = w.json("/debug/configz").await;
        (z["sources"][0]["health"] == "healthy").then_some(())
    })
    .await;
}

fn subset_cluster(subset: &str) -> String {
    format!("outbound|8080|{subset}|{HOST}")
}

/// Root reads any file whatever its mode (`CAP_DAC_OVERRIDE`), and the tests run as root. So
/// this test runs the server as `nobody` (`setpriv`), for which a file of mode 0600 owned by
/// root is a real "permission denied".
#[tokio::test]
async fn an_unreadable_file_is_an_error_and_its_last_good_contents_stay() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let mode = |path: &Path, mode: u32| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    };
    mode(dir.path(), 0o755);
    write(dir.path(), "echo.yaml", &echo(9001));
    let echo_path = dir.path().join("echo.yaml");
    mode(&echo_path, 0o644);
    let w = Wayfinder::start_as_nobody(&[
        "--registries",
        "File",
        "--file-registry",
        dir.path().to_str().unwrap(),
        "--debounce-after",
        "10ms",
    ])
    .await;
    w.ready().await;
    serves(&w, 9001).await;

    mode(&echo_path, 0o600);
    reported(&w, &echo_path, "Permission denied").await;
    let error = degraded_by(&w, "File", &echo_path).await;
    assert_eq!(error["kind"], "unavailable", "{error}");
    serves(&w, 9001).await;
    assert_eq!(w.get("/ready").await.0, 200);

    // Readable again (the mode change is an event of its own): read, and healthy again.
    mode(&echo_path, 0o644);
    w.wait_health("File", "healthy").await;
    write(dir.path(), "echo.yaml", &echo(9002));
    serves(&w, 9002).await;
}
