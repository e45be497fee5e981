//! `--secure`: the load on the secure port. The server gets a bootstrap token per client
//! namespace and a CA directory of the tool's own; before the load, the tool gets one
//! certificate per namespace from the CA, as an agent does ([`wayfinder::agent::certificates`]),
//! and every client of that namespace presents it, each on a TLS connection of its own.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use tonic::transport::{Certificate, ClientTlsConfig, Identity};
use wayfinder::agent::certificates::CaClient;

use crate::load::Logs;
use crate::mesh;

/// The server flags for the secure port; returns the directory holding the CA and tokens.
pub(crate) fn flags(flags: &mut Vec<String>, namespaces: usize) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let tokens: String = (0..namespaces)
        .map(|i| {
            format!(
                "{} {} load\n",
                token(i),
                mesh::client_namespace(i, namespaces)
            )
        })
        .collect();
    std::fs::write(dir.path().join("tokens"), tokens).expect("the tokens file");
    for i in 0..namespaces {
        std::fs::write(dir.path().join(format!("token-{i}")), token(i)).expect("a token file");
    }
    for flag in [
        "--secure-grpc-addr".to_string(),
        "127.0.0.1:0".into(),
        "--ca-dir".into(),
        dir.path().join("ca").display().to_string(),
        "--bootstrap-tokens".into(),
        dir.path().join("tokens").display().to_string(),
    ] {
        flags.push(flag);
    }
    dir
}

fn token(namespace: usize) -> String {
    format!("xds-load-token-{namespace:08}")
}

/// The secure port's address and each namespace's TLS configuration, by namespace index.
pub(crate) async fn identities(
    logs: &Logs,
    dir: &Path,
    namespaces: usize,
) -> (SocketAddr, Vec<ClientTlsConfig>) {
    let addr = crate::listening(logs, "secure-grpc").await;
    let root_cert = dir.join("ca").join("root-cert.pem");
    let root = std::fs::read_to_string(&root_cert).expect("the CA's root");
    let mut tls = Vec::new();
    for i in 0..namespaces {
        let client = CaClient {
            address: addr.to_string(),
            root_cert: root_cert.clone(),
            token_file: dir.join(format!("token-{i}")),
            ttl: Duration::from_secs(24 * 3600),
        };
        let workload = client.fetch(None).await.expect("a certificate");
        tls.push(
            ClientTlsConfig::new()
                .ca_certificate(Certificate::from_pem(&root))
                .domain_name("127.0.0.1")
                .identity(Identity::from_pem(&workload.chain_pem, &workload.key_pem)),
        );
    }
    (addr, tls)
}
