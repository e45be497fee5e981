//! Gateway credentials: the Kubernetes Secrets a Gateway server's `credentialName` names, as
//! Istio reads them (`pilot/pkg/credentials/kube/secrets.go`, `pilot/pkg/model/credentials`).
//!
//! - **Names.** A `credentialName` is a Secret's name in the gateway's namespace (or
//!   `kubernetes://NAME`, or `kubernetes://NAMESPACE/NAME`); the gateway asks for it over SDS as
//!   `kubernetes://NAME` ([`resource_name`]), and for the CA that verifies clients (`MUTUAL`,
//!   `OPTIONAL_MUTUAL`) as the same name with [`CA_SUFFIX`]. [`SecretRef::parse`] reads such a
//!   name back.
//! - **Layouts.** A Secret holds a certificate and its key either in Istio's generic layout
//!   (`cert`, `key`, optionally `cacert` and `crl`) or in Kubernetes' TLS layout (`tls.crt`,
//!   `tls.key`, optionally `ca.crt`, `ca.crl` and `tls.ocsp-staple`); generic wins when both
//!   are there. The CA of `NAME-cacert` is the Secret `NAME-cacert`'s `cacert` or `ca.crt`, else
//!   the Secret `NAME`'s. [`cert_info`] and [`root`] are Istio's `ExtractCertInfo` and
//!   `ExtractRoot`, with their error messages.
//!
//! A [`Secret`] keeps the bytes of those keys only (and the names of the first others, for
//! error messages), and its `Debug` shows their names and sizes, never their bytes: a private
//! key must not reach a log.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use wayfinder_registry::Item;

/// The suffix of the SDS name of a credential's CA certificate (Istio's `SdsCaSuffix`).
pub const CA_SUFFIX: &str = "-cacert";

/// The prefix of SDS names of Kubernetes Secrets in the proxy's cluster.
pub const KUBERNETES_PREFIX: &str = "kubernetes://";

/// Istio's generic layout: the certificate chain.
pub const GENERIC_CERT: &str = "cert";
/// Istio's generic layout: the private key.
pub const GENERIC_KEY: &str = "key";
/// Istio's generic layout: the CA certificate.
pub const GENERIC_CA_CERT: &str = "cacert";
/// Istio's generic layout: the CRL.
pub const GENERIC_CRL: &str = "crl";
/// Kubernetes' TLS layout: the certificate chain.
pub const TLS_CERT: &str = "tls.crt";
/// Kubernetes' TLS layout: the private key.
pub const TLS_KEY: &str = "tls.key";
/// Kubernetes' TLS layout: an OCSP staple.
pub const TLS_OCSP_STAPLE: &str = "tls.ocsp-staple";
/// Kubernetes' TLS layout: the CA certificate.
pub const TLS_CA_CERT: &str = "ca.crt";
/// Kubernetes' TLS layout: the CRL.
pub const TLS_CRL: &str = "ca.crl";

/// Every key of a Secret a gateway reads; a [`Secret`] keeps only these.
pub const KEYS: [&str; 9] = [
    GENERIC_CERT,
    GENERIC_KEY,
    GENERIC_CA_CERT,
    GENERIC_CRL,
    TLS_CERT,
    TLS_KEY,
    TLS_OCSP_STAPLE,
    TLS_CA_CERT,
    TLS_CRL,
];

/// Bytes of a Secret's entry, shared.
pub type Bytes = Arc<[u8]>;

/// A Kubernetes Secret cut to the keys a gateway reads ([`KEYS`]).
#[derive(Clone, PartialEq, Eq)]
pub struct Secret {
    /// Its namespace.
    pub namespace: Arc<str>,
    /// Its name.
    pub name: Arc<str>,
    /// Its entries of [`KEYS`], decoded.
    data: BTreeMap<&'static str, Bytes>,
    /// Its keys, sorted: the first three names and how many there are in all, which is what
    /// messages show of them.
    keys: ([Option<Arc<str>>; 3], usize),
}

