//! A workload's security policies, AuthorizationPolicy and RequestAuthentication, as the
//! filters of its chains: the JWT filter then the RBAC filters on HTTP chains (`authn.rs`,
//! `authz.rs`), the RBAC network filters on every other chain. [`Policies`] is also the key of
//! what is generated from them, so that sidecars with the same policies share it.

use std::sync::Arc;

use wayfinder_config::{ConfigObject, ConfigSpec, LabelLookup};

use super::{MeshSettings, authn, authz};
use crate::jwks::JwksTable;
use crate::snapshot::TrafficConfig;
use crate::xds::pb::hcm::HttpFilter;
use crate::xds::pb::listener::Filter;

/// The policies that apply to one workload (`TrafficConfig::security_for`) and the keys of
/// its JWT rules: equal when they are the same objects, or objects of the same content (a
/// source that reads its objects again makes new ones), with the same keys.
#[derive(Clone, Debug, Default)]
pub(crate) struct Policies {
    objects: Arc<[Arc<ConfigObject>]>,
    /// The keys of each JWT rule of the RequestAuthentications, in their order.
    jwks: Arc<[Option<Arc<str>>]>,
}

impl Policies {
    /// The policies of a workload in `namespace` with `labels`, with the keys `table` has for
    /// their JWT rules.
    pub(crate) fn for_workload(
        config: &TrafficConfig,
        mesh: &MeshSettings,
        table: &JwksTable,
        namespace: &str,
        labels: &impl LabelLookup,
    ) -> Self {
        let objects = config.security_for(&mesh.root_namespace, namespace, labels);
        let jwks = objects
            .iter()
            .filter_map(|o| match &o.spec {
                ConfigSpec::RequestAuthentication(ra) => Some(&ra.jwt_rules),
                _ => None,
            })
            .flatten()
            .collect::<Vec<_>>();
        let jwks = authn::keyed(&jwks, table)
            .into_iter()
            .map(|k| k.jwks)
            .collect();
        Self {
            objects: objects.into(),
            jwks,
        }
    }

    fn authorization(&self) -> Vec<authz::Applied<'_>> {
        self.objects
            .iter()
            .filter_map(|o| match &o.spec {
                ConfigSpec::AuthorizationPolicy(policy) => Some(authz::Applied {
                    meta: &o.meta,
                    policy,
                }),
                _ => None,
            })
            .collect()
    }

    fn jwt_rules(&self) -> Vec<authn::Keyed<'_>> {
        self.objects
            .iter()
            .filter_map(|o| match &o.spec {
                ConfigSpec::RequestAuthentication(ra) => Some(&ra.jwt_rules),
                _ => None,
            })
            .flatten()
            .zip(self.jwks.iter())
            .map(|(rule, jwks)| authn::Keyed {
                rule,
                jwks: jwks.clone(),
            })
            .collect()
    }
}

impl PartialEq for Policies {
    fn eq(&self, other: &Self) -> bool {
        self.objects.len() == other.objects.len()
            && (self.objects.iter())
                .zip(other.objects.iter())
                .all(|(a, b)| Arc::ptr_eq(a, b) || a == b)
            && self.jwks == other.jwks
    }
}

impl Eq for Policies {}

/// By the objects' names: equal policies have equal names, and hashing their content on every
/// request of every sidecar would cost more than the rare comparison of two lists.
impl std::hash::Hash for Policies {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        for o in self.objects.iter() {
            o.meta.namespace.hash(state);
            o.meta.name.hash(state);
        }
    }
}

/// A workload's policies as filters: for its HTTP chains (the JWT filter, then the RBAC
/// filters, before the router) and for every other chain (RBAC, before `tcp_proxy`).
#[derive(Debug, Default)]
pub(crate) struct Filters {
    pub(crate) http: Vec<HttpFilter>,
    pub(crate) tcp: Vec<Filter>,
}

impl Filters {
    /// The filters of `policies`, in the mesh's `trust_domain`, for a gateway or a sidecar.
    pub(crate) fn new(policies: &Policies, trust_domain: &str, gateway: bool) -> Self {
        let applied = policies.authorization();
        let jwt = authn::filter(&policies.jwt_rules(), gateway);
        Self {
            http: jwt
                .into_iter()
                .chain(authz::http_filters(&applied, trust_domain))
                .collect(),
            tcp: authz::network_filters(&applied, trust_domain),
        }
    }

    /// No policy applies.
    pub(crate) fn is_empty(&self) -> bool {
        self.http.is_empty() && self.tcp.is_empty()
    }
}
