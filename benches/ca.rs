//! The mesh CA's cost per certificate: a CSR checked and signed for an identity
//! (`MeshCa::sign_csr`), with the self-signed ECDSA P-256 root and with an RSA 2048 CA key,
//! and the secure port's own certificate with its new key (`MeshCa::issue_server`).
//! `cargo bench --bench ca` runs it; figures are recorded in BENCHMARKS.md. CI only builds it.

// The inputs are built here and valid by construction; a panic would be a bench bug.
#![allow(clippy::expect_used)]

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use divan::Bencher;
use rcgen::{CertificateParams, KeyPair};
use wayfinder::ca::{CaConfig, MeshCa};

fn main() {
    divan::main();
}

fn config(dir: &std::path::Path) -> CaConfig {
    CaConfig {
        trust_domain: "cluster.local".into(),
        cacerts_dir: dir.join("cacerts"),
        ca_dir: dir.join("ca"),
        ttl: Duration::from_secs(24 * 3600),
        max_ttl: Duration::from_secs(90 * 24 * 3600),
    }
}

fn csr() -> String {
    let key = KeyPair::generate().expect("a key");
    CertificateParams::new(vec![])
        .expect("params")
        .serialize_request(&key)
        .expect("a CSR")
        .pem()
        .expect("PEM")
}

/// A plug-in CA whose key is RSA 2048 (PKCS#1, as `openssl genrsa -traditional` writes it).
fn rsa_ca(dir: &std::path::Path) -> Arc<MeshCa> {
    let cacerts = dir.join("cacerts");
    std::fs::create_dir_all(&cacerts).expect("a directory");
    let run = |args: &[&str]| {
        let ok = std::process::Command::new("openssl")
            .args(args)
            .current_dir(&cacerts)
            .status()
            .expect("openssl")
            .success();
        assert!(ok, "openssl {args:?}");
    };
    run(&["genrsa", "-traditional", "-out", "ca-key.pem", "2048"]);
    run(&[
        "req",
        "-x509",
        "-new",
        "-key",
        "ca-key.pem",
        "-subj",
        "/O=Istio/CN=Root CA",
        "-days",
        "30",
        "-addext",
        "basicConstraints=critical,CA:true",
        "-addext",
        "keyUsage=critical,keyCertSign,digitalSignature",
        "-out",
        "ca-cert.pem",
    ]);
    std::fs::copy(cacerts.join("ca-cert.pem"), cacerts.join("root-cert.pem")).expect("copy");
    std::fs::copy(cacerts.join("ca-cert.pem"), cacerts.join("cert-chain.pem")).expect("copy");
    MeshCa::load(&config(dir)).expect("the RSA CA")
}

#[divan::bench]
fn sign_csr_ecdsa(bencher: Bencher) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let ca = MeshCa::load(&config(dir.path())).expect("a CA");
    let csr = csr();
    bencher.bench(|| black_box(ca.sign_csr(&csr, "default", "web", None).expect("signed")));
}

#[divan::bench]
fn sign_csr_rsa_2048(bencher: Bencher) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let ca = rsa_ca(dir.path());
    let csr = csr();
    bencher.bench(|| black_box(ca.sign_csr(&csr, "default", "web", None).expect("signed")));
}

#[divan::bench]
fn issue_server_certificate(bencher: Bencher) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let ca = MeshCa::load(&config(dir.path())).expect("a CA");
    let names = vec!["localhost".to_string(), "127.0.0.1".to_string()];
    bencher.bench(|| black_box(ca.issue_server(&names).expect("issued")));
}
