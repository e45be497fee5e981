//! One fetch of an issuer's keys: HTTP(S) `GET` of the rule's `jwksUri`, or of the `jwks_uri`
//! its issuer's OpenID discovery document (`ISSUER/.well-known/openid-configuration`) names.
//!
//! A RequestAuthentication's author chooses the address the control plane fetches, and the
//! answer is inlined into proxies' configuration, so a fetch is careful about what it reaches
//! and what it passes on:
//! - `http` and `https` only; `https` is verified against the machine's trust store;
//! - no link-local address (`169.254.0.0/16`, `fe80::/10`, where clouds serve instance
//!   credentials) and no known cloud metadata address (`100.100.100.200`, `fd00:ec2::/32`),
//!   checked on every address DNS gives and on literal addresses, redirects included (at most
//!   5), as istiod's dialer does;
//! - the whole fetch within the rule's `timeout`, at most `max_bytes` read;
//! - the body must be a JWKS document with at least one key Envoy can use (a `kty` of `RSA`
//!   with `n` and `e`, `EC` with `crv`, `x` and `y`, or `OKP` with `crv` and `x`): Envoy
//!   refuses a provider whose inline keys it cannot read, and with it the whole listener, so a
//!   document that is not one is a failure here instead;
//! - private key material in it (an issuer's mistake) is removed before it goes anywhere:
//!   the private members of asymmetric keys, and symmetric (`oct`) keys, which are secrets.
//!
//! Private and loopback addresses are allowed: an issuer may run in the cluster.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};

use super::JwksKey;

/// Why a fetch failed.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// The URI cannot be fetched (not http or https, no host).
    #[error("{0}")]
    Uri(String),
    /// The request failed (connection, TLS, a blocked address, a timeout).
    #[error("GET {uri}: {reason}")]
    Request {
        /// What was asked for.
        uri: String,
        /// Why it failed, with its causes.
        reason: String,
    },
    /// The answer was not 2xx.
    #[error("GET {uri}: status {status}")]
    Status {
        /// What was asked for.
        uri: String,
        /// Its status.
        status: u16,
    },
    /// The answer was too large.
    #[error("GET {uri}: the answer is larger than {max} bytes")]
    TooLarge {
        /// What was asked for.
        uri: String,
        /// The limit.
        max: usize,
    },
    /// The answer is not what was expected.
    #[error("GET {uri}: {reason}")]
    Invalid {
        /// What was asked for.
        uri: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// The client fetches go through: addresses checked, redirects checked and bounded.
pub fn client() -> Result<reqwest::Client, reqwest::Error> {
    // reqwest's TLS needs a process-wide provider (the Consul and Eureka clients do the same);
    // an embedding program may not have installed one.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let redirects = reqwest::redirect::Policy::custom(|attempt| {
        if attempt.previous().len() >= 5 {
            attempt.error("more than 5 redirects")
        } else if let Err(e) = allowed_url(attempt.url()) {
            attempt.error(e)
        } else {
            attempt.follow()
        }
    });
    reqwest::Client::builder()
        .dns_resolver(Arc::new(Guarded))
        .redirect(redirects)
        .no_proxy()
        .build()
}

/// The keys of `key`: the JWKS document, as served.
pub async fn jwks(
    client: &reqwest::Client,
    key: &JwksKey,
    timeout: Duration,
    max_bytes: usize,
) -> Result<String, FetchError> {
    let fetch = async {
        let uri = if key.uri.is_empty() {
            discover(client, &key.issuer, max_bytes).await?
        } else {
            key.uri.to_string()
        };
        let body = get(client, &uri, max_bytes).await?;
        let invalid = |reason: String| FetchError::Invalid {
            uri: uri.clone(),
            reason,
        };
        let text = String::from_utf8(body).map_err(|_| invalid("not UTF-8".into()))?;
        // Only public keys go to proxies (and to their debug pages).
        let text = super::without_private_keys(&text, true).unwrap_or(text);
        check_jwks(text.as_bytes()).map_err(invalid)?;
        Ok(text)
    };
    tokio::time::timeout(timeout, fetch)
        .await
        .unwrap_or_else(|_| {
            Err(FetchError::Request {
                uri: if key.uri.is_empty() {
                    format!("{}{DISCOVERY}", key.issuer.trim_end_matches('/'))
                } else {
                    key.uri.to_string()
                },
                reason: format!("no answer within {timeout:?}"),
            })
        })
}

/// The discovery document's path under an issuer.
const DISCOVERY: &str = "/.well-known/openid-configuration";

/// The `jwks_uri` of `issuer`'s OpenID discovery document.
async fn discover(
    client: &reqwest::Client,
    issuer: &str,
    max_bytes: usize,
) -> Result<String, FetchError> {
    let uri = format!("{}{DISCOVERY}", issuer.trim_end_matches('/'));
    let body = get(client, &uri, max_bytes).await?;
    let invalid = |reason: &str| FetchError::Invalid {
        uri: uri.clone(),
        reason: reason.into(),
    };
    let document: serde_json::Value =
        serde_json::from_slice(&body).map_err(|_| invalid("not a JSON document"))?;
    let jwks_uri = document["jwks_uri"]
        .as_str()
        .ok_or_else(|| invalid("no jwks_uri string"))?;
    Ok(jwks_uri.to_string())
}

