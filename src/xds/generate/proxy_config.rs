//! PCDS: a proxy's own settings (Istio's `istio.mesh.v1alpha1.ProxyConfig` type), what Istio's
//! injector would write into the pod: MeshConfig's `defaultConfig` under the ProxyConfig
//! objects that apply to the proxy's workload, layered by
//! [`wayfinder_config::proxy_config::effective`]. The agent asks for it on a stream of its own
//! before it starts Envoy; Envoy never does.
//!
//! One resource, named [`NAME`]. Istio's istiod serves this type only for its trust bundle
//! (`PcdsGenerator`), unnamed; wayfinder serves the settings that decide how the proxy is
//! started (`concurrency`, `proxyMetadata`, `image`), under a name, since every resource here
//! has one.

use wayfinder_config::proxy_config::{self, ProxySettings};
use wayfinder_config::{ConfigSpec, Kind};

use super::XdsSnapshot;
use super::cache::{Layer, Resources};
use crate::xds::pb::mesh::{ProxyConfig, ProxyImage};
use crate::xds::pb::protobuf::Int32Value;
use crate::xds::proxy::Proxy;
use crate::xds::resource::{Resource, ResourceSet, insert};

/// The name of the one PCDS resource.
pub(super) const NAME: &str = "proxy-config";

impl XdsSnapshot {
    /// The settings `proxy`'s workload is to be started with.
    pub fn proxy_settings(&self, proxy: &Proxy) -> ProxySettings {
        let configs: Vec<_> = self
            .model
            .config
            .of_kind_keyed(Kind::ProxyConfig)
            .filter_map(|(_, o)| match &o.spec {
                ConfigSpec::ProxyConfig(pc) => Some((&o.meta, pc)),
                _ => None,
            })
            .collect();
        proxy_config::effective(
            self.mesh.proxy_defaults.as_ref(),
            configs.iter().copied(),
            &self.mesh.root_namespace,
            &proxy.namespace,
            &proxy.labels,
        )
    }

    /// The PCDS layer of `proxy`: its settings as Istio's message.
    pub(super) fn proxy_config(&self, proxy: &Proxy) -> Resources {
        let s = self.proxy_settings(proxy);
        let message = ProxyConfig {
            concurrency: s.concurrency.map(|value| Int32Value { value }),
            proxy_metadata: s.environment,
            image: s.image_type.map(|image_type| ProxyImage { image_type }),
        };
        let mut set = ResourceSet::new();
        insert(&mut set, Resource::encode(NAME, &message));
        Resources {
            layers: vec![Layer::new(set)],
        }
    }
}
