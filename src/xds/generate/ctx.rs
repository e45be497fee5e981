//! What generators need besides a service ([`Ctx`]): the snapshot, the mesh domain, and the
//! namespace of the proxies being served, with the services they see.

use std::collections::BTreeMap;

use wayfinder_config::{ConfigMeta, DestinationRule, EgressListener, Sidecar};

use super::MeshSettings;
use crate::snapshot::rules::{ExportDefaults, egress_allows, hosts_allow, registry_only};
use crate::snapshot::{MergedService, Snapshot, Visible};

/// What generators need besides a service: the snapshot, the mesh domain, and the namespace
/// of the proxies being served, with the services they see.
pub(crate) struct Ctx<'a> {
    pub(crate) model: &'a Snapshot,
    pub(crate) domain: &'a str,
    pub(crate) namespace: &'a str,
    /// The visible services, in hostname order.
    pub(crate) visible: Visible<'a>,
    /// True when traffic to unknown destinations goes nowhere (a Sidecar's `REGISTRY_ONLY`).
    pub(crate) registry_only: bool,
    /// Where objects without `exportTo` are exported (MeshConfig's `default*ExportTo`).
    pub(crate) exports: &'a ExportDefaults,
    /// A Sidecar's egress listeners with ports, when it has any.
    egress: Option<Egress<'a>>,
}

/// A Sidecar's egress listeners by port, and the one without a port (Istio: a listener with
/// a port imports its hosts on that port only; the one without, on every other port).
struct Egress<'a> {
    sidecar_ns: &'a str,
    by_port: BTreeMap<u16, &'a EgressListener>,
    catch_all: Option<&'a EgressListener>,
}

/// Where a port's outbound listener is: its address, and whether it binds it itself
/// (`captureMode: NONE`) rather than taking captured connections.
pub(crate) struct Bind<'a> {
    pub(crate) address: &'a str,
    pub(crate) binds: bool,
}

impl<'a> Ctx<'a> {
    pub(super) fn new(
        model: &'a Snapshot,
        domain: &'a str,
        namespace: &'a str,
        mesh: &'a MeshSettings,
    ) -> Self {
        let mut ctx = Self::scoped(model, domain, namespace, None, mesh);
        // Gateways are not scoped by a Sidecar, nor by the mesh's outbound policy.
        ctx.registry_only = false;
        ctx
    }

    /// A context whose services are limited by a Sidecar's egress hosts, its unknown
    /// destinations sent nowhere as the Sidecar's policy says, else as the mesh's
    /// (MeshConfig's `outboundTrafficPolicy`).
    pub(super) fn scoped(
        model: &'a Snapshot,
        domain: &'a str,
        namespace: &'a str,
        sidecar: Option<(&'a ConfigMeta, &'a Sidecar)>,
        mesh: &'a MeshSettings,
    ) -> Self {
        let mut visible = model.visible_with(namespace, &mesh.exports.services);
        if let Some((meta, sc)) = sidecar {
            visible.retain(|s| {
                egress_allows(
                    sc,
                    &meta.namespace,
                    &s.service.namespace,
                    &s.service.hostname,
                )
            });
        }
        let registry_only = registry_only(sidecar.map(|(_, sc)| sc), mesh.registry_only);
        let egress = sidecar.and_then(|(meta, sc)| {
            let by_port: BTreeMap<u16, &EgressListener> = sc
                .egress
                .iter()
                .filter_map(|e| Some((u16::try_from(e.port.as_ref()?.number).ok()?, e)))
                .collect();
            (!by_port.is_empty()).then(|| Egress {
                sidecar_ns: &meta.namespace,
                by_port,
                catch_all: sc.egress.iter().find(|e| e.port.is_none()),
            })
        });
        Self {
            model,
            domain,
            namespace,
            visible,
            registry_only,
            exports: &mesh.exports,
            egress,
        }
    }

    /// True when the proxy sees `svc` on `port`: always, but under a Sidecar whose egress
    /// listeners name ports, where the listener of `port` (else the one without a port)
    /// must take it.
    pub(crate) fn on_port(&self, svc: &MergedService, port: u16) -> bool {
        let Some(e) = &self.egress else {
            return true;
        };
        let Some(listener) = e.by_port.get(&port).copied().or(e.catch_all) else {
            return false;
        };
        let s = &svc.service;
        hosts_allow(&listener.hosts, e.sidecar_ns, &s.namespace, &s.hostname)
    }

    /// Where `port`'s outbound listener is, when its Sidecar egress listener says (`bind`,
    /// `captureMode`); `None`: at the capture address, taking captured connections.
    pub(crate) fn bind(&self, port: u16) -> Option<Bind<'a>> {
        let listener = self.egress.as_ref()?.by_port.get(&port)?;
        let binds = listener.capture_mode.as_deref() == Some("NONE");
        let address = match listener.bind.as_str() {
            "" if binds => "127.0.0.1",
            "" => return None,
            bind => bind,
        };
        Some(Bind { address, binds })
    }

    /// The visible service with this hostname.
    pub(crate) fn service(&self, host: &str) -> Option<&'a MergedService> {
        let i = self
            .visible
            .binary_search_by(|s| (*s.service.hostname).cmp(host))
            .ok()?;
        self.visible.get(i).map(|s| &***s)
    }

    /// The DestinationRule for a service, as seen from this namespace.
    pub(crate) fn rule(
        &self,
        svc: &MergedService,
    ) -> Option<(&'a ConfigMeta, &'a DestinationRule)> {
        self.model.config.destination_rule(
            &svc.service.hostname,
            &svc.service.namespace,
            self.namespace,
            self.domain,
            self.exports,
        )
    }
}
