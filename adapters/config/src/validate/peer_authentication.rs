//! `PeerAuthentication`, as Istio's `ValidatePeerAuthentication` checks it: per-port modes
//! only in a policy that selects workloads (a mesh or namespace policy cannot have them), port
//! numbers 1 to 65535, and selector labels as every selector's. A selector without labels is
//! a warning: the policy is its namespace's, not a workload's. Modes need no check here: one
//! Istio does not name fails the document as it is read.

use super::names::check_labels;
use super::{Problems, check_port, key_path};
use crate::PeerAuthentication;

pub(super) fn check(pa: &PeerAuthentication, p: &mut Problems) {
    let labels = pa.selector.as_ref().map(|s| &s.match_labels);
    if let Some(labels) = labels {
        if labels.is_empty() {
            p.warn(
                "spec.selector.matchLabels",
                "no labels: the policy applies to every workload of its namespace (of the \
                 mesh, in the root namespace)",
            );
        }
        check_labels(p, "spec.selector.matchLabels", labels);
    }
    if pa.port_level_mtls.is_empty() {
        return;
    }
    if labels.is_none_or(|labels| labels.is_empty()) {
        p.error(
            "spec.portLevelMtls",
            "requires a selector with labels: a mesh or namespace policy cannot have per-port \
             modes",
        );
    }
    for port in pa.port_level_mtls.keys() {
        check_port(p, key_path("spec.portLevelMtls", &port.to_string()), *port);
    }
}
