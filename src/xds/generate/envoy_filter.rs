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
mod route;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use prost::Message;
use prost_reflect::{DescriptorPool, DynamicMessage};
use serde::Serialize;
use wayfinder_config::envoy_filter::{
    ApplyTo, MAX_PROXY_VERSION_LEN, ObjectMatch, Operation, PatchContext,
};
use wayfinder_config::envoy_types::{message_type, read_patch_value};
use wayfinder_config::{ConfigKey, ConfigSpec, Kind};

use super::cache::{Layer, Resources};
use crate::snapshot::TrafficConfig;
use crate::xds::TypeUrl;
use crate::xds::proxy::{Proxy, ProxyKind};
use crate::xds::resource::{Resource, ResourceSet};

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

/// The kinds of patch that change resources of `type_url`.
fn kinds(type_url: TypeUrl) -> &'static [ApplyTo] {
    match type_url {
        TypeUrl::Listener => &[
            ApplyTo::Listener,
            ApplyTo::ListenerFilter,
            ApplyTo::FilterChain,
            ApplyTo::NetworkFilter,
            ApplyTo::HttpFilter,
            // Inline route configurations (a sidecar's inbound side).
            ApplyTo::RouteConfiguration,
            ApplyTo::VirtualHost,
            ApplyTo::HttpRoute,
        ],
        TypeUrl::Route => &[
            ApplyTo::RouteConfiguration,
            ApplyTo::VirtualHost,
            ApplyTo::HttpRoute,
        ],
        TypeUrl::Cluster => &[ApplyTo::Cluster],
        _ => &[],
    }
}

/// What was made of a snapshot's resources with sets of patches, kept for the snapshot's
/// life: (patch places, proxy kind, type, base layers) to the patched layers.
#[derive(Default)]
pub(crate) struct Patched {
    made: Mutex<BTreeMap<PatchedKey, Resources>>,
    /// The failures seen applying patches, shared with the next snapshot while the
    /// configuration is the same, so that each is logged once.
    failures: Arc<Mutex<BTreeSet<Failure>>>,
}

type PatchedKey = (Vec<(usize, usize)>, bool, TypeUrl, Vec<u64>);

impl Patched {
    /// For the next snapshot: nothing made, the failures kept when the configuration is the
    /// same (`config_changed` false).
    pub(crate) fn next(&self, config_changed: bool) -> Self {
        Self {
            made: Mutex::default(),
            failures: if config_changed {
                Arc::default()
            } else {
                self.failures.clone()
            },
        }
    }

    /// `base` patched with `selected` for a proxy (a gateway when `gateway`).
    pub(crate) fn apply(
        &self,
        selected: &Selected,
        gateway: bool,
        type_url: TypeUrl,
        base: Resources,
    ) -> Resources {
        let patches = selected.of(kinds(type_url));
        if patches.is_empty() {
            return base;
        }
        let Ok(pool) = crate::xds::json::pool() else {
            return base;
        };
        let key = (
            selected.ids.clone(),
            gateway,
            type_url,
            base.layers.iter().map(|l| l.id()).collect(),
        );
        if let Some(made) = lock(&self.made).get(&key) {
            return made.clone();
        }
        let mut failures = Vec::new();
        let made = patch_resources(pool, &patches, gateway, type_url, &base, &mut failures);
        for failure in failures {
            if lock(&self.failures).insert(failure.clone()) {
                tracing::warn!(
                    envoy_filter = %failure.key,
                    "EnvoyFilter patch not applied where it failed: {}; the other patches apply",
                    failure.message
                );
            }
        }
        lock(&self.made).insert(key, made.clone());
        made
    }

