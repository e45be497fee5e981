//! The xDS resource types wayfinder serves, named once.

use std::fmt;

/// A resource type wayfinder serves. The declaration order is the make-before-break push order
/// of the xDS protocol (clusters, then their endpoints, then listeners, then their routes), and
/// [`TypeUrl::PUSH_ORDER`] lists them in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TypeUrl {
    /// CDS: `envoy.config.cluster.v3.Cluster`.
    Cluster,
    /// EDS: `envoy.config.endpoint.v3.ClusterLoadAssignment`.
    Endpoint,
    /// LDS: `envoy.config.listener.v3.Listener`.
    Listener,
    /// RDS: `envoy.config.route.v3.RouteConfiguration`.
    Route,
    /// SDS over ADS: `envoy.extensions.transport_sockets.tls.v3.Secret`, a gateway's
    /// credentials (`credentialName`), pushed last, as istiod does: a listener that names a
    /// new secret waits for it while warming.
    Secret,
    /// PCDS: Istio's `istio.mesh.v1alpha1.ProxyConfig`, the proxy's own settings, asked for
    /// by its agent before it starts Envoy (`generate/proxy_config.rs`).
    ProxyConfig,
}

impl TypeUrl {
    /// Every type, in push order.
    pub const PUSH_ORDER: [TypeUrl; 6] = [
        Self::Cluster,
        Self::Endpoint,
        Self::Listener,
        Self::Route,
        Self::Secret,
        Self::ProxyConfig,
    ];

    /// The full type URL, `type.googleapis.com/...`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Cluster => "type.googleapis.com/envoy.config.cluster.v3.Cluster",
            Self::Endpoint => "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment",
            Self::Listener => "type.googleapis.com/envoy.config.listener.v3.Listener",
            Self::Route => "type.googleapis.com/envoy.config.route.v3.RouteConfiguration",
            Self::Secret => "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret",
            Self::ProxyConfig => crate::xds::pb::mesh::PROXY_CONFIG_TYPE,
        }
    }

    /// The short name Istio uses in metrics and debug pages: `cds`, `eds`, `lds`, `rds`,
    /// `sds`, `pcds`.
    pub const fn short(self) -> &'static str {
        match self {
            Self::Cluster => "cds",
            Self::Endpoint => "eds",
            Self::Listener => "lds",
            Self::Route => "rds",
            Self::Secret => "sds",
            Self::ProxyConfig => "pcds",
        }
    }

    /// The type for a type URL, if wayfinder serves it.
    pub fn parse(url: &str) -> Option<Self> {
        Self::PUSH_ORDER.into_iter().find(|t| t.as_str() == url)
    }

    /// True for the types whose state-of-the-world responses must hold the full set (LDS, CDS):
    /// a resource missing from such a response is deleted.
    pub const fn is_full_state(self) -> bool {
        matches!(self, Self::Cluster | Self::Listener)
    }
}

impl fmt::Display for TypeUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.short())
    }
}

/// A value per type, for the few types one stream uses, in type order. A stream keeps its
/// protocol state and its debug copy in these: a `BTreeMap` node holds room for eleven entries
/// (about 3 KB of `TypeState` for the four a sidecar uses), this only for those there are.
#[derive(Clone, Debug)]
pub struct PerType<V>(Vec<(TypeUrl, V)>);

impl<V> Default for PerType<V> {
    fn default() -> Self {
        Self(Vec::new())
    }
}

impl<V> PerType<V> {
    /// The value for `t`, if there is one.
    pub fn get(&self, t: TypeUrl) -> Option<&V> {
        self.0.iter().find(|(k, _)| *k == t).map(|(_, v)| v)
    }

    /// The value for `t`, if there is one, to change.
    pub fn get_mut(&mut self, t: TypeUrl) -> Option<&mut V> {
        self.0.iter_mut().find(|(k, _)| *k == t).map(|(_, v)| v)
    }

    /// The value for `t`, made with `V::default()` if there was none.
    pub fn get_or_default(&mut self, t: TypeUrl) -> &mut V
    where
        V: Default,
    {
        let at = match self.0.binary_search_by_key(&t, |(k, _)| *k) {
            Ok(at) => at,
            Err(at) => {
                self.0.insert(at, (t, V::default()));
                at
            }
        };
        &mut self.0[at].1
    }

    /// The types there are values for, in order.
    pub fn keys(&self) -> impl Iterator<Item = TypeUrl> + '_ {
        self.0.iter().map(|(k, _)| *k)
    }

    /// Each type and its value, in type order.
    pub fn iter(&self) -> impl Iterator<Item = (&TypeUrl, &V)> {
        self.0.iter().map(|(k, v)| (k, v))
    }
}

impl<'a, V> IntoIterator for &'a PerType<V> {
    type Item = (&'a TypeUrl, &'a V);
    type IntoIter = std::iter::Map<
        std::slice::Iter<'a, (TypeUrl, V)>,
        fn(&'a (TypeUrl, V)) -> (&'a TypeUrl, &'a V),
    >;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter().map(|(k, v)| (k, v))
    }
}

impl<V> IntoIterator for PerType<V> {
    type Item = (TypeUrl, V);
    type IntoIter = std::vec::IntoIter<(TypeUrl, V)>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xds::pb;
    use prost::Name;

    #[test]
    fn type_urls_match_the_generated_messages() {
        assert_eq!(TypeUrl::Cluster.as_str(), pb::cluster::Cluster::type_url());
        assert_eq!(
            TypeUrl::Endpoint.as_str(),
            pb::endpoint::ClusterLoadAssignment::type_url()
        );
        assert_eq!(
            TypeUrl::Listener.as_str(),
            pb::listener::Listener::type_url()
        );
        assert_eq!(
            TypeUrl::Route.as_str(),
            pb::route::RouteConfiguration::type_url()
        );
        assert_eq!(TypeUrl::Secret.as_str(), pb::tls::Secret::type_url());
        assert_eq!(
            TypeUrl::ProxyConfig.as_str(),
            pb::mesh::ProxyConfig::type_url()
        );
        for t in TypeUrl::PUSH_ORDER {
            assert_eq!(TypeUrl::parse(t.as_str()), Some(t));
        }
        assert_eq!(
            TypeUrl::parse("type.googleapis.com/envoy.config.core.v3.TypedExtensionConfig"),
            None
        );
    }

    #[test]
    fn per_type_keeps_one_value_per_type_in_type_order() {
        let mut m = PerType::<u32>::default();
        *m.get_or_default(TypeUrl::Route) += 1;
        *m.get_or_default(TypeUrl::Cluster) += 2;
        *m.get_or_default(TypeUrl::Route) += 3;
        assert_eq!(
            m.keys().collect::<Vec<_>>(),
            [TypeUrl::Cluster, TypeUrl::Route]
        );
        assert_eq!(m.get(TypeUrl::Route), Some(&4));
        assert_eq!(m.get(TypeUrl::Listener), None);
        assert_eq!(m.get_mut(TypeUrl::Cluster).copied(), Some(2));
        let pairs: Vec<_> = m.into_iter().collect();
        assert_eq!(pairs, [(TypeUrl::Cluster, 2), (TypeUrl::Route, 4)]);
    }
}
