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
}

impl TypeUrl {
    /// Every type, in push order.
    pub const PUSH_ORDER: [TypeUrl; 4] =
        [Self::Cluster, Self::Endpoint, Self::Listener, Self::Route];

    /// The full type URL, `type.googleapis.com/...`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Cluster => "type.googleapis.com/envoy.config.cluster.v3.Cluster",
            Self::Endpoint => "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment",
            Self::Listener => "type.googleapis.com/envoy.config.listener.v3.Listener",
            Self::Route => "type.googleapis.com/envoy.config.route.v3.RouteConfiguration",
        }
    }

    /// The short name Istio uses in metrics and debug pages: `cds`, `eds`, `lds`, `rds`.
    pub const fn short(self) -> &'static str {
        match self {
            Self::Cluster => "cds",
            Self::Endpoint => "eds",
            Self::Listener => "lds",
            Self::Route => "rds",
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
        for t in TypeUrl::PUSH_ORDER {
            assert_eq!(TypeUrl::parse(t.as_str()), Some(t));
        }
        assert_eq!(
            TypeUrl::parse("type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"),
            None
        );
    }
}
