//! The container images (`deploy/image/`, built by `scripts/image`): the test runs the script
//! with a tag of its own, then starts the image. No container engine runs on these machines,
//! so it runs the image's exact root filesystem with `buildah run --isolation chroot` (the
//! image's user and working directory; the host's network, so the test reaches its loopback
//! ports): `wayfinder discovery` on the demo registry serves the demo mesh over ADS as uid
//! 1337, and the proxy image's Envoy is 1.40 where the agent looks for it.
//!
//! It needs buildah (Debian's, installed by `scripts/install-test-tools`), root, and Envoy in
//! `.tools` (the proxy image copies it). Without them it skips with a notice, or fails under
//! `WAYFINDER_REQUIRE_TOOLS=1` (see `tools`). `scripts/image` builds the release binary with
//! cargo: `scripts/test` runs it before `cargo test`, so here cargo finds it up to date (cargo
//! does not hold its target-directory lock while tests run, so a cold build works too, slowly).
//! Both images and every container are removed at the end, also when the test fails.

use std::io::Write;
use std::path::Path;
use std::process::Stdio;

use serde_json::Value;
use tokio::process::Command;
use wayfinder::xds::TypeUrl::Cluster as CDS;

use crate::support::ads::{Ads, names_of, sidecar};
use crate::support::binary::{LOOPBACK, Wayfinder};
use crate::tools;

/// The storage driver `scripts/image` uses (its default, or what the environment says).
fn driver() -> String {
    std::env::var("WAYFINDER_IMAGE_STORAGE_DRIVER").unwrap_or_else(|_| "vfs".to_owned())
}

/// Whether buildah runs; without it, prints a notice, or fails when the run requires the
/// tools.
fn buildah_available() -> bool {
    let found = std::process::Command::new("buildah")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        let why = "buildah not found on PATH: install it with scripts/install-test-tools \
                   (Debian: apt-get install --no-install-recommends buildah)";
        assert!(!tools::required(), "{}=1 but {why}", tools::REQUIRE_ENV);
        let _ = writeln!(std::io::stderr(), "SKIP: image tests: {why}");
    }
    found
}

/// Runs `buildah --storage-driver DRIVER ARGS` and returns its standard output, trimmed.
async fn buildah(args: &[&str]) -> String {
    let mut command = Command::new("buildah");
    command.args(["--storage-driver", &driver()]).args(args);
    succeed(command, &format!("buildah {args:?}")).await
}