/// `GET uri`, 2xx only, at most `max_bytes`.
async fn get(client: &reqwest::Client, uri: &str, max_bytes: usize) -> Result<Vec<u8>, FetchError> {
    let url = reqwest::Url::parse(uri).map_err(|e| FetchError::Uri(format!("{uri:?}: {e}")))?;
    allowed_url(&url).map_err(|e| FetchError::Uri(format!("{uri}: {e}")))?;
    let request = |reason: String| FetchError::Request {
        uri: uri.to_string(),
        reason,
    };
    let mut response = client
        .get(url)
        .send()
        .await
        .map_err(|e| request(causes(&e)))?;
    let status = response.status();
    if !status.is_success() {
        return Err(FetchError::Status {
            uri: uri.to_string(),
            status: status.as_u16(),
        });
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| request(causes(&e)))? {
        if body.len() + chunk.len() > max_bytes {
            return Err(FetchError::TooLarge {
                uri: uri.to_string(),
                max: max_bytes,
            });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// An error with its causes, which say what actually failed (reqwest's own message rarely
/// does).
fn causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// `http` or `https`, with a host that is not a blocked literal address.
fn allowed_url(url: &reqwest::Url) -> Result<(), String> {
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!(
            "scheme {:?} is not supported: http or https",
            url.scheme()
        ));
    }
    let ip = match url.host() {
        None => return Err("no host".into()),
        Some(url::Host::Domain(_)) => return Ok(()),
        Some(url::Host::Ipv4(ip)) => IpAddr::V4(ip),
        Some(url::Host::Ipv6(ip)) => IpAddr::V6(ip),
    };
    blocked(ip).map_or(Ok(()), Err)
}

/// Why the control plane does not connect to `ip`, if it does not.
pub fn blocked(ip: IpAddr) -> Option<String> {
    let link_local = match ip {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => (v6.segments()[0] & 0xffc0) == 0xfe80,
    };
    let metadata = match ip {
        IpAddr::V4(v4) => v4.octets() == [100, 100, 100, 200],
        IpAddr::V6(v6) => v6.segments()[0] == 0xfd00 && v6.segments()[1] == 0x0ec2,
    };
    if link_local {
        Some(format!(
            "{ip} is link-local, where clouds serve instance credentials"
        ))
    } else if metadata {
        Some(format!("{ip} is a cloud metadata address"))
    } else {
        None
    }
}

/// DNS through the system resolver, without the addresses [`blocked`] refuses.
struct Guarded;

impl reqwest::dns::Resolve for Guarded {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let host = name.as_str().to_string();
        Box::pin(async move {
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let allowed: Vec<SocketAddr> = found
                .iter()
                .copied()
                .filter(|a| blocked(a.ip()).is_none())
                .collect();
            if allowed.is_empty() {
                let why = found
                    .first()
                    .and_then(|a| blocked(a.ip()))
                    .unwrap_or_else(|| "no address".into());
                return Err(format!("{host}: {why}").into());
            }
            let addrs: reqwest::dns::Addrs = Box::new(allowed.into_iter());
            Ok(addrs)
        })
    }
}

/// Checks that `body` is a JWKS document with a key Envoy can use (see the module's docs).
pub fn check_jwks(body: &[u8]) -> Result<(), String> {
    let document: serde_json::Value =
        serde_json::from_slice(body).map_err(|_| "not a JSON document".to_string())?;
    let keys = document["keys"]
        .as_array()
        .ok_or_else(|| "no \"keys\" array: not a JWKS document".to_string())?;
    let usable = |key: &serde_json::Value| {
        let has = |members: &[&str]| members.iter().all(|m| key[*m].is_string());
        match key["kty"].as_str() {
            Some("RSA") => has(&["n", "e"]),
            Some("EC") => has(&["crv", "x", "y"]),
            Some("OKP") => has(&["crv", "x"]),
            _ => false,
        }
    };
    if keys.iter().any(usable) {
        Ok(())
    } else {
        Err("no public key Envoy can use (RSA, EC or OKP with its members)".into())
    }
}

/// A JWKS of one public key whose private key is dropped as soon as it is made: nobody can
/// sign a token it accepts. It stands for keys that could not be fetched, so that a proxy
/// refuses every token of that issuer rather than accepting any (as istiod's
/// `PublicOnlyJwks`). `None` when the system's random source fails.
pub fn public_only_jwks() -> Option<String> {
    let rng = SystemRandom::new();
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).ok()?;
    let pair =
        EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng).ok()?;
    // An uncompressed P-256 point: 0x04, then x and y of 32 bytes each.
    let [4, xy @ ..] = pair.public_key().as_ref() else {
        return None;
    };
    let (x, y) = xy.split_at_checked(32)?;
    Some(format!(
        r#"{{"keys":[{{"kty":"EC","crv":"P-256","use":"sig","x":"{}","y":"{}"}}]}}"#,
        URL_SAFE_NO_PAD.encode(x),
        URL_SAFE_NO_PAD.encode(y),
    ))
}

#[cfg(test)]
mod tests;
