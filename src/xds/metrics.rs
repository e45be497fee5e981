//! The xDS server's metrics, under Istio's names: pushes and what triggered them, their
//! timing, NACKs, errors, listener conflicts, connected clients, refused streams and the two
//! budgets.
//!
//! They are registered in the server's one Prometheus registry beside the model's
//! ([`crate::metrics::ModelMetrics`]); the shared pieces (Istio's counter type, label sets)
//! are in [`crate::metrics`], which knows nothing of xDS. Every series is present from the
//! start: per-type families with a series for each type the server pushes, at 0.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::metrics::{
    CONVERGENCE_BUCKETS, IstioCounter, PUSH_BUCKETS, ReasonLabel, TypeLabel, present,
};
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

/// Istio's buckets for `pilot_xds_send_time`, in seconds.
const SEND_BUCKETS: [f64; 8] = [0.01, 0.1, 1.0, 3.0, 5.0, 10.0, 20.0, 30.0];

/// The reasons of `pilot_push_triggers` a push can have here (Istio's `TriggerReason`s): the
/// model's changes (`endpoint`, `service`, `config`), new gateway credentials (`secret`),
/// new JWT keys (`unknown`, as istiod's key resolver pushes), and any other input of
/// generation, such as the mesh settings (`global`).
pub const PUSH_TRIGGERS: [&str; 6] = [
    "endpoint", "service", "config", "secret", "unknown", "global",
];

