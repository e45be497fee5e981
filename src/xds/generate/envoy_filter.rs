//! EnvoyFilter: Istio's patches to the listeners, routes and clusters generated for a proxy
//! (`pilot/pkg/networking/core/envoyfilter`), applied to the encoded resources after they are
//! generated.
//!
//! - **Which filters.** Those of the root namespace and of the proxy's namespace whose
//!   `workloadSelector` the proxy's labels match (none: every workload there), root namespace
//!   first, each namespace's in name order, then stably by `priority` (Istio orders by
//!   creation time where wayfinder, reading files, orders by name). A filter attached by
//!   `targetRefs` is for Kubernetes Gateway API gateways, which wayfinder does not serve: it
//!   applies to no proxy. A patch whose `match.proxy` the node does not match is left out.
//! - **Where.** A patch's `match.context` picks the configuration: a gateway's (`GATEWAY`),
//!   a sidecar's inbound side (`SIDECAR_INBOUND`: the `virtualInbound` listener, `inbound|`
//!   clusters) or outbound side (everything else); `ANY` is all of them.
//! - **How.** Each resource is read as its Envoy message (`prost-reflect`, with the
//!   descriptors `wayfinder_config::envoy_types` holds), patched in Istio's order (the object, then the objects
//!   within it), and encoded again. The operations are Istio's, written in `listener`,
//!   `route` and `cluster`; a `MERGE` is `merge`'s.
//! - **When it fails.** A value that does not read as the message its `applyTo` names is
//!   refused by validation, with its object (`wayfinder_config::envoy_types`); should one
//!   reach here it is reported once per configuration and its patch left out. A patch that fails where it
//!   applies (a `MERGE` into a filter's `typed_config` of another type) is left out there, as
//!   Istio leaves it, and the other patches apply. Both are logged and shown on
//!   `/debug/configz` (`envoy_filters`), with the filter. A resource is only ever the
//!   generated one with some patches applied whole: never a half-applied patch.
//!
//! Patched resources are made per snapshot, for each set of patches and layer of generated
//! resources (`Patched`), and shared by the proxies that have both.

mod cluster;
mod fields;
mod listener;
mod merge;
mod patched;
mod route;
#[cfg(test)]
mod tests;

pub(crate) use self::patched::Patched;

use std::collections::BTreeMap;
use std::sync::Arc;

use prost_reflect::DynamicMessage;
use serde::Serialize;
use wayfinder_config::envoy_filter::{
    ApplyTo, MAX_PROXY_VERSION_LEN, ObjectMatch, Operation, PatchContext,
};
use wayfinder_config::envoy_types::{message_type, read_patch_value};
use wayfinder_config::{ConfigKey, ConfigSpec, Kind};

use crate::snapshot::TrafficConfig;
use crate::xds::proxy::{Proxy, ProxyKind};

/// Which side of a proxy a resource configures, to compare with a patch's context.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Side {
    Gateway,
    Inbound,
    Outbound,
}

impl Side {
    fn context(self) -> PatchContext {
        match self {
            Side::Gateway => PatchContext::Gateway,
            Side::Inbound => PatchContext::SidecarInbound,
            Side::Outbound => PatchContext::SidecarOutbound,
        }
    }
}

/// One patch, its value read as its Envoy message.
#[derive(Debug)]
pub(super) struct Patch {
    /// The EnvoyFilter it is from.
    pub(super) key: ConfigKey,
    pub(super) apply_to: ApplyTo,
    pub(super) matches: ObjectMatch,
    pub(super) operation: Operation,
    /// The value (`None` for `REMOVE`).
    pub(super) value: Option<DynamicMessage>,
    /// `match.proxy.proxyVersion`, compiled.
    version: VersionMatch,
}

#[derive(Debug)]
enum VersionMatch {
    Any,
    Pattern(regex_lite::Regex),
    /// Too long to compile (Istio's `maxProxyVersionLen`): matches no proxy.
    Never,
}

