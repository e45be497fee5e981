//! IST0101 for a Sidecar whose `workloadSelector` matches no workload of its namespace
//! (Istio's `sidecar.SelectorAnalyzer`): it configures no proxy, and the workloads meant to
//! get it keep the namespace's Sidecar, or none.

use super::gateways::{label_field, selector_string};
use super::lines::Field;
use super::{Context, Found};

/// `Referenced selector not found` for a Sidecar with a selector that matches no workload of
/// its namespace. A Sidecar without one is the namespace's, and needs no workload.
pub(crate) fn sidecars(cx: &Context<'_>, found: &mut Vec<Found>) {
    for (located, sidecar) in cx.sidecars() {
        let Some(selector) = sidecar.workload_selector.as_ref().map(|s| &s.labels) else {
            continue;
        };
        if selector.is_empty() {
            continue;
        }
        let namespace = &*located.object.meta.namespace;
        if cx.workload(Some(namespace), selector).is_none() {
            let field = Field::at("spec").key("workloadSelector").key("labels");
            let field = label_field(selector, field);
            found.push(Found::not_found(
                located,
                field,
                "selector",
                &selector_string(selector),
            ));
        }
    }
}
