//! The secure port (`--secure-grpc-addr`) against the binary, with real TLS clients (tonic's
//! channel over rustls) and certificates made in the test with rcgen or, for Istio's plug-in
//! CA, with the `openssl` commands of Istio's own certificate tools.
//!
//! - A client without a certificate gets one with a bootstrap token (and only with a good
//!   one), and its ADS streams are refused with `UNAUTHENTICATED` until it has one.
//! - With its certificate (namespace `a`), a node claiming namespace `b` is refused with
//!   `PERMISSION_DENIED`; one in `a` is served, and `/debug/syncz` shows its identity.
//! - The certificate renews itself: a request with the client certificate and no token.
//! - A plug-in CA with an intermediate and PKCS#1 RSA keys is used as given.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use rcgen::{CertificateParams, KeyPair};
use rustls::RootCertStore;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::WebPkiClientVerifier;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use wayfinder::ca::{IstioCertificateRequest, IstioCertificateResponse, PATH, PeerCertificate};
use wayfinder::xds::TypeUrl;

use crate::support::ads::{Ads, sidecar_with};
use crate::support::binary::{Wayfinder, get};

const TOKEN: &str = "vm-bootstrap-token-0001";

/// A TLS channel to the secure port trusting `root_pem`, presenting `identity` (a PEM
/// chain and key) if given.
pub(crate) async fn channel(
    addr: SocketAddr,
    root_pem: &str,
    identity: Option<&(String, String)>,
) -> Channel {
    crate::support::tls_provider();
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(root_pem))
        .domain_name("localhost");
    if let Some((chain, key)) = identity {
        tls = tls.identity(Identity::from_pem(chain, key));
    }
    Endpoint::from_shared(format!("https://{addr}"))
        .expect("a URL")
        .tls_config(tls)
        .expect("a TLS configuration")
        .connect()
        .await
        .expect("a TLS connection to the secure port")
}

/// A CSR for a new key, as istio-agent makes one, and the key's PEM.
pub(crate) fn csr() -> (String, String) {
    let key = KeyPair::generate().expect("a key");
    let mut params = CertificateParams::new(vec![]).expect("params");
    params.subject_alt_names = vec![rcgen::SanType::URI(
        "spiffe://cluster.local/ns/kube-system/sa/admin"
            .try_into()
            .expect("a URI"),
    )];
    let csr = params.serialize_request(&key).expect("a CSR");
    (csr.pem().expect("PEM"), key.serialize_pem())
}

/// Calls CreateCertificate with `token` as istio-agent sends it.
pub(crate) async fn create(
    channel: Channel,
    csr: &str,
    token: Option<&str>,
) -> Result<Vec<String>, tonic::Status> {
    let mut client = tonic::client::Grpc::new(channel);
    client.ready().await.expect("the channel is ready");
    let mut request = tonic::Request::new(IstioCertificateRequest {
        csr: csr.to_string(),
        validity_duration: 0,
    });
    if let Some(token) = token {
        let value = format!("Bearer {token}").parse().expect("a header value");
        request.metadata_mut().insert("authorization", value);
    }
    let codec =
        tonic_prost::ProstCodec::<IstioCertificateRequest, IstioCertificateResponse>::default();
    let path = http::uri::PathAndQuery::from_static(PATH);
    client
        .unary(request, path, codec)
        .await
        .map(|r| r.into_inner().cert_chain)
}

/// Verifies a PEM chain (leaf first) against `root_pem` and reads its leaf.
pub(crate) fn verify(chain: &[String], root_pem: &str) -> PeerCertificate {
    let certs: Vec<CertificateDer<'static>> = chain
        .iter()
        .flat_map(|pem| CertificateDer::pem_slice_iter(pem.as_bytes()))
        .collect::<Result<_, _>>()
        .expect("PEM certificates");
    let mut roots = RootCertStore::empty();
    roots.add_parsable_certificates(CertificateDer::pem_slice_iter(root_pem.as_bytes()).flatten());
    WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        Arc::new(rustls::crypto::ring::default_provider()),
    )
    .build()
    .expect("a verifier")
    .verify_client_cert(&certs[0], &certs[1..], UnixTime::now())
    .expect("the chain verifies against the root");
    PeerCertificate::read(&certs[0]).expect("a readable leaf")
}

