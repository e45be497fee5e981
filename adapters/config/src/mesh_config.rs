//! Istio's MeshConfig (pilot-discovery's `--meshConfig`, the `mesh` key of the `istio`
//! ConfigMap): the mesh-wide settings wayfinder acts on, read as istiod reads them.
//!
//! [`parse`] reads a file's YAML (or JSON) into [`MeshConfig`] and says, as warnings, which of
//! the fields it holds wayfinder does not act on: every other MeshConfig field (tracing,
//! access logs, extension providers, …) and those it reads but does not apply yet. A value it
//! acts on that is wrong (`outboundTrafficPolicy.mode: BLOCK`, a `connectTimeout` under 1 ms,
//! a `localityLbSetting` Istio would refuse) refuses the file, as istiod refuses to start with
//! it; the server keeps the last good one.
//!
//! Acted on: `rootNamespace`, `trustDomain`, `outboundTrafficPolicy`, `localityLbSetting`,
//! `enableAutoMtls`, `connectTimeout`, the `default*ExportTo`s, of `defaultConfig`
//! `concurrency`, `proxyMetadata` (served to agents, see [`crate::proxy_config`]) and `image`
//! (reported), and `protocolDetectionTimeout`. Read and reported as not acted on yet:
//! `ingressClass`, `ingressService`; and `defaultConfig`'s other fields, each by name.

use serde::{Deserialize, Serialize};

use crate::LocalityLbSetting;
use crate::common::Duration;
use crate::proxy_config::DefaultConfig;
use crate::validate::{Problem, has_errors};

/// The MeshConfig fields wayfinder reads (Istio's names and meanings).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MeshConfig {
    /// The namespace whose policies without a selector are the mesh's (Istio's default
    /// `istio-system`).
    #[serde(default)]
    pub root_namespace: Option<String>,
    /// The trust domain of workload identities (`cluster.local`).
    #[serde(default)]
    pub trust_domain: Option<String>,
    /// What sidecars do with traffic to unknown destinations, unless a Sidecar says.
    #[serde(default)]
    pub outbound_traffic_policy: Option<OutboundTrafficPolicy>,
    /// Locality load balancing of every cluster whose DestinationRule sets none.
    #[serde(default)]
    pub locality_lb_setting: Option<LocalityLbSetting>,
    /// Auto mTLS to workloads with a sidecar (default on).
    #[serde(default)]
    pub enable_auto_mtls: Option<bool>,
    /// Clusters' connect timeout (Istio's default `10s`).
    #[serde(default)]
    pub connect_timeout: Option<Duration>,
    /// The proxies' default ProxyConfig, under the ProxyConfig objects.
    #[serde(default)]
    pub default_config: Option<DefaultConfig>,
    /// Where DestinationRules without `exportTo` are exported (Istio's default `*`).
    #[serde(default)]
    pub default_destination_rule_export_to: Vec<String>,
    /// Where VirtualServices without `exportTo` are exported (Istio's default `*`).
    #[serde(default)]
    pub default_virtual_service_export_to: Vec<String>,
    /// Where services without `exportTo` are exported (Istio's default `*`).
    #[serde(default)]
    pub default_service_export_to: Vec<String>,
    /// How long the inbound listener's TLS inspector waits for a client's first bytes
    /// (Istio's default `0s`, for ever; wayfinder's, when unset, Envoy's 15 s).
    #[serde(default)]
    pub protocol_detection_timeout: Option<Duration>,
    /// Read, not acted on yet (wayfinder serves no Kubernetes Ingress).
    #[serde(default)]
    pub ingress_class: Option<String>,
    /// Read, not acted on yet.
    #[serde(default)]
    pub ingress_service: Option<String>,
}

/// `outboundTrafficPolicy`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutboundTrafficPolicy {
    /// `ALLOW_ANY` (Istio's default) or `REGISTRY_ONLY`.
    #[serde(default)]
    pub mode: Option<String>,
}

impl MeshConfig {
    /// True when sidecars without a Sidecar's policy send unknown destinations nowhere.
    pub fn registry_only(&self) -> bool {
        self.outbound_traffic_policy
            .as_ref()
            .and_then(|p| p.mode.as_deref())
            == Some("REGISTRY_ONLY")
    }