impl Secret {
    /// The Secret `namespace/name` with the entries of `data` a gateway reads.
    pub fn new<K: AsRef<str>>(
        namespace: &str,
        name: &str,
        data: impl IntoIterator<Item = (K, Vec<u8>)>,
    ) -> Self {
        let mut names: Vec<Arc<str>> = Vec::new();
        let mut kept = BTreeMap::new();
        for (k, v) in data {
            let k = k.as_ref();
            names.push(k.into());
            if let Some(key) = KEYS.iter().find(|known| **known == k) {
                kept.insert(*key, Bytes::from(v));
            }
        }
        names.sort();
        let count = names.len();
        let mut first = names.into_iter();
        Self {
            namespace: namespace.into(),
            name: name.into(),
            data: kept,
            keys: ([first.next(), first.next(), first.next()], count),
        }
    }

    /// The entry `key`, if the Secret has it.
    pub fn get(&self, key: &str) -> Option<&Bytes> {
        self.data.get(key)
    }

    /// The bytes the Secret holds, for sizing.
    pub fn size(&self) -> usize {
        self.data.values().map(|v| v.len()).sum()
    }

    /// True when `key` is there and not empty (Istio's `hasValue`).
    fn has_value(&self, key: &str) -> bool {
        self.get(key).is_some_and(|v| !v.is_empty())
    }

    /// A non-empty entry.
    fn value(&self, key: &str) -> Option<Bytes> {
        self.get(key).filter(|v| !v.is_empty()).cloned()
    }

    /// The keys it has, for messages: at most three, then how many more (Istio's
    /// `truncatedKeysMessage`).
    fn keys_message(&self) -> String {
        let (first, count) = &self.keys;
        let names: Vec<&str> = first.iter().flatten().map(|k| &**k).collect();
        if *count < 3 {
            names.join(", ")
        } else {
            format!("{}, and {} more...", names.join(", "), count - 3)
        }
    }
}

/// Names and sizes only: the bytes may be a private key.
impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sizes: BTreeMap<&str, usize> = self.data.iter().map(|(k, v)| (*k, v.len())).collect();
        f.debug_struct("Secret")
            .field("namespace", &self.namespace)
            .field("name", &self.name)
            .field("bytes", &sizes)
            .finish()
    }
}

/// A Secret is keyed by its namespace and name within its cluster's stream.
impl Item for Secret {
    type Key = (Arc<str>, Arc<str>);

    fn key(&self) -> Self::Key {
        (self.namespace.clone(), self.name.clone())
    }
}

/// A certificate and what goes with it, read from a [`Secret`].
#[derive(Clone, PartialEq, Eq)]
pub struct CertInfo {
    /// The certificate chain (PEM), or, from [`root`], the CA certificates.
    pub cert: Bytes,
    /// The private key (PEM); `None` from [`root`].
    pub key: Option<Bytes>,
    /// An OCSP staple (TLS layout only).
    pub staple: Option<Bytes>,
    /// A CRL.
    pub crl: Option<Bytes>,
}

/// Never the key's bytes.
impl fmt::Debug for CertInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CertInfo")
            .field("cert_bytes", &self.cert.len())
            .field("key", &self.key.as_ref().map(|_| "(not shown)"))
            .field("staple_bytes", &self.staple.as_ref().map(|s| s.len()))
            .field("crl_bytes", &self.crl.as_ref().map(|c| c.len()))
            .finish()
    }
}

