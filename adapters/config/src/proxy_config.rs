//! `ProxyConfig` (`networking.istio.io/v1beta1`, the one version Istio serves it): per-workload
//! settings of the proxy itself, and how Istio layers them (`pilot/pkg/model/proxy_config.go`).
//!
//! A proxy's effective settings ([`effective`]) are, each layer over the one before:
//! 1. MeshConfig's `defaultConfig` ([`DefaultConfig`]);
//! 2. the root namespace's ProxyConfig without a selector;
//! 3. the proxy's namespace's ProxyConfig without a selector (when it is not the root);
//! 4. the first ProxyConfig of the proxy's namespace whose `selector.matchLabels` the
//!    workload has.
//!
//! A layer's `concurrency` and `image` replace the ones below; its environment variables
//! (`environmentVariables`, MeshConfig's `proxyMetadata`) are added to them, a name set again
//! taking the new value, as Istio's `MergeProxyConfig` merges `proxyMetadata`. Where several
//! objects qualify for one layer Istio takes the oldest; wayfinder, which keeps no creation
//! time, takes the first by name (and `wayfinder analyze` sees the others).
//!
//! Istio applies the result when it injects the pod (the sidecar container's `--concurrency`,
//! its environment, its image). wayfinder injects nothing: the server serves the result to the
//! agent over ADS (Istio's PCDS type, `istio.mesh.v1alpha1.ProxyConfig`), and the agent
//! applies it when it starts Envoy.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::ConfigMeta;
use crate::common::{LabelLookup, LabelSelector};

/// A `ProxyConfig` spec.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProxyConfig {
    /// The workloads it is for; without one, every workload of its namespace (of the mesh, in
    /// the root namespace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
    /// Envoy's worker threads; `0` for one per core.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<i32>,
    /// Environment variables of the proxy's agent (`ISTIO_META_*` become node metadata).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub environment_variables: BTreeMap<String, String>,
    /// The proxy image's flavour; nothing here picks images, so only reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<ProxyImage>,
}

/// `ProxyImage`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProxyImage {
    /// `default`, `debug`, `distroless`.
    #[serde(default)]
    pub image_type: String,
}

/// The fields of MeshConfig's `defaultConfig` (a `ProxyConfig` of `istio.mesh.v1alpha1`) that
/// wayfinder serves to agents; the others are reported as not acted on.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DefaultConfig {
    /// As [`ProxyConfig::concurrency`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<i32>,
    /// As [`ProxyConfig::environment_variables`].
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub proxy_metadata: BTreeMap<String, String>,
    /// As [`ProxyConfig::image`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<ProxyImage>,
}

/// A proxy's effective settings: what [`effective`] layers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize)]
pub struct ProxySettings {
    /// Envoy's worker threads, when a layer sets them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<i32>,
    /// Environment variables for the agent.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub environment: BTreeMap<String, String>,
    /// The image flavour, when a layer sets one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_type: Option<String>,
}

impl ProxySettings {
    /// Puts one layer over these settings.
    fn layer(
        &mut self,
        concurrency: Option<i32>,
        environment: &BTreeMap<String, String>,
        image: Option<&ProxyImage>,
    ) {
        if concurrency.is_some() {
            self.concurrency = concurrency;
        }
        self.environment
            .extend(environment.iter().map(|(k, v)| (k.clone(), v.clone())));
        if let Some(image) = image.filter(|i| !i.image_type.is_empty()) {
            self.image_type = Some(image.image_type.clone());
        }
    }
}

/// The settings of a proxy in `namespace` with `labels`: `mesh` (MeshConfig's
/// `defaultConfig`) under the ProxyConfigs `configs` (every one, in (namespace, name) order)
/// of `root_namespace` and `namespace`, as the module says.
pub fn effective<'a>(
    mesh: Option<&DefaultConfig>,
    configs: impl Iterator<Item = (&'a ConfigMeta, &'a ProxyConfig)> + Clone,
    root_namespace: &str,
    namespace: &str,
    labels: &impl LabelLookup,
) -> ProxySettings {
    let mut settings = ProxySettings::default();
    if let Some(d) = mesh {
        settings.layer(d.concurrency, &d.proxy_metadata, d.image.as_ref());
    }
    let unselective = |ns: &str| {
        configs.clone().find(|(m, pc)| {
            &*m.namespace == ns
                && pc
                    .selector
                    .as_ref()
                    .is_none_or(|s| s.match_labels.is_empty())
        })
    };
    let mut layers = vec![unselective(root_namespace)];
    if namespace != root_namespace {
        layers.push(unselective(namespace));
    }
    layers.push(configs.clone().find(|(m, pc)| {
        &*m.namespace == namespace
            && pc
                .selector
                .as_ref()
                .is_some_and(|s| !s.match_labels.is_empty() && s.matches(labels))
    }));
    for (_, pc) in layers.into_iter().flatten() {
        settings.layer(pc.concurrency, &pc.environment_variables, pc.image.as_ref());
    }
    settings
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn meta(namespace: &str, name: &str) -> ConfigMeta {
        ConfigMeta {
            namespace: Arc::from(namespace),
            name: Arc::from(name),
            ..ConfigMeta::default()
        }
    }

    fn pc(
        selector: &[(&str, &str)],
        concurrency: Option<i32>,
        env: &[(&str, &str)],
    ) -> ProxyConfig {
        let map = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>()
        };
        ProxyConfig {
            selector: (!selector.is_empty()).then(|| LabelSelector {
                match_labels: map(selector),
            }),
            concurrency,
            environment_variables: map(env),
            image: None,
        }
    }

    #[test]
    fn layers_go_mesh_root_namespace_workload_and_merge_environments() {
        let mesh = DefaultConfig {
            concurrency: Some(2),
            proxy_metadata: [("A".to_string(), "mesh".to_string())].into(),
            image: None,
        };
        let configs = [
            (
                meta("istio-system", "global"),
                pc(&[], Some(4), &[("B", "root")]),
            ),
            (meta("shop", "a-ns"), pc(&[], None, &[("A", "ns")])),
            (meta("shop", "b-ns-second"), pc(&[], Some(9), &[])),
            (
                meta("shop", "web"),
                pc(&[("app", "web")], Some(1), &[("C", "web")]),
            ),
            (meta("other", "web"), pc(&[("app", "web")], Some(7), &[])),
        ];
        let all = || configs.iter().map(|(m, p)| (m, p));
        let web: BTreeMap<String, String> = [("app".to_string(), "web".to_string())].into();
        let got = effective(Some(&mesh), all(), "istio-system", "shop", &web);
        assert_eq!(got.concurrency, Some(1), "the workload's wins");
        assert_eq!(
            got.environment,
            [("A", "ns"), ("B", "root"), ("C", "web")]
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .into()
        );
        // Another workload of the namespace: the first unselective one (by name) is its
        // namespace's; another namespace's selector never applies.
        let db: BTreeMap<String, String> = [("app".to_string(), "db".to_string())].into();
        assert_eq!(
            effective(Some(&mesh), all(), "istio-system", "shop", &db).concurrency,
            Some(4)
        );
        assert_eq!(
            effective(None, all(), "istio-system", "empty", &web).concurrency,
            Some(4)
        );
        assert_eq!(
            effective(
                Some(&mesh),
                std::iter::empty(),
                "istio-system",
                "empty",
                &web
            ),
            ProxySettings {
                concurrency: Some(2),
                environment: [("A".to_string(), "mesh".to_string())].into(),
                image_type: None,
            }
        );
    }
}
