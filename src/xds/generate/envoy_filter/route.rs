//! Patches to a route configuration, as Istio's `rc_patch.go` applies them: the
//! configuration's own (`MERGE` only), each virtual host's (`REMOVE`, `MERGE`, `REPLACE`, then
//! its routes'), then the virtual hosts the patches add. Routes are removed or merged in
//! place, then added or inserted.

use prost_reflect::{DynamicMessage, Value};
use wayfinder_config::envoy_filter::{ApplyTo, Operation, RouteAction};

use super::fields::{self, list_mut, string};
use super::merge::merge;
use super::{Failure, Patch, Side};

/// True when some patch of `patches` may change the route configuration `name` on `side`,
/// read from the name alone, so that other configurations are not decoded.
pub(super) fn may_change(patches: &[&Patch], side: Side, name: &str) -> bool {
    patches.iter().any(|p| {
        matches!(
            p.apply_to,
            ApplyTo::RouteConfiguration | ApplyTo::VirtualHost | ApplyTo::HttpRoute
        ) && p.is_for(side)
            && config_match(name, side, p)
    })
}

/// Patches `rc`, a route configuration of `side`. Route configurations are never removed:
/// true.
pub(super) fn patch(
    patches: &[&Patch],
    side: Side,
    rc: &mut DynamicMessage,
) -> Result<bool, Failure> {
    let name = string(rc, "name");
    let on: Vec<&Patch> = patches
        .iter()
        .copied()
        .filter(|p| p.is_for(side) && config_match(&name, side, p))
        .collect();
    for p in on
        .iter()
        .filter(|p| p.apply_to == ApplyTo::RouteConfiguration)
    {
        if matches!(
            p.operation,
            Operation::Merge | Operation::MergeAndReplaceList
        ) {
            merge(
                rc,
                p.value()?,
                p.operation == Operation::MergeAndReplaceList,
            );
        }
    }
    let hosts: Vec<&Patch> = on
        .iter()
        .copied()
        .filter(|p| p.apply_to == ApplyTo::VirtualHost)
        .collect();
    let routes: Vec<&Patch> = on
        .iter()
        .copied()
        .filter(|p| p.apply_to == ApplyTo::HttpRoute)
        .collect();
    let Some(list) = list_mut(rc, "virtual_hosts") else {
        return Ok(true);
    };
    let mut kept = Vec::with_capacity(list.len());
    'hosts: for mut host in std::mem::take(list) {
        if let Some(vh) = host.as_message_mut() {
            for p in &hosts {
                if !host_match(vh, p) {
                    continue;
                }
                match p.operation {
                    Operation::Remove => continue 'hosts,
                    Operation::Merge | Operation::MergeAndReplaceList => merge(
                        vh,
                        p.value()?,
                        p.operation == Operation::MergeAndReplaceList,
                    ),
                    Operation::Replace => *vh = p.value()?.clone(),
                    _ => {}
                }
            }
            patch_routes(vh, &routes)?;
        }
        kept.push(host);
    }
    for p in hosts.iter().filter(|p| p.operation == Operation::Add) {
        kept.push(Value::Message(p.value()?.clone()));
    }
    *list = kept;
    Ok(true)
}

