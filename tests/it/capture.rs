//! `wayfinder agent capture` in a network namespace of its own, with Debian's nftables: the
//! rules it installs and removes, and an application's plain request to a mesh service that
//! goes through the sidecar the agent runs and reaches a backend, as in a pod.

use std::process::Output;

use crate::gateway::backend_in;
use crate::support::agent::Agent;
use crate::support::binary::{Wayfinder, path};
use crate::support::eventually;
use crate::support::fixtures::write;
use crate::support::netns::Netns;
use crate::tools::{Tools, tools};

/// Runs `program args` in `netns` with the test tools' `nft` first on `PATH`.
async fn run(netns: &Netns, tools: &Tools, program: &str, args: &[&str]) -> Output {
    netns
        .command(program)
        .args(args)
        .env("PATH", tools.path_with_netfilter())
        .output()
        .await
        .unwrap_or_else(|e| panic!("{program}: {e}"))
}

async fn ruleset(netns: &Netns, tools: &Tools) -> String {
    let out = run(netns, tools, "nft", &["list", "ruleset"]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `wayfinder agent capture ARGS` in `netns`, failing the test with its error.
pub(crate) async fn capture(netns: &Netns, tools: &Tools, args: &[&str]) {
    let mut all = vec!["agent", "capture"];
    all.extend_from_slice(args);
    let out = run(netns, tools, path(), &all).await;
    assert!(
        out.status.success(),
        "wayfinder agent capture {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The ServiceEntry `echo` (address 10.96.0.5, HTTP port 80) with one endpoint at
/// `address:port`.
fn echo_entry(address: &str, port: u16) -> String {
    format!(
        "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\n\
         metadata: {{name: echo, namespace: default}}\nspec:\n  \
         hosts: [echo.default.svc.cluster.local]\n  addresses: [10.96.0.5]\n  \
         location: MESH_INTERNAL\n  resolution: STATIC\n  \
         ports: [{{number: 80, name: http, protocol: HTTP}}]\n  \
         endpoints: [{{address: {address}, ports: {{http: {port}}}}}]\n"
    )
}

/// The application of the pod `netns`, running as nobody, asks `http://10.96.0.5/` in plain
/// HTTP: `STATUS BODY`, or nothing when it failed.
async fn app_request(netns: &Netns, tools: &Tools) -> String {
    let script = "import urllib.request\n\
                  r = urllib.request.urlopen('http://10.96.0.5/', timeout=5)\n\
                  print(r.status, r.read().decode())";
    let out = netns
        .command("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&tools.python)
        .args(["-c", script])
        .env("no_proxy", "*")
        .output()
        .await
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Runs `ip args` in `netns`, failing the test with its error.
async fn ip(netns: &Netns, tools: &Tools, args: &[&str]) {
    let out = run(netns, tools, "ip", args).await;
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn capture_installs_its_own_table_once_and_cleanup_removes_exactly_it() {
    let Some(tools) = tools() else { return };
    let netns = Netns::new();
    // Someone else's table, which capture must leave alone.
    let theirs = "table ip theirs {\n\tchain output {\n\t\ttype filter hook output priority 0; policy accept;\n\t}\n}\n";
    let mut add = netns.command("nft");
    add.args(["-f", "-"])
        .env("PATH", tools.path_with_netfilter())
        .stdin(std::process::Stdio::piped());
    let mut child = add.spawn().unwrap();
    use tokio::io::AsyncWriteExt;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(theirs.as_bytes())
        .await
        .unwrap();
    assert!(child.wait().await.unwrap().success());
    let before = ruleset(&netns, &tools).await;

    capture(
        &netns,
        &tools,
        &["-u", "1337", "-o", "22", "-x", "10.0.0.0/8", "-d", "8080"],
    )
    .await;
    let once = ruleset(&netns, &tools).await;
    assert!(once.contains("table inet wayfinder"), "{once}");
    assert!(
        once.contains("redirect to :15001") && once.contains("redirect to :15006"),
        "{once}"
    );
    assert!(
        once.contains("meta skuid 1337 return"),
        "the proxy's uid is excluded: {once}"
    );
    assert!(once.contains("tcp dport 22 return"), "-o: {once}");
    assert!(once.contains("ip daddr 10.0.0.0/8 return"), "-x: {once}");
    assert!(
        once.contains("8080, 15020, 15021, 15090"),
        "-d and the proxy's ports: {once}"
    );
    capture(
        &netns,
        &tools,
        &["-u", "1337", "-o", "22", "-x", "10.0.0.0/8", "-d", "8080"],
    )
    .await;
    assert_eq!(
        ruleset(&netns, &tools).await,
        once,
        "a second run replaces, never duplicates"
    );

    capture(&netns, &tools, &["--cleanup"]).await;
    assert_eq!(
        ruleset(&netns, &tools).await,
        before,
        "cleanup removes exactly what capture added"
    );
    capture(&netns, &tools, &["--cleanup"]).await;

    // Without nft or iptables on PATH: a clear error.
    let out = netns
        .command(path())
        .args(["agent", "capture"])
        .env("PATH", "/nonexistent")
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("neither nft (nftables) nor iptables-restore"),
        "{stderr}"
    );
}

#[tokio::test]
async fn an_application_s_plain_request_goes_through_the_captured_sidecar_to_a_backend() {
    let Some(tools) = tools() else { return };
    let netns = Netns::new();
    // The pod's network: an interface with the pod's address and a default route, so that a
    // service address leaves through it (and is captured on the way).
    for args in [
        &["link", "add", "wf0", "type", "veth", "peer", "name", "wf1"][..],
        &["addr", "add", "10.1.1.5/24", "dev", "wf0"],
        &["link", "set", "wf0", "up"],
        &["link", "set", "wf1", "up"],
        &["route", "add", "default", "dev", "wf0"],
    ] {
        ip(&netns, &tools, args).await;
    }
    let (_backend, port) = backend_in(netns.command(&tools.python), &tools, "echo", &[]).await;
    let dir = tempfile::tempdir().unwrap();
    let files = dir.path().join("files");
    std::fs::create_dir_all(&files).unwrap();
    write(&files, "echo.yaml", &echo_entry("127.0.0.1", port));
    let wrapper = netns.wrapper();
    let wrapper: Vec<&str> = wrapper.iter().map(String::as_str).collect();
    let f = files.display().to_string();
    let w = Wayfinder::start_under(
        &wrapper,
        &[
            "--registries",
            "File",
            "--file-registry",
            &f,
            "--debounce-after",
            "10ms",
        ],
    )
    .await;

    // The agent and Envoy run as root here, so root is the proxy's user; the application runs
    // as nobody.
    capture(&netns, &tools, &["-u", "0", "-g", "0"]).await;
    let envoy = tools.envoy.display().to_string();
    let discovery = w.grpc.to_string();
    let agent = Agent::start(
        &netns,
        dir.path(),
        "sidecar",
        &[
            "--binary-path",
            &envoy,
            "--discovery-address",
            &discovery,
            "--certs-dir",
            "certs",
        ],
        &[
            ("INSTANCE_IP", "10.1.1.5"),
            ("POD_NAME", "app"),
            ("POD_NAMESPACE", "default"),
        ],
    )
    .await;
    agent.ready(&netns).await;

    eventually("the application's request to reach the backend", || async {
        (app_request(&netns, &tools).await == "200 echo").then_some(())
    })
    .await;
    // It went through the sidecar: Envoy counted it in the service's outbound cluster.
    let admin = agent.admin(0).await;
    let (_, stats) = netns.get(admin, "/stats?filter=upstream_rq_200").await;
    assert!(
        stats.contains("cluster.outbound|80||echo.default.svc.cluster.local.upstream_rq_200: "),
        "{stats}"
    );
    capture(&netns, &tools, &["--cleanup"]).await;
}

/// Two pods: network namespaces with the addresses 10.1.1.5 (A) and 10.1.1.6 (B), joined by
/// a veth pair.
pub(crate) async fn two_pods(tools: &Tools) -> (Netns, Netns) {
    let (a, b) = (Netns::new(), Netns::new());
    let b_pid = b.pid().to_string();
    ip(
        &a,
        tools,
        &[
            "link", "add", "wfa", "type", "veth", "peer", "name", "wfb", "netns", &b_pid,
        ],
    )
    .await;
    for (ns, dev, addr) in [(&a, "wfa", "10.1.1.5/24"), (&b, "wfb", "10.1.1.6/24")] {
        ip(ns, tools, &["addr", "add", addr, "dev", dev]).await;
        ip(ns, tools, &["link", "set", dev, "up"]).await;
        ip(ns, tools, &["route", "add", "default", "dev", dev]).await;
    }
    (a, b)
}

/// The control plane in pod A (see [`two_pods`]), its plaintext ADS port on pod A's address,
/// with the File registry of `files` and `args` besides.
pub(crate) async fn discovery_in_pod_a(
    a: &Netns,
    tools: &Tools,
    files: &std::path::Path,
    args: &[&str],
) -> Wayfinder {
    discovery_in_pod_a_at(a, tools, files, "10.1.1.5:15010", args).await
}

/// [`discovery_in_pod_a`] with its plaintext ADS port at `grpc`: a second control plane there.
pub(crate) async fn discovery_in_pod_a_at(
    a: &Netns,
    tools: &Tools,
    files: &std::path::Path,
    grpc: &str,
    args: &[&str],
) -> Wayfinder {
    let f = files.display().to_string();
    let mut all = vec!["--registries", "File", "--file-registry", &f];
    all.extend_from_slice(&["--debounce-after", "10ms"]);
    all.extend_from_slice(args);
    let mut discovery = a.command(path());
    discovery.env("PATH", tools.path_with_netfilter());
    Wayfinder::start_in(discovery, grpc, &all).await
}

#[tokio::test]
async fn two_pods_on_one_machine_exchange_captured_traffic_through_both_sidecars() {
    let Some(tools) = tools() else { return };
    let (a, b) = two_pods(&tools).await;
    // The workload of pod B, on its loopback as a container's server would be; its service's
    // endpoint is pod B's address.
    let (_app, port) = backend_in(b.command(&tools.python), &tools, "pod-b", &[]).await;
    let dir = tempfile::tempdir().unwrap();
    let files = dir.path().join("files");
    std::fs::create_dir_all(&files).unwrap();
    write(&files, "echo.yaml", &echo_entry("10.1.1.6", port));
    // The control plane runs in pod A, on its address, where pod B's proxy reaches it.
    let w = discovery_in_pod_a(&a, &tools, &files, &[]).await;
    // Pod A's capture leaves the control plane's port alone, inbound (pod B's proxy) and
    // outbound (its own proxy, which would otherwise be sent to its inbound port, as a proxy
    // calling its own pod's address is).
    capture(
        &a,
        &tools,
        &["-u", "0", "-g", "0", "-d", "15010", "-o", "15010"],
    )
    .await;
    capture(&b, &tools, &["-u", "0", "-g", "0"]).await;
    let envoy = tools.envoy.display().to_string();
    let mut agents = Vec::new();
    for (ns, name, address) in [(&a, "pod-a", "10.1.1.5"), (&b, "pod-b", "10.1.1.6")] {
        let pod_dir = dir.path().join(name);
        std::fs::create_dir_all(&pod_dir).unwrap();
        let agent = Agent::start(
            ns,
            &pod_dir,
            "sidecar",
            &[
                "--binary-path",
                &envoy,
                "--discovery-address",
                "10.1.1.5:15010",
                "--certs-dir",
                "certs",
            ],
            &[
                ("INSTANCE_IP", address),
                ("POD_NAME", name),
                ("POD_NAMESPACE", "default"),
            ],
        )
        .await;
        agent.ready(ns).await;
        agents.push(agent);
    }

    // Pod A's application, as nobody, asks the service's address in plain HTTP.
    eventually("pod A's request to reach pod B's workload", || async {
        (app_request(&a, &tools).await == "200 pod-b").then_some(())
    })
    .await;
    // Through both sidecars: out of pod A's outbound cluster, into pod B's inbound one.
    let admin_a = agents[0].admin(0).await;
    let (_, stats_a) = a.get(admin_a, "/stats?filter=upstream_rq_200").await;
    assert!(
        stats_a.contains("cluster.outbound|80||echo.default.svc.cluster.local.upstream_rq_200: "),
        "{stats_a}"
    );
    let admin_b = agents[1].admin(0).await;
    let (_, stats_b) = b
        .get(admin_b, "/stats?filter=inbound.*upstream_rq_200")
        .await;
    assert!(
        stats_b.contains(&format!("cluster.inbound|{port}||")),
        "{stats_b}"
    );
    drop(w);
}
