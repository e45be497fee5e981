//! Patches to a listener, as Istio's `listener_patch.go` applies them: the listener's own
//! (`REMOVE`, `MERGE`), its listener filters', then each filter chain's (`REMOVE`, `MERGE`,
//! then its network filters', then, in an HTTP connection manager, its HTTP filters'), and
//! last the filter chains the patches add. Listeners a patch adds are `Patch::added`.

use std::cell::RefCell;

use prost_reflect::{DescriptorPool, DynamicMessage, Value};
use wayfinder_config::envoy_filter::{ApplyTo, Operation};

use super::fields::{self, list_mut, message, string};
use super::merge::{merge, merge_any};
use super::{Failure, Patch, Side};

mod chains;

use self::chains::Chains;

/// The HTTP connection manager's filter name.
const HCM: &str = "envoy.filters.network.http_connection_manager";

/// Names of the listeners whose filter chains hold the ports (Istio matches their chains'
/// destination ports for `portNumber`).
const VIRTUAL: [&str; 2] = ["virtualInbound", "virtualOutbound"];

/// Patches `listener`; false when a patch removed it. A patch that fails on a filter (its
/// `typed_config` of another type) is left out there, into `failed`.
pub(super) fn patch(
    pool: &DescriptorPool,
    patches: &[&Patch],
    side: Side,
    listener: &mut DynamicMessage,
    failed: &mut Vec<Failure>,
) -> Result<bool, Failure> {
    for p in patches
        .iter()
        .filter(|p| p.apply_to == ApplyTo::Listener && p.is_for(side))
    {
        if !listener_match(listener, p) {
            continue;
        }
        match p.operation {
            Operation::Remove => return Ok(false),
            Operation::Merge | Operation::MergeAndReplaceList => merge(
                listener,
                p.value()?,
                p.operation == Operation::MergeAndReplaceList,
            ),
            _ => {}
        }
    }
    let listener_filters = on(patches, ApplyTo::ListenerFilter, side, listener);
    if !listener_filters.is_empty()
        && let Some(list) = list_mut(listener, "listener_filters")
    {
        for p in listener_filters {
            let wanted = p
                .matches
                .listener
                .as_ref()
                .map(|l| l.listener_filter.clone())
                .unwrap_or_default();
            let is = |f: &DynamicMessage| wanted.is_empty() || string(f, "name") == wanted;
            if p.merges() {
                if !wanted.is_empty() {
                    for f in list.iter_mut().filter_map(Value::as_message_mut) {
                        if is(f)
                            && let Err(failure) = merge_filter(pool, p, f)
                        {
                            failed.push(failure);
                        }
                    }
                }
                continue;
            }
            list_op(list, p, !wanted.is_empty(), is)?;
        }
    }
    let name = string(listener, "name");
    let chains = on(patches, ApplyTo::FilterChain, side, listener);
    let network = on(patches, ApplyTo::NetworkFilter, side, listener);
    let http = on(patches, ApplyTo::HttpFilter, side, listener);
    let routes: Vec<&Patch> = patches
        .iter()
        .copied()
        .filter(|p| {
            matches!(
                p.apply_to,
                ApplyTo::RouteConfiguration | ApplyTo::VirtualHost | ApplyTo::HttpRoute
            )
        })
        .collect();
    let chain_patches = Chains {
        pool,
        side,
        virtual_listener: VIRTUAL.contains(&name.as_str()),
        chains: &chains,
        network: &network,
        http: &http,
        routes: &routes,
        failed: RefCell::new(Vec::new()),
    };
    if let Some(list) = list_mut(listener, "filter_chains") {
        let mut kept = Vec::with_capacity(list.len());
        for mut chain in std::mem::take(list) {
            let keep = match chain.as_message_mut() {
                Some(fc) => chain_patches.patch(fc)?,
                None => true,
            };
            if keep {
                kept.push(chain);
            }
        }
        *list = kept;
    }
    if listener.has_field_by_name("default_filter_chain")
        && let Some(fc) = fields::message_mut(listener, "default_filter_chain")
        && !chain_patches.patch(fc)?
    {
        listener.clear_field_by_name("default_filter_chain");
    }
    for p in chains.iter().filter(|p| p.operation == Operation::Add) {
        if let Some(list) = list_mut(listener, "filter_chains") {
            list.push(Value::Message(p.value()?.clone()));
        }
    }
    failed.extend(chain_patches.failed.into_inner());
    Ok(true)
}

