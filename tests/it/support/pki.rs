//! A certificate authority made in the test, and a server certificate it signs: real
//! certificates, with rcgen (the crate the product uses).

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// A CA and a certificate for one name, signed by it.
pub(crate) struct Pki {
    /// The CA's certificate (PEM).
    pub(crate) ca_pem: String,
    /// The server certificate.
    pub(crate) cert: CertificateDer<'static>,
    /// The server certificate (PEM).
    pub(crate) cert_pem: String,
    /// Its key.
    pub(crate) key: PrivateKeyDer<'static>,
    /// Its key (PKCS#8 PEM).
    pub(crate) key_pem: String,
}

impl Pki {
    /// A new CA, and a certificate for `name` (DNS name and common name).
    pub(crate) fn new(name: &str) -> Self {
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, "wayfinder test CA");
        let ca_key = KeyPair::generate().unwrap();
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca, ca_key);
        let mut leaf = CertificateParams::new(vec![name.to_string()]).unwrap();
        leaf.distinguished_name.push(DnType::CommonName, name);
        let key = KeyPair::generate().unwrap();
        let cert = leaf.signed_by(&key, &issuer).unwrap();
        Self {
            ca_pem: ca_cert.pem(),
            cert: cert.der().clone(),
            cert_pem: cert.pem(),
            key: PrivatePkcs8KeyDer::from(key.serialize_der()).into(),
            key_pem: key.serialize_pem(),
        }
    }
}
