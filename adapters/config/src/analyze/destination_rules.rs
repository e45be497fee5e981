//! IST0174: a DestinationRule whose host is no known service (Istio's
//! `destinationrule.PodNotSelectedAnalyzer`, its first check). Its policy and subsets apply to
//! nothing: a typo in the host, or a service that is not there yet.

use super::lines::Field;
use super::message::Code;
use super::{Context, Found};
use crate::validate::names::host_within;

/// `UnknownDestinationRuleHost` for a DestinationRule whose host names no service visible from
/// its namespace. A wildcard host (`*.example.com`) is known when it covers a service, where
/// Istio looks only for a ServiceEntry of that wildcard.
pub(crate) fn hosts(cx: &Context<'_>, found: &mut Vec<Found>) {
    for (located, dr) in cx.destination_rules() {
        let namespace = &*located.object.meta.namespace;
        let known = if dr.host.starts_with('*') {
            cx.services.iter().any(|r| {
                let s = &r.service;
                s.export_to.visible_from(&s.namespace, namespace)
                    && host_within(&s.hostname, &dr.host)
            })
        } else {
            cx.service(&dr.host, namespace).is_some()
        };
        if !known {
            let text = format!(
                "The host {} defined in the DestinationRule does not match any services in the mesh.",
                dr.host
            );
            let field = Field::at("spec").key("host");
            found.push(Found::on(
                located,
                field,
                Code::UnknownDestinationRuleHost,
                text,
            ));
        }
    }
}