/// A node in namespace `namespace` claiming service account `account`.
fn node(namespace: &str, account: &str) -> wayfinder::xds::pb::core::Node {
    sidecar_with("10.1.0.1", namespace, "SERVICE_ACCOUNT", account)
}

fn tokens_file(dir: &Path) -> String {
    let path = dir.join("tokens");
    std::fs::write(&path, format!("# VMs\n{TOKEN} a web\n")).expect("write the tokens");
    path.to_str().expect("a UTF-8 path").to_string()
}

#[tokio::test]
async fn a_vm_gets_its_certificate_with_a_token_and_ads_only_for_its_own_identity() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let tokens = tokens_file(dir.path());
    let w = Wayfinder::start(&["--bootstrap-tokens", &tokens]).await;
    let secure = w.secure_grpc().await;
    let root = std::fs::read_to_string(w.ca_dir().join("root-cert.pem")).expect("the root");
    let anonymous = channel(secure, &root, None).await;
    let (csr, key) = csr();

    for (token, why) in [
        (
            None,
            "no client certificate of this mesh and no authorization",
        ),
        (
            Some("vm-bootstrap-token-0002"),
            "not a known bootstrap token",
        ),
    ] {
        let refused = create(anonymous.clone(), &csr, token)
            .await
            .expect_err("refused");
        assert_eq!(refused.code(), tonic::Code::Unauthenticated, "{refused:?}");
        assert!(refused.message().contains(why), "{refused:?}");
    }
    let refusal = w
        .wait_log("the refusal's log line", |l| {
            l["message"] == "refusing a certificate request"
                && l["reason"]
                    .as_str()
                    .is_some_and(|r| r.contains("not a known bootstrap token"))
        })
        .await;
    assert!(
        refusal["peer"]
            .as_str()
            .is_some_and(|p| p.starts_with("127.0.0.1:")),
        "{refusal}"
    );

    let mut ads = Ads::open(anonymous.clone(), node("a", "web"))
        .await
        .expect("a stream");
    ads.try_subscribe(TypeUrl::Cluster).await;
    let status = ads.recv_error().await;
    assert_eq!(status.code(), tonic::Code::Unauthenticated, "{status:?}");

    let chain = create(anonymous, &csr, Some(TOKEN))
        .await
        .expect("a certificate");
    assert_eq!(chain.len(), 2, "the certificate and the self-signed root");
    let leaf = verify(&chain, &root);
    let ids: Vec<String> = leaf.identities.iter().map(ToString::to_string).collect();
    assert_eq!(
        ids,
        ["spiffe://cluster.local/ns/a/sa/web"],
        "the token's identity, not the CSR's"
    );

    let identity = (chain[..1].concat(), key);
    let mutual = channel(secure, &root, Some(&identity)).await;
    for claimed in [node("b", "web"), node("a", "db")] {
        let mut ads = Ads::open(mutual.clone(), claimed).await.expect("a stream");
        ads.try_subscribe(TypeUrl::Cluster).await;
        let status = ads.recv_error().await;
        assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status:?}");
        assert!(
            status
                .message()
                .contains("spiffe://cluster.local/ns/a/sa/web"),
            "{status:?}"
        );
    }
    let mut ads = Ads::open(mutual.clone(), node("a", "web"))
        .await
        .expect("a stream");
    ads.subscribe(TypeUrl::Cluster, &[]).await;
    ads.recv_type(TypeUrl::Cluster).await;
    let (status, syncz) = get(w.http, "/debug/syncz").await;
    assert_eq!(status, 200);
    let syncz: serde_json::Value = serde_json::from_str(&syncz).expect("JSON");
    let conn = &syncz[0];
    assert_eq!(
        conn["identity"], "spiffe://cluster.local/ns/a/sa/web",
        "{syncz}"
    );
    assert_eq!(conn["certificate_expiry"], leaf.expiry(), "{syncz}");
    assert!(!syncz.to_string().contains("PRIVATE KEY"));

    let (csr, _) = self::csr();
    let renewed = create(mutual, &csr, None)
        .await
        .expect("a renewal by certificate");
    let renewed = verify(&renewed, &root);
    assert_eq!(renewed.identities, leaf.identities);
}

