//! `PeerAuthentication` (`security.istio.io`, `v1` and `v1beta1`): whether connections to a
//! workload must be mutual TLS, may be, or must not be; and [`effective`], the mode Istio
//! derives for one workload from every policy in force.
//!
//! Istio's rules ([`effective`] follows `ComposePeerAuthentication` in istio/istio's
//! `pilot/pkg/security/authn/policy_applier.go`): a policy without a selector in the root
//! namespace is the mesh's, one without a selector elsewhere its namespace's, one with a
//! selector applies to the workloads of its namespace it selects. The most specific level that
//! sets a mode decides, `UNSET` inherits from the level above, and with nothing set the mode
//! is `PERMISSIVE`. Only the workload's own policy has per-port modes.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{Error as _, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};

use crate::ConfigMeta;
use crate::common::{LabelLookup, LabelSelector};

/// A `PeerAuthentication` spec.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PeerAuthentication {
    /// The workloads of the policy's namespace it applies to; none (or no labels): every
    /// workload of the namespace, or of the mesh in the root namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
    /// The mode for the workloads; none: inherited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtls: Option<PeerMtls>,
    /// Modes of single ports of the workload (its own port, not a service's), by number.
    /// Requires a selector. Keys are read as YAML integers or strings (`8080:`, `"8080":`).
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "port_keys"
    )]
    pub port_level_mtls: BTreeMap<u32, PeerMtls>,
}

/// Istio's `PeerAuthentication.MutualTLS`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerMtls {
    /// The mode.
    #[serde(default)]
    pub mode: MtlsMode,
}

/// A mutual TLS mode, as Istio names it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum MtlsMode {
    /// Inherit from the level above; `PERMISSIVE` when nothing above sets a mode.
    #[default]
    Unset,
    /// Plaintext only: connections are not mutual TLS.
    Disable,
    /// Mutual TLS or plaintext.
    Permissive,
    /// Mutual TLS only: the client presents a certificate of the mesh.
    Strict,
}

impl MtlsMode {
    /// Every mode, in Istio's order.
    pub const ALL: [MtlsMode; 4] = [
        MtlsMode::Unset,
        MtlsMode::Disable,
        MtlsMode::Permissive,
        MtlsMode::Strict,
    ];

    /// Istio's name: `UNSET`, `DISABLE`, `PERMISSIVE`, `STRICT`.
    pub fn name(self) -> &'static str {
        match self {
            MtlsMode::Unset => "UNSET",
            MtlsMode::Disable => "DISABLE",
            MtlsMode::Permissive => "PERMISSIVE",
            MtlsMode::Strict => "STRICT",
        }
    }
}

impl fmt::Display for MtlsMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// By name, as Istio's CRD allows (a number is not); `null` is `UNSET`, as in Istio's JSON.
/// Another name is an error that names the field and the modes, since serde's own message
/// ("unknown variant") says neither.
impl<'de> Deserialize<'de> for MtlsMode {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        let Some(name) = Option::<String>::deserialize(de)? else {
            return Ok(MtlsMode::Unset);
        };
        MtlsMode::ALL
            .into_iter()
            .find(|mode| mode.name() == name)
            .ok_or_else(|| {
                D::Error::custom(format!(
                    "mode: {name:?} is not an mTLS mode: UNSET, DISABLE, PERMISSIVE or STRICT"
                ))
            })
    }
}

/// A workload's peer authentication: its mode, and the ports whose mode differs (or is set
/// on its own).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct EffectiveMtls {
    /// The workload's mode; never [`MtlsMode::Unset`].
    pub mode: MtlsMode,
    /// The modes of single ports of the workload; never [`MtlsMode::Unset`].
    pub ports: BTreeMap<u16, MtlsMode>,
}

impl EffectiveMtls {
    /// The mode of connections to the workload's `port`.
    pub fn mode_for(&self, port: u16) -> MtlsMode {
        self.ports.get(&port).copied().unwrap_or(self.mode)
    }
}

