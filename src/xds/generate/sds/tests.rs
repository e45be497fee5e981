//! What a proxy is served of the secrets it asks for: by identity, namespace and the API
//! server's answer, with Istio's layouts and its `-cacert` rules.

use std::collections::BTreeSet;
use std::sync::Arc;

use prost::Message;
use wayfinder_config::credentials::Secret as KubeSecret;

use super::*;
use crate::xds::fixtures::sidecar;
use crate::xds::pb::tls::Secret;

fn kube(name: &str, data: &[(&str, &str)]) -> KubeSecret {
    KubeSecret::new(
        "shop",
        name,
        data.iter().map(|(k, v)| (*k, v.as_bytes().to_vec())),
    )
}

/// `shop/www` (TLS layout with a CA), `shop/generic` (generic layout, its CA split into
/// `generic-cacert`), and `other/www`.
fn table(allowed: &[(&str, &str)]) -> Credentials {
    let mut other = kube(
        "www",
        &[("tls.crt", "other-cert"), ("tls.key", "other-key")],
    );
    other.namespace = "other".into();
    Credentials::fixed(
        "Kubernetes",
        vec![
            kube(
                "www",
                &[
                    ("tls.crt", "www-cert"),
                    ("tls.key", "www-key"),
                    ("ca.crt", "www-ca"),
                ],
            ),
            kube(
                "generic",
                &[("cert", "g-cert"), ("key", "g-key"), ("cacert", "g-ca")],
            ),
            kube("generic-cacert", &[("cacert", "split-ca")]),
            other,
        ],
        allowed,
    )
}

/// A gateway in `shop` as `ingress`, with a certificate unless `plaintext`.
fn gateway(plaintext: bool) -> Proxy {
    Proxy {
        namespace: "shop".into(),
        service_account: Some("ingress".into()),
        certificate: (!plaintext).then(|| {
            (
                "spiffe://cluster.local/ns/shop/sa/ingress".into(),
                "2030-01-01T00:00:00Z".into(),
            )
        }),
        ..sidecar()
    }
}

/// The secrets served to `proxy` for `names`, decoded, by name.
fn served(creds: &Credentials, proxy: &Proxy, names: &[&str]) -> Vec<(String, Secret)> {
    let names: BTreeSet<Arc<str>> = names.iter().map(|n| Arc::from(*n)).collect();
    let Some((identity, access)) = reader(creds, proxy) else {
        return Vec::new();
    };
    secrets(creds, &identity, access, &names)
        .into_iter()
        .map(|(name, r)| {
            let any = r.any();
            (
                name.to_string(),
                Secret::decode(any.value.as_slice()).unwrap(),
            )
        })
        .collect()
}

fn bytes(source: &Option<DataSource>) -> String {
    match source.as_ref().and_then(|s| s.specifier.as_ref()) {
        Some(data_source::Specifier::InlineBytes(b)) => String::from_utf8_lossy(b).into_owned(),
        other => panic!("not inline bytes: {other:?}"),
    }
}

fn certificate(secret: &Secret) -> (String, String) {
    match &secret.r#type {
        Some(secret::Type::TlsCertificate(t)) => {
            (bytes(&t.certificate_chain), bytes(&t.private_key))
        }
        other => panic!("not a certificate: {other:?}"),
    }
}

fn ca(secret: &Secret) -> String {
    match &secret.r#type {
        Some(secret::Type::ValidationContext(v)) => bytes(&v.trusted_ca),
        other => panic!("not a validation context: {other:?}"),
    }
}

#[test]
fn an_allowed_gateway_gets_its_namespace_s_credentials_in_both_layouts_and_their_cas() {
    let creds = table(&[("shop", "ingress")]);
    let got = served(
        &creds,
        &gateway(false),
        &[
            "kubernetes://www",
            "kubernetes://shop/generic",
            "kubernetes://www-cacert",
            "kubernetes://generic-cacert",
        ],
    );
    let names: Vec<&str> = got.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "kubernetes://generic-cacert",
            "kubernetes://shop/generic",
            "kubernetes://www",
            "kubernetes://www-cacert",
        ]
    );
    assert_eq!(
        certificate(&got[2].1),
        ("www-cert".into(), "www-key".into())
    );
    assert_eq!(certificate(&got[1].1), ("g-cert".into(), "g-key".into()));
    // A Secret named NAME-cacert wins over NAME's own CA; else NAME's CA is used.
    assert_eq!(ca(&got[0].1), "split-ca");
    assert_eq!(ca(&got[3].1), "www-ca");
    // Each secret is named as asked.
    assert!(got.iter().all(|(n, s)| *n == s.name));
    assert!(
        creds.asked().is_empty(),
        "a fresh answer is not asked again"
    );
}

#[test]
fn without_an_answer_only_cas_are_served_and_an_answer_is_asked_for() {
    let creds = table(&[]);
    let got = served(
        &creds,
        &gateway(false),
        &["kubernetes://www", "kubernetes://www-cacert"],
    );
    let names: Vec<&str> = got.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["kubernetes://www-cacert"]);
    let asked: Vec<String> = creds.asked().iter().map(ToString::to_string).collect();
    assert_eq!(asked, ["shop/ingress in cluster Kubernetes"]);
}

#[test]
fn no_secret_for_a_proxy_without_a_certificate_another_namespace_or_an_unknown_name() {
    let creds = table(&[("shop", "ingress")]);
    assert!(served(&creds, &gateway(true), &["kubernetes://www"]).is_empty());
    let got = served(
        &creds,
        &gateway(false),
        &[
            "kubernetes://other/www",
            "kubernetes://missing",
            "kubernetes://missing-cacert",
            "file-cert:/etc/certs/cert.pem",
        ],
    );
    assert!(got.is_empty(), "{got:?}");
    // A proxy of another cluster than those read.
    let elsewhere = Proxy {
        cluster_id: "remote".into(),
        ..gateway(false)
    };
    assert!(reader(&creds, &elsewhere).is_none());
}
