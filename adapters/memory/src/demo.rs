//! The built-in demo mesh: a small bookinfo (productpage, details, ratings, reviews v1/v2/v3).
//!
//! `wayfinder discovery` with no flags runs on this registry (`--registries Mock`), so a
//! freshly started server serves meaningful configuration. Addresses are documentation-style
//! private IPs; nothing listens on them.

use wayfinder_registry::{Endpoint, Locality, Protocol, Registration, Service};

use crate::{MemoryHandle, MemoryRegistry};

/// The namespace every demo service lives in.
pub const NAMESPACE: &str = "default";

/// A memory registry named `Mock` holding bookinfo under `domain` (e.g. `cluster.local`),
/// and its handle.
pub async fn bookinfo(domain: &str) -> (MemoryRegistry, MemoryHandle) {
    let (registry, handle) = MemoryRegistry::new("Mock");
    for registration in bookinfo_services(domain) {
        handle.upsert(registration).await;
    }
    (registry, handle)
}

/// The bookinfo services and endpoints under `domain`.
pub fn bookinfo_services(domain: &str) -> Vec<Registration> {
    let apps: [(&str, u8, &[&str]); 4] = [
        ("productpage", 10, &["v1"]),
        ("details", 11, &["v1"]),
        ("ratings", 12, &["v1"]),
        ("reviews", 13, &["v1", "v2", "v3"]),
    ];
    apps.iter()
        .map(|&(app, octet, versions)| {
            let mut service = Service::new(format!("{app}.{NAMESPACE}.svc.{domain}"), NAMESPACE)
                .with_port("http", 9080, Protocol::Http);
            service.addresses = vec![[10, 96, 0, octet].into()];
            service.labels.insert("app".into(), app.into());
            let account: std::sync::Arc<str> = format!("bookinfo-{app}").into();
            service.service_accounts = vec![account.clone()];
            let endpoints = versions
                .iter()
                .zip(1u8..)
                .map(|(version, i)| {
                    let mut ep = Endpoint::new(format!("10.1.{octet}.{i}"))
                        .with_label("app", app)
                        .with_label("version", version);
                    ep.locality = Locality::parse(&format!(
                        "us-east1/us-east1-{}",
                        ['a', 'b', 'c'][usize::from(i - 1) % 3]
                    ));
                    ep.service_account = Some(account.clone());
                    ep
                })
                .collect();
            Registration::new(service, endpoints)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bookinfo_is_valid_and_has_three_reviews_versions() {
        let services = bookinfo_services("cluster.local");
        assert_eq!(services.len(), 4);
        for s in &services {
            s.validate().unwrap();
        }
        let reviews = services
            .iter()
            .find(|r| r.service.hostname.starts_with("reviews."))
            .unwrap();
        let versions: Vec<_> = reviews
            .endpoints
            .iter()
            .map(|e| &*e.labels["version"])
            .collect();
        assert_eq!(versions, ["v1", "v2", "v3"]);
    }
}