/// Runs `openssl ARGS` in `dir`.
fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl (Istio's certificate tools use it) is installed");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Istio's plug-in CA files as `tools/certs/Makefile.selfsigned.mk` makes them: an RSA root,
/// an intermediate CA signed by it, `cert-chain.pem` = intermediate + root. The keys are
/// PKCS#1 (`-traditional`), as in Istio's `samples/certs`.
fn istio_cacerts(dir: &Path) {
    std::fs::write(
        dir.join("ca.conf"),
        "[req]\ndistinguished_name = dn\nprompt = no\n[dn]\nO = Istio\nCN = Intermediate CA\n\
         [ext]\nbasicConstraints = critical, CA:true, pathlen:0\n\
         keyUsage = critical, digitalSignature, nonRepudiation, keyEncipherment, keyCertSign\n\
         subjectKeyIdentifier = hash\n",
    )
    .expect("write");
    std::fs::write(
        dir.join("root.conf"),
        "[req]\ndistinguished_name = dn\nprompt = no\nx509_extensions = ext\n[dn]\nO = Istio\nCN = Root CA\n\
         [ext]\nbasicConstraints = critical, CA:true\n\
         keyUsage = critical, digitalSignature, nonRepudiation, keyEncipherment, keyCertSign\n\
         subjectKeyIdentifier = hash\n",
    )
    .expect("write");
    openssl(
        dir,
        &["genrsa", "-traditional", "-out", "root-key.pem", "2048"],
    );
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-new",
            "-key",
            "root-key.pem",
            "-sha256",
            "-days",
            "30",
            "-config",
            "root.conf",
            "-out",
            "root-cert.pem",
        ],
    );
    openssl(
        dir,
        &["genrsa", "-traditional", "-out", "ca-key.pem", "2048"],
    );
    openssl(
        dir,
        &[
            "req",
            "-new",
            "-key",
            "ca-key.pem",
            "-config",
            "ca.conf",
            "-out",
            "ca.csr",
        ],
    );
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "ca.csr",
            "-CA",
            "root-cert.pem",
            "-CAkey",
            "root-key.pem",
            "-CAcreateserial",
            "-days",
            "30",
            "-sha256",
            "-extfile",
            "ca.conf",
            "-extensions",
            "ext",
            "-out",
            "ca-cert.pem",
        ],
    );
    let chain = [
        std::fs::read_to_string(dir.join("ca-cert.pem")).expect("read"),
        std::fs::read_to_string(dir.join("root-cert.pem")).expect("read"),
    ]
    .concat();
    std::fs::write(dir.join("cert-chain.pem"), chain).expect("write");
}

#[tokio::test]
async fn istio_s_plug_in_ca_with_an_intermediate_is_used_as_given() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let cacerts = dir.path().join("cacerts");
    std::fs::create_dir(&cacerts).expect("a directory");
    istio_cacerts(&cacerts);
    assert!(
        std::fs::read_to_string(cacerts.join("ca-key.pem"))
            .expect("read")
            .contains("BEGIN RSA PRIVATE KEY"),
        "a PKCS#1 key, as Istio's samples hold"
    );
    let tokens = tokens_file(dir.path());
    let unused = dir.path().join("unused-ca");
    let w = Wayfinder::start(&[
        "--secure-grpc-addr",
        "127.0.0.1:0",
        "--cacerts-dir",
        cacerts.to_str().expect("UTF-8"),
        "--ca-dir",
        unused.to_str().expect("UTF-8"),
        "--bootstrap-tokens",
        &tokens,
    ])
    .await;
    let root = std::fs::read_to_string(cacerts.join("root-cert.pem")).expect("the root");
    // The client trusts only the given root: the server's own certificate chains to it too.
    let anonymous = channel(w.secure_grpc().await, &root, None).await;
    let (csr, _) = csr();
    let chain = create(anonymous, &csr, Some(TOKEN))
        .await
        .expect("a certificate");
    assert_eq!(chain.len(), 3, "certificate, cert-chain.pem, root-cert.pem");
    assert_eq!(chain[2], root);
    let leaf = verify(&chain, &root);
    assert_eq!(
        leaf.identities[0].to_string(),
        "spiffe://cluster.local/ns/a/sa/web"
    );
    assert!(
        !unused.exists(),
        "no self-signed root was made beside a plug-in CA"
    );
    w.wait_log("the CA's start line", |l| {
        l["message"] == "mesh CA loaded"
            && l["origin"]
                .as_str()
                .is_some_and(|o| o.starts_with("plug-in CA in"))
    })
    .await;
}
