//! Istio's virtual host domain expansion: the names a client in some namespace may use for a
//! service.
//!
//! For a proxy whose DNS domain is `default.svc.cluster.local`, the service
//! `reviews.default.svc.cluster.local` on port 9080 answers to `reviews`, `reviews.default`,
//! `reviews.default.svc` and the full name, each also with `:9080`, and to its VIPs with and
//! without the port. A service of another namespace answers to `name.ns` and `name.ns.svc`
//! (not the bare name). Hosts outside the cluster domain, and any host when the proxy's domain
//! is not a Kubernetes one, keep only the full name, except that a host sharing a suffix with
//! a non-Kubernetes proxy domain gets the shortened forms Istio gives it. This follows
//! `generateVirtualHostDomains` in istio/istio `pilot/pkg/networking/core/httproute.go`.

use std::net::IpAddr;

/// Every domain for `host` on `port` as seen from `proxy_domain`, without duplicates, in a
/// stable order: the full name first.
pub(super) fn expand(host: &str, port: u16, proxy_domain: &str, vips: &[IpAddr]) -> Vec<String> {
    let mut names = vec![host.to_string()];
    names.extend(alternatives(host, proxy_domain));
    for vip in vips {
        names.push(vip.to_string());
    }
    let mut out: Vec<String> = Vec::with_capacity(names.len() * 2);
    for name in names {
        let with_port = match name.parse::<IpAddr>() {
            Ok(IpAddr::V6(_)) => format!("[{name}]:{port}"),
            _ => format!("{name}:{port}"),
        };
        for d in [name, with_port] {
            if !out.contains(&d) {
                out.push(d);
            }
        }
    }
    out
}

/// The shortened names, without ports.
fn alternatives(host: &str, proxy_domain: &str) -> Vec<String> {
    if let Some(proxy_svc) = proxy_domain.find(".svc.") {
        // A Kubernetes proxy domain `ns.svc.<suffix>`: only `name.ns.svc.<suffix>` hosts expand.
        let suffix = &proxy_domain[proxy_svc..];
        let Some(host_svc) = host.find(".svc.") else {
            return Vec::new();
        };
        if &host[host_svc..] != suffix {
            return Vec::new();
        }
        let Some(name_end) = host.find('.') else {
            return Vec::new();
        };
        if name_end >= host_svc {
            return Vec::new();
        }
        let name = &host[..name_end];
        let name_ns = &host[..host_svc];
        let name_ns_svc = format!("{name_ns}.svc");
        if host[name_end + 1..host_svc] == proxy_domain[..proxy_svc] {
            vec![name.to_string(), name_ns.to_string(), name_ns_svc]
        } else {
            vec![name_ns.to_string(), name_ns_svc]
        }
    } else {
        shared_suffix_alternatives(host, proxy_domain)
    }
}

/// Istio's older rule for non-Kubernetes domains: the host without the longest DNS suffix it
/// shares with the proxy's domain, and that name with each shorter part of the shared suffix.
fn shared_suffix_alternatives(host: &str, proxy_domain: &str) -> Vec<String> {
    let host_parts: Vec<&str> = host.split('.').collect();
    let proxy_parts: Vec<&str> = proxy_domain.split('.').collect();
    let shared = host_parts
        .iter()
        .rev()
        .zip(proxy_parts.iter().rev())
        .take_while(|(a, b)| a == b)
        .count();
    if shared == 0 || shared >= host_parts.len() {
        return Vec::new();
    }
    let unique = host_parts[..host_parts.len() - shared].join(".");
    let suffix = &host_parts[host_parts.len() - shared..];
    let mut out = vec![unique.clone()];
    for keep in 1..shared {
        out.push(format!("{unique}.{}", suffix[..keep].join(".")));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_namespace_gets_every_short_form() {
        let d = expand(
            "reviews.default.svc.cluster.local",
            9080,
            "default.svc.cluster.local",
            &["10.96.0.13".parse().unwrap()],
        );
        assert_eq!(
            d,
            [
                "reviews.default.svc.cluster.local",
                "reviews.default.svc.cluster.local:9080",
                "reviews",
                "reviews:9080",
                "reviews.default",
                "reviews.default:9080",
                "reviews.default.svc",
                "reviews.default.svc:9080",
                "10.96.0.13",
                "10.96.0.13:9080",
            ]
        );
    }

    #[test]
    fn other_namespaces_and_external_hosts() {
        let d = expand(
            "ratings.prod.svc.cluster.local",
            80,
            "default.svc.cluster.local",
            &[],
        );
        assert_eq!(
            d[2..],
            [
                "ratings.prod",
                "ratings.prod:80",
                "ratings.prod.svc",
                "ratings.prod.svc:80"
            ]
        );
        let d = expand(
            "api.example.com",
            443,
            "default.svc.cluster.local",
            &["::1".parse().unwrap()],
        );
        assert_eq!(
            d,
            ["api.example.com", "api.example.com:443", "::1", "[::1]:443"]
        );
    }

    #[test]
    fn non_kubernetes_domains_use_the_shared_suffix() {
        let d = expand("db.east.corp.internal", 5432, "web.east.corp.internal", &[]);
        assert_eq!(
            d[2..],
            [
                "db",
                "db:5432",
                "db.east",
                "db.east:5432",
                "db.east.corp",
                "db.east.corp:5432"
            ]
        );
    }
}
