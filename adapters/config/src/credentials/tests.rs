//! Istio's cases (`pilot/pkg/credentials/kube/secrets_test.go`, `model/credentials/resource_test.go`).

use super::*;

fn secret(name: &str, data: &[(&str, &str)]) -> Secret {
    Secret::new(
        "default",
        name,
        data.iter().map(|(k, v)| (*k, v.as_bytes().to_vec())),
    )
}

fn text(b: &Option<Bytes>) -> Option<String> {
    b.as_ref().map(|b| String::from_utf8_lossy(b).into_owned())
}

#[test]
fn the_generic_layout_wins_over_the_tls_one() {
    let both = secret(
        "both",
        &[
            ("cert", "g-cert"),
            ("key", "g-key"),
            ("tls.crt", "t-cert"),
            ("tls.key", "t-key"),
        ],
    );
    let info = cert_info(&both).unwrap();
    assert_eq!(&*info.cert, b"g-cert");
    assert_eq!(text(&info.key).as_deref(), Some("g-key"));
}

#[test]
fn the_tls_layout_carries_its_staple_and_crl() {
    let tls = secret(
        "tls-mtls-crl",
        &[
            ("tls.crt", "tls-mtls-cert"),
            ("tls.key", "tls-mtls-key"),
            ("ca.crt", "tls-mtls-ca"),
            ("ca.crl", "tls-mtls-crl"),
            ("tls.ocsp-staple", "staple"),
        ],
    );
    let info = cert_info(&tls).unwrap();
    assert_eq!(&*info.cert, b"tls-mtls-cert");
    assert_eq!(text(&info.staple).as_deref(), Some("staple"));
    assert_eq!(text(&info.crl).as_deref(), Some("tls-mtls-crl"));
    let ca = root(&tls).unwrap();
    assert_eq!(&*ca.cert, b"tls-mtls-ca");
    assert_eq!(ca.key, None);
    assert_eq!(text(&ca.crl).as_deref(), Some("tls-mtls-crl"));
}

#[test]
fn missing_and_empty_keys_are_explained_as_istio_explains_them() {
    let generic = secret(
        "generic",
        &[("cert", "generic-cert"), ("key", "generic-key")],
    );
    assert_eq!(
        root(&generic).unwrap_err(),
        "found secret, but didn't have expected keys cacert or ca.crt; found: cert, key"
    );
    let empty = secret("empty-cert", &[("tls.crt", ""), ("tls.key", "tls-key")]);
    assert_eq!(
        cert_info(&empty).unwrap_err(),
        "found keys \"tls.crt\" and \"tls.key\", but they were empty"
    );
    let wrong = secret(
        "wrong-keys",
        &[("foo-bar", "my-cert"), ("tls.key", "tls-key")],
    );
    assert_eq!(
        cert_info(&wrong).unwrap_err(),
        "found secret, but didn't have expected keys (cert and key) or (tls.crt and tls.key); \
         found: foo-bar, tls.key"
    );
    let many = secret("many", &[("a", "1"), ("b", "2"), ("c", "3"), ("d", "4")]);
    assert!(
        root(&many)
            .unwrap_err()
            .ends_with("found: a, b, c, and 1 more..."),
        "{}",
        root(&many).unwrap_err()
    );
    let empty_ca = secret("empty-ca", &[("ca.crt", "")]);
    assert_eq!(
        root(&empty_ca).unwrap_err(),
        "found key \"ca.crt\", but it was empty"
    );
}

#[test]
fn debug_shows_sizes_never_bytes() {
    let s = secret(
        "tls",
        &[
            ("tls.crt", "CERT"),
            ("tls.key", "-----BEGIN PRIVATE KEY-----"),
        ],
    );
    let shown = format!("{s:?} {:?}", cert_info(&s).unwrap());
    assert!(!shown.contains("PRIVATE KEY"), "{shown}");
    assert!(shown.contains("\"tls.key\": 27"), "{shown}");
}

#[test]
fn only_the_keys_a_gateway_reads_are_kept() {
    let s = secret("app", &[("password", "hunter2"), ("tls.crt", "c")]);
    assert_eq!(s.get("password"), None);
    assert_eq!(s.size(), 1);
}

#[test]
fn resource_names_are_istio_s() {
    assert_eq!(resource_name("my-cert"), "kubernetes://my-cert");
    assert_eq!(
        resource_name("kubernetes://my-cert"),
        "kubernetes://my-cert"
    );
    let parse = |n| SecretRef::parse(n, "proxy-ns");
    assert_eq!(
        parse("kubernetes://my-cert").unwrap(),
        SecretRef {
            namespace: "proxy-ns".into(),
            name: "my-cert".into(),
            ca_only: false
        }
    );
    let ca = parse("kubernetes://other/my-cert-cacert").unwrap();
    assert_eq!((ca.namespace.as_str(), ca.ca_only), ("other", true));
    assert_eq!(ca.stripped(), "my-cert");
    for bad in [
        "my-cert",
        "kubernetes://",
        "kubernetes:///x",
        "configmap://ns/x",
    ] {
        assert!(parse(bad).is_err(), "{bad}");
    }
}
