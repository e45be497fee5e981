//! Real Envoy 1.40 originating TLS for a DestinationRule `SIMPLE` to a TLS server on loopback
//! whose certificate comes from a CA made in the test: refused while only the system's trust
//! store vouches for the server, served once the rule gives the CA, refused again when the
//! rule asks for a name the certificate lacks, served without verification only under
//! `insecureSkipVerify`.
//!
//! Envoy runs as an egress gateway (a `Gateway` on a loopback port and a VirtualService
//! routing the server's host to its ServiceEntry), Istio's TLS-origination setup: a sidecar
//! would need the traffic captured by iptables, and gateways get the very clusters sidecars
//! get. The system's trust store is the default `--system-ca-file`, as a user would leave it.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_rustls::LazyConfigAcceptor;
use wayfinder::xds::DEFAULT_SYSTEM_CA_FILE;

use crate::envoy::Envoy;
use crate::gateway::{NODE, gateway, virtual_service};
use crate::support::binary::Wayfinder;
use crate::support::fixtures::{service_entry, write};
use crate::support::pki::Pki;
use crate::support::{DEADLINE, tls_provider};
use crate::tools::tools;

/// The server's host, which its certificate names.
const HOST: &str = "secure.example.com";
/// The cluster Envoy originates TLS from.
const CLUSTER: &str = "outbound|8443||secure.example.com";
/// What the server answers.
const BODY: &str = "secure";

#[tokio::test]
async fn simple_tls_origination_verifies_the_server_unless_told_not_to() {
    let Some(tools) = tools() else { return };
    assert!(
        Path::new(DEFAULT_SYSTEM_CA_FILE).is_file(),
        "the system's CA bundle {DEFAULT_SYSTEM_CA_FILE}, which Envoy gets by default, is missing"
    );
    let pki = Pki::new(HOST);
    let certs = tempfile::tempdir().unwrap();
    let ca_file = certs.path().join("ca.pem");
    std::fs::write(&ca_file, &pki.ca_pem).unwrap();
    let ca = ca_file.display().to_string();
    let server = TlsServer::start(&pki).await;

    let dir = tempfile::tempdir().unwrap();
    let empty = tempfile::tempdir().unwrap();
    let port = free_port();
    let entry = service_entry("secure", HOST, ("http", 8443, "HTTP"), &[server.port]);
    let route = format!("  - route: [{{destination: {{host: {HOST}, port: {{number: 8443}}}}}}]\n");
    write(dir.path(), "entry.yaml", &entry);
    write(dir.path(), "gateway.yaml", &gateway(port));
    write(
        dir.path(),
        "vs.yaml",
        &virtual_service("secure", HOST, &route),
    );
    write(dir.path(), "dr.yaml", &rule("{mode: SIMPLE}"));
    let (e, d) = (empty.path().display(), dir.path().display());
    let flags =
        format!("--registries=File --file-registry={e} --config-dir={d} --debounce-after=10ms");
    let w = Wayfinder::start(&flags.split(' ').collect::<Vec<_>>()).await;
    w.ready().await;
    let envoy = Envoy::start(&tools, w.grpc, NODE, "{LABELS: {istio: ingressgateway}}").await;
    let client = Client::new(port);

    // No CA given: the test CA is in no system store, so the handshake fails verification.
    // Envoy sent the host as SNI.
    client
        .wait_for_verify_failure(&envoy, "no CA", "fail_verify_error")
        .await;
    assert!(
        server.names().iter().any(|n| n == HOST),
        "SNI from the destination host; the server saw {:?}",
        server.names()
    );

    // The rule gives the CA: served.
    write(
        dir.path(),
        "dr.yaml",
        &rule(&format!("{{mode: SIMPLE, caCertificates: {ca}}}")),
    );
    client.wait_for_body(&envoy, "with the CA").await;

    // The CA, but a name the certificate does not carry: refused.
    let wrong =
        format!("{{mode: SIMPLE, caCertificates: {ca}, subjectAltNames: [other.example.com]}}");
    write(dir.path(), "dr.yaml", &rule(&wrong));
    client
        .wait_for_verify_failure(&envoy, "a wrong subjectAltName", "fail_verify_san")
        .await;

    // Only insecureSkipVerify turns verification off.
    write(
        dir.path(),
        "dr.yaml",
        &rule("{mode: SIMPLE, insecureSkipVerify: true}"),
    );
    client.wait_for_body(&envoy, "insecureSkipVerify").await;

    envoy.assert_nothing_rejected().await;
}