/// A virtual host's routes: removes and merges in place, then adds and inserts.
fn patch_routes(vh: &mut DynamicMessage, patches: &[&Patch]) -> Result<(), Failure> {
    let patches: Vec<&Patch> = patches
        .iter()
        .copied()
        .filter(|p| host_match(vh, p))
        .collect();
    if patches.is_empty() {
        return Ok(());
    }
    let Some(routes) = list_mut(vh, "routes") else {
        return Ok(());
    };
    let mut kept = Vec::with_capacity(routes.len());
    'routes: for mut route in std::mem::take(routes) {
        if let Some(r) = route.as_message_mut() {
            for p in &patches {
                if !route_match(r, p) {
                    continue;
                }
                match p.operation {
                    Operation::Remove => continue 'routes,
                    Operation::Merge | Operation::MergeAndReplaceList => {
                        merge(r, p.value()?, p.operation == Operation::MergeAndReplaceList)
                    }
                    _ => {}
                }
            }
        }
        kept.push(route);
    }
    *routes = kept;
    for p in &patches {
        let named = route_named(p);
        let value = || p.value().map(|v| Value::Message(v.clone()));
        let first = |routes: &Vec<Value>| {
            routes
                .iter()
                .position(|r| r.as_message().is_some_and(|r| route_match(r, p)))
        };
        match p.operation {
            Operation::Add => routes.push(value()?),
            Operation::InsertAfter if !named => routes.push(value()?),
            Operation::InsertBefore | Operation::InsertFirst if !named => {
                routes.insert(0, value()?)
            }
            Operation::InsertAfter => {
                if let Some(i) = first(routes) {
                    routes.insert(i + 1, value()?);
                }
            }
            Operation::InsertBefore => {
                if let Some(i) = first(routes) {
                    routes.insert(i, value()?);
                }
            }
            // Istio: first, but only when a route matches.
            Operation::InsertFirst if first(routes).is_some() => routes.insert(0, value()?),
            _ => {}
        }
    }
    Ok(())
}

/// Istio's `routeConfigurationMatch`: by name, and by port (a sidecar's configurations are
/// named by port, `80`, or `inbound|8080||`); a gateway's also by server port name and
/// Gateway (`https.443.<port name>.<gateway>.<namespace>`).
fn config_match(name: &str, side: Side, p: &Patch) -> bool {
    let Some(m) = &p.matches.route_configuration else {
        return true;
    };
    if !m.name.is_empty() && m.name != name {
        return false;
    }
    if side != Side::Gateway {
        return m.port_number == 0 || port_of(name) == Some(m.port_number);
    }
    let parts: Vec<&str> = name.split('.').collect();
    let port = parts.get(1).and_then(|p| p.parse::<u32>().ok());
    let (port_name, gateway) = match parts[..] {
        [_, _, port_name, gateway, namespace] => (port_name, format!("{namespace}/{gateway}")),
        _ => ("", String::new()),
    };
    (m.port_name.is_empty() || m.port_name == port_name)
        && (m.gateway.is_empty() || m.gateway == gateway)
        && (m.port_number == 0 || port == Some(m.port_number))
}

/// The port of a sidecar's route configuration name.
fn port_of(name: &str) -> Option<u32> {
    match name.strip_prefix("inbound|") {
        Some(rest) => rest.split('|').next()?.parse().ok(),
        None => name.parse().ok(),
    }
}

/// Istio's `virtualHostMatch`: by name and by a domain it serves.
fn host_match(vh: &DynamicMessage, p: &Patch) -> bool {
    let Some(m) = p
        .matches
        .route_configuration
        .as_ref()
        .and_then(|m| m.vhost.as_ref())
    else {
        return true;
    };
    (m.name.is_empty() || m.name == string(vh, "name"))
        && (m.domain_name.is_empty() || fields::strings(vh, "domains").contains(&m.domain_name))
}

/// True when the patch names a route.
fn route_named(p: &Patch) -> bool {
    p.matches
        .route_configuration
        .as_ref()
        .and_then(|m| m.vhost.as_ref())
        .is_some_and(|v| v.route.is_some())
}

/// Istio's `routeMatch`: by name and by action.
fn route_match(route: &DynamicMessage, p: &Patch) -> bool {
    let Some(m) = p
        .matches
        .route_configuration
        .as_ref()
        .and_then(|m| m.vhost.as_ref())
        .and_then(|v| v.route.as_ref())
    else {
        return true;
    };
    if !m.name.is_empty() && m.name != string(route, "name") {
        return false;
    }
    let action = match m.action {
        RouteAction::Any => return true,
        RouteAction::Route => "route",
        RouteAction::Redirect => "redirect",
        RouteAction::DirectResponse => "direct_response",
    };
    // Istio: a route with another kind of action matches every action.
    let actions = ["route", "redirect", "direct_response"];
    if !actions.iter().any(|a| fields::has(route, a)) {
        return true;
    }
    fields::has(route, action)
}
