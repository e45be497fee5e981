//! SPIFFE identities: `spiffe://TRUST_DOMAIN/ns/NAMESPACE/sa/SERVICE_ACCOUNT`, as Istio writes
//! them into workload certificates, and reading them back from a peer's certificate.

use std::fmt;

use rustls::pki_types::CertificateDer;
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};

/// A workload's identity in the mesh.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SpiffeId {
    /// `cluster.local`.
    pub trust_domain: String,
    /// The workload's namespace.
    pub namespace: String,
    /// Its service account.
    pub service_account: String,
}

impl SpiffeId {
    /// Parses `spiffe://TD/ns/NS/sa/SA`; anything else is `None`.
    pub fn parse(uri: &str) -> Option<Self> {
        let rest = uri.strip_prefix("spiffe://")?;
        let mut parts = rest.split('/');
        let (Some(td), Some("ns"), Some(ns), Some("sa"), Some(sa), None) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return None;
        };
        [td, ns, sa]
            .iter()
            .all(|p| !p.is_empty())
            .then(|| Self::new(td, ns, sa))
    }

    /// The identity of `service_account` in `namespace`.
    pub fn new(trust_domain: &str, namespace: &str, service_account: &str) -> Self {
        Self {
            trust_domain: trust_domain.to_string(),
            namespace: namespace.to_string(),
            service_account: service_account.to_string(),
        }
    }
}

impl fmt::Display for SpiffeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "spiffe://{}/ns/{}/sa/{}",
            self.trust_domain, self.namespace, self.service_account
        )
    }
}

/// What a verified peer certificate says about its holder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerCertificate {
    /// Its SPIFFE identities (URI names that parse as one), in the certificate's order.
    pub identities: Vec<SpiffeId>,
    /// When it expires, in seconds since the Unix epoch.
    pub not_after: i64,
}

impl PeerCertificate {
    /// Reads a DER certificate; `None` when it does not parse (the TLS layer verified it
    /// before, so that does not happen for a peer's).
    pub fn read(der: &CertificateDer<'_>) -> Option<Self> {
        let (_, cert) = X509Certificate::from_der(der.as_ref()).ok()?;
        let identities = cert
            .subject_alternative_name()
            .ok()
            .flatten()
            .map(|san| {
                san.value
                    .general_names
                    .iter()
                    .filter_map(|name| match name {
                        GeneralName::URI(uri) => SpiffeId::parse(uri),
                        _ => None,
                    })
                    .collect()
            })
            .unwrap_or_default();
        Some(Self {
            identities,
            not_after: cert.validity().not_after.timestamp(),
        })
    }

    /// When it expires, as RFC 3339 (UTC).
    pub fn expiry(&self) -> String {
        time::OffsetDateTime::from_unix_timestamp(self.not_after)
            .ok()
            .and_then(|t| {
                t.format(&time::format_description::well_known::Rfc3339)
                    .ok()
            })
            .unwrap_or_else(|| self.not_after.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spiffe_ids_parse_only_in_istio_s_form() {
        let id = SpiffeId::parse("spiffe://cluster.local/ns/a/sa/web").expect("an id");
        assert_eq!(id, SpiffeId::new("cluster.local", "a", "web"));
        assert_eq!(id.to_string(), "spiffe://cluster.local/ns/a/sa/web");
        for bad in [
            "spiffe://cluster.local/ns/a/sa/",
            "spiffe://cluster.local/ns/a",
            "spiffe://cluster.local/sa/web/ns/a",
            "spiffe://cluster.local/ns/a/sa/web/extra",
            "https://cluster.local/ns/a/sa/web",
        ] {
            assert_eq!(SpiffeId::parse(bad), None, "{bad}");
        }
    }
}
