//! VirtualService: hosts, gateways, TLS and TCP rules, and the destinations and weights every
//! kind of rule shares. HTTP rules are checked in `http`.

use std::collections::BTreeMap;

use super::names::{
    check_export_to, check_gateway_ref, check_labels, check_wildcard_domain, host_within,
    hosts_overlap, is_dns_label, is_ip, is_ip_or_cidr,
};
use super::{Problems, check_port, http};
use crate::{Destination, RouteDestination, TlsRoute, VirtualService};

/// Checks a VirtualService in `namespace`.
pub(super) fn check(vs: &VirtualService, namespace: &str, p: &mut Problems) {
    check_hosts(vs, p);
    for (i, gateway) in vs.gateways.iter().enumerate() {
        check_gateway_ref(p, &format!("spec.gateways[{i}]"), gateway);
    }
    check_export_to(p, "spec.exportTo", namespace, &vs.export_to);
    if vs.http.is_empty() && vs.tls.is_empty() && vs.tcp.is_empty() {
        p.error(
            "spec",
            "a VirtualService needs at least one http, tls or tcp rule",
        );
    }
    for (i, rule) in vs.http.iter().enumerate() {
        let path = format!("spec.http[{i}]");
        http::check_route(rule, &path, p);
        // Istio: a delegate's rules are merged into its root's, and delegate no further.
        if vs.hosts.is_empty() && rule.delegate.is_some() {
            p.error(
                format!("{path}.delegate"),
                "only a root VirtualService (one with hosts) may delegate",
            );
        }
    }
    for (i, rule) in vs.tls.iter().enumerate() {
        check_tls_route(vs, rule, &format!("spec.tls[{i}]"), p);
    }
    for (i, rule) in vs.tcp.iter().enumerate() {
        let path = format!("spec.tcp[{i}]");
        for (j, m) in rule.matches.iter().enumerate() {
            let l4 = L4Match {
                destination_subnets: &m.destination_subnets,
                port: m.port,
                source_labels: &m.source_labels,
                gateways: &m.gateways,
                source_namespace: &m.source_namespace,
            };
            l4.check(p, &format!("{path}.match[{j}]"));
        }
        check_route_destinations(p, &path, &rule.route);
    }
}

/// A destination of a route or a mirror: a host (short names allowed, `*` not), an optional
/// subset and port.
pub(super) fn check_destination(p: &mut Problems, field: &str, d: &Destination) {
    let host = format!("{field}.host");
    if d.host.is_empty() {
        p.error(host, "is required");
    } else if d.host == "*" {
        p.error(host, "* is not a destination: name a service");
    } else if let Err(e) = check_wildcard_domain(&d.host) {
        p.error(host, e);
    }
    if !d.subset.is_empty() && !is_dns_label(&d.subset) {
        p.error(
            format!("{field}.subset"),
            format!("subset name {:?} is not a DNS label", d.subset),
        );
    }
    if let Some(port) = d.port {
        check_port(p, format!("{field}.port.number"), port.number);
    }
}

/// The weights of the destinations of one rule (`field` is the rule's `route`). Each is 0 to
/// 100; several must not all be 0. Istio accepts totals other than 100 and Envoy splits traffic
/// in proportion, so such a total is a warning; a lone destination takes all traffic whatever
/// its weight says.
pub(super) fn check_weights(p: &mut Problems, field: &str, weights: &[Option<i32>]) {
    let mut total: i64 = 0;
    for (i, weight) in weights.iter().enumerate() {
        let Some(w) = *weight else { continue };
        if (0..=100).contains(&w) {
            total += i64::from(w);
        } else {
            p.error(
                format!("{field}[{i}].weight"),
                format!("weight {w} is out of range 0..=100"),
            );
        }
    }
    match weights {
        [Some(w)] if *w != 100 && (0..=100).contains(w) => p.warn(
            format!("{field}[0].weight"),
            format!("a single destination receives all traffic: weight {w} has no effect"),
        ),
        [_, _, ..] if total == 0 => p.error(
            field,
            "the weights of the destinations add up to 0: give at least one a weight",
        ),
        [_, _, ..] if total != 100 => p.warn(
            field,
            format!("the weights add up to {total}, not 100: traffic is split in proportion"),
        ),
        _ => {}
    }
}

