use std::os::unix::fs::PermissionsExt;

use rcgen::{CertificateParams, KeyPair};

use super::*;

fn config(dir: &Path) -> CaConfig {
    CaConfig {
        trust_domain: "cluster.local".into(),
        cacerts_dir: dir.join("cacerts"),
        ca_dir: dir.join("ca"),
        ttl: Duration::from_secs(3600),
        max_ttl: Duration::from_secs(7200),
    }
}

/// A CSR as istio-agent makes one: a new key, its SPIFFE id (which the CA ignores).
fn csr(claimed: &str) -> String {
    let key = KeyPair::generate().expect("a key");
    let params = CertificateParams::new(vec![]).expect("params");
    let mut params = params;
    params.subject_alt_names = vec![SanType::URI(claimed.try_into().expect("a URI"))];
    params
        .serialize_request(&key)
        .expect("a CSR")
        .pem()
        .expect("PEM")
}

/// Verifies `chain` (PEM blocks, leaf first, root last) against `root_pem` as the secure
/// port verifies clients, and reads the leaf.
fn verify(chain: &[String], root_pem: &str) -> Result<PeerCertificate, String> {
    let certs: Vec<CertificateDer<'static>> = chain
        .iter()
        .flat_map(|pem| CertificateDer::pem_slice_iter(pem.as_bytes()))
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    let mut roots = RootCertStore::empty();
    roots.add_parsable_certificates(CertificateDer::pem_slice_iter(root_pem.as_bytes()).flatten());
    let verifier = WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        Arc::new(rustls::crypto::ring::default_provider()),
    )
    .build()
    .map_err(|e| e.to_string())?;
    verifier
        .verify_client_cert(&certs[0], &certs[1..], UnixTime::now())
        .map_err(|e| e.to_string())?;
    PeerCertificate::read(&certs[0]).ok_or_else(|| "the leaf does not parse".into())
}

#[test]
fn a_self_signed_root_is_made_once_and_signs_spiffe_certificates() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let ca = MeshCa::load(&config(dir.path())).expect("a CA");
    let key = dir.path().join("ca/ca-key.pem");
    let mode = std::fs::metadata(&key)
        .expect("the key")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "the CA key is private");
    let again = MeshCa::load(&config(dir.path())).expect("the same CA");
    assert_eq!(
        ca.root_pem(),
        again.root_pem(),
        "the root is kept across starts"
    );

    let chain = ca
        .sign_csr(
            &csr("spiffe://evil/ns/kube-system/sa/admin"),
            "a",
            "web",
            None,
        )
        .expect("a certificate");
    assert_eq!(chain.len(), 2, "certificate then root: {chain:?}");
    assert_eq!(chain[1], ca.root_pem());
    let leaf = verify(&chain, again.root_pem()).expect("it verifies against the kept root");
    assert_eq!(
        leaf.identities,
        [SpiffeId::new("cluster.local", "a", "web")],
        "the identity is the authenticated one, not the CSR's"
    );
    let now = OffsetDateTime::now_utc().unix_timestamp();
    assert!(
        (leaf.not_after - now - 3600).abs() <= 5,
        "the default lifetime: {} s",
        leaf.not_after - now
    );
}

#[test]
fn lifetimes_and_bad_csrs_are_refused() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let ca = MeshCa::load(&config(dir.path())).expect("a CA");
    let long = ca.sign_csr(&csr("x"), "a", "web", Some(Duration::from_secs(7201)));
    assert!(matches!(long, Err(IssueError::Lifetime { .. })), "{long:?}");
    let short = ca
        .sign_csr(&csr("x"), "a", "web", Some(Duration::from_secs(120)))
        .expect("a short certificate");
    let leaf = verify(&short, ca.root_pem()).expect("it verifies");
    let now = OffsetDateTime::now_utc().unix_timestamp();
    assert!((leaf.not_after - now - 120).abs() <= 5);

    let good = csr("x");
    // A CSR whose signature no longer matches its contents: one base64 character changed
    // in the middle of the body.
    let mut tampered: Vec<char> = good.chars().collect();
    let i = tampered.len() / 2;
    tampered[i] = if tampered[i] == 'A' { 'B' } else { 'A' };
    let tampered: String = tampered.into_iter().collect();
    for bad in ["not a CSR", tampered.as_str()] {
        let err = ca.sign_csr(bad, "a", "web", None);
        assert!(matches!(err, Err(IssueError::Csr(_))), "{err:?}");
    }
}

/// Istio's plug-in layout with an intermediate: root → intermediate (`ca-cert.pem`).
fn plug_in(dir: &Path) -> (String, KeyPair) {
    let root_key = KeyPair::generate().expect("a key");
    let mut root = CertificateParams::new(vec![]).expect("params");
    root.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    root.distinguished_name.push(DnType::CommonName, "Root CA");
    let root_cert = root.self_signed(&root_key).expect("a root");
    let root_issuer = Issuer::new(root, root_key);
    let ca_key = KeyPair::generate().expect("a key");
    let mut ca = CertificateParams::new(vec![]).expect("params");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "Intermediate CA");
    let ca_cert = ca
        .signed_by(&ca_key, &root_issuer)
        .expect("an intermediate");
    let cacerts = dir.join("cacerts");
    std::fs::create_dir_all(&cacerts).expect("a directory");
    let write = |name: &str, text: &str| std::fs::write(cacerts.join(name), text).expect("write");
    write("ca-cert.pem", &ca_cert.pem());
    write("ca-key.pem", &ca_key.serialize_pem());
    write(
        "cert-chain.pem",
        &format!("{}{}", ca_cert.pem(), root_cert.pem()),
    );
    write("root-cert.pem", &root_cert.pem());
    (root_cert.pem(), ca_key)
}

#[test]
fn a_plug_in_ca_with_an_intermediate_is_used_as_given() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (root, _) = plug_in(dir.path());
    let ca = MeshCa::load(&config(dir.path())).expect("the plug-in CA");
    assert_eq!(ca.root_pem(), root);
    assert!(
        !dir.path().join("ca").exists(),
        "no self-signed root is made"
    );
    let chain = ca
        .sign_csr(&csr("x"), "b", "db", None)
        .expect("a certificate");
    assert_eq!(
        chain.len(),
        3,
        "certificate, cert-chain.pem, root: {chain:?}"
    );
    assert_eq!(chain[2], root);
    verify(&chain, &root).expect("it chains to the given root through the intermediate");
    let only_leaf = verify(&chain[..1], &root);
    assert!(
        only_leaf.is_err(),
        "not without the intermediate: {only_leaf:?}"
    );
}

#[test]
fn a_plug_in_ca_whose_files_do_not_fit_is_refused_at_load() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    plug_in(dir.path());
    let other = KeyPair::generate().expect("a key");
    let key = dir.path().join("cacerts/ca-key.pem");
    std::fs::write(&key, other.serialize_pem()).expect("write");
    let err = MeshCa::load(&config(dir.path())).expect_err("a key of another certificate");
    assert!(
        err.to_string()
            .contains("ca-key.pem the key of ca-cert.pem"),
        "{err}"
    );

    std::fs::write(
        &key,
        "-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n",
    )
    .expect("write");
    let err = MeshCa::load(&config(dir.path())).expect_err("a SEC1 key");
    assert!(err.to_string().contains("openssl pkcs8 -topk8"), "{err}");
    assert!(err.to_string().contains(&*key.to_string_lossy()), "{err}");
}
