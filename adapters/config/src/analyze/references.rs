//! IST0101 for a VirtualService's destinations: a host no known service is (Istio's
//! `virtualservice.DestinationHostAnalyzer`), a port the service does not have, and a subset
//! no DestinationRule of the host defines (`virtualservice.DestinationRuleAnalyzer`).
//!
//! The proxy routes to such a destination a cluster that does not exist, so every request
//! the route takes is answered 503.

use std::collections::BTreeSet;

use super::lines::Field;
use super::{Context, Found};
use crate::validate::names::host_within;
use crate::{Destination, VirtualService};

/// One destination of a VirtualService, where it is, and whether it is a mirror's.
pub(crate) struct Routed<'a> {
    pub(crate) destination: &'a Destination,
    /// The destination's field: `spec.http[0].route[1].destination`.
    pub(crate) field: Field,
    pub(crate) mirror: bool,
}

/// Every destination of `vs`: HTTP, TLS and TCP routes' and HTTP mirrors', in order.
pub(crate) fn destinations(vs: &VirtualService) -> Vec<Routed<'_>> {
    let mut out = Vec::new();
    let spec = Field::at("spec");
    let route = |kind: &str, i: usize, j: usize, destination| Routed {
        destination,
        field: spec
            .clone()
            .key(kind)
            .index(i)
            .key("route")
            .index(j)
            .key("destination"),
        mirror: false,
    };
    for (i, http) in vs.http.iter().enumerate() {
        for (j, r) in http.route.iter().enumerate() {
            out.push(route("http", i, j, &r.destination));
        }
    }
    for (i, tls) in vs.tls.iter().enumerate() {
        for (j, r) in tls.route.iter().enumerate() {
            out.push(route("tls", i, j, &r.destination));
        }
    }
    for (i, tcp) in vs.tcp.iter().enumerate() {
        for (j, r) in tcp.route.iter().enumerate() {
            out.push(route("tcp", i, j, &r.destination));
        }
    }
    for (i, http) in vs.http.iter().enumerate() {
        let rule = spec.clone().key("http").index(i);
        if let Some(mirror) = &http.mirror {
            let field = rule.clone().key("mirror");
            out.push(Routed {
                destination: mirror,
                field,
                mirror: true,
            });
        }
        for (j, mirror) in http.mirrors.iter().enumerate() {
            let field = rule.clone().key("mirrors").index(j).key("destination");
            out.push(Routed {
                destination: &mirror.destination,
                field,
                mirror: true,
            });
        }
    }
    out
}

/// `Referenced host not found` (`mirror host` for a mirror) for a destination no known
/// service is, and `Referenced host:port not found` for a port the service does not have.
pub(crate) fn hosts(cx: &Context<'_>, found: &mut Vec<Found>) {
    for (located, vs) in cx.virtual_services() {
        let namespace = &*located.object.meta.namespace;
        for routed in destinations(vs) {
            let d = routed.destination;
            let field = routed.field.key("host");
            let Some(service) = cx.service(&d.host, namespace) else {
                let what = if routed.mirror { "mirror host" } else { "host" };
                found.push(Found::not_found(located, field, what, &d.host));
                continue;
            };
            let Some(port) = d.port.as_ref().map(|p| p.number) else {
                continue;
            };
            if !service
                .service
                .ports
                .iter()
                .any(|p| u32::from(p.number) == port)
            {
                found.push(Found::not_found(
                    located,
                    field,
                    "host:port",
                    &format!("{}:{port}", d.host),
                ));
            }
        }
    }
}

/// `Referenced host+subset in destinationrule not found` for a destination's subset that no
/// DestinationRule of its host defines.
pub(crate) fn subsets(cx: &Context<'_>, found: &mut Vec<Found>) {
    // (host as a full name, subset) of every DestinationRule; those of wildcard hosts apart,
    // as they are matched by suffix.
    let (wildcards, defined): (BTreeSet<(String, &str)>, BTreeSet<_>) = cx
        .destination_rules()
        .flat_map(|(located, dr)| {
            let host = cx.fqdn(&dr.host, &located.object.meta.namespace);
            dr.subsets
                .iter()
                .map(move |s| (host.clone(), s.name.as_str()))
        })
        .partition(|(host, _)| host.starts_with('*'));
    for (located, vs) in cx.virtual_services() {
        let namespace = &*located.object.meta.namespace;
        for routed in destinations(vs) {
            let d = routed.destination;
            if d.subset.is_empty() {
                continue;
            }
            let host = cx.fqdn(&d.host, namespace);
            let subset = d.subset.as_str();
            let covered = defined.contains(&(host.clone(), subset))
                || wildcards
                    .iter()
                    .any(|(name, s)| *s == subset && host_within(&host, name));
            if !covered {
                let what = if routed.mirror {
                    "mirror+subset in destinationrule"
                } else {
                    "host+subset in destinationrule"
                };
                let field = routed.field.key("subset");
                let value = format!("{}+{}", d.host, d.subset);
                found.push(Found::not_found(located, field, what, &value));
            }
        }
    }
}
