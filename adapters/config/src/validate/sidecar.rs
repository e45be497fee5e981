//! Sidecar: the egress hosts a workload sees and what happens to other traffic.

use super::Problems;
use super::names::{check_labels, check_scoped_host};
use crate::Sidecar;

/// Checks a Sidecar.
pub(super) fn check(sc: &Sidecar, p: &mut Problems) {
    if sc.egress.is_empty()
        && sc.ingress.is_empty()
        && sc.outbound_traffic_policy.is_none()
        && sc.inbound_connection_pool.is_none()
    {
        p.error(
            "spec",
            "an empty Sidecar changes nothing: give egress hosts or an outboundTrafficPolicy",
        );
    }
    if let Some(selector) = &sc.workload_selector {
        if selector.labels.is_empty() {
            p.warn(
                "spec.workloadSelector.labels",
                "no labels: the Sidecar applies to every workload of the namespace",
            );
        }
        check_labels(p, "spec.workloadSelector.labels", &selector.labels);
    }
    if !sc.ingress.is_empty() {
        p.ignored("spec.ingress");
    }
    if sc.inbound_connection_pool.is_some() {
        p.ignored("spec.inboundConnectionPool");
    }
    check_egress(sc, p);
    if let Some(policy) = &sc.outbound_traffic_policy {
        if let Some(mode) = policy.mode.as_deref()
            && mode != "ALLOW_ANY"
            && mode != "REGISTRY_ONLY"
        {
            p.error(
                "spec.outboundTrafficPolicy.mode",
                format!("{mode:?} is not ALLOW_ANY or REGISTRY_ONLY"),
            );
        }
        if policy.egress_proxy.is_some() {
            p.ignored("spec.outboundTrafficPolicy.egressProxy");
        }
    }
}

/// Egress listeners. As in Istio, only one may leave out the port (the catch-all), and it
/// comes last so that listeners with ports take precedence.
fn check_egress(sc: &Sidecar, p: &mut Problems) {
    let mut catch_all: Option<usize> = None;
    for (i, listener) in sc.egress.iter().enumerate() {
        let path = format!("spec.egress[{i}]");
        if listener.port.is_some() {
            p.warn(
                format!("{path}.port"),
                "not supported yet: the hosts of this listener apply to every port",
            );
        } else if let Some(first) = catch_all {
            p.error(
                &path,
                format!(
                    "spec.egress[{first}] is already the listener without a port: only one may \
                     leave it out"
                ),
            );
        } else {
            catch_all = Some(i);
            if i + 1 != sc.egress.len() {
                p.error(&path, "the listener without a port must be the last one");
            }
        }
        if !listener.bind.is_empty() {
            p.ignored(format!("{path}.bind"));
        }
        if listener.capture_mode.is_some() {
            p.ignored(format!("{path}.captureMode"));
        }
        if listener.hosts.is_empty() {
            p.error(
                format!("{path}.hosts"),
                "an egress listener needs at least one host",
            );
        }
        for (j, host) in listener.hosts.iter().enumerate() {
            for e in check_scoped_host(host, false) {
                p.error(format!("{path}.hosts[{j}]"), e);
            }
        }
    }
}
