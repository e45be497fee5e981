//! Patches to a listener, as Istio's `listener_patch.go` applies them: the listener's own
//! (`REMOVE`, `MERGE`), its listener filters', then each filter chain's (`REMOVE`, `MERGE`,
//! then its network filters', then, in an HTTP connection manager, its HTTP filters'), and
//! last the filter chains the patches add. Listeners a patch adds are [`added`].

use std::cell::RefCell;

use prost_reflect::{DescriptorPool, DynamicMessage, Value};
use wayfinder_config::envoy_filter::{ApplyTo, Operation, PatchContext};

use super::fields::{self, list_mut, message, string};
use super::merge::{merge, merge_any, pack, unpack};
use super::{Failure, Patch, Side, route};

/// The HTTP connection manager's filter name.
const HCM: &str = "envoy.filters.network.http_connection_manager";

/// Names of the listeners whose filter chains hold the ports (Istio matches their chains'
/// destination ports for `portNumber`).
const VIRTUAL: [&str; 2] = ["virtualInbound", "virtualOutbound"];

/// The listeners the patches add on `side` (`ANY` adds on a sidecar's outbound side and a
/// gateway only, as Istio).
pub(super) fn added<'a>(patches: &[&'a Patch], side: Side) -> Vec<(&'a Patch, DynamicMessage)> {
    patches
        .iter()
        .filter(|p| p.apply_to == ApplyTo::Listener && p.operation == Operation::Add)
        .filter(|p| p.matches.context != PatchContext::Any || side != Side::Inbound)
        .filter(|p| p.is_for(side))
        .filter_map(|p| Some((*p, p.value.clone()?)))
        .collect()
}

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
            if p.operation == Operation::Merge || p.operation == Operation::MergeAndReplaceList {
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

/// The patches of a listener's filter chains.
struct Chains<'a> {
    pool: &'a DescriptorPool,
    side: Side,
    virtual_listener: bool,
    chains: &'a [&'a Patch],
    network: &'a [&'a Patch],
    http: &'a [&'a Patch],
    routes: &'a [&'a Patch],
    /// The patches that failed on a filter, left out there.
    failed: RefCell<Vec<Failure>>,
}

