//! A listener's filter chains patched, as Istio's `patchFilterChains` and what it calls: each
//! chain's own patches (`REMOVE`, `MERGE`), its network filters', and in an HTTP connection
//! manager its HTTP filters' (and, on a sidecar's inbound side, its inline routes').

use std::cell::RefCell;

use prost_reflect::{DescriptorPool, DynamicMessage, Value};
use wayfinder_config::envoy_filter::Operation;

use super::super::fields::{self, list_mut, message, string};
use super::super::merge::{merge, merge_any, pack, unpack};
use super::super::{Failure, Patch, Side, route};
use super::{HCM, list_op, merge_filter};

/// The patches of a listener's filter chains.
pub(super) struct Chains<'a> {
    pub(super) pool: &'a DescriptorPool,
    pub(super) side: Side,
    pub(super) virtual_listener: bool,
    pub(super) chains: &'a [&'a Patch],
    pub(super) network: &'a [&'a Patch],
    pub(super) http: &'a [&'a Patch],
    pub(super) routes: &'a [&'a Patch],
    /// The patches that failed on a filter, left out there.
    pub(super) failed: RefCell<Vec<Failure>>,
}

impl Chains<'_> {
    /// Patches one filter chain; false when a patch removed it.
    pub(super) fn patch(&self, fc: &mut DynamicMessage) -> Result<bool, Failure> {
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
        self.patch_filters(filters, &network, filter_name)?;
        let http: Vec<&Patch> = http
            .into_iter()
            .filter(|p| filter_name(p).is_none_or(|w| w == HCM))
            .collect();
        for filter in filters.iter_mut().filter_map(Value::as_message_mut) {
            if string(filter, "name") == HCM {
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

    /// A list of filters patched, as Istio patches network and HTTP filters alike: the list
    /// operations in order, then each filter's merges; `named` is the filter a patch names.
    fn patch_filters(
        &self,
        list: &mut Vec<Value>,
        patches: &[&Patch],
        named: fn(&Patch) -> Option<&str>,
    ) -> Result<(), Failure> {
        for p in patches.iter().filter(|p| !p.merges()) {
            let wanted = named(p);
            list_op(list, p, wanted.is_some(), |f| {
                wanted.is_none_or(|w| string(f, "name") == w)
            })?;
        }
        for f in list.iter_mut().filter_map(Value::as_message_mut) {
            let name = string(f, "name");
            let merging = patches.iter().filter(|p| p.merges());
            for p in merging.filter(|p| named(p).is_none_or(|w| w == name)) {
                if let Err(failure) = merge_filter(self.pool, p, f) {
                    self.failed.borrow_mut().push(failure);
                }
            }
        }
        Ok(())
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
            self.patch_filters(list, http, sub_filter_name)?;
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
