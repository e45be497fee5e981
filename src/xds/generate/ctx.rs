//! What generators need besides a service ([`Ctx`]): the snapshot, the mesh domain, and the
//! namespace of the proxies being served, with the services they see.

use wayfinder_config::{ConfigMeta, DestinationRule, Sidecar};

use super::MeshSettings;
use crate::snapshot::rules::{ExportDefaults, egress_allows, registry_only};
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
        sidecar: Option<(&ConfigMeta, &Sidecar)>,
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
        Self {
            model,
            domain,
            namespace,
            visible,
            registry_only,
            exports: &mesh.exports,
        }
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