/// The patches of `kind` for `side` that match `listener`.
fn on<'a>(
    patches: &[&'a Patch],
    kind: ApplyTo,
    side: Side,
    listener: &DynamicMessage,
) -> Vec<&'a Patch> {
    patches
        .iter()
        .copied()
        .filter(|p| p.apply_to == kind && p.is_for(side) && listener_match(listener, p))
        .collect()
}

/// Istio's `listenerMatch`: the listener's name and port (the port of a virtual listener is
/// matched on its filter chains instead, but by listener patches).
fn listener_match(listener: &DynamicMessage, p: &Patch) -> bool {
    let Some(l) = &p.matches.listener else {
        return true;
    };
    let name = string(listener, "name");
    if !l.name.is_empty() && l.name != name {
        return false;
    }
    if p.apply_to != ApplyTo::Listener && VIRTUAL.contains(&name.as_str()) {
        return true;
    }
    l.port_number == 0 || fields::listener_port(listener) == l.port_number
}

/// The list operations of filters (and listener filters), as Istio's: `ADD` appends,
/// `INSERT_FIRST` prepends, `INSERT_BEFORE`/`INSERT_AFTER` go beside the first match (first or
/// last without a match named), `REPLACE` replaces the first match, `REMOVE` removes every
/// match (both only with a match named).
pub(super) fn list_op(
    list: &mut Vec<Value>,
    p: &Patch,
    named: bool,
    is: impl Fn(&DynamicMessage) -> bool,
) -> Result<(), Failure> {
    let first = || list.iter().position(|v| v.as_message().is_some_and(&is));
    match p.operation {
        Operation::Add => list.push(Value::Message(p.value()?.clone())),
        Operation::InsertFirst => list.insert(0, Value::Message(p.value()?.clone())),
        Operation::InsertBefore | Operation::InsertAfter if !named => {
            let value = Value::Message(p.value()?.clone());
            if p.operation == Operation::InsertBefore {
                list.insert(0, value);
            } else {
                list.push(value);
            }
        }
        Operation::InsertBefore => {
            if let Some(i) = first() {
                list.insert(i, Value::Message(p.value()?.clone()));
            }
        }
        Operation::InsertAfter => {
            if let Some(i) = first() {
                list.insert(i + 1, Value::Message(p.value()?.clone()));
            }
        }
        Operation::Replace if named => {
            if let Some(i) = first() {
                list[i] = Value::Message(p.value()?.clone());
            }
        }
        Operation::Remove if named => list.retain(|v| !v.as_message().is_some_and(&is)),
        _ => {}
    }
    Ok(())
}

/// Istio's merge of a filter: its `typed_config` merged with the patch's (both unpacked), and
/// its name replaced when the patch gives one. A filter without a `typed_config` is left as it
/// is.
fn merge_filter(
    pool: &DescriptorPool,
    p: &Patch,
    filter: &mut DynamicMessage,
) -> Result<(), Failure> {
    let value = p.value()?;
    if !filter.has_field_by_name("typed_config") {
        return Ok(());
    }
    if let Some(patch_config) = message(value, "typed_config")
        && let Some(config) = fields::message_mut(filter, "typed_config")
    {
        merge_any(pool, config, &patch_config).map_err(|e| p.fail(e))?;
    }
    let name = string(value, "name");
    if !name.is_empty() {
        filter.set_field_by_name("name", Value::String(name));
    }
    Ok(())
}
