//! Patches to a cluster, as Istio's `cluster_patch.go` applies them: `REMOVE`, or `MERGE`
//! (a transport socket of the cluster's socket's name merged into it, their typed configs
//! unpacked); clusters the patches add are `Patch::added`.

use prost_reflect::{DescriptorPool, DynamicMessage, Value};
use wayfinder_config::envoy_filter::{ApplyTo, Operation};

use super::fields::{self, list_mut, message, string};
use super::merge::{merge, merge_any};
use super::{Failure, Patch, Side};

/// Patches `cluster`; false when a patch removed it. A transport socket merge that fails
/// (their typed configs of other types) is left out, into `failed`.
pub(super) fn patch(
    pool: &DescriptorPool,
    patches: &[&Patch],
    side: Side,
    cluster: &mut DynamicMessage,
    failed: &mut Vec<Failure>,
) -> Result<bool, Failure> {
    for p in patches
        .iter()
        .filter(|p| p.apply_to == ApplyTo::Cluster && p.is_for(side))
    {
        if !cluster_match(&string(cluster, "name"), p) {
            continue;
        }
        match p.operation {
            Operation::Remove => return Ok(false),
            Operation::Merge | Operation::MergeAndReplaceList => {
                let value = p.value()?;
                match merge_transport_socket(pool, p, cluster, value) {
                    Ok(true) => {}
                    Ok(false) => merge(
                        cluster,
                        value,
                        p.operation == Operation::MergeAndReplaceList,
                    ),
                    Err(failure) => failed.push(failure),
                }
            }
            _ => {}
        }
    }
    Ok(true)
}

/// True when some patch of `patches` may change the cluster `name` on `side`: what
/// [`patch`] looks at, read from the name alone, so that other clusters are not decoded.
pub(super) fn may_change(patches: &[&Patch], side: Side, name: &str) -> bool {
    patches.iter().any(|p| {
        p.apply_to == ApplyTo::Cluster
            && p.operation != Operation::Add
            && p.is_for(side)
            && cluster_match(name, p)
    })
}

/// Istio's `clusterMatch`: by name, or by the service, subset and port of its name
/// (`outbound|80|v1|reviews.default.svc.cluster.local`).
fn cluster_match(name: &str, p: &Patch) -> bool {
    let Some(m) = &p.matches.cluster else {
        return true;
    };
    if !m.name.is_empty() {
        return m.name == name;
    }
    let parts: Vec<&str> = name.split('|').collect();
    let (port, subset, host) = match parts[..] {
        [_, port, subset, host] => (port.parse::<u32>().ok(), subset, host),
        _ => (None, "", ""),
    };
    (m.subset.is_empty() || m.subset == subset)
        && (m.service.is_empty() || m.service == host)
        && (m.port_number == 0 || port == Some(m.port_number))
}

/// Istio's `mergeTransportSocketCluster`: true when the patch's transport socket was the
/// merge (merged into the socket of its name, set when the cluster has none of that name, or
/// dropped when the cluster matches sockets and none has its name).
fn merge_transport_socket(
    pool: &DescriptorPool,
    p: &Patch,
    cluster: &mut DynamicMessage,
    value: &DynamicMessage,
) -> Result<bool, Failure> {
    let Some(theirs) = message(value, "transport_socket") else {
        return Ok(false);
    };
    let name = string(&theirs, "name");
    let src = message(&theirs, "typed_config");
    let merge_into = |socket: &mut DynamicMessage| -> Result<(), Failure> {
        if let Some(src) = &src
            && socket.has_field_by_name("typed_config")
            && let Some(dst) = fields::message_mut(socket, "typed_config")
        {
            merge_any(pool, dst, src).map_err(|e| p.fail(e))?;
        }
        Ok(())
    };
    if let Some(list) = list_mut(cluster, "transport_socket_matches")
        && !list.is_empty()
    {
        let found = list
            .iter_mut()
            .filter_map(Value::as_message_mut)
            .filter_map(|m| fields::message_mut(m, "transport_socket"))
            .find(|s| string(s, "name") == name);
        if let Some(socket) = found {
            merge_into(socket)?;
        }
        return Ok(true);
    }
    let same = message(cluster, "transport_socket").is_some_and(|s| string(&s, "name") == name);
    if same {
        if let Some(socket) = fields::message_mut(cluster, "transport_socket") {
            merge_into(socket)?;
        }
    } else {
        cluster.set_field_by_name("transport_socket", Value::Message(theirs));
    }
    Ok(true)
}
