//! The Istio traffic configuration in force, as part of the snapshot.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;
use wayfinder_config::peer_authentication;
use wayfinder_config::{
    ConfigKey, ConfigMeta, ConfigObject, ConfigSpec, DestinationRule, EffectiveMtls, Gateway, Kind,
    LabelLookup, PeerAuthentication, Sidecar, VirtualService, WorkloadGroup,
};

/// Every accepted configuration object. When two sources hold the same key, the one listed
/// first wins (`--config-dir` before the Kubernetes API).
#[derive(Debug, Default, Serialize)]
pub struct TrafficConfig {
    /// Objects by kind, namespace and name.
    pub objects: BTreeMap<ConfigKey, Arc<ConfigObject>>,
}

impl TrafficConfig {
    /// Merges the sources' objects, first source first; a root VirtualService is in force
    /// with its delegates' rules merged in (`delegates.rs`).
    pub fn merge<'a>(
        sources: impl IntoIterator<Item = &'a BTreeMap<ConfigKey, Arc<ConfigObject>>>,
    ) -> Self {
        let mut objects = BTreeMap::new();
        for source in sources {
            for (key, object) in source {
                objects.entry(key.clone()).or_insert_with(|| object.clone());
            }
        }
        super::delegates::expand(&mut objects);
        Self { objects }
    }

    /// The objects of `kind`: a range of the map, whose keys sort by kind first, so that
    /// asking for the few PeerAuthentications (per proxy, per endpoint) does not walk every
    /// VirtualService.
    fn of_kind(&self, kind: Kind) -> impl Iterator<Item = &Arc<ConfigObject>> {
        self.of_kind_keyed(kind).map(|(_, object)| object)
    }

    /// The objects of `kind` with their keys, in (namespace, name) order.
    pub(crate) fn of_kind_keyed(
        &self,
        kind: Kind,
    ) -> impl Iterator<Item = (&ConfigKey, &Arc<ConfigObject>)> {
        let first = ConfigKey {
            kind,
            namespace: "".into(),
            name: "".into(),
        };
        self.objects
            .range(first..)
            .take_while(move |(key, _)| key.kind == kind)
    }

    /// VirtualServices in (namespace, name) order.
    pub fn virtual_services(&self) -> impl Iterator<Item = (&ConfigMeta, &VirtualService)> {
        self.of_kind(Kind::VirtualService)
            .filter_map(|o| match &o.spec {
                ConfigSpec::VirtualService(vs) => Some((&o.meta, vs)),
                _ => None,
            })
    }

    /// DestinationRules in (namespace, name) order.
    pub fn destination_rules(&self) -> impl Iterator<Item = (&ConfigMeta, &DestinationRule)> {
        self.of_kind(Kind::DestinationRule)
            .filter_map(|o| match &o.spec {
                ConfigSpec::DestinationRule(dr) => Some((&o.meta, &**dr)),
                _ => None,
            })
    }

    /// Gateways in (namespace, name) order.
    pub fn gateways(&self) -> impl Iterator<Item = (&ConfigMeta, &Gateway)> {
        self.of_kind(Kind::Gateway).filter_map(|o| match &o.spec {
            ConfigSpec::Gateway(gw) => Some((&o.meta, gw)),
            _ => None,
        })
    }

    /// Sidecars in (namespace, name) order.
    pub fn sidecars(&self) -> impl Iterator<Item = (&ConfigMeta, &Sidecar)> {
        self.of_kind(Kind::Sidecar).filter_map(|o| match &o.spec {
            ConfigSpec::Sidecar(sc) => Some((&o.meta, sc)),
            _ => None,
        })
    }

    /// PeerAuthentications in (namespace, name) order.
    pub fn peer_authentications(&self) -> impl Iterator<Item = (&ConfigMeta, &PeerAuthentication)> {
        self.of_kind(Kind::PeerAuthentication)
            .filter_map(|o| match &o.spec {
                ConfigSpec::PeerAuthentication(pa) => Some((&o.meta, pa)),
                _ => None,
            })
    }

    /// The peer authentication of a workload in `namespace` with `labels` (a proxy's
    /// metadata `LABELS`): Istio's precedence of the mesh policy (in `root_namespace`), the
    /// namespace's and the workload's, and the workload policy's ports; `PERMISSIVE` when no
    /// policy sets a mode. See [`peer_authentication::effective`].
    pub fn mtls_for(
        &self,
        root_namespace: &str,
        namespace: &str,
        labels: &impl LabelLookup,
    ) -> EffectiveMtls {
        peer_authentication::effective(
            self.peer_authentications(),
            root_namespace,
            namespace,
            labels,
        )
    }

    /// The AuthorizationPolicies and RequestAuthentications that apply to a workload in
    /// `namespace` with `labels`, by kind, then in (namespace, name) order, as Istio selects
    /// them for a sidecar or a gateway: those of `root_namespace` and of `namespace` without a
    /// selector, or whose selector's labels the workload has (a root-namespace policy with a
    /// selector applies in every namespace). Policies attached by `targetRef(s)` are for
    /// Kubernetes Gateway API resources, which wayfinder does not serve, and apply to no
    /// workload here.
    pub fn security_for(
        &self,
        root_namespace: &str,
        namespace: &str,
        labels: &impl LabelLookup,
    ) -> Vec<Arc<ConfigObject>> {
        [Kind::AuthorizationPolicy, Kind::RequestAuthentication]
            .into_iter()
            .flat_map(|kind| self.of_kind(kind))
            .filter(|o| {
                let (selector, targeted) = match &o.spec {
                    ConfigSpec::AuthorizationPolicy(p) => (
                        &p.selector,
                        p.target_ref.is_some() || !p.target_refs.is_empty(),
                    ),
                    ConfigSpec::RequestAuthentication(p) => (
                        &p.selector,
                        p.target_ref.is_some() || !p.target_refs.is_empty(),
                    ),
                    _ => return false,
                };
                let at = &*o.meta.namespace;
                (at == root_namespace || at == namespace)
                    && !targeted
                    && selector.as_ref().is_none_or(|s| s.matches(labels))
            })
            .cloned()
            .collect()
    }

    /// The WorkloadGroup `namespace/name`, if there is one.
    pub fn workload_group(
        &self,
        namespace: &str,
        name: &str,
    ) -> Option<(&ConfigMeta, &WorkloadGroup)> {
        let key = ConfigKey {
            kind: Kind::WorkloadGroup,
            namespace: namespace.into(),
            name: name.into(),
        };
        let object = self.objects.get(&key)?;
        match &object.spec {
            ConfigSpec::WorkloadGroup(wg) => Some((&object.meta, wg)),
            _ => None,
        }
    }
}
