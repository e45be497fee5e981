//! Two pods on one machine with sidecars that hold mesh certificates: network namespaces
//! joined by a veth pair (`capture::two_pods`), the control plane in pod A with its secure
//! port on pod A's address, pod B running the `reviews` workload with its traffic captured,
//! agents that get their certificates with bootstrap tokens; and the clients the tests ask
//! with (pod A's application through its sidecar, mesh clients with certificates of their
//! own). Used by `workload_mtls` and `authorization`.

use std::path::Path;

use crate::capture::{capture, discovery_in_pod_a, two_pods};
use crate::gateway::backend_in;
use crate::support::agent::Agent;
use crate::support::binary::Wayfinder;
use crate::support::fixtures::write;
use crate::support::netns::Netns;
use crate::tools::Tools;

/// The identities of the two pods, as their bootstrap tokens give them, the east-west
/// gateway's, and another workload's (a mesh client that is neither pod).
const TOKENS: &str = "pod-a-token-000000001 default sleep\npod-b-token-000000001 default reviews\n\
                      eastwest-token-000001 default istio-eastwestgateway\n\
                      other-token-000000001 default other\n";
/// Pod A's SPIFFE id.
pub(crate) const SLEEP: &str = "spiffe://cluster.local/ns/default/sa/sleep";
/// The control plane's secure port, on pod A's address, where agents connect.
const DISCOVERY: &str = "10.1.1.5:15012";

/// Where an agent runs besides its pod: its control plane's secure address, and its status
/// and Envoy admin ports (none: the defaults; others for a second agent in one network
/// namespace).
#[derive(Clone, Copy)]
pub(crate) struct At<'a> {
    pub(crate) discovery: &'a str,
    pub(crate) ports: &'a [(u16, u16)],
}

impl Default for At<'_> {
    fn default() -> Self {
        Self {
            discovery: DISCOVERY,
            ports: &[],
        }
    }
}

/// The ServiceEntry `reviews` (address 10.96.0.5, HTTP port 80) with pod B's workload as its
/// endpoint, running as the service account `reviews`: as in Istio, a workload entry with a
/// service account speaks mesh mTLS (`security.istio.io/tlsMode: istio`).
pub(crate) fn reviews_entry(port: u16) -> String {
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

/// Starts an agent in `netns` in `role` for `pod` (address `ip`, service account `sa`, and
/// `env` besides), with its certificate from the server's CA (`ca`: its `--ca-dir`) through
/// `token_file`, and waits for its Envoy to be ready.
pub(crate) async fn mesh_agent(
    netns: &Netns,
    mesh: &Mesh,
    role: &str,
    pod: (&str, &str, &str),
    env: &[(&str, &str)],
    token_file: &Path,
) -> Agent {
    mesh_agent_at(netns, mesh, role, pod, env, token_file, At::default()).await
}

/// [`mesh_agent`] where `at` says: another control plane, or other ports.
pub(crate) async fn mesh_agent_at(
    netns: &Netns,
    mesh: &Mesh,
    role: &str,
    (pod, ip, sa): (&str, &str, &str),
    env: &[(&str, &str)],
    token_file: &Path,
    At { discovery, ports }: At<'_>,
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
    let mut args = vec![
        "--binary-path",
        &envoy,
        "--discovery-address",
        discovery,
        "--control-plane-auth-policy",
        "MUTUAL_TLS",
        "--ca-root-cert",
        &root,
        "--bootstrap-token-file",
        &token,
        "--secret-ttl",
        "30s",
    ];
    let (status, admin) = ports.first().map_or((15020, 15000), |p| *p);
    let (status_port, admin_port) = (status.to_string(), admin.to_string());
    if !ports.is_empty() {
        args.extend([
            "--status-port",
            &status_port,
            "--proxy-admin-port",
            &admin_port,
        ]);
    }
    let at = format!("127.0.0.1:{status}");
    let agent = Agent::start_at(netns, &pod_dir, role, &at, &args, &all_env).await;
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
        Self::start_with(tools, configs, &[]).await
    }

    /// [`Mesh::start`], with the server's `flags` besides.
    pub(crate) async fn start_with(tools: Tools, configs: &[(&str, &str)], flags: &[&str]) -> Self {
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
        let mut args = vec![
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
        ];
        args.extend_from_slice(flags);
        let w = discovery_in_pod_a(&a, &tools, &files, &args).await;
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
        self.sidecar_b_with(&[], At::default()).await
    }

    /// [`Mesh::sidecar_b`] with `env` besides, where `at` says.
    pub(crate) async fn sidecar_b_with(&self, env: &[(&str, &str)], at: At<'_>) -> Agent {
        let token = self.token("b");
        let mut all_env = vec![("ISTIO_METAJSON_LABELS", r#"{"app": "reviews"}"#)];
        all_env.extend_from_slice(env);
        mesh_agent_at(
            &self.b,
            self,
            "sidecar",
            ("pod-b", "10.1.1.6", "reviews"),
            &all_env,
            &token,
            at,
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
