//! Mutual TLS between workloads with real Envoy 1.40 under the real agent: two pods (network
//! namespaces joined by a veth pair, traffic captured by `wayfinder agent capture`), each
//! sidecar with a workload certificate from the server's CA. Pod A's application asks pod B's
//! service in plain HTTP; its sidecar originates mesh mTLS (auto mTLS, then Istio's bookinfo
//! `destination-rule-all-mtls.yaml`), pod B's sidecar terminates it as its PeerAuthentication
//! says: STRICT, PERMISSIVE, DISABLE. Certificates rotate under a request loop. An east-west
//! gateway (`AUTO_PASSTHROUGH`) passes a mesh client's mTLS through to pod B by Istio's SNI.

use std::path::Path;
use std::process::Stdio;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::bookinfo::{MUTUAL, sample};
use crate::capture::{capture, discovery_in_pod_a, two_pods};
use crate::gateway::backend_in;
use crate::mesh_identity::envoy_certificates;
use crate::support::agent::Agent;
use crate::support::binary::Wayfinder;
use crate::support::eventually;
use crate::support::fixtures::{istio_file, write};
use crate::support::netns::Netns;
use crate::tools::{Tools, tools};

/// The identities of the two pods, as their bootstrap tokens give them, the east-west
/// gateway's, and another workload's (a mesh client that is neither pod).
const TOKENS: &str = "pod-a-token-000000001 default sleep\npod-b-token-000000001 default reviews\n\
                      eastwest-token-000001 default istio-eastwestgateway\n\
                      other-token-000000001 default other\n";
/// Pod A's SPIFFE id.
pub(crate) const SLEEP: &str = "spiffe://cluster.local/ns/default/sa/sleep";

/// The ServiceEntry `reviews` (address 10.96.0.5, HTTP port 80) with pod B's workload as its
/// endpoint, running as the service account `reviews`: as in Istio, a workload entry with a
/// service account speaks mesh mTLS (`security.istio.io/tlsMode: istio`).
fn reviews_entry(port: u16) -> String {
    format!(
        "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\n\
         metadata: {{name: reviews, namespace: default}}\nspec:\n  \
         hosts: [reviews.default.svc.cluster.local]\n  addresses: [10.96.0.5]\n  \
         location: MESH_INTERNAL\n  resolution: STATIC\n  \
         ports: [{{number: 80, name: http, protocol: HTTP}}]\n  \
         endpoints: [{{address: 10.1.1.6, ports: {{http: {port}}}, serviceAccount: reviews, \
         labels: {{version: v1}}}}]\n"
    )
}

/// The namespace `default`'s PeerAuthentication in `mode`.
fn peer_authentication(mode: &str) -> String {
    format!(
        "apiVersion: security.istio.io/v1\nkind: PeerAuthentication\n\
         metadata: {{name: default, namespace: default}}\nspec:\n  mtls: {{mode: {mode}}}\n"
    )
}

/// A plain HTTP GET of `url` by Python in `netns` as `user` (`nobody`: pod A's application,
/// whose traffic the capture sends through the sidecar; `root`: a client outside the mesh,
/// which the capture leaves alone): `STATUS BODY XFCC`, or `failed: ERROR`.
pub(crate) async fn request(netns: &Netns, tools: &Tools, user: &str, url: &str) -> String {
    request_with(netns, tools, user, "GET", url).await
}

/// [`request`] with another method. An HTTP error status is `failed:` with it
/// (`<HTTPError 403: 'Forbidden'>`).
pub(crate) async fn request_with(
    netns: &Netns,
    tools: &Tools,
    user: &str,
    method: &str,
    url: &str,
) -> String {
    request_with_headers(netns, tools, user, method, url, &[]).await
}