impl Chains<'_> {
    /// Patches one filter chain; false when a patch removed it.
    fn patch(&self, fc: &mut DynamicMessage) -> Result<bool, Failure> {
        for p in self.chains {
            if !self.chain_match(fc, p) {
                continue;
            }
            match p.operation {
                Operation::Remove => return Ok(false),
                Operation::Merge | Operation::MergeAndReplaceList => {
                    let value = p.value()?;
                    match merge_transport_socket(self.pool, p, fc, value) {
                        Ok(true) => {}
                        Ok(false) => {
                            merge(fc, value, p.operation == Operation::MergeAndReplaceList)
                        }
                        Err(failure) => self.failed.borrow_mut().push(failure),
                    }
                }
                _ => {}
            }
        }
        let network: Vec<&Patch> = self
            .network
            .iter()
            .copied()
            .filter(|p| self.chain_match(fc, p))
            .collect();
        let http: Vec<&Patch> = self
            .http
            .iter()
            .copied()
            .filter(|p| self.chain_match(fc, p))
            .collect();
        let Some(filters) = list_mut(fc, "filters") else {
            return Ok(true);
        };
        for p in network.iter().filter(|p| {
            !matches!(
                p.operation,
                Operation::Merge | Operation::MergeAndReplaceList
            )
        }) {
            let wanted = filter_name(p);
            list_op(filters, p, wanted.is_some(), |f| {
                wanted.is_none_or(|w| string(f, "name") == w)
            })?;
        }
        for filter in filters.iter_mut().filter_map(Value::as_message_mut) {
            let name = string(filter, "name");
            for p in network
                .iter()
                .filter(|p| {
                    matches!(
                        p.operation,
                        Operation::Merge | Operation::MergeAndReplaceList
                    )
                })
                .filter(|p| filter_name(p).is_none_or(|w| w == name))
            {
                if let Err(failure) = merge_filter(self.pool, p, filter) {
                    self.failed.borrow_mut().push(failure);
                }
            }
            if string(filter, "name") == HCM {
                let http: Vec<&Patch> = http
                    .iter()
                    .copied()
                    .filter(|p| filter_name(p).is_none_or(|w| w == HCM))
                    .collect();
                self.patch_hcm(filter, &http)?;
            }
        }
        Ok(true)
    }

    /// Istio's `filterChainMatch` (the listener already matched).
    fn chain_match(&self, fc: &DynamicMessage, p: &Patch) -> bool {
        let Some(l) = &p.matches.listener else {
            return true;
        };
        let fcm = message(fc, "filter_chain_match");
        let destination = fcm
            .as_ref()
            .and_then(|m| fields::wrapped_u32(m, "destination_port"));
        if self.virtual_listener && l.port_number > 0 && destination != Some(l.port_number) {
            return false;
        }
        let Some(m) = &l.filter_chain else {
            return true;
        };
        if !m.name.is_empty() && m.name != string(fc, "name") {
            return false;
        }
        let fcm_strings = |field: &str| {
            fcm.as_ref()
                .map(|f| fields::strings(f, field))
                .unwrap_or_default()
        };
        if !m.sni.is_empty() && !fcm_strings("server_names").contains(&m.sni) {
            return false;
        }
        if !m.transport_protocol.is_empty()
            && fcm.as_ref().map(|f| string(f, "transport_protocol"))
                != Some(m.transport_protocol.clone())
        {
            return false;
        }
        if !m.application_protocols.is_empty() {
            let have = fcm_strings("application_protocols");
            if fcm.is_none()
                || !m
                    .application_protocols
                    .split(',')
                    .all(|p| have.iter().any(|h| h == p))
            {
                return false;
            }
        }
        if m.destination_port > 0 && destination != Some(m.destination_port) {
            return false;
        }
        true
    }

    /// An HTTP connection manager's HTTP filters patched (and, on a sidecar's inbound side,
    /// its inline route configuration, as Istio patches it while building it).
    fn patch_hcm(&self, filter: &mut DynamicMessage, http: &[&Patch]) -> Result<(), Failure> {
        let inline = self.side == Side::Inbound && !self.routes.is_empty();
        if http.is_empty() && !inline {
            return Ok(());
        }
        let Some(any) = fields::message_mut(filter, "typed_config") else {
            return Ok(());
        };
        let mut hcm = match unpack(self.pool, any) {
            Ok(hcm) => hcm,
            Err(e) => {
                let first = http.first().or(self.routes.first());
                self.failed.borrow_mut().extend(first.map(|p| p.fail(e)));
                return Ok(());
            }
        };
        if let Some(list) = list_mut(&mut hcm, "http_filters") {
            for p in http.iter().filter(|p| {
                !matches!(
                    p.operation,
                    Operation::Merge | Operation::MergeAndReplaceList
                )
            }) {
                let wanted = sub_filter_name(p);
                list_op(list, p, wanted.is_some(), |f| {
                    wanted.is_none_or(|w| string(f, "name") == w)
                })?;
            }
            for f in list.iter_mut().filter_map(Value::as_message_mut) {
                let name = string(f, "name");
                for p in http
                    .iter()
                    .filter(|p| {
                        matches!(
                            p.operation,
                            Operation::Merge | Operation::MergeAndReplaceList
                        )
                    })
                    .filter(|p| sub_filter_name(p).is_none_or(|w| w == name))
                {
                    if let Err(failure) = merge_filter(self.pool, p, f) {
                        self.failed.borrow_mut().push(failure);
                    }
                }
            }
        }
        if inline
            && hcm.has_field_by_name("route_config")
            && let Some(rc) = fields::message_mut(&mut hcm, "route_config")
        {
            route::patch(self.routes, self.side, rc)?;
        }
        pack(any, &hcm);
        Ok(())
    }
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

/// The network filter a patch names, if it names one.
fn filter_name(p: &Patch) -> Option<&str> {
    let f = p
        .matches
        .listener
        .as_ref()?
        .filter_chain
        .as_ref()?
        .filter
        .as_ref()?;
    Some(f.name.as_str())
}

/// The HTTP filter a patch names, if it names one.
fn sub_filter_name(p: &Patch) -> Option<&str> {
    let f = p
        .matches
        .listener
        .as_ref()?
        .filter_chain
        .as_ref()?
        .filter
        .as_ref()?;
    Some(f.sub_filter.as_ref()?.name.as_str())
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

/// Istio's `mergeTransportSocketListener`: a patch's transport socket of the chain's socket's
/// name is merged into it (their typed configs unpacked); true when that was the merge.
fn merge_transport_socket(
    pool: &DescriptorPool,
    p: &Patch,
    fc: &mut DynamicMessage,
    value: &DynamicMessage,
) -> Result<bool, Failure> {
    let (Some(theirs), Some(ours)) = (
        message(value, "transport_socket"),
        message(fc, "transport_socket"),
    ) else {
        return Ok(false);
    };
    if string(&theirs, "name") != string(&ours, "name") {
        return Ok(false);
    }
    if let (Some(src), Some(socket)) = (
        message(&theirs, "typed_config"),
        fields::message_mut(fc, "transport_socket"),
    ) && socket.has_field_by_name("typed_config")
        && let Some(dst) = fields::message_mut(socket, "typed_config")
    {
        merge_any(pool, dst, &src).map_err(|e| p.fail(e))?;
    }
    Ok(true)
}