/// Hosts: each a (wildcard) domain, a short name or an IP address, none overlapping another,
/// and no `*` where sidecars would see it (Istio's rule: it would capture all traffic of the
/// mesh). Without hosts a VirtualService is a delegate, used only through a root's
/// `delegate`: it has HTTP rules only and no gateways (Istio's rules).
fn check_hosts(vs: &VirtualService, p: &mut Problems) {
    if vs.hosts.is_empty() {
        if !vs.gateways.is_empty() {
            p.error(
                "spec.gateways",
                "a delegate VirtualService (one without hosts) must have no gateways",
            );
        }
        if !vs.tls.is_empty() {
            p.error(
                "spec.tls",
                "a delegate VirtualService (one without hosts) must have no tls rules",
            );
        }
        if !vs.tcp.is_empty() {
            p.error(
                "spec.tcp",
                "a delegate VirtualService (one without hosts) must have no tcp rules",
            );
        }
    }
    let for_mesh = vs.gateways.is_empty() || vs.gateways.iter().any(|g| g == "mesh");
    let mut valid: Vec<(usize, &str)> = Vec::new();
    for (i, host) in vs.hosts.iter().enumerate() {
        let field = format!("spec.hosts[{i}]");
        let problem = match check_wildcard_domain(host) {
            Err(_) if is_ip(host) => None,
            Err(e) => Some(e),
            Ok(()) if host == "*" && for_mesh => Some(
                "* is not allowed for sidecars (gateways empty or including mesh): name the \
                 hosts, or bind the VirtualService to gateways only"
                    .into(),
            ),
            Ok(()) => None,
        };
        if let Some(message) = problem {
            p.error(field, message);
            continue;
        }
        if let Some((j, other)) = valid.iter().find(|(_, other)| hosts_overlap(host, other)) {
            p.error(
                field,
                format!("{host:?} overlaps spec.hosts[{j}] ({other:?}): list each host once"),
            );
        } else {
            valid.push((i, host));
        }
    }
}

fn check_tls_route(vs: &VirtualService, rule: &TlsRoute, path: &str, p: &mut Problems) {
    if rule.matches.is_empty() {
        p.error(
            format!("{path}.match"),
            "a TLS rule needs at least one match with sniHosts",
        );
    }
    for (j, m) in rule.matches.iter().enumerate() {
        let mpath = format!("{path}.match[{j}]");
        if m.sni_hosts.is_empty() {
            p.error(
                format!("{mpath}.sniHosts"),
                "at least one SNI host is required",
            );
        }
        for (k, sni) in m.sni_hosts.iter().enumerate() {
            check_sni_host(vs, p, &format!("{mpath}.sniHosts[{k}]"), sni);
        }
        let l4 = L4Match {
            destination_subnets: &m.destination_subnets,
            port: m.port,
            source_labels: &m.source_labels,
            gateways: &m.gateways,
            source_namespace: &m.source_namespace,
        };
        l4.check(p, &mpath);
    }
    check_route_destinations(p, path, &rule.route);
}

/// An SNI name must fall within one of the VirtualService's hosts (Istio's rule), or the
/// listener would never route it here.
fn check_sni_host(vs: &VirtualService, p: &mut Problems, field: &str, sni: &str) {
    if let Err(e) = check_wildcard_domain(sni) {
        if is_ip(sni) {
            p.warn(
                field,
                "an IP address as SNI goes against the SNI spec; most clients never send one",
            );
        } else {
            p.error(field, e);
        }
        return;
    }
    if !vs.hosts.iter().any(|h| host_within(sni, h)) {
        p.error(
            field,
            format!(
                "SNI host {sni:?} is not within any host of the VirtualService ({})",
                vs.hosts.join(", ")
            ),
        );
    }
}

/// The destinations of a TLS or TCP rule at `path`.
fn check_route_destinations(p: &mut Problems, path: &str, route: &[RouteDestination]) {
    let field = format!("{path}.route");
    if route.is_empty() {
        p.error(&field, "at least one destination is required");
    }
    for (j, r) in route.iter().enumerate() {
        check_destination(p, &format!("{field}[{j}].destination"), &r.destination);
    }
    let weights: Vec<Option<i32>> = route.iter().map(|r| r.weight).collect();
    check_weights(p, &field, &weights);
}

/// The conditions TLS and TCP matches share.
struct L4Match<'a> {
    destination_subnets: &'a [String],
    port: Option<u32>,
    source_labels: &'a BTreeMap<String, String>,
    gateways: &'a [String],
    source_namespace: &'a str,
}

impl L4Match<'_> {
    fn check(&self, p: &mut Problems, path: &str) {
        for (i, subnet) in self.destination_subnets.iter().enumerate() {
            if !is_ip_or_cidr(subnet) {
                p.error(
                    format!("{path}.destinationSubnets[{i}]"),
                    format!("{subnet:?} is not an IP address or CIDR block"),
                );
            }
        }
        if let Some(port) = self.port {
            check_port(p, format!("{path}.port"), port);
        }
        check_source_conditions(p, path, self.source_labels, self.source_namespace);
        for (i, gateway) in self.gateways.iter().enumerate() {
            check_gateway_ref(p, &format!("{path}.gateways[{i}]"), gateway);
        }
    }
}

/// `sourceLabels` and `sourceNamespace` select client workloads, which wayfinder does not tell
/// apart yet: the condition is ignored, so the rule applies to every client.
pub(super) fn check_source_conditions(
    p: &mut Problems,
    path: &str,
    labels: &BTreeMap<String, String>,
    namespace: &str,
) {
    if !labels.is_empty() {
        let field = format!("{path}.sourceLabels");
        check_labels(p, &field, labels);
        p.warn(
            field,
            "not supported yet: ignored, so the rule applies to every client",
        );
    }
    if !namespace.is_empty() {
        p.warn(
            format!("{path}.sourceNamespace"),
            "not supported yet: ignored, so the rule applies to every client",
        );
    }
}