/// DestinationRule `secure` for [`HOST`] with client TLS `tls` (a YAML flow mapping).
fn rule(tls: &str) -> String {
    format!(
        "apiVersion: networking.istio.io/v1\nkind: DestinationRule\n\
         metadata: {{name: secure, namespace: default}}\nspec:\n  host: {HOST}\n  \
         trafficPolicy:\n    tls: {tls}\n"
    )
}

fn free_port() -> u16 {
    let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    probe.local_addr().unwrap().port()
}

/// Requests to [`HOST`] through the gateway listener on `port`.
struct Client {
    http: reqwest::Client,
    port: u16,
}

impl Client {
    fn new(port: u16) -> Self {
        tls_provider();
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap();
        Self { http, port }
    }

    /// The status and body of `GET /` with `Host: HOST`; status 0 and the error without an
    /// HTTP answer.
    async fn get(&self) -> (u16, String) {
        let url = format!("http://127.0.0.1:{}/", self.port);
        let request = self.http.get(url).header(reqwest::header::HOST, HOST);
        match request.send().await {
            Ok(r) => (r.status().as_u16(), r.text().await.unwrap_or_default()),
            Err(e) => (0, format!("{e:?}")),
        }
    }

    /// Waits until the server's answer comes through.
    async fn wait_for_body(&self, envoy: &Envoy, case: &str) {
        self.wait_until(envoy, case, async |(status, body)| {
            *status == 200 && body == BODY
        })
        .await;
    }

    /// Waits until Envoy answers 503 and counts one more handshake that failed verification
    /// in the cluster's stat `ssl.STAT` (`fail_verify_error` for the chain,
    /// `fail_verify_san` for the names).
    async fn wait_for_verify_failure(&self, envoy: &Envoy, case: &str, stat: &str) {
        let stat = format!("cluster.{CLUSTER}.ssl.{stat}");
        let before = envoy.stat(&stat).await;
        self.wait_until(envoy, case, async |(status, _)| {
            *status == 503 && envoy.stat(&stat).await > before
        })
        .await;
    }

    /// Polls until an answer satisfies `want`; on timeout, fails with the last answer, the
    /// cluster's nonzero stats and what Envoy rejected.
    async fn wait_until(
        &self,
        envoy: &Envoy,
        case: &str,
        want: impl AsyncFn(&(u16, String)) -> bool,
    ) {
        let deadline = tokio::time::Instant::now() + DEADLINE;
        let mut last = self.get().await;
        while !want(&last).await {
            if tokio::time::Instant::now() > deadline {
                let prefix = format!("cluster.{CLUSTER}.");
                let stats = envoy.stats().await.into_iter();
                let mut stats: Vec<_> = stats
                    .filter(|(k, v)| k.starts_with(&prefix) && v != "0")
                    .collect();
                stats.sort();
                panic!(
                    "{case}: no expected answer within {DEADLINE:?}; last {last:?}\n\
                     rejected: {:?}\nthe cluster's stats: {stats:?}",
                    envoy.rejected().await,
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            last = self.get().await;
        }
    }
}

/// A TLS server on loopback answering every HTTP/1.1 request with [`BODY`], noting the SNI
/// of every handshake. Its task ends when this is dropped.
struct TlsServer {
    port: u16,
    names: Arc<Mutex<Vec<String>>>,
    task: JoinHandle<()>,
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl TlsServer {
    async fn start(pki: &Pki) -> Self {
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![pki.cert.clone()], pki.key.clone_key())
        .unwrap();
        let config = Arc::new(config);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let names = Arc::new(Mutex::new(Vec::new()));
        let seen = names.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let (config, seen) = (config.clone(), seen.clone());
                tokio::spawn(async move {
                    let acceptor = rustls::server::Acceptor::default();
                    let Ok(start) = LazyConfigAcceptor::new(acceptor, tcp).await else {
                        return;
                    };
                    let hello = start.client_hello();
                    let name = hello.server_name().unwrap_or_default().to_string();
                    seen.lock().unwrap().push(name);
                    // A client that refuses the certificate ends the handshake here.
                    if let Ok(tls) = start.into_stream(config).await {
                        answer(tls).await;
                    }
                });
            }
        });
        Self { port, names, task }
    }

    /// The SNI names of the handshakes so far (empty for none).
    fn names(&self) -> Vec<String> {
        self.names.lock().unwrap().clone()
    }
}

/// Answers each request on one connection (GETs: headers, no body) until the client closes.
async fn answer<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(mut stream: S) {
    let response = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\r\n{BODY}",
        BODY.len()
    );
    let mut pending = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        while let Some(end) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
            pending.drain(..end + 4);
            if stream.write_all(response.as_bytes()).await.is_err() {
                return;
            }
        }
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => pending.extend_from_slice(&buf[..n]),
        }
    }
}
