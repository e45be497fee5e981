//! IST0113 (`MTLSPolicyConflict`): a DestinationRule whose TLS mode the PeerAuthentication in
//! force for the host's workloads refuses. Every connection it makes fails: plaintext (or TLS
//! of the DestinationRule's own, `SIMPLE`/`MUTUAL`) to a `STRICT` workload, Istio's mutual TLS
//! (`ISTIO_MUTUAL`) to a `DISABLE` one. `PERMISSIVE` takes either, and a DestinationRule that
//! sets no TLS gets auto mTLS, which follows the workload, so neither conflicts.
//!
//! Istio retired this code (see [`Code::MtlsPolicyConflict`] for why wayfinder keeps it). The
//! mode is read as the server reads it: the DestinationRule's port-level TLS for a port, else
//! its TLS (subsets' own policies are not looked at); the workload's mode by Istio's
//! precedence ([`crate::peer_authentication::effective`]) on the port the workload serves.

use wayfinder_registry::{Labels, Registration};

use super::lines::Field;
use super::message::{Code, go_quote};
use super::{Context, Found};
use crate::peer_authentication::effective;
use crate::{ClientTlsMode, DestinationRule, MtlsMode};

/// One `MTLSPolicyConflict` per DestinationRule and service whose workloads refuse its TLS,
/// at the first port and workload that do.
pub(crate) fn conflicts(cx: &Context<'_>, found: &mut Vec<Found>) {
    for (located, dr) in cx.destination_rules() {
        let namespace = &*located.object.meta.namespace;
        for registration in cx.services_of(&dr.host, namespace) {
            if let Some(conflict) = conflict(cx, dr, registration) {
                let text = format!(
                    "A DestinationRule and PeerAuthentication are in conflict with regards to mTLS \
                     for host {}. The DestinationRule {} specifies that mTLS must be {} but the \
                     PeerAuthentication {} specifies {}.",
                    registration.service.hostname,
                    go_quote(&format!(
                        "{}/{}",
                        located.object.meta.namespace, located.object.meta.name
                    )),
                    conflict.mtls,
                    go_quote(&conflict.policy),
                    conflict.mode.name(),
                );
                found.push(Found::on(
                    located,
                    conflict.field,
                    Code::MtlsPolicyConflict,
                    text,
                ));
            }
        }
    }
}

/// A DestinationRule's TLS that its workloads refuse.
struct Conflict {
    /// Whether the DestinationRule's TLS is Istio's mutual TLS.
    mtls: bool,
    /// The workload's mode.
    mode: MtlsMode,
    /// The PeerAuthentication that set it, `namespace/name`.
    policy: String,
    /// The DestinationRule's TLS mode field.
    field: Field,
}

fn conflict(
    cx: &Context<'_>,
    dr: &DestinationRule,
    registration: &Registration,
) -> Option<Conflict> {
    let policy = dr.traffic_policy.as_ref()?;
    let service = &registration.service;
    let policies = cx
        .peer_authentications()
        .map(|(l, pa)| (&l.object.meta, pa));
    for port in &service.ports {
        let port_level = policy
            .port_level_settings
            .iter()
            .enumerate()
            .find(|(_, p)| {
                p.tls.is_some()
                    && p.port
                        .as_ref()
                        .is_some_and(|s| s.number == u32::from(port.number))
            });
        let (tls, field) = match port_level {
            Some((k, p)) => (
                p.tls.as_ref(),
                Field::at("spec")
                    .key("trafficPolicy")
                    .key("portLevelSettings")
                    .index(k),
            ),
            None => (policy.tls.as_ref(), Field::at("spec").key("trafficPolicy")),
        };
        let Some(mode) = tls.and_then(|t| t.mode) else {
            continue;
        };
        let mtls = mode == ClientTlsMode::IstioMutual;
        for endpoint in registration.endpoints.iter() {
            let target = endpoint.port_for(port);
            let root = &cx.known.root_namespace;
            let workload = effective(policies.clone(), root, &service.namespace, &endpoint.labels);
            let set = workload.mode_for(target);
            let refused = if mtls {
                set == MtlsMode::Disable
            } else {
                set == MtlsMode::Strict
            };
            if refused {
                let policy = deciding(cx, &service.namespace, &endpoint.labels, target, set)?;
                let field = field.key("tls").key("mode");
                return Some(Conflict {
                    mtls,
                    mode: set,
                    policy,
                    field,
                });
            }
        }
    }
    None
}

/// The PeerAuthentication that sets `mode` for a workload: the most specific one that applies
/// to it (workload, namespace, then mesh) and says that mode; the first by name of a level,
/// as [`effective`] takes it.
fn deciding(
    cx: &Context<'_>,
    namespace: &str,
    labels: &Labels,
    port: u16,
    mode: MtlsMode,
) -> Option<String> {
    let root = &*cx.known.root_namespace;
    cx.peer_authentications()
        .filter_map(|(located, pa)| {
            let meta = &located.object.meta;
            let selector = pa.selector.as_ref().filter(|s| !s.match_labels.is_empty());
            let at = &*meta.namespace;
            // 0: the workload's policy, 1: its namespace's, 2: the mesh's.
            let level = match selector {
                Some(s) if at == namespace && at != root && s.matches(labels) => 0,
                None if at == namespace => 1,
                None if at == root => 2,
                _ => return None,
            };
            let port_level = (level == 0)
                .then(|| pa.port_level_mtls.get(&u32::from(port)))
                .flatten()
                .map(|m| m.mode)
                .filter(|m| *m != MtlsMode::Unset);
            let says = port_level.or(pa.mtls.as_ref().map(|m| m.mode)) == Some(mode);
            says.then(|| (level, format!("{}/{}", meta.namespace, meta.name)))
        })
        .min()
        .map(|(_, name)| name)
}
