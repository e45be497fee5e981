//! IST0174: a DestinationRule whose host is no known service (Istio's
//! `destinationrule.PodNotSelectedAnalyzer`, its first check). Its policy and subsets apply to
//! nothing: a typo in the host, or a service that is not there yet.

use super::lines::Field;
use super::message::Code;
use super::{Context, Found};

/// `UnknownDestinationRuleHost` for a DestinationRule whose host names no service visible from
/// its namespace. A wildcard host (`*.example.com`) is known when it covers a service, where
/// Istio looks only for a ServiceEntry of that wildcard.
pub(crate) fn hosts(cx: &Context<'_>, found: &mut Vec<Found>) {
    for (located, dr) in cx.destination_rules() {
        let namespace = &*located.object.meta.namespace;
        if cx.services_of(&dr.host, namespace).is_empty() {
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