/// Runs `command`, fails the test with its standard error unless it succeeds, and returns its
/// standard output, trimmed.
async fn succeed(mut command: Command, what: &str) -> String {
    let out = command
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap_or_else(|e| panic!("run {what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The images and containers a test made; removed (containers first) when dropped.
struct Cleanup {
    images: Vec<String>,
    containers: Vec<String>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let driver = driver();
        for (what, names) in [("rm", &self.containers), ("rmi", &self.images)] {
            if names.is_empty() {
                continue;
            }
            let _ = std::process::Command::new("buildah")
                .args(["--storage-driver", &driver, what])
                .args(names)
                .stdout(Stdio::null())
                .status();
        }
    }
}

impl Cleanup {
    /// `buildah from` the image: a container (its root filesystem) to run and inspect.
    async fn container(&mut self, image: &str) -> String {
        let name = format!(
            "{}-{}",
            image.replace([':', '/'], "-"),
            self.containers.len()
        );
        buildah(&["from", "--pull-never", "--name", &name, image]).await;
        self.containers.push(name.clone());
        name
    }
}

/// `buildah run` of `argv` in `container`, as the image's user, in the host's network.
fn run_in(container: &str, argv: &[&str]) -> Command {
    let mut command = Command::new("buildah");
    command
        .args(["--storage-driver", &driver(), "run"])
        .args([
            "--isolation",
            "chroot",
            "--network",
            "host",
            container,
            "--",
        ])
        .args(argv);
    command
}

/// The image's OCI configuration (`User`, `Entrypoint`, `ExposedPorts`, …).
async fn config(image: &str) -> Value {
    let json = buildah(&["inspect", "--type", "image", image]).await;
    let inspected: Value = serde_json::from_str(&json)
        .unwrap_or_else(|e| panic!("buildah inspect {image} ({e}): {json}"));
    inspected["OCIv1"]["config"].clone()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_images_serve_the_demo_mesh_as_non_root_and_carry_envoy() {
    if tools::tools().is_none() || !buildah_available() {
        return;
    }
    let unique = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_nanos();
    let tag = format!("wayfinder-it:image-{}-{unique}", std::process::id());
    let proxy_tag = format!("{tag}-proxy");
    // Declared first, so it is dropped last: after the server in the container stopped.
    let mut cleanup = Cleanup {
        images: vec![proxy_tag.clone(), tag.clone()],
        containers: Vec::new(),
    };
    let mut script = Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/image"));
    script.arg(&tag);
    succeed(script, &format!("scripts/image {tag}")).await;

    let base = config(&tag).await;
    assert_eq!(base["User"], "1337:1337", "{base}");
    assert_eq!(
        base["Entrypoint"],
        serde_json::json!(["/usr/local/bin/wayfinder"])
    );
    assert_eq!(base["Cmd"], serde_json::json!(["discovery"]));
    for port in ["8080/tcp", "15010/tcp", "15012/tcp"] {
        assert!(
            base["ExposedPorts"].get(port).is_some(),
            "{port} not exposed: {base}"
        );
    }

    // The image's entrypoint and command, on loopback ports the OS picks, with the secure
    // port's self-signed CA made in the image's default `--ca-dir` (relative to WORKDIR /).
    let container = cleanup.container(&tag).await;
    let mut argv = vec!["/usr/local/bin/wayfinder", "discovery"];
    argv.extend(&LOOPBACK[..6]);
    argv.extend(["--secure-grpc-addr", "127.0.0.1:0", "--log-format", "json"]);
    let server = Wayfinder::spawn_under_runner(run_in(&container, &argv)).await;
    server.ready().await;
    let ca = server
        .wait_log("the CA loaded", |l| l["message"] == "mesh CA loaded")
        .await;
    assert_eq!(
        ca["origin"], "self-signed root made in ./var/lib/wayfinder/ca",
        "{ca}"
    );
    server.secure_grpc().await;

    let registries = server.json("/debug/registryz").await;
    let mock = &registries["registries"][0];
    assert_eq!(mock["status"]["registry"], "Mock", "{registries}");
    assert_eq!(mock["status"]["health"], "healthy", "{registries}");
    let mut ads = Ads::connect(server.grpc, sidecar("10.1.0.9", "default")).await;
    ads.subscribe(CDS, &[]).await;
    let clusters = names_of(&ads.recv_type(CDS).await);
    assert!(
        clusters.contains(&"outbound|9080||reviews.default.svc.cluster.local".to_owned()),
        "the demo mesh's reviews service is not served: {clusters:?}"
    );
    drop(ads);
    drop(server);

    // The CA it wrote is uid 1337's: the server ran as the image's user, not root.
    let rootfs = buildah(&["mount", &container]).await;
    let root_cert = Path::new(&rootfs).join("var/lib/wayfinder/ca/root-cert.pem");
    let owner = std::os::unix::fs::MetadataExt::uid(
        &std::fs::metadata(&root_cert).unwrap_or_else(|e| panic!("{}: {e}", root_cert.display())),
    );
    assert_eq!(
        owner,
        1337,
        "{} is owned by uid {owner}",
        root_cert.display()
    );
    buildah(&["umount", &container]).await;

    // The proxy image: Envoy 1.40 at the agent's default --binary-path.
    let proxy = cleanup.container(&proxy_tag).await;
    let version = succeed(
        run_in(&proxy, &["/usr/local/bin/envoy", "--version"]),
        "envoy --version in the proxy image",
    )
    .await;
    assert!(version.contains("/1.40."), "envoy --version: {version}");
    let help = succeed(
        run_in(
            &proxy,
            &["/usr/local/bin/wayfinder", "agent", "proxy", "--help"],
        ),
        "wayfinder agent proxy --help in the proxy image",
    )
    .await;
    assert!(
        help.contains("[default: /usr/local/bin/envoy]"),
        "the agent does not look for Envoy where the proxy image has it:\n{help}"
    );
    let proxy_config = config(&proxy_tag).await;
    assert_eq!(proxy_config["User"], "1337:1337", "{proxy_config}");
    assert_eq!(
        proxy_config["Entrypoint"],
        serde_json::json!(["/usr/local/bin/wayfinder", "agent"])
    );
}