    /// The failures seen so far.
    pub(crate) fn failures(&self) -> Vec<Failure> {
        lock(&self.failures).iter().cloned().collect()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Each layer's resources patched (one that cannot be read or patched at all stays as it was
/// generated), and the resources the patches add in a layer of their own.
fn patch_resources(
    pool: &DescriptorPool,
    patches: &[&Patch],
    gateway: bool,
    type_url: TypeUrl,
    base: &Resources,
    failures: &mut Vec<Failure>,
) -> Resources {
    let mut layers = Vec::with_capacity(base.layers.len() + 1);
    let mut names = BTreeSet::new();
    for layer in &base.layers {
        let mut set = ResourceSet::new();
        for (name, resource) in layer.set() {
            match patch_one(pool, patches, gateway, type_url, resource, failures) {
                Ok(Some(patched)) => {
                    names.insert(name.clone());
                    set.insert(name.clone(), patched);
                }
                Ok(None) => {}
                Err(failure) => {
                    failures.push(failure);
                    names.insert(name.clone());
                    set.insert(name.clone(), resource.clone());
                }
            }
        }
        layers.push(Layer::new(set));
    }
    let sides: &[Side] = if gateway {
        &[Side::Gateway]
    } else {
        &[Side::Outbound, Side::Inbound]
    };
    let mut added = ResourceSet::new();
    for side in sides {
        let new = match type_url {
            TypeUrl::Listener => listener::added(patches, *side),
            TypeUrl::Cluster => cluster::added(patches, *side),
            _ => Vec::new(),
        };
        for (patch, message) in new {
            let name: Arc<str> = fields::string(&message, "name").into();
            if name.is_empty() || names.contains(&name) || added.contains_key(&name) {
                failures.push(patch.fail(format!(
                    "ADD of {:?}: {}",
                    &*name,
                    if name.is_empty() {
                        "it has no name"
                    } else {
                        "the proxy has one of that name already"
                    }
                )));
                continue;
            }
            added.insert(name.clone(), Arc::new(encode(name, &message)));
        }
    }
    if !added.is_empty() {
        layers.push(Layer::new(added));
    }
    Resources { layers }
}

/// One resource patched: `None` when a patch removed it, itself when nothing changed it. A
/// patch that fails on a part of it is left out there (into `failed`); one that fails on the
/// whole leaves the resource as it was generated (the error).
fn patch_one(
    pool: &DescriptorPool,
    patches: &[&Patch],
    gateway: bool,
    type_url: TypeUrl,
    resource: &Arc<Resource>,
    failed: &mut Vec<Failure>,
) -> Result<Option<Arc<Resource>>, Failure> {
    let name = &*resource.name;
    let side = if gateway {
        Side::Gateway
    } else if name.starts_with("inbound|") {
        Side::Inbound
    } else {
        Side::Outbound
    };
    // What no patch can change is left encoded (a CLUSTER patch for one service must not
    // decode every cluster of the mesh).
    let untouched = match type_url {
        TypeUrl::Cluster => !cluster::may_change(patches, side, name),
        TypeUrl::Route => !route::may_change(patches, side, name),
        _ => false,
    };
    if untouched {
        return Ok(Some(resource.clone()));
    }
    let any = resource.any();
    let unreadable = |e: String| Failure {
        key: patches[0].key.clone(),
        message: format!("cannot read {}: {e}", resource.name),
    };
    let desc = pool
        .get_message_by_name(any.type_url.rsplit('/').next().unwrap_or_default())
        .ok_or_else(|| unreadable(format!("unknown type {}", any.type_url)))?;
    let mut message = DynamicMessage::decode(desc, any.value.as_slice())
        .map_err(|e| unreadable(e.to_string()))?;
    let kept = match type_url {
        TypeUrl::Listener => {
            let direction = message.get_field_by_name("traffic_direction");
            let side = match direction.and_then(|v| v.as_enum_number()) {
                _ if gateway => Side::Gateway,
                // envoy.config.core.v3.TrafficDirection.INBOUND
                Some(1) => Side::Inbound,
                _ => Side::Outbound,
            };
            listener::patch(pool, patches, side, &mut message, failed)?
        }
        TypeUrl::Route => route::patch(patches, side, &mut message)?,
        TypeUrl::Cluster => cluster::patch(pool, patches, side, &mut message, failed)?,
        _ => true,
    };
    if !kept {
        return Ok(None);
    }
    let value = message.encode_to_vec();
    if value == any.value {
        return Ok(Some(resource.clone()));
    }
    Ok(Some(Arc::new(encode(resource.name.clone(), &message))))
}

/// A patched message encoded as a resource; its version from its content, as maps may be
/// encoded in any order.
fn encode(name: Arc<str>, message: &DynamicMessage) -> Resource {
    Resource::encode_dynamic(name, message)
}
