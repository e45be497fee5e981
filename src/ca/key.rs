//! The CA's signing key, read from `ca-key.pem`.
//!
//! rcgen's `KeyPair` (on ring) reads PKCS#8 keys only (`BEGIN PRIVATE KEY`, what OpenSSL 3's
//! `genrsa` and `genpkey` write). Istio's older tools and many `cacerts` secrets hold RSA keys
//! in PKCS#1 (`BEGIN RSA PRIVATE KEY`, OpenSSL 1's `genrsa`): those are read by ring's
//! `RsaKeyPair::from_der` and signed through rcgen's [`SigningKey`] trait. An EC key in SEC1
//! form (`BEGIN EC PRIVATE KEY`) is refused with the `openssl pkcs8 -topk8` command that
//! converts it: ring reads EC keys only in PKCS#8, and wayfinder parses no ASN.1 itself.

use rcgen::{KeyPair, PKCS_RSA_SHA256, PublicKeyData, SignatureAlgorithm, SigningKey};
use ring::rand::SystemRandom;
use ring::signature::{self, KeyPair as _, RsaKeyPair};

/// A CA key: any key rcgen reads, or an RSA key in PKCS#1.
pub(crate) enum CaKey {
    /// PKCS#8 (RSA, ECDSA P-256/P-384, Ed25519), or a key made here.
    Pkcs8(KeyPair),
    /// PKCS#1 RSA, with its public key (PKCS#1 `RSAPublicKey`, as rcgen writes RSA keys).
    Rsa(RsaKeyPair, Vec<u8>),
}

impl std::fmt::Debug for CaKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CaKey(…)")
    }
}

impl CaKey {
    /// Reads a PEM private key; the error says which forms are read.
    pub(crate) fn from_pem(pem: &str) -> Result<Self, String> {
        if pem.contains("-----BEGIN EC PRIVATE KEY-----") {
            return Err(
                "an EC key in SEC1 form (BEGIN EC PRIVATE KEY); convert it to PKCS#8 with \
                 `openssl pkcs8 -topk8 -nocrypt -in ca-key.pem -out ca-key.pkcs8.pem`"
                    .into(),
            );
        }
        if pem.contains("-----BEGIN RSA PRIVATE KEY-----") {
            let der = rustls::pki_types::pem::PemObject::from_pem_slice(pem.as_bytes())
                .map(|d: rustls::pki_types::PrivatePkcs1KeyDer<'_>| d)
                .map_err(|e| format!("not a PEM RSA key: {e}"))?;
            let key = RsaKeyPair::from_der(der.secret_pkcs1_der())
                .map_err(|e| format!("not a usable RSA key: {e}"))?;
            let public = key.public_key().as_ref().to_vec();
            return Ok(Self::Rsa(key, public));
        }
        KeyPair::from_pem(pem)
            .map(Self::Pkcs8)
            .map_err(|e| format!("not a PKCS#8 (BEGIN PRIVATE KEY) or PKCS#1 RSA private key: {e}"))
    }

    /// A new ECDSA P-256 key, made in this process.
    pub(crate) fn generate() -> Result<Self, rcgen::Error> {
        KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map(Self::Pkcs8)
    }

    /// The key in PKCS#8 PEM, to keep in `ca-key.pem` (only keys made here are written).
    pub(crate) fn pem(&self) -> Option<String> {
        match self {
            Self::Pkcs8(key) => Some(key.serialize_pem()),
            Self::Rsa(..) => None,
        }
    }
}

impl PublicKeyData for CaKey {
    fn der_bytes(&self) -> &[u8] {
        match self {
            Self::Pkcs8(key) => key.der_bytes(),
            Self::Rsa(_, public) => public,
        }
    }

    fn algorithm(&self) -> &'static SignatureAlgorithm {
        match self {
            Self::Pkcs8(key) => key.algorithm(),
            Self::Rsa(..) => &PKCS_RSA_SHA256,
        }
    }
}

impl SigningKey for CaKey {
    fn sign(&self, msg: &[u8]) -> Result<Vec<u8>, rcgen::Error> {
        match self {
            Self::Pkcs8(key) => key.sign(msg),
            Self::Rsa(key, _) => {
                let mut sig = vec![0; key.public().modulus_len()];
                key.sign(
                    &signature::RSA_PKCS1_SHA256,
                    &SystemRandom::new(),
                    msg,
                    &mut sig,
                )
                .map_err(|_| rcgen::Error::RingUnspecified)?;
                Ok(sig)
            }
        }
    }
}
