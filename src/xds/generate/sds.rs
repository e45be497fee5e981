//! Gateways' credentials as SDS secrets on the ADS stream, as istiod's `SecretGen` serves them:
//! the secrets a proxy asks for by name (`kubernetes://NAME`, `kubernetes://NAMESPACE/NAME`,
//! and `…-cacert` for a CA), read from the [`Credentials`] table.
//!
//! Who gets what (istiod's `filterAuthorizedResources`):
//! - nothing to a proxy without a verified identity (a certificate, on the secure port): on the
//!   plaintext port a node is whoever it says it is;
//! - nothing from another namespace than the proxy's (Istio allows that only for Gateway API
//!   references, which wayfinder does not serve);
//! - a CA certificate (`NAME-cacert`) to any such proxy of the namespace: it is public;
//! - a certificate and its key only when the API server said the proxy's service account may
//!   `list` Secrets in its namespace ([`Credentials::decision`]); with no answer yet, the
//!   table is asked for one, and the secret comes with the table that holds the answer.
//!
//! A name that is not one of these, a Secret that is missing or lacks the keys, is left out
//! with a warning naming the Secret and why; the proxy keeps what it had (SDS is not a
//! full-state type). A certificate outside its validity period is served with a warning, as
//! istiod serves it.

use std::collections::BTreeSet;
use std::sync::Arc;

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use wayfinder_config::credentials::{self, CertInfo, SecretRef};
use x509_parser::prelude::{FromDer, X509Certificate};

use crate::credentials::{Credentials, Identity};
use crate::xds::pb::core::{DataSource, data_source};
use crate::xds::pb::tls::{CertificateValidationContext, Secret, TlsCertificate, secret};
use crate::xds::proxy::Proxy;
use crate::xds::resource::{Resource, ResourceSet, insert};

/// What a proxy may read of its namespace's Secrets: part of the key of what it is served.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Access {
    /// CA certificates and credentials (the API server allowed its service account).
    Credentials,
    /// CA certificates only: the API server refused, or has not answered yet.
    CaOnly,
}

/// Whom a proxy's secrets are read for: its identity, and what it may read. `None` for a
/// proxy that gets no secrets (no verified identity, or a cluster wayfinder does not read).
pub(super) fn reader(creds: &Credentials, proxy: &Proxy) -> Option<(Identity, Access)> {
    proxy.certificate.as_ref()?;
    let identity = Identity {
        cluster: creds.cluster(&proxy.cluster_id)?.clone(),
        namespace: proxy.namespace.clone(),
        service_account: proxy.service_account.as_deref()?.into(),
    };
    let access = match creds.decision(&identity) {
        Some(d) => {
            if d.expired() {
                creds.ask(&identity);
            }
            if d.allowed.is_ok() {
                Access::Credentials
            } else {
                Access::CaOnly
            }
        }
        None => {
            creds.ask(&identity);
            Access::CaOnly
        }
    };
    Some((identity, access))
}

/// The secrets of `names` that `identity` may read with `access`.
pub(super) fn secrets(
    creds: &Credentials,
    identity: &Identity,
    access: Access,
    names: &BTreeSet<Arc<str>>,
) -> ResourceSet {
    let mut set = ResourceSet::new();
    for name in names {
        match secret(creds, identity, access, name) {
            Ok(Some(resource)) => insert(&mut set, resource),
            Ok(None) => {}
            Err(why) => tracing::warn!(
                identity = %identity,
                secret = %name,
                "not serving the secret: {why}"
            ),
        }
    }
    set
}

/// One secret; `Ok(None)` for one `access` does not cover (said once by the task that
/// decided).
fn secret(
    creds: &Credentials,
    identity: &Identity,
    access: Access,
    name: &str,
) -> Result<Option<Resource>, String> {
    let wanted = SecretRef::parse(name, &identity.namespace)?;
    if wanted.namespace != *identity.namespace {
        return Err(format!(
            "it is in namespace {}, not the proxy's: a gateway reads the Secrets of its own \
             namespace only",
            wanted.namespace
        ));
    }
    let find = |name: &str| creds.secret(&identity.cluster, &wanted.namespace, name);
    let missing = |name: &str| format!("Secret {}/{name} not found", wanted.namespace);
    if wanted.ca_only {
        // `NAME-cacert`, else the CA of `NAME` (Istio's `GetCaCert`).
        let found = find(&wanted.name).or_else(|| find(wanted.stripped()));
        let secret = found.ok_or_else(|| missing(wanted.stripped()))?;
        let ca = credentials::root(secret)?;
        check_validity(identity, name, &ca);
        return Ok(Some(Resource::encode(name, &ca_secret(name, &ca))));
    }
    if access != Access::Credentials {
        return Ok(None);
    }
    let secret = find(&wanted.name).ok_or_else(|| missing(&wanted.name))?;
    let info = credentials::cert_info(secret)?;
    check_validity(identity, name, &info);
    Ok(Some(Resource::encode(name, &tls_secret(name, &info))))
}

/// A certificate and its key (Istio's `toEnvoyTLSSecret`).
fn tls_secret(name: &str, info: &CertInfo) -> Secret {
    Secret {
        name: name.to_owned(),
        r#type: Some(secret::Type::TlsCertificate(TlsCertificate {
            certificate_chain: inline(Some(&info.cert)),
            private_key: inline(info.key.as_ref()),
            ocsp_staple: inline(info.staple.as_ref()),
            ..Default::default()
        })),
    }
}

/// CA certificates, with their CRL (Istio's `toEnvoyCaSecret`).
fn ca_secret(name: &str, ca: &CertInfo) -> Secret {
    Secret {
        name: name.to_owned(),
        r#type: Some(secret::Type::ValidationContext(
            CertificateValidationContext {
                trusted_ca: inline(Some(&ca.cert)),
                crl: inline(ca.crl.as_ref()),
                ..Default::default()
            },
        )),
    }
}

fn inline(bytes: Option<&credentials::Bytes>) -> Option<DataSource> {
    bytes.map(|b| DataSource {
        specifier: Some(data_source::Specifier::InlineBytes(b.to_vec())),
        ..Default::default()
    })
}

/// Warns of a first certificate that does not parse or is outside its validity period
/// (Istio's `ValidateCertificate`); it is served all the same, as istiod serves it.
fn check_validity(identity: &Identity, name: &str, info: &CertInfo) {
    let problem = match CertificateDer::pem_slice_iter(&info.cert).next() {
        None => Some("no PEM certificate in it".to_owned()),
        Some(Err(e)) => Some(format!("its PEM does not parse: {e}")),
        Some(Ok(der)) => match X509Certificate::from_der(der.as_ref()) {
            Err(e) => Some(format!("its certificate does not parse: {e}")),
            Ok((_, cert)) if !cert.validity().is_valid() => {
                Some("its certificate is expired or not yet valid".to_owned())
            }
            Ok(_) => None,
        },
    };
    if let Some(problem) = problem {
        tracing::warn!(identity = %identity, secret = %name, "invalid certificate: {problem}");
    }
}

#[cfg(test)]
mod tests;