/// Effective peer authentication of a workload: mode for the workload and per port overrides.
///
/// `policies` are every `PeerAuthentication` in force, in any order; the workload is in
/// `namespace` with `labels`, and `root_namespace` is the mesh's (Istio's `rootNamespace`,
/// `istio-system` by default). As in Istio:
///
/// - The candidates are the mesh policy (in the root namespace, without a selector or with a
///   selector without labels), the namespace policy (in the workload's namespace, likewise) and the
///   workload policy (in the workload's namespace, whose selector's labels the workload has).
///   A policy in the root namespace with a selector is ignored, for every workload (Istio:
///   "ignored when deployed in the root namespace"). A workload in the root namespace has no
///   namespace level: its namespace's policy is the mesh policy.
/// - Of several policies of one level Istio takes the oldest. Creation times are not known
///   here, so the first by name wins, which is Istio's order among policies created in the
///   same second.
/// - The most specific level whose mode is not `UNSET` decides; with none, `PERMISSIVE`.
/// - `portLevelMtls` counts only in the workload policy; a port whose mode is `UNSET` has the
///   workload's mode. Numbers that are not ports (validation refuses them) are left out.
pub fn effective<'a>(
    policies: impl Iterator<Item = (&'a ConfigMeta, &'a PeerAuthentication)>,
    root_namespace: &str,
    namespace: &str,
    labels: &impl LabelLookup,
) -> EffectiveMtls {
    // Per level, the policy chosen so far and its name.
    let mut mesh: Option<(&str, &PeerAuthentication)> = None;
    let mut space = None;
    let mut workload = None;
    for (meta, policy) in policies {
        let selector = policy
            .selector
            .as_ref()
            .filter(|s| !s.match_labels.is_empty());
        let at = &*meta.namespace;
        let level = match selector {
            None if at == root_namespace => &mut mesh,
            None if at == namespace => &mut space,
            Some(s) if at == namespace && at != root_namespace && s.matches(labels) => {
                &mut workload
            }
            _ => continue,
        };
        if level.is_none_or(|(name, _)| *meta.name < *name) {
            *level = Some((&*meta.name, policy));
        }
    }
    let mut mode = MtlsMode::Permissive;
    for (_, policy) in [mesh, space, workload].into_iter().flatten() {
        if let Some(set) = policy.mtls.as_ref().map(|m| m.mode)
            && set != MtlsMode::Unset
        {
            mode = set;
        }
    }
    let ports = workload.map_or_else(BTreeMap::new, |(_, policy)| {
        let ports = policy.port_level_mtls.iter();
        ports
            .filter_map(|(port, mtls)| {
                let port = u16::try_from(*port).ok().filter(|p| *p != 0)?;
                let set = if mtls.mode == MtlsMode::Unset {
                    mode
                } else {
                    mtls.mode
                };
                Some((port, set))
            })
            .collect()
    });
    EffectiveMtls { mode, ports }
}

/// `portLevelMtls`: keys are port numbers, written as YAML integers (`8080:`) or as strings
/// (`"8080":`, as JSON and the Kubernetes API write every key). A number given twice is an
/// error rather than a silent choice of one of its modes.
fn port_keys<'de, D: Deserializer<'de>>(de: D) -> Result<BTreeMap<u32, PeerMtls>, D::Error> {
    struct Ports;

    impl<'de> Visitor<'de> for Ports {
        type Value = BTreeMap<u32, PeerMtls>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a map of port numbers to mTLS settings")
        }

        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(BTreeMap::new())
        }

        fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(BTreeMap::new())
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut ports = BTreeMap::new();
            while let Some(PortKey(port)) = map.next_key()? {
                let mtls = map.next_value()?;
                if ports.insert(port, mtls).is_some() {
                    return Err(A::Error::custom(format!(
                        "portLevelMtls: port {port} is given twice"
                    )));
                }
            }
            Ok(ports)
        }
    }

    de.deserialize_any(Ports)
}

/// A key of `portLevelMtls`.
struct PortKey(u32);

impl<'de> Deserialize<'de> for PortKey {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        struct Key;

        impl Visitor<'_> for Key {
            type Value = PortKey;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a port number")
            }

            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<PortKey, E> {
                u32::try_from(v).map(PortKey).map_err(|_| not_a_port(v))
            }

            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<PortKey, E> {
                u32::try_from(v).map(PortKey).map_err(|_| not_a_port(v))
            }

            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<PortKey, E> {
                v.parse().map(PortKey).map_err(|_| not_a_port(v))
            }
        }

        de.deserialize_any(Key)
    }
}

fn not_a_port<E: serde::de::Error>(key: impl fmt::Debug) -> E {
    E::custom(format!(
        "portLevelMtls: {key:?} is not a port number (1 to 65535)"
    ))
}

#[cfg(test)]
mod tests;