/// [`request_with`] with request headers (`name`, `value`).
pub(crate) async fn request_with_headers(
    netns: &Netns,
    tools: &Tools,
    user: &str,
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
) -> String {
    let headers: String = headers
        .iter()
        .map(|(name, value)| format!("'{name}': '{value}', "))
        .collect();
    let script = format!(
        "import urllib.request\n\
         try:\n    \
             q = urllib.request.Request('{url}', method='{method}', headers={{{headers}}})\n    \
             r = urllib.request.urlopen(q, timeout=5)\n    \
             print(r.status, r.read().decode(), r.headers.get('x-xfcc', '-'))\n\
         except Exception as e:\n    \
             print('failed:', repr(e))"
    );
    let id = if user == "root" { "0" } else { "65534" };
    let out = netns
        .command("setpriv")
        .args([
            &format!("--reuid={id}"),
            &format!("--regid={id}"),
            "--clear-groups",
        ])
        .arg(&tools.python)
        .args(["-c", &script])
        .env("no_proxy", "*")
        .output()
        .await
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Pod A's application asking the `reviews` service through its sidecar.
pub(crate) async fn from_mesh(a: &Netns, tools: &Tools) -> String {
    request(a, tools, "nobody", "http://10.96.0.5/").await
}

/// A client outside the mesh asking pod B's workload directly, in plaintext.
async fn from_outside(a: &Netns, tools: &Tools, port: u16) -> String {
    request(a, tools, "root", &format!("http://10.1.1.6:{port}/")).await
}

/// The value of the counter `name` on an Envoy's admin port (0 when it has none yet).
async fn counter(netns: &Netns, admin: std::net::SocketAddr, name: &str) -> u64 {
    let (_, stats) = netns.get(admin, &format!("/stats?filter=^{name}$")).await;
    stats
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}: ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Pod A's cluster of the `reviews` service, as its Envoy holds it.
async fn reviews_cluster(a: &Netns, admin: std::net::SocketAddr) -> Option<Value> {
    let (_, dump) = a
        .get(admin, "/config_dump?resource=dynamic_active_clusters")
        .await;
    let clusters: Value = serde_json::from_str(&dump).ok()?;
    let reviews = clusters["configs"]
        .as_array()?
        .iter()
        .find(|c| c["cluster"]["name"] == "outbound|80||reviews.default.svc.cluster.local")?;
    Some(reviews["cluster"].clone())
}

/// How many filter chains of the inbound listener an Envoy holds terminate TLS (none when it
/// has no such listener yet).
async fn inbound_mtls_chains(netns: &Netns, admin: std::net::SocketAddr) -> Option<usize> {
    let (_, dump) = netns
        .get(admin, "/config_dump?resource=dynamic_listeners")
        .await;
    let listeners: Value = serde_json::from_str(&dump).ok()?;
    let inbound = listeners["configs"]
        .as_array()?
        .iter()
        .find(|l| l["name"] == "virtualInbound")?;
    let chains = inbound["active_state"]["listener"]["filter_chains"].as_array()?;
    Some(
        chains
            .iter()
            .filter(|c| !c["transport_socket"].is_null())
            .count(),
    )
}

/// pod B's inbound TLS handshakes.
const HANDSHAKES: &str = "listener.0.0.0.0_15006.ssl.handshake";

/// Requests from pod A's application in a loop (Python as nobody), until its stdin closes:
/// `OK FAILED` and the first failures.
struct AppLoop(tokio::process::Child);

impl AppLoop {
    fn start(a: &Netns, tools: &Tools) -> Self {
        let script = "import sys, threading, urllib.request\n\
                      stop = threading.Event()\n\
                      threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()\n\
                      ok, failed = 0, []\n\
                      while not stop.is_set():\n    \
                          try:\n        \
                              r = urllib.request.urlopen('http://10.96.0.5/', timeout=5)\n        \
                              body = r.read().decode()\n        \
                              if r.status == 200 and body == 'pod-b':\n            \
                                  ok += 1\n        \
                              else:\n            \
                                  failed.append(f'{r.status} {body}')\n    \
                          except Exception as e:\n        \
                              failed.append(repr(e))\n\
                      print(ok, len(failed), failed[:5])";
        let child = a
            .command("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(&tools.python)
            .args(["-c", script])
            .env("no_proxy", "*")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start the request loop");
        Self(child)
    }

    /// Stops the loop: requests answered by pod B, and the failures' summary.
    async fn stop(mut self) -> (u64, String) {
        let mut stdin = self.0.stdin.take().unwrap();
        stdin.shutdown().await.unwrap();
        drop(stdin);
        let mut out = String::new();
        self.0
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut out)
            .await
            .unwrap();
        let (ok, rest) = out.trim().split_once(' ').expect("OK FAILED [...]");
        (ok.parse().unwrap(), rest.to_string())
    }
}

/// Starts an agent in `netns` in `role` for `pod` (address `ip`, service account `sa`, and
/// `env` besides), with its certificate from the server's CA (`ca`: its `--ca-dir`) through
/// `token_file`, and waits for its Envoy to be ready.
async fn mesh_agent(
    netns: &Netns,
    mesh: &Mesh,
    role: &str,
    (pod, ip, sa): (&str, &str, &str),
    env: &[(&str, &str)],
    token_file: &Path,
) -> Agent {
    let pod_dir = mesh.dir.path().join(pod);
    std::fs::create_dir_all(&pod_dir).unwrap();
    let root = mesh.ca.join("root-cert.pem").display().to_string();
    let token = token_file.display().to_string();
    let envoy = mesh.tools.envoy.display().to_string();
    let mut all_env = vec![
        ("INSTANCE_IP", ip),
        ("POD_NAME", pod),
        ("POD_NAMESPACE", "default"),
        ("SERVICE_ACCOUNT", sa),
    ];
    all_env.extend_from_slice(env);
    let agent = Agent::start(
        netns,
        &pod_dir,
        role,
        &[
            "--binary-path",
            &envoy,
            "--discovery-address",
            "10.1.1.5:15012",
            "--control-plane-auth-policy",
            "MUTUAL_TLS",
            "--ca-root-cert",
            &root,
            "--bootstrap-token-file",
            &token,
            "--secret-ttl",
            "30s",
        ],
        &all_env,
    )
    .await;
    agent.ready(netns).await;
    agent
}

/// Two pods and the control plane in pod A, with its secure port on pod A's address; pod B
/// runs the `reviews` workload (its port `port`) and has its traffic captured. `config` is
/// the server's `--config-dir`.
pub(crate) struct Mesh {
    pub(crate) tools: Tools,
    pub(crate) a: Netns,
    pub(crate) b: Netns,
    pub(crate) dir: tempfile::TempDir,
    pub(crate) config: std::path::PathBuf,
    pub(crate) ca: std::path::PathBuf,
    pub(crate) port: u16,
    /// The server and pod B's workload, stopped when this is dropped.
    pub(crate) server: Wayfinder,
    _app: tokio::process::Child,
}

impl Mesh {
    /// Starts it with `configs` (file name, YAML) in the `--config-dir`.
    pub(crate) async fn start(tools: Tools, configs: &[(&str, &str)]) -> Self {
        let (a, b) = two_pods(&tools).await;
        // Pod B's workload, on its loopback as a container's server would be.
        let (app, port) = backend_in(b.command(&tools.python), &tools, "pod-b", &[]).await;
        let dir = tempfile::tempdir().unwrap();
        let (files, config, ca) = (
            dir.path().join("files"),
            dir.path().join("config"),
            dir.path().join("ca"),
        );
        for d in [&files, &config, &ca] {
            std::fs::create_dir_all(d).unwrap();
        }
        write(&files, "reviews.yaml", &reviews_entry(port));
        for (name, yaml) in configs {
            write(&config, name, yaml);
        }
        write(dir.path(), "tokens", TOKENS);
        for (file, token) in [
            ("token-a", "pod-a-token-000000001"),
            ("token-b", "pod-b-token-000000001"),
            ("token-eastwest", "eastwest-token-000001"),
        ] {
            write(dir.path(), file, &format!("{token}\n"));
        }
        // The control plane runs in pod A; its secure port is on pod A's address, where pod
        // B's agent reaches it, with a certificate that names that address.
        let arg = |p: &Path| p.display().to_string();
        let (c, t, d) = (arg(&config), arg(&dir.path().join("tokens")), arg(&ca));
        let w = discovery_in_pod_a(
            &a,
            &tools,
            &files,
            &[
                "--config-dir",
                &c,
                "--secure-grpc-addr",
                "10.1.1.5:15012",
                "--secure-grpc-san",
                "10.1.1.5,localhost",
                "--ca-dir",
                &d,
                "--bootstrap-tokens",
                &t,
            ],
        )
        .await;
        capture(&b, &tools, &["-u", "0", "-g", "0"]).await;
        Self {
            tools,
            a,
            b,
            dir,
            config,
            ca,
            port,
            server: w,
            _app: app,
        }
    }

    /// The token file of `name` (`a`, `b`, `eastwest`).
    pub(crate) fn token(&self, name: &str) -> std::path::PathBuf {
        self.dir.path().join(format!("token-{name}"))
    }

    /// Pod B's sidecar, as `reviews`, labelled `app: reviews`.
    pub(crate) async fn sidecar_b(&self) -> Agent {
        let token = self.token("b");
        let labels = [("ISTIO_METAJSON_LABELS", r#"{"app": "reviews"}"#)];
        mesh_agent(
            &self.b,
            self,
            "sidecar",
            ("pod-b", "10.1.1.6", "reviews"),
            &labels,
            &token,
        )
        .await
    }

    /// Pod A's sidecar, as `sleep`, with pod A's traffic captured but the control plane's.
    pub(crate) async fn sidecar_a(&self) -> Agent {
        capture(
            &self.a,
            &self.tools,
            &[
                "-u",
                "0",
                "-g",
                "0",
                "-d",
                "15010,15012",
                "-o",
                "15010,15012",
            ],
        )
        .await;
        let token = self.token("a");
        mesh_agent(
            &self.a,
            self,
            "sidecar",
            ("pod-a", "10.1.1.5", "sleep"),
            &[],
            &token,
        )
        .await
    }

    /// Another workload in pod B (an HTTP server, served as TCP), behind the ServiceEntry
    /// `echo-tcp` (address 10.96.0.6, TCP port 9000, service account `reviews`): the process
    /// and its port.
    pub(crate) async fn tcp_service(&self) -> (tokio::process::Child, u16) {
        let (app, port) = backend_in(
            self.b.command(&self.tools.python),
            &self.tools,
            "pod-b-tcp",
            &[],
        )
        .await;
        let entry = format!(
            "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\n\
             metadata: {{name: echo-tcp, namespace: default}}\nspec:\n  \
             hosts: [echo-tcp.default.svc.cluster.local]\n  addresses: [10.96.0.6]\n  \
             location: MESH_INTERNAL\n  resolution: STATIC\n  \
             ports: [{{number: 9000, name: tcp, protocol: TCP}}]\n  \
             endpoints: [{{address: 10.1.1.6, ports: {{tcp: {port}}}, serviceAccount: reviews}}]\n"
        );
        write(&self.dir.path().join("files"), "echo-tcp.yaml", &entry);
        (app, port)
    }

    /// A certificate of the mesh for the identity of the bootstrap token `token` (its key
    /// made here), written with the root to a directory of its own (`chain.pem`, `key.pem`,
    /// `root.pem`) for [`mtls_request`].
    pub(crate) async fn client_certificate(&self, token: &'static str) -> std::path::PathBuf {
        let root = std::fs::read_to_string(self.ca.join("root-cert.pem")).unwrap();
        let root_pem = root.clone();
        let (chain, key) = self
            .a
            .block_on(move || async move {
                let addr = "10.1.1.5:15012".parse().unwrap();
                let channel = crate::secure::channel(addr, &root_pem, None).await;
                let (csr, key) = crate::secure::csr();
                let chain = crate::secure::create(channel, &csr, Some(token))
                    .await
                    .expect("a certificate");
                (chain, key)
            })
            .await;
        let dir = self.dir.path().join(format!("client-{token}"));
        std::fs::create_dir_all(&dir).unwrap();
        write(&dir, "chain.pem", &chain.concat());
        write(&dir, "key.pem", &key);
        write(&dir, "root.pem", &root);
        dir
    }
}

#[tokio::test]
async fn sidecars_speak_mutual_tls_as_peer_authentication_says_and_rotate_certificates_under_load()
{
    let Some(tools) = tools() else { return };
    let mesh = Mesh::start(tools, &[("peer.yaml", &peer_authentication("STRICT"))]).await;
    let Mesh {
        tools,
        a,
        b,
        config,
        port,
        ..
    } = &mesh;
    let (tools, port) = (tools, *port);
    let agent_a = mesh.sidecar_a().await;
    let agent_b = mesh.sidecar_b().await;
    let (admin_a, admin_b) = (agent_a.admin(0).await, agent_b.admin(0).await);

    // STRICT, auto mTLS: pod A's request reaches pod B's workload over mTLS, which names pod
    // A's identity to it; a plaintext client outside the mesh is refused.
    let answer = eventually("pod A's request to reach pod B over mTLS", || async {
        let answer = from_mesh(a, tools).await;
        answer.starts_with("200 pod-b ").then_some(answer)
    })
    .await;
    assert!(answer.contains(&format!("URI={SLEEP}")), "{answer}");
    let handshakes = counter(b, admin_b, HANDSHAKES).await;
    assert!(
        handshakes > 0,
        "no TLS handshake on pod B's inbound listener"
    );
    let outside = from_outside(a, tools, port).await;
    assert!(outside.starts_with("failed:"), "STRICT served {outside:?}");

    // Istio's bookinfo rule turns ISTIO_MUTUAL on explicitly: served to pod A's sidecar with
    // Istio's SNI, and requests still reach pod B over mTLS.
    write(config, MUTUAL, &sample(MUTUAL));
    eventually("pod A's cluster to carry the rule's mTLS", || async {
        let reviews = reviews_cluster(a, admin_a).await?;
        let socket = &reviews["transport_socket"]["typed_config"];
        (socket["sni"] == "outbound_.80_._.reviews.default.svc.cluster.local").then_some(())
    })
    .await;
    let answer = from_mesh(a, tools).await;
    assert!(
        answer.starts_with("200 pod-b ") && answer.contains(SLEEP),
        "{answer}"
    );

    // Rotation: both certificates (30 s) are renewed during a request loop, which loses no
    // request, and neither Envoy restarts.
    let first_b = envoy_certificates(b, admin_b).await;
    let requests = AppLoop::start(a, tools);
    for agent in [&agent_a, &agent_b] {
        agent
            .logs
            .wait("the renewed certificate", |l| {
                l["message"] == "obtained the workload certificate" && l["serial"] == 2
            })
            .await;
    }
    eventually("pod B's Envoy to hold its renewed certificate", || async {
        let now = envoy_certificates(b, admin_b).await;
        (!now.is_empty() && now.iter().all(|c| !first_b.contains(c))).then_some(())
    })
    .await;
    let (ok, failed) = requests.stop().await;
    eprintln!("workload mTLS: {ok} requests through the rotation, failures: {failed}");
    assert!(ok > 0, "{failed}");
    assert!(
        failed.starts_with("0 "),
        "requests failed during the rotation: {failed}"
    );
    for agent in [&agent_a, &agent_b] {
        assert_eq!(agent.envoys().len(), 1, "an Envoy was restarted");
    }

    // PERMISSIVE: mTLS from the mesh and plaintext from outside, both served.
    write(config, "peer.yaml", &peer_authentication("PERMISSIVE"));
    let outside = eventually("PERMISSIVE to serve plaintext", || async {
        let answer = from_outside(a, tools, port).await;
        answer.starts_with("200 pod-b ").then_some(answer)
    })
    .await;
    assert!(
        outside.ends_with(" -"),
        "no client identity in plaintext: {outside}"
    );
    let answer = from_mesh(a, tools).await;
    assert!(answer.contains(SLEEP), "{answer}");

    // DISABLE: plaintext only. Once pod B's Envoy has it, pod A's ISTIO_MUTUAL requests fail
    // (as soon as the connections of the old chains have drained); without the rule, auto
    // mTLS sees pod B's DISABLE and sends plaintext, which is served.
    write(config, "peer.yaml", &peer_authentication("DISABLE"));
    eventually("pod B's Envoy to take plaintext only", || async {
        (inbound_mtls_chains(b, admin_b).await == Some(0)).then_some(())
    })
    .await;
    eventually("DISABLE to refuse pod A's mTLS", || async {
        let answer = from_mesh(a, tools).await;
        (!answer.starts_with("200 ")).then_some(())
    })
    .await;
    assert!(from_outside(a, tools, port).await.starts_with("200 pod-b "));
    std::fs::remove_file(config.join(MUTUAL)).unwrap();
    // Pod A's cluster is replaced (its pooled mTLS connections with it).
    eventually("pod A's cluster to turn to auto mTLS", || async {
        let reviews = reviews_cluster(a, admin_a).await?;
        reviews["transport_socket_matches"].is_array().then_some(())
    })
    .await;
    let answer = eventually("auto mTLS to send plaintext under DISABLE", || async {
        let answer = from_mesh(a, tools).await;
        answer.starts_with("200 pod-b ").then_some(answer)
    })
    .await;
    assert!(
        answer.ends_with(" -"),
        "plaintext has no client identity: {answer}"
    );
}

/// Istio's east-west gateway, as its multicluster sample exposes services: a TLS server on
/// 15443 that passes mesh mTLS through by SNI (`AUTO_PASSTHROUGH`), selecting
/// `istio: eastwestgateway`, in the namespace `default`.
const EASTWEST: &str = "multicluster_expose-services.yaml";

/// A mesh client in pod A (Python's `ssl`, as root, so not captured): mTLS to `target` with
/// SNI `sni`, ALPN `istio` and the certificate in `dir` (see [`Mesh::client_certificate`]),
/// then `METHOD PATH` over HTTP/1.1: `STATUS BODY [SERVER URIS] [XFCC]`, or `failed: ERROR`
/// (also when the server closes the connection without an answer).
pub(crate) async fn mtls_request(
    mesh: &Mesh,
    dir: &Path,
    target: (&str, u16),
    sni: &str,
    method: &str,
    path: &str,
) -> String {
    let file = |name: &str| dir.join(name).display().to_string();
    let script = format!(
        "import socket, ssl\n\
         ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)\n\
         ctx.check_hostname = False\n\
         ctx.load_verify_locations('{root}')\n\
         ctx.load_cert_chain('{chain}', '{key}')\n\
         ctx.set_alpn_protocols(['istio'])\n\
         try:\n    \
             with socket.create_connection(('{host}', {port}), timeout=5) as raw:\n        \
                 with ctx.wrap_socket(raw, server_hostname='{sni}') as s:\n            \
                     uris = [v for k, v in s.getpeercert().get('subjectAltName', ()) if k == 'URI']\n            \
                     s.sendall(b'{method} {path} HTTP/1.1\\r\\nHost: reviews\\r\\nConnection: close\\r\\n\\r\\n')\n            \
                     data = b''\n            \
                     while True:\n                \
                         chunk = s.recv(65536)\n                \
                         if not chunk:\n                    \
                             break\n                \
                         data += chunk\n    \
             if not data:\n        \
                 raise ConnectionError('closed without an answer')\n    \
             head, _, body = data.decode().partition('\\r\\n\\r\\n')\n    \
             xfcc = [l.split(': ', 1)[1] for l in head.split('\\r\\n') if l.lower().startswith('x-xfcc:')]\n    \
             print(head.split(' ')[1], body, uris, xfcc)\n\
         except Exception as e:\n    \
             print('failed:', repr(e))",
        root = file("root.pem"),
        chain = file("chain.pem"),
        key = file("key.pem"),
        host = target.0,
        port = target.1,
    );
    let out = mesh
        .a
        .command(&mesh.tools.python)
        .args(["-c", &script])
        .output()
        .await
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Through the east-west gateway at 127.0.0.1:15443.
async fn through_gateway(mesh: &Mesh, dir: &Path, sni: &str) -> String {
    mtls_request(mesh, dir, ("127.0.0.1", 15443), sni, "GET", "/").await
}

#[tokio::test]
async fn an_east_west_gateway_passes_mesh_mtls_through_by_istio_s_sni() {
    let Some(tools) = tools() else { return };
    let mesh = Mesh::start(
        tools,
        &[
            ("peer.yaml", &peer_authentication("STRICT")),
            (EASTWEST, &istio_file(EASTWEST)),
        ],
    )
    .await;
    let _b = mesh.sidecar_b().await;
    let token = mesh.token("eastwest");
    let labels = [("ISTIO_METAJSON_LABELS", r#"{"istio": "eastwestgateway"}"#)];
    let pod = ("eastwest", "10.1.1.5", "istio-eastwestgateway");
    let _gateway = mesh_agent(&mesh.a, &mesh, "router", pod, &labels, &token).await;

    // The client's own certificate, as `sleep`, from the CA (its key made here).
    let client = mesh.client_certificate("pod-a-token-000000001").await;

    // Istio's SNI for reviews' port 80: the gateway passes the client's mTLS through to pod
    // B's sidecar, which is the server the client sees, and which names the client.
    let sni = "outbound_.80_._.reviews.default.svc.cluster.local";
    let answer = eventually("the gateway to pass mTLS through to reviews", || async {
        let answer = through_gateway(&mesh, &client, sni).await;
        answer.starts_with("200 pod-b ").then_some(answer)
    })
    .await;
    assert!(
        answer.contains("['spiffe://cluster.local/ns/default/sa/reviews']"),
        "the server is pod B's sidecar, not the gateway: {answer}"
    );
    assert!(answer.contains(&format!("URI={SLEEP}")), "{answer}");
    // A name that is no cluster of the gateway's goes nowhere.
    let nowhere = through_gateway(
        &mesh,
        &client,
        "outbound_.80_._.nothing.default.svc.cluster.local",
    )
    .await;
    assert!(nowhere.starts_with("failed:"), "{nowhere}");
}