impl Patch {
    /// True when the patch is for `side` (its context, or `ANY`).
    pub(super) fn is_for(&self, side: Side) -> bool {
        matches!(self.matches.context, PatchContext::Any) || self.matches.context == side.context()
    }

    /// True for `MERGE` and `MERGE_AND_REPLACE_LIST`.
    pub(super) fn merges(&self) -> bool {
        matches!(
            self.operation,
            Operation::Merge | Operation::MergeAndReplaceList
        )
    }

    /// The patches of `apply_to` that add an object of their own on `side` (`ANY` adds on a
    /// sidecar's outbound side and a gateway only, as Istio), with their values.
    pub(super) fn added<'a>(
        patches: &[&'a Patch],
        apply_to: ApplyTo,
        side: Side,
    ) -> Vec<(&'a Patch, DynamicMessage)> {
        patches
            .iter()
            .filter(|p| p.apply_to == apply_to && p.operation == Operation::Add)
            .filter(|p| p.matches.context != PatchContext::Any || side != Side::Inbound)
            .filter(|p| p.is_for(side))
            .filter_map(|p| Some((*p, p.value.clone()?)))
            .collect()
    }

    /// The patch's value (present for every operation but `REMOVE`, as validation requires).
    pub(super) fn value(&self) -> Result<&DynamicMessage, Failure> {
        self.value
            .as_ref()
            .ok_or_else(|| self.fail("the patch has no value".into()))
    }

    /// A failure of this patch.
    pub(super) fn fail(&self, message: String) -> Failure {
        Failure {
            key: self.key.clone(),
            message,
        }
    }

    /// Istio's `proxyMatch`: the node's `ISTIO_VERSION` and metadata.
    fn matches_proxy(&self, proxy: &Proxy) -> bool {
        let Some(m) = &self.matches.proxy else {
            return true;
        };
        let version = proxy
            .metadata
            .get("ISTIO_VERSION")
            .map_or("", String::as_str);
        let version_ok = match &self.version {
            VersionMatch::Any => true,
            VersionMatch::Never => false,
            VersionMatch::Pattern(re) => !version.is_empty() && re.is_match(version),
        };
        version_ok
            && m.metadata
                .iter()
                .all(|(k, v)| proxy.metadata.get(k) == Some(v))
    }
}

/// A patch that could not be applied: the EnvoyFilter and why.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Failure {
    /// The EnvoyFilter.
    pub key: ConfigKey,
    /// What failed.
    pub message: String,
}

/// One EnvoyFilter, read.
#[derive(Debug)]
struct Filter {
    namespace: Arc<str>,
    selector: Option<BTreeMap<String, String>>,
    targeted: bool,
    priority: i32,
    patches: Vec<Arc<Patch>>,
}

/// The EnvoyFilters of a snapshot's configuration, read once: their patches' values as
/// Envoy messages, and what could not be read.
#[derive(Debug, Default)]
pub(crate) struct EnvoyFilters {
    filters: Vec<Filter>,
    /// The patches left out, and why.
    pub(crate) problems: Vec<Failure>,
}

