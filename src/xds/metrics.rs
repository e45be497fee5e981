//! The xDS server's metrics, under Istio's names: pushes, NACKs, connected clients, refused
//! streams and the two budgets.
//!
//! They are registered in the server's one Prometheus registry beside the model's
//! ([`crate::metrics::ModelMetrics`]); the shared pieces (Istio's counter type, label sets)
//! are in [`crate::metrics`], which knows nothing of xDS.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::metrics::{CONVERGENCE_BUCKETS, IstioCounter, PUSH_BUCKETS, ReasonLabel, TypeLabel};
use crate::xds::TypeUrl;

/// Istio's buckets for `pilot_xds_config_size_bytes` (4 MB is gRPC's default message limit).
const SIZE_BUCKETS: [f64; 6] = [
    1.0,
    10_000.0,
    1_000_000.0,
    4_000_000.0,
    10_000_000.0,
    40_000_000.0,
];

/// Every metric the xDS server records.
pub struct XdsMetrics {
    /// `pilot_xds`: connected xDS clients.
    pub xds_clients: Gauge,
    /// `pilot_xds_pushes{type}`: responses sent.
    pub xds_pushes: Family<TypeLabel, IstioCounter>,
    /// `pilot_xds_push_time{type}`: seconds to generate and queue one response.
    pub xds_push_time: Family<TypeLabel, Histogram>,
    /// `pilot_xds_config_size_bytes{type}`: size of the resources in one response.
    pub xds_config_size: Family<TypeLabel, Histogram>,
    /// `pilot_proxy_convergence_time`: seconds from a snapshot's publication to a proxy's push.
    pub proxy_convergence: Histogram,
    /// `pilot_total_xds_rejects`: NACKs of any type.
    pub xds_rejects: IstioCounter,
    /// `pilot_xds_{cds,eds,lds,rds}_reject`: NACKs per type.
    pub xds_type_rejects: Family<TypeLabel, IstioCounter>,
    /// `pilot_xds_expired_nonce`: requests ignored for a stale nonce.
    pub xds_expired_nonce: IstioCounter,
    /// `wayfinder_xds_refused_streams_total{reason}`: streams the server refused: `rate` (the
    /// new-stream rate limit), `budget` (the request budget was in use), `size`, `names`,
    /// `node` (a bad or oversized node), `compressed`, `slow` (a request that did not arrive
    /// in time), `malformed`, `stalled` (a client that stopped reading its responses),
    /// `identity` (the secure port: no client certificate, or one of another identity).
    pub xds_refused_streams: Family<ReasonLabel, Counter>,
    /// `wayfinder_xds_request_budget_bytes`: bytes of the request budget
    /// (`--max-request-budget`) held by requests being read or handled.
    pub xds_request_budget: Gauge,
    /// `wayfinder_xds_push_budget_bytes`: bytes of the push budget (`--max-push-budget`)
    /// held by copied response chunks not yet written to their connections.
    pub xds_push_budget: Gauge,
}

impl XdsMetrics {
    /// Creates every metric and registers it in `r`.
    pub fn new(r: &mut Registry) -> Self {
        let m = Self {
            xds_clients: Gauge::default(),
            xds_pushes: Family::default(),
            xds_push_time: Family::new_with_constructor(|| Histogram::new(PUSH_BUCKETS)),
            xds_config_size: Family::new_with_constructor(|| Histogram::new(SIZE_BUCKETS)),
            proxy_convergence: Histogram::new(CONVERGENCE_BUCKETS),
            xds_rejects: IstioCounter::default(),
            xds_type_rejects: Family::default(),
            xds_expired_nonce: IstioCounter::default(),
            xds_refused_streams: Family::default(),
            xds_request_budget: Gauge::default(),
            xds_push_budget: Gauge::default(),
        };
        r.register("pilot_xds", "Connected xDS clients", m.xds_clients.clone());
        r.register(
            "pilot_xds_pushes",
            "xDS responses sent, by type",
            m.xds_pushes.clone(),
        );
        r.register(
            "pilot_xds_push_time",
            "Seconds to generate and queue one response",
            m.xds_push_time.clone(),
        );
        r.register(
            "pilot_xds_config_size_bytes",
            "Bytes of resources per response",
            m.xds_config_size.clone(),
        );
        r.register(
            "pilot_proxy_convergence_time",
            "Seconds from a snapshot's publication to its push to a proxy",
            m.proxy_convergence.clone(),
        );
        r.register(
            "pilot_total_xds_rejects",
            "NACKs of any type",
            m.xds_rejects.clone(),
        );
        r.register(
            "pilot_xds_expired_nonce",
            "Requests ignored because their nonce was stale",
            m.xds_expired_nonce.clone(),
        );
        r.register(
            "wayfinder_xds_refused_streams",
            "xDS streams refused, by reason",
            m.xds_refused_streams.clone(),
        );
        r.register(
            "wayfinder_xds_request_budget_bytes",
            "Bytes of the request budget held by requests being read or handled",
            m.xds_request_budget.clone(),
        );
        r.register(
            "wayfinder_xds_push_budget_bytes",
            "Bytes of the push budget held by response chunks not yet written",
            m.xds_push_budget.clone(),
        );
        // Istio names its per-type NACK counters pilot_xds_cds_reject, …: one family per name.
        for t in TypeUrl::PUSH_ORDER {
            let counter = m
                .xds_type_rejects
                .get_or_create(&TypeLabel { r#type: t.short() })
                .clone();
            r.register(
                format!("pilot_xds_{}_reject", t.short()),
                format!("NACKs of {} responses", t.short()),
                counter,
            );
        }
        m
    }

    /// Labels for an xDS type.
    pub fn type_label(t: TypeUrl) -> TypeLabel {
        TypeLabel { r#type: t.short() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Exposition;

    #[test]
    fn istio_counters_keep_their_names() {
        let mut registry = Registry::default();
        let m = XdsMetrics::new(&mut registry);
        m.xds_pushes
            .get_or_create(&TypeLabel { r#type: "cds" })
            .inc();
        m.xds_rejects.inc();
        m.xds_type_rejects
            .get_or_create(&TypeLabel { r#type: "eds" })
            .inc();
        let text = Exposition::new(registry).render();
        assert!(text.contains("pilot_xds_pushes{type=\"cds\"} 1"), "{text}");
        assert!(text.contains("pilot_total_xds_rejects 1"), "{text}");
        assert!(text.contains("pilot_xds_eds_reject 1"), "{text}");
    }
}