    /// The fields read but not acted on yet, that this config sets.
    fn not_acted_on(&self) -> Vec<&'static str> {
        [
            ("ingressClass", self.ingress_class.is_some()),
            ("ingressService", self.ingress_service.is_some()),
        ]
        .into_iter()
        .filter(|(_, set)| *set)
        .map(|(name, _)| name)
        .collect()
    }
}

/// A MeshConfig read, and its problems: errors (which refuse it) and warnings (fields not
/// acted on).
#[derive(Clone, Debug, PartialEq)]
pub struct Parsed {
    /// The settings.
    pub config: MeshConfig,
    /// Every problem, errors first.
    pub problems: Vec<Problem>,
}

impl Parsed {
    /// True when the config must not be used.
    pub fn refused(&self) -> bool {
        has_errors(&self.problems)
    }
}

/// Reads a MeshConfig's YAML or JSON. `Err` when it does not parse as one.
pub fn parse(text: &str) -> Result<Parsed, String> {
    let mut skipped = Vec::new();
    let config: MeshConfig = serde_saphyr::with_deserializer_from_str(text, |de| {
        let mut skip = |path: serde_ignored::Path<'_>| {
            skipped.push(crate::documents::field_path(&path).to_string());
        };
        serde_ignored::deserialize(de, &mut skip)
    })
    .map_err(|e| e.to_string())?;
    let mut problems = check(&config);
    let read = config.not_acted_on();
    problems.extend(
        read.iter()
            .map(|f| Problem::warning(*f, "not acted on yet: wayfinder reads it and ignores it")),
    );
    if names_image(&config) {
        problems.push(Problem::warning(
            "defaultConfig.image",
            "not acted on: wayfinder injects no containers, so it picks no proxy image",
        ));
    }
    problems.extend(skipped.into_iter().map(|f| {
        Problem::warning(
            f,
            "not acted on: wayfinder does not read this field (or it is not one of MeshConfig)",
        )
    }));
    problems.sort_by_key(|p| !p.fatal);
    Ok(Parsed { config, problems })
}

/// True when `defaultConfig` names an image flavour.
fn names_image(c: &MeshConfig) -> bool {
    c.default_config.as_ref().is_some_and(|d| d.image.is_some())
}

/// The values wayfinder acts on, checked as istiod checks them.
fn check(c: &MeshConfig) -> Vec<Problem> {
    let mut problems = Vec::new();
    if let Some(mode) = c
        .outbound_traffic_policy
        .as_ref()
        .and_then(|p| p.mode.as_deref())
        && !matches!(mode, "ALLOW_ANY" | "REGISTRY_ONLY")
    {
        problems.push(Problem::error(
            "outboundTrafficPolicy.mode",
            format!("{mode:?} is not ALLOW_ANY or REGISTRY_ONLY"),
        ));
    }
    if c.connect_timeout
        .is_some_and(|d| d.0 < std::time::Duration::from_millis(1))
    {
        problems.push(Problem::error("connectTimeout", "must be at least 1ms"));
    }
    for (field, value) in [
        ("rootNamespace", &c.root_namespace),
        ("trustDomain", &c.trust_domain),
    ] {
        if value.as_deref() == Some("") {
            problems.push(Problem::error(field, "must not be empty"));
        }
    }
    if c.default_config
        .as_ref()
        .and_then(|d| d.concurrency)
        .is_some_and(|n| n < 0)
    {
        problems.push(Problem::error(
            "defaultConfig.concurrency",
            "concurrency must be greater than or equal to 0",
        ));
    }
    if let Some(l) = &c.locality_lb_setting {
        problems.extend(crate::validate::locality_lb_setting("localityLbSetting", l));
    }
    for (field, list) in [
        ("defaultServiceExportTo", &c.default_service_export_to),
        (
            "defaultVirtualServiceExportTo",
            &c.default_virtual_service_export_to,
        ),
        (
            "defaultDestinationRuleExportTo",
            &c.default_destination_rule_export_to,
        ),
    ] {
        problems.extend(crate::validate::export_to(field, list));
    }
    problems
}

#[cfg(test)]
mod tests;
