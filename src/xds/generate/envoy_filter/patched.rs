//! Applying a proxy's patches to the layers it would get ([`Patched`]): each resource read as
//! its Envoy message only when a patch may change it, patched by `listener`, `route` or
//! `cluster`, and encoded again; what the patches add in a layer of its own.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use prost::Message;
use prost_reflect::{DescriptorPool, DynamicMessage};
use wayfinder_config::envoy_filter::ApplyTo;

use super::super::cache::{Layer, Resources};
use super::{Failure, Patch, Selected, Side, cluster, fields, listener, route};
use crate::xds::TypeUrl;
use crate::xds::resource::{Resource, ResourceSet};

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
            TypeUrl::Listener => Patch::added(patches, ApplyTo::Listener, *side),
            TypeUrl::Cluster => Patch::added(patches, ApplyTo::Cluster, *side),
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
