//! Fitting a spec's lists to their contents once it is read.
//!
//! A YAML sequence does not say how long it is, so serde grows each `Vec` as it reads, to
//! four elements for the first one. An object then keeps that room for as long as it is in
//! force: 75,000 VirtualServices of one or two rules kept three times the memory their rules
//! need (heaptrack, BENCHMARKS.md "Hardening (issue 12)").

use super::{
    ConfigSpec, DestinationRule, Gateway, HttpRoute, L4MatchAttributes, Sidecar, TcpRoute,
    TlsMatchAttributes, TlsRoute, VirtualService,
};

impl ConfigSpec {
    /// Shrinks the spec's lists, and the lists in their elements, to their lengths. Lists
    /// that stay short whatever the mesh (CORS origins, certificate names) are left as read.
    pub fn shrink_to_fit(&mut self) {
        match self {
            ConfigSpec::VirtualService(vs) => virtual_service(vs),
            ConfigSpec::DestinationRule(dr) => destination_rule(dr),
            ConfigSpec::Gateway(gw) => gateway(gw),
            ConfigSpec::Sidecar(sc) => sidecar(sc),
            // Its lists are short (probe headers, an exec command).
            ConfigSpec::WorkloadGroup(_) => {}
            // Maps only, which hold no spare room.
            ConfigSpec::PeerAuthentication(_) => {}
            // Its lists are a policy's own few rules and values.
            ConfigSpec::AuthorizationPolicy(_) => {}
            // A few JWT rules, their inline keys read whole.
            ConfigSpec::RequestAuthentication(_) => {}
            // Its patches are few; their values are JSON, read whole.
            ConfigSpec::EnvoyFilter(_) => {}
            // Maps only.
            ConfigSpec::ProxyConfig(_) => {}
        }
    }
}

/// Shrinks `list` and then each of its elements with `each`.
fn fit<T>(list: &mut Vec<T>, each: impl FnMut(&mut T)) {
    list.shrink_to_fit();
    list.iter_mut().for_each(each);
}

fn virtual_service(vs: &mut VirtualService) {
    vs.hosts.shrink_to_fit();
    vs.gateways.shrink_to_fit();
    vs.export_to.shrink_to_fit();
    fit(&mut vs.http, http_route);
    fit(&mut vs.tls, tls_route);
    fit(&mut vs.tcp, tcp_route);
}

fn http_route(route: &mut HttpRoute) {
    fit(&mut route.matches, |m| m.gateways.shrink_to_fit());
    route.route.shrink_to_fit();
    route.mirrors.shrink_to_fit();
}

fn tls_route(route: &mut TlsRoute) {
    fit(&mut route.matches, |m: &mut TlsMatchAttributes| {
        m.sni_hosts.shrink_to_fit();
        m.destination_subnets.shrink_to_fit();
        m.gateways.shrink_to_fit();
    });
    route.route.shrink_to_fit();
}

fn tcp_route(route: &mut TcpRoute) {
    fit(&mut route.matches, |m: &mut L4MatchAttributes| {
        m.destination_subnets.shrink_to_fit();
        m.gateways.shrink_to_fit();
    });
    route.route.shrink_to_fit();
}

fn destination_rule(dr: &mut DestinationRule) {
    dr.subsets.shrink_to_fit();
    dr.export_to.shrink_to_fit();
}

fn gateway(gw: &mut Gateway) {
    fit(&mut gw.servers, |s| s.hosts.shrink_to_fit());
}

fn sidecar(sc: &mut Sidecar) {
    sc.ingress.shrink_to_fit();
    fit(&mut sc.egress, |e| e.hosts.shrink_to_fit());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ConfigObject;

    /// A memory bound: every object is as large as its largest kind, and every HTTP rule as
    /// large as all its policies, so a variant or a policy unboxed again shows here (they
    /// were 896 and 1,008 bytes, and 75,000 VirtualServices took 715 MB at their peak).
    #[test]
    fn objects_and_rules_stay_small() {
        assert!(
            size_of::<ConfigObject>() <= 256,
            "{}",
            size_of::<ConfigObject>()
        );
        assert!(size_of::<HttpRoute>() <= 256, "{}", size_of::<HttpRoute>());
    }

    #[test]
    fn lists_hold_what_was_read() {
        let yaml = "hosts: [reviews]\nhttp:\n- match:\n  - uri: {prefix: /a}\n  route:\n  \
                    - destination: {host: reviews}\n    weight: 90\n  \
                    - destination: {host: canary}\n    weight: 10\n";
        let vs: VirtualService = serde_saphyr::from_str(yaml).unwrap();
        let mut spec = ConfigSpec::VirtualService(vs);
        spec.shrink_to_fit();
        let ConfigSpec::VirtualService(vs) = &spec else {
            unreachable!()
        };
        assert_eq!(vs.hosts.capacity(), 1);
        assert_eq!(vs.http.capacity(), 1);
        assert_eq!(vs.http[0].matches.capacity(), 1);
        assert_eq!(vs.http[0].route.capacity(), 2);
    }
}