impl EnvoyFilters {
    /// Reads every EnvoyFilter of `config`.
    pub(crate) fn read(config: &TrafficConfig) -> Self {
        let mut out = Self::default();
        for (key, object) in config.of_kind_keyed(Kind::EnvoyFilter) {
            let ConfigSpec::EnvoyFilter(ef) = &object.spec else {
                continue;
            };
            let mut patches = Vec::new();
            for (i, cp) in ef.config_patches.iter().enumerate() {
                let Some(cp) = cp else { continue };
                let Some(patch) = &cp.patch else { continue };
                let fail = |message: String| Failure {
                    key: key.clone(),
                    message: format!("configPatches[{i}]: {message}"),
                };
                if message_type(cp.apply_to).is_none() {
                    // Validation warned: wayfinder serves no ECDS and patches no bootstrap.
                    continue;
                }
                // Validation read the value as this reads it: an error here would be a value
                // of an object a source did not validate.
                let value = match patch
                    .value
                    .as_ref()
                    .map(|v| read_patch_value(cp.apply_to, v))
                {
                    None | Some(Ok(None)) => None,
                    Some(Ok(Some(value))) => Some(value.message),
                    Some(Err(message)) => {
                        out.problems.push(fail(format!("the value is {message}")));
                        continue;
                    }
                };
                let matches = cp.matches.clone().unwrap_or_default();
                let version = match matches.proxy.as_ref().map(|p| p.proxy_version.as_str()) {
                    None | Some("") => VersionMatch::Any,
                    Some(v) if v.len() > MAX_PROXY_VERSION_LEN => VersionMatch::Never,
                    Some(v) => match regex_lite::Regex::new(v) {
                        Ok(re) => VersionMatch::Pattern(re),
                        Err(err) => {
                            out.problems.push(fail(format!("proxyVersion: {err}")));
                            continue;
                        }
                    },
                };
                // As Istio: an insert is an ADD but among filters and routes.
                let mut operation = patch.operation;
                if matches!(
                    operation,
                    Operation::InsertBefore | Operation::InsertAfter | Operation::InsertFirst
                ) && !matches!(
                    cp.apply_to,
                    ApplyTo::HttpFilter
                        | ApplyTo::NetworkFilter
                        | ApplyTo::HttpRoute
                        | ApplyTo::ListenerFilter
                ) {
                    operation = Operation::Add;
                }
                patches.push(Arc::new(Patch {
                    key: key.clone(),
                    apply_to: cp.apply_to,
                    matches,
                    operation,
                    value,
                    version,
                }));
            }
            out.filters.push(Filter {
                namespace: key.namespace.clone(),
                selector: ef.workload_selector.as_ref().map(|s| s.labels.clone()),
                targeted: !ef.target_refs.is_empty(),
                priority: ef.priority,
                patches,
            });
        }
        out
    }

    /// The patches that apply to `proxy`, in order, with their places (which key what is
    /// made of them): root namespace first, then the proxy's, then by priority.
    pub(crate) fn for_proxy(&self, proxy: &Proxy, root_namespace: &str) -> Selected {
        if proxy.kind == ProxyKind::Grpc || self.filters.is_empty() {
            return Selected::default();
        }
        let selects = |f: &Filter| {
            !f.targeted
                && f.selector
                    .as_ref()
                    .is_none_or(|labels| labels.iter().all(|(k, v)| proxy.labels.get(k) == Some(v)))
        };
        let mut namespaces = vec![root_namespace];
        if *proxy.namespace != *root_namespace {
            namespaces.push(&proxy.namespace);
        }
        let mut chosen: Vec<(usize, &Filter)> = Vec::new();
        for namespace in namespaces {
            chosen.extend(
                self.filters
                    .iter()
                    .enumerate()
                    .filter(|(_, f)| *f.namespace == *namespace && selects(f)),
            );
        }
        chosen.sort_by_key(|(_, f)| f.priority);
        let mut selected = Selected::default();
        for (i, f) in chosen {
            for (j, p) in f.patches.iter().enumerate() {
                if p.matches_proxy(proxy) {
                    selected.ids.push((i, j));
                    selected.patches.push(p.clone());
                }
            }
        }
        selected
    }
}

/// The patches one proxy gets, and their places among the snapshot's (the key of what is
/// made of them).
#[derive(Debug, Default)]
pub(crate) struct Selected {
    ids: Vec<(usize, usize)>,
    patches: Vec<Arc<Patch>>,
}

impl Selected {
    /// The patches of `apply_to` kinds.
    fn of(&self, kinds: &[ApplyTo]) -> Vec<&Patch> {
        self.patches
            .iter()
            .filter(|p| kinds.contains(&p.apply_to))
            .map(|p| &**p)
            .collect()
    }
}