/// The listener conflicts generation found, by Istio's kinds, for
/// [`XdsMetrics::record_listener_conflicts`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ListenerConflicts {
    /// `pilot_conflict_inbound_listener`: workload addresses with a port two services claim
    /// with different protocols (Istio counts the proxies it generates for; here every
    /// workload of the snapshot counts, with a proxy connected or not).
    pub inbound: usize,
    /// `pilot_conflict_outbound_listener_tcp_over_current_tcp`: opaque (TCP or TLS) listeners
    /// a service could not join because another service holds it or its filter chain match.
    pub tcp_over_tcp: usize,
    /// `pilot_conflict_outbound_listener_tcp_over_current_http`: wildcard TCP listeners left
    /// out because HTTP services hold the port.
    pub tcp_over_http: usize,
    /// `pilot_conflict_outbound_listener_http_over_current_tcp`: wildcard HTTP listeners left
    /// out because a TCP listener holds the port. Always 0 here: HTTP ports are laid out
    /// before opaque ones, so an HTTP service never meets a TCP listener already in place.
    pub http_over_tcp: usize,
}

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
    /// `pilot_xds_send_time`: seconds a stream waits to hand one response to its connection
    /// (the room in its queue, which a client that reads slowly keeps full), as grpc-go's
    /// `Send` blocks in istiod.
    pub xds_send_time: Histogram,
    /// `pilot_xds_write_timeout`: connections closed because their client took none of its
    /// responses for `--push-send-timeout` (Istio: a send that hit its deadline).
    pub xds_write_timeouts: IstioCounter,
    /// `pilot_push_triggers{type}`: pushes to a proxy by the reasons of the change that caused
    /// them (see [`PUSH_TRIGGERS`]): for each push, every reason counts the changes of its
    /// kind in the snapshot pushed, as istiod counts the reasons merged into a push request.
    pub push_triggers: Family<TypeLabel, IstioCounter>,
    /// `pilot_proxy_queue_time`: seconds from a snapshot reaching the xDS server to a
    /// stream's push of it taking its place under the push throttle (istiod: from the push
    /// request's start to the proxy's dequeue from the push queue). A push with nothing to
    /// send takes no place and is not timed.
    pub proxy_queue_time: Histogram,
    /// `pilot_total_xds_internal_errors`: streams that failed other than by the client
    /// leaving, as istiod counts an unexpected receive error (a request that does not decode,
    /// a stream cut in the middle of a message), and connections the server's own
    /// bookkeeping lost.
    pub xds_internal_errors: IstioCounter,
    /// `pilot_conflict_inbound_listener`: see [`ListenerConflicts::inbound`].
    pub conflict_inbound_listener: Gauge,
    /// `pilot_conflict_outbound_listener_tcp_over_current_tcp`.
    pub conflict_tcp_over_tcp: Gauge,
    /// `pilot_conflict_outbound_listener_tcp_over_current_http` (Istio removed it in 1.19).
    pub conflict_tcp_over_http: Gauge,
    /// `pilot_conflict_outbound_listener_http_over_current_tcp` (Istio removed it in 1.19).
    pub conflict_http_over_tcp: Gauge,
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
            xds_send_time: Histogram::new(SEND_BUCKETS),
            xds_write_timeouts: IstioCounter::default(),
            push_triggers: Family::default(),
            proxy_queue_time: Histogram::new(CONVERGENCE_BUCKETS),
            xds_internal_errors: IstioCounter::default(),
            conflict_inbound_listener: Gauge::default(),
            conflict_tcp_over_tcp: Gauge::default(),
            conflict_tcp_over_http: Gauge::default(),
            conflict_http_over_tcp: Gauge::default(),
        };
        for t in TypeUrl::PUSH_ORDER {
            let label = Self::type_label(t);
            present(&m.xds_pushes, &label);
            present(&m.xds_push_time, &label);
            present(&m.xds_config_size, &label);
        }
        for r#type in PUSH_TRIGGERS {
            present(&m.push_triggers, &TypeLabel { r#type });
        }
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
        r.register(
            "pilot_xds_send_time",
            "Total time in seconds Pilot takes to send generated configuration.",
            m.xds_send_time.clone(),
        );
        r.register(
            "pilot_xds_write_timeout",
            "Pilot XDS response write timeouts.",
            m.xds_write_timeouts.clone(),
        );
        r.register(
            "pilot_push_triggers",
            "Total number of times a push was triggered, labeled by reason for the push.",
            m.push_triggers.clone(),
        );
        r.register(
            "pilot_proxy_queue_time",
            "Time in seconds, a proxy is in the push queue before being dequeued.",
            m.proxy_queue_time.clone(),
        );
        r.register(
            "pilot_total_xds_internal_errors",
            "Total number of internal XDS errors in pilot.",
            m.xds_internal_errors.clone(),
        );
        for (name, help, gauge) in [
            (
                "pilot_conflict_inbound_listener",
                "Number of conflicting inbound listeners.",
                &m.conflict_inbound_listener,
            ),
            (
                "pilot_conflict_outbound_listener_tcp_over_current_tcp",
                "Number of conflicting tcp listeners with current tcp listener.",
                &m.conflict_tcp_over_tcp,
            ),
            (
                "pilot_conflict_outbound_listener_tcp_over_current_http",
                "Number of conflicting wildcard tcp listeners with current wildcard http listener.",
                &m.conflict_tcp_over_http,
            ),
            (
                "pilot_conflict_outbound_listener_http_over_current_tcp",
                "Number of conflicting wildcard http listeners with current wildcard tcp listener.",
                &m.conflict_http_over_tcp,
            ),
        ] {
            r.register(name, help, gauge.clone());
        }
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

    /// Sets the listener conflict gauges to what generation found in the current snapshot.
    pub fn record_listener_conflicts(&self, found: ListenerConflicts) {
        let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        self.conflict_inbound_listener.set(count(found.inbound));
        self.conflict_tcp_over_tcp.set(count(found.tcp_over_tcp));
        self.conflict_tcp_over_http.set(count(found.tcp_over_http));
        self.conflict_http_over_tcp.set(count(found.http_over_tcp));
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

    #[test]
    fn every_series_is_served_from_the_start() {
        let mut registry = Registry::default();
        let _m = XdsMetrics::new(&mut registry);
        let text = Exposition::new(registry).render();
        for line in [
            "pilot_xds_pushes{type=\"lds\"} 0",
            "pilot_xds_push_time_count{type=\"sds\"} 0",
            "pilot_xds_config_size_bytes_count{type=\"eds\"} 0",
            "pilot_push_triggers{type=\"endpoint\"} 0",
            "pilot_push_triggers{type=\"global\"} 0",
            "pilot_xds_send_time_count 0",
            "pilot_proxy_queue_time_count 0",
            "pilot_xds_write_timeout 0",
            "pilot_total_xds_internal_errors 0",
            "pilot_conflict_inbound_listener 0",
            "pilot_conflict_outbound_listener_tcp_over_current_tcp 0",
            "pilot_conflict_outbound_listener_tcp_over_current_http 0",
            "pilot_conflict_outbound_listener_http_over_current_tcp 0",
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
    }
}
