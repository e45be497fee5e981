//! IST0101 about gateways: a VirtualService bound to a Gateway that does not exist (Istio's
//! `virtualservice.GatewayAnalyzer`), a Gateway whose selector matches no workload, and a
//! Gateway server's credential that no Secret of the gateway's namespace holds
//! (`gateway.IngressGatewayPortAnalyzer`, `gateway.SecretAnalyzer`); IST0132 for a
//! VirtualService bound to a Gateway that serves none of its hosts (`GatewayAnalyzer` too).
//!
//! A route bound to a missing Gateway, or to one that serves none of its hosts, is never
//! served; a Gateway that selects nothing configures no proxy; a server without its
//! credential is left out of the gateway's listeners.

use std::collections::BTreeMap;

use super::lines::Field;
use super::message::Code;
use super::{Context, Found};
use crate::Gateway;
use crate::validate::names::hosts_overlap;

/// `Referenced gateway not found` for a VirtualService's `gateways` entry naming no Gateway
/// (`mesh`, the sidecars, is not one), and `VirtualServiceHostNotFoundInGateway` for one whose
/// servers serve none of the VirtualService's hosts. Istio gives the second for a missing
/// Gateway too; one message says that better.
pub(crate) fn references(cx: &Context<'_>, found: &mut Vec<Found>) {
    for (located, vs) in cx.virtual_services() {
        let namespace = &*located.object.meta.namespace;
        for (i, name) in vs.gateways.iter().enumerate() {
            if name == "mesh" {
                continue;
            }
            let (gw_namespace, gw_name) = name.split_once('/').unwrap_or((namespace, name));
            let gateway = cx.gateways().find(|(gw, _)| {
                *gw.object.meta.namespace == *gw_namespace && *gw.object.meta.name == *gw_name
            });
            let field = Field::at("spec").key("gateways").index(i);
            match gateway {
                None => found.push(Found::not_found(located, field, "gateway", name)),
                Some((_, gateway)) if !serves(gateway, gw_namespace, namespace, &vs.hosts) => {
                    let text = format!(
                        "one or more host [{}] defined in VirtualService {namespace}/{} not found \
                         in Gateway {gw_namespace}/{gw_name}.",
                        vs.hosts.join(" "),
                        located.object.meta.name,
                    );
                    let code = Code::VirtualServiceHostNotFoundInGateway;
                    found.push(Found::on(located, field, code, text));
                }
                Some(_) => {}
            }
        }
    }
}

/// `Referenced selector not found` for a Gateway whose selector matches no workload (in any
/// namespace, as Istio's gateways may run in another one), and `Referenced credentialName not
/// found` for a server's credential that is no Secret of the namespace of the workload it
/// selects.
pub(crate) fn selectors(cx: &Context<'_>, found: &mut Vec<Found>) {
    for (located, gw) in cx.gateways() {
        let Some(workload) = cx.workload(None, &gw.selector) else {
            let field = label_field(&gw.selector, Field::at("spec").key("selector"));
            found.push(Found::not_found(
                located,
                field,
                "selector",
                &selector_string(&gw.selector),
            ));
            continue;
        };
        for (i, server) in gw.servers.iter().enumerate() {
            let Some(tls) = &server.tls else { continue };
            let tls_field = Field::at("spec").key("servers").index(i).key("tls");
            let mut names = Vec::new();
            if !tls.credential_name.is_empty() {
                names.push((
                    &tls.credential_name,
                    tls_field.clone().key("credentialName"),
                ));
            }
            for (j, name) in tls.credential_names.iter().enumerate() {
                names.push((name, tls_field.clone().key("credentialNames").index(j)));
            }
            for (name, field) in names {
                let (namespace, secret) =
                    name.split_once('/').unwrap_or((workload.namespace, name));
                if !cx
                    .secrets
                    .contains(&(namespace.to_owned(), secret.to_owned()))
                {
                    found.push(Found::not_found(located, field, "credentialName", name));
                }
            }
        }
    }
}

/// Whether a server of `gateway` (of `gateway_namespace`) serves one of `hosts`, of a
/// VirtualService of `namespace`: a server host `ns/host` serves only VirtualServices of `ns`
/// (`.` the gateway's own namespace, `*` any), and hosts match as Istio's `host.Name.Matches`.
fn serves(gateway: &Gateway, gateway_namespace: &str, namespace: &str, hosts: &[String]) -> bool {
    let server_hosts = gateway.servers.iter().flat_map(|s| &s.hosts);
    server_hosts.into_iter().any(|entry| {
        let (scope, host) = entry.split_once('/').unwrap_or(("*", entry));
        let scope = if scope == "." {
            gateway_namespace
        } else {
            scope
        };
        (scope == "*" || scope == namespace) && hosts.iter().any(|h| hosts_overlap(host, h))
    })
}

/// A selector as Kubernetes writes it (`app=reviews,version=v1`), as Istio's messages show it.
pub(crate) fn selector_string(labels: &BTreeMap<String, String>) -> String {
    let pairs: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    pairs.join(",")
}

/// The field of a selector's first label (Istio points at it), else the selector's.
pub(crate) fn label_field(labels: &BTreeMap<String, String>, selector: Field) -> Field {
    match labels.keys().next() {
        Some(key) => selector.key(key),
        None => selector,
    }
}