/// The certificate and key of `secret`: the generic layout, else the TLS one (Istio's
/// `ExtractCertInfo`).
pub fn cert_info(secret: &Secret) -> Result<CertInfo, String> {
    if secret.has_value(GENERIC_CERT) && secret.has_value(GENERIC_KEY) {
        return Ok(CertInfo {
            cert: secret.value(GENERIC_CERT).unwrap_or_default(),
            key: secret.value(GENERIC_KEY),
            staple: None,
            crl: secret.value(GENERIC_CRL),
        });
    }
    if secret.has_value(TLS_CERT) && secret.has_value(TLS_KEY) {
        return Ok(CertInfo {
            cert: secret.value(TLS_CERT).unwrap_or_default(),
            key: secret.value(TLS_KEY),
            staple: secret.value(TLS_OCSP_STAPLE),
            crl: secret.value(TLS_CRL),
        });
    }
    let has = |a: &str, b: &str| secret.get(a).is_some() && secret.get(b).is_some();
    for (cert, key) in [(GENERIC_CERT, GENERIC_KEY), (TLS_CERT, TLS_KEY)] {
        if has(cert, key) {
            return Err(format!(
                "found keys {cert:?} and {key:?}, but they were empty"
            ));
        }
    }
    Err(format!(
        "found secret, but didn't have expected keys ({GENERIC_CERT} and {GENERIC_KEY}) or \
         ({TLS_CERT} and {TLS_KEY}); found: {}",
        secret.keys_message()
    ))
}

/// The CA certificates of `secret`: `cacert`, else `ca.crt` (Istio's `ExtractRoot`).
pub fn root(secret: &Secret) -> Result<CertInfo, String> {
    for (ca, crl) in [(GENERIC_CA_CERT, GENERIC_CRL), (TLS_CA_CERT, TLS_CRL)] {
        if let Some(cert) = secret.value(ca) {
            return Ok(CertInfo {
                cert,
                key: None,
                staple: None,
                crl: secret.value(crl),
            });
        }
    }
    for ca in [GENERIC_CA_CERT, TLS_CA_CERT] {
        if secret.get(ca).is_some() {
            return Err(format!("found key {ca:?}, but it was empty"));
        }
    }
    Err(format!(
        "found secret, but didn't have expected keys {GENERIC_CA_CERT} or {TLS_CA_CERT}; \
         found: {}",
        secret.keys_message()
    ))
}

/// The SDS name a gateway asks for `credential_name` by (Istio's `ToResourceName`):
/// `kubernetes://NAME` unless it names its type already.
pub fn resource_name(credential_name: &str) -> String {
    if credential_name.starts_with(KUBERNETES_PREFIX) {
        credential_name.to_owned()
    } else {
        format!("{KUBERNETES_PREFIX}{credential_name}")
    }
}

/// The Secret an SDS name asks for (Istio's `ParseResourceName`, for `kubernetes://`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SecretRef {
    /// Its namespace: the one the name gives, else the proxy's.
    pub namespace: String,
    /// The Secret's name, [`CA_SUFFIX`] included when asked with it.
    pub name: String,
    /// True when the name ends in [`CA_SUFFIX`]: only the CA certificates are asked for.
    pub ca_only: bool,
}

impl SecretRef {
    /// Reads `kubernetes://NAME` or `kubernetes://NAMESPACE/NAME`, the namespace defaulting to
    /// `proxy_namespace`. `Err` says why any other name is not one.
    pub fn parse(resource_name: &str, proxy_namespace: &str) -> Result<Self, String> {
        let Some(rest) = resource_name.strip_prefix(KUBERNETES_PREFIX) else {
            return Err(format!(
                "unknown resource type: {resource_name:?} (wayfinder serves {KUBERNETES_PREFIX} \
                 names)"
            ));
        };
        let mut parts = rest.split('/');
        let (namespace, name) = match (parts.next(), parts.next()) {
            (Some(name), None) => (proxy_namespace, name),
            (Some(namespace), Some(name)) => (namespace, name),
            _ => ("", ""),
        };
        if name.is_empty() || namespace.is_empty() {
            return Err(format!(
                "invalid resource name {resource_name:?}: expected {KUBERNETES_PREFIX}NAME or \
                 {KUBERNETES_PREFIX}NAMESPACE/NAME"
            ));
        }
        Ok(Self {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            ca_only: name.ends_with(CA_SUFFIX),
        })
    }

    /// For a CA name, the Secret's name without [`CA_SUFFIX`] (whose CA is used when no Secret
    /// has the suffixed name).
    pub fn stripped(&self) -> &str {
        self.name.strip_suffix(CA_SUFFIX).unwrap_or(&self.name)
    }
}

#[cfg(test)]
mod tests;
