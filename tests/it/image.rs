//! The container images (`deploy/image/`, built by `scripts/image`): the test runs the script
//! with a tag of its own, then starts the images. No container engine runs on these machines,
//! so it runs each image's exact root filesystem with `buildah run --isolation chroot` (the
//! image's user and working directory, the caller's network):
//! - on the host's loopback, `wayfinder discovery` on the demo registry serves the demo mesh
//!   over ADS as uid 1337, with its CA in the image's default `--ca-dir`;
//! - the proxy image's Envoy is 1.40, where the agent looks for it by default;
//! - in a network namespace of the test's own (as a pod's, so default ports), the proxy image's
//!   agent runs as a gateway beside the control-plane image's server: it starts the image's
//!   Envoy as uid 1337, which gets ready with the demo mesh's clusters.
//!
//! It needs buildah (Debian's, installed by `scripts/install-test-tools`), root, and Envoy in
//! `.tools` (the proxy image copies it). Without them it skips with a notice, or fails under
//! `WAYFINDER_REQUIRE_TOOLS=1` (see `tools`). `scripts/image` builds the release binary with
//! cargo: `scripts/test` runs it before `cargo test`, so here cargo finds it up to date (cargo
//! does not hold its target-directory lock while tests run, so a cold build works too, slowly).
//! Both images and every container are removed at the end, also when the test fails.

use std::io::Write;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;

use rustix::process::Signal;
use serde_json::Value;
use tokio::process::Command;
use wayfinder::xds::TypeUrl::Cluster as CDS;

use crate::support::ads::{Ads, names_of, sidecar};
use crate::support::agent::{STATUS, is_envoy, kill};
use crate::support::binary::{LOOPBACK, Wayfinder, stop_gracefully};
use crate::support::eventually;
use crate::support::logs::Logs;
use crate::support::netns::Netns;
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

/// `buildah run` arguments for `argv` in `container`, as the image's user, in the caller's
/// network (the host's, or a namespace the caller entered), with `env` set.
fn run_args(container: &str, env: &[(&str, &str)], argv: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = [
        "--storage-driver",
        &driver(),
        "run",
        "--isolation",
        "chroot",
    ]
    .into_iter()
    .chain(["--network", "host"])
    .map(str::to_owned)
    .collect();
    for (name, value) in env {
        args.extend(["--env".to_owned(), format!("{name}={value}")]);
    }
    args.extend(
        [container, "--"]
            .into_iter()
            .chain(argv.iter().copied())
            .map(str::to_owned),
    );
    args
}

/// `buildah run` of `argv` in `container`, in the host's network.
fn run_in(container: &str, argv: &[&str]) -> Command {
    let mut command = Command::new("buildah");
    command.args(run_args(container, &[], argv));
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

    a_gateway_from_the_proxy_image_gets_the_mesh(&mut cleanup, &tag, &proxy_tag).await;
}

/// The proxy image's agent as a gateway (`proxy router`) beside the control-plane image's
/// server, both on their default ports in a network namespace of their own, as in a pod: the
/// agent starts the image's Envoy (its default `--binary-path`) as uid 1337, which takes the
/// demo mesh from the server and gets ready.
async fn a_gateway_from_the_proxy_image_gets_the_mesh(
    cleanup: &mut Cleanup,
    tag: &str,
    proxy_tag: &str,
) {
    let netns = Netns::new();
    let server_container = cleanup.container(tag).await;
    let mut command = netns.command("buildah");
    command.args(run_args(
        &server_container,
        &[],
        &[
            "/usr/local/bin/wayfinder",
            "discovery",
            "--log-format",
            "json",
        ],
    ));
    let server = Wayfinder::spawn_under_runner(command).await;
    let ready = SocketAddr::from(([127, 0, 0, 1], server.http.port()));
    eventually(
        "the server's /ready to answer 200 in the namespace",
        || async { (netns.get(ready, "/ready").await.0 == 200).then_some(()) },
    )
    .await;

    let proxy_container = cleanup.container(proxy_tag).await;
    let mut command = netns.command("buildah");
    command
        .args(run_args(
            &proxy_container,
            &[
                ("INSTANCE_IP", "127.0.0.1"),
                ("POD_NAME", "ingress"),
                ("POD_NAMESPACE", "default"),
            ],
            &[
                "/usr/local/bin/wayfinder",
                "agent",
                "proxy",
                "router",
                "--discovery-address",
                "127.0.0.1:15010",
                "--log-format",
                "json",
            ],
        ))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = command.spawn().expect("buildah run the agent");
    let logs = Logs::collect(child.stderr.take().expect("piped stderr"));
    let agent = RunningAgent { child, logs };
    let started = agent
        .logs
        .wait("the agent to start Envoy", |l| {
            l["message"] == "started Envoy"
        })
        .await;
    let pid = started["pid"].as_u64().expect("Envoy's pid");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    assert!(
        status.lines().any(|l| l.starts_with("Uid:\t1337\t")),
        "Envoy does not run as uid 1337:\n{status}"
    );
    eventually("the agent's /healthz/ready to answer 200", || async {
        (netns.get(STATUS.parse().unwrap(), "/healthz/ready").await.0 == 200).then_some(())
    })
    .await;
    let (_, clusters) = netns
        .get("127.0.0.1:15000".parse().unwrap(), "/clusters")
        .await;
    assert!(
        clusters.contains("outbound|9080||reviews.default.svc.cluster.local"),
        "the gateway's Envoy lacks the demo mesh's clusters:\n{clusters}"
    );
    drop(agent);
    drop(server);
}

/// `buildah run` of the agent. Dropping it sends buildah SIGTERM (it stops the agent), waits,
/// then kills any Envoy the agent started that is still running, by pid.
struct RunningAgent {
    child: tokio::process::Child,
    logs: Logs,
}

impl Drop for RunningAgent {
    fn drop(&mut self) {
        stop_gracefully(&mut self.child);
        let _ = self.child.start_kill();
        for line in self.logs.matching(|l| l["message"] == "started Envoy") {
            if let Some(pid) = line["pid"].as_u64().and_then(|p| u32::try_from(p).ok())
                && is_envoy(pid)
            {
                let _ = kill(pid, Signal::KILL);
            }
        }
    }
}
