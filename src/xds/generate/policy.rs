//! DestinationRule traffic policy as Envoy cluster settings.
//!
//! The policy in force for one cluster is layered as Istio's `MergeTrafficPolicy` does: the
//! rule's top-level policy, then its port-level settings for the cluster's port, then the
//! subset's policy and the subset's port-level settings. Each layer replaces whole field
//! groups (`loadBalancer`, `connectionPool`, `outlierDetection`, `tls`) of the one before.

use wayfinder_config::{
    ClientTlsSettings, ConnectionPoolSettings, ConsistentHash, DestinationRule,
    LoadBalancerSettings, OutlierDetection, SimpleLb, Subset, TrafficPolicy,
};

use super::proto::u32_value;
use super::upstream_tls::{self, Upstream};
use crate::xds::pb::cluster::{self, Cluster, cluster::LbPolicy};
use crate::xds::pb::core;
use crate::xds::pb::protobuf::Duration as PbDuration;
use crate::xds::pb::route::{RouteAction, route_action::HashPolicy, route_action::hash_policy};
use crate::xds::pb::types;

/// The field groups in force for one cluster.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Policy<'a> {
    lb: Option<&'a LoadBalancerSettings>,
    pool: Option<&'a ConnectionPoolSettings>,
    outlier: Option<&'a OutlierDetection>,
    tls: Option<&'a ClientTlsSettings>,
}

impl<'a> Policy<'a> {
    /// The policy for `port` (and `subset`) of the service `rule` applies to.
    pub(super) fn new(
        rule: Option<&'a DestinationRule>,
        port: u16,
        subset: Option<&'a Subset>,
    ) -> Self {
        let mut policy = Self::default();
        if let Some(tp) = rule.and_then(|r| r.traffic_policy.as_ref()) {
            policy.layer(tp, port);
        }
        if let Some(tp) = subset.and_then(|s| s.traffic_policy.as_ref()) {
            policy.layer(tp, port);
        }
        policy
    }

    fn layer(&mut self, tp: &'a TrafficPolicy, port: u16) {
        self.lb = tp.load_balancer.as_ref().or(self.lb);
        self.pool = tp.connection_pool.as_ref().or(self.pool);
        self.outlier = tp.outlier_detection.as_ref().or(self.outlier);
        self.tls = tp.tls.as_ref().or(self.tls);
        let port_level = tp
            .port_level_settings
            .iter()
            .find(|p| p.port.is_some_and(|p| p.number == u32::from(port)));
        if let Some(p) = port_level {
            self.lb = p.load_balancer.as_ref().or(self.lb);
            self.pool = p.connection_pool.as_ref().or(self.pool);
            self.outlier = p.outlier_detection.as_ref().or(self.outlier);
            self.tls = p.tls.as_ref().or(self.tls);
        }
    }

    /// The locality load balancing the rule sets, if it does.
    pub(super) fn locality(&self) -> Option<&'a wayfinder_config::LocalityLbSetting> {
        self.lb.and_then(|lb| lb.locality_lb_setting.as_ref())
    }

    /// True when the cluster has outlier detection, which locality failover needs.
    pub(super) fn has_outlier_detection(&self) -> bool {
        self.outlier.is_some()
    }

    /// True when the load balancer is `PASSTHROUGH`: the cluster forwards to the original
    /// destination and has no endpoints of its own.
    pub(super) fn passthrough(&self) -> bool {
        self.lb.and_then(|lb| lb.simple) == Some(SimpleLb::Passthrough)
    }

    /// Applies load balancing, connection pool, outlier detection and TLS to `cluster`, whose
    /// destination is `host`. `http` collects the upstream HTTP options (one map entry with
    /// the HTTP/2 choice); `system_ca` is the trust store TLS falls back to.
    pub(super) fn apply(
        &self,
        cluster: &mut Cluster,
        http: &mut HttpOptions,
        host: &str,
        system_ca: &str,
    ) {
        if let Some(lb) = self.lb {
            apply_lb(cluster, lb);
        }
        if let Some(pool) = self.pool {
            apply_pool(cluster, pool, http);
        }
        if let Some(outlier) = self.outlier {
            apply_outlier(cluster, outlier);
        }
        if let Some(tls) = self.tls {
            let to = Upstream {
                host,
                http2: http.http2,
                system_ca,
            };
            let origination = upstream_tls::originate(tls, to);
            cluster.transport_socket = origination.socket;
            http.auto_sni = origination.auto_sni;
            http.auto_san_validation = origination.auto_san_validation;
        }
    }

    /// The same policy without its TLS settings: a cluster that passes its clients' TLS
    /// through (a gateway's `AUTO_PASSTHROUGH`) originates none.
    pub(super) fn without_tls(self) -> Self {
        Self { tls: None, ..self }
    }

    /// The client TLS settings in force, if any layer gives them.
    pub(super) fn tls(&self) -> Option<&'a ClientTlsSettings> {
        self.tls
    }

    /// The route hash policies consistent hashing needs.
    pub(super) fn hash_policies(&self) -> Vec<HashPolicy> {
        let Some(hash) = self.lb.and_then(|lb| lb.consistent_hash.as_ref()) else {
            return Vec::new();
        };
        hash_policy(hash).into_iter().collect()
    }
}

/// Upstream HTTP options gathered from the port protocol and the connection pool.
#[derive(Default)]
pub(super) struct HttpOptions {
    pub(super) http2: bool,
    pub(super) common: Option<core::HttpProtocolOptions>,
    pub(super) max_concurrent_streams: Option<u32>,
    /// SNI from each request's `Host` (a wildcard destination under TLS).
    pub(super) auto_sni: bool,
    /// The server certificate must name each request's `Host`.
    pub(super) auto_san_validation: bool,
}

fn apply_lb(cluster: &mut Cluster, lb: &LoadBalancerSettings) {
    if let Some(hash) = &lb.consistent_hash {
        if let Some(maglev) = hash.maglev {
            cluster.lb_policy = LbPolicy::Maglev as i32;
            cluster.lb_config = Some(cluster::cluster::LbConfig::MaglevLbConfig(
                cluster::cluster::MaglevLbConfig {
                    table_size: maglev
                        .table_size
                        .map(|value| crate::xds::pb::protobuf::UInt64Value { value }),
                },
            ));
        } else {
            cluster.lb_policy = LbPolicy::RingHash as i32;
            let size = hash
                .ring_hash
                .and_then(|r| r.minimum_ring_size)
                .or(hash.minimum_ring_size);
            cluster.lb_config = Some(cluster::cluster::LbConfig::RingHashLbConfig(
                cluster::cluster::RingHashLbConfig {
                    minimum_ring_size: size
                        .map(|value| crate::xds::pb::protobuf::UInt64Value { value }),
                    ..Default::default()
                },
            ));
        }
        return;
    }
    cluster.lb_policy = match lb.simple {
        Some(SimpleLb::Random) => LbPolicy::Random,
        Some(SimpleLb::RoundRobin) => LbPolicy::RoundRobin,
        Some(SimpleLb::Passthrough) => LbPolicy::ClusterProvided,
        _ => LbPolicy::LeastRequest,
    } as i32;
    // Slow start, for round robin and least request only, as Istio's `setWarmup`.
    let Some(slow_start) = slow_start(lb) else {
        return;
    };
    use cluster::cluster::{LbConfig, LeastRequestLbConfig, RoundRobinLbConfig};
    cluster.lb_config = if cluster.lb_policy == LbPolicy::RoundRobin as i32 {
        Some(LbConfig::RoundRobinLbConfig(RoundRobinLbConfig {
            slow_start_config: Some(slow_start),
        }))
    } else if cluster.lb_policy == LbPolicy::LeastRequest as i32 {
        Some(LbConfig::LeastRequestLbConfig(LeastRequestLbConfig {
            slow_start_config: Some(slow_start),
            ..Default::default()
        }))
    } else {
        None
    };
}

/// Envoy's slow start from `warmup` (aggression 1 and a minimum of 10% unless given, as Istio
/// sets them; its runtime key `(` is Istio's, which no runtime layer sets), else from the
/// deprecated `warmupDurationSecs` (the window alone).
fn slow_start(lb: &LoadBalancerSettings) -> Option<cluster::cluster::SlowStartConfig> {
    if let Some(w) = &lb.warmup {
        return Some(cluster::cluster::SlowStartConfig {
            slow_start_window: w.duration.map(|d| duration(d.0)),
            aggression: Some(core::RuntimeDouble {
                default_value: w.aggression.unwrap_or(1.0),
                runtime_key: "(".into(),
            }),
            min_weight_percent: Some(types::Percent {
                value: w.minimum_percent.unwrap_or(10.0),
            }),
        });
    }
    lb.warmup_duration_secs
        .map(|d| cluster::cluster::SlowStartConfig {
            slow_start_window: Some(duration(d.0)),
            ..Default::default()
        })
}

pub(super) fn apply_pool(
    cluster: &mut Cluster,
    pool: &ConnectionPoolSettings,
    http: &mut HttpOptions,
) {
    let thresholds = cluster
        .circuit_breakers
        .get_or_insert_with(Default::default)
        .thresholds
        .first_mut();
    let mut common = core::HttpProtocolOptions::default();
    let mut any_common = false;
    if let Some(tcp) = &pool.tcp {
        if let (Some(t), Some(n)) = (thresholds, tcp.max_connections) {
            t.max_connections = u32_value(n);
        }
        if let Some(d) = tcp.connect_timeout {
            cluster.connect_timeout = Some(duration(d.0));
        }
        if let Some(k) = &tcp.tcp_keepalive {
            cluster.upstream_connection_options = Some(cluster::UpstreamConnectionOptions {
                tcp_keepalive: Some(core::TcpKeepalive {
                    keepalive_probes: k.probes.and_then(u32_value),
                    keepalive_time: k
                        .time
                        .and_then(|d| u32_value(u32::try_from(d.0.as_secs()).unwrap_or(u32::MAX))),
                    keepalive_interval: k
                        .interval
                        .and_then(|d| u32_value(u32::try_from(d.0.as_secs()).unwrap_or(u32::MAX))),
                }),
                ..Default::default()
            });
        }
        if let Some(d) = tcp.max_connection_duration {
            common.max_connection_duration = Some(duration(d.0));
            any_common = true;
        }
    }
    if let Some(h) = &pool.http {
        let thresholds = cluster
            .circuit_breakers
            .get_or_insert_with(Default::default)
            .thresholds
            .first_mut();
        if let Some(t) = thresholds {
            if let Some(n) = h.http1_max_pending_requests {
                t.max_pending_requests = u32_value(n);
            }
            if let Some(n) = h.http2_max_requests {
                t.max_requests = u32_value(n);
            }
            if let Some(n) = h.max_retries {
                t.max_retries = u32_value(n);
            }
        }
        if let Some(d) = h.idle_timeout {
            common.idle_timeout = Some(duration(d.0));
            any_common = true;
        }
        if let Some(n) = h.max_requests_per_connection {
            common.max_requests_per_connection = u32_value(n);
            any_common = true;
        }
        http.max_concurrent_streams = h.max_concurrent_streams;
    }
    if any_common {
        http.common = Some(common);
    }
}

fn apply_outlier(cluster: &mut Cluster, o: &OutlierDetection) {
    let enforce = |n: Option<u32>| u32_value(if n.is_some_and(|n| n > 0) { 100 } else { 0 });
    let five_xx = o.consecutive_5xx_errors.or(o.consecutive_errors);
    cluster.outlier_detection = Some(cluster::OutlierDetection {
        consecutive_5xx: five_xx.and_then(u32_value),
        enforcing_consecutive_5xx: enforce(five_xx),
        consecutive_gateway_failure: o.consecutive_gateway_errors.and_then(u32_value),
        enforcing_consecutive_gateway_failure: enforce(o.consecutive_gateway_errors),
        split_external_local_origin_errors: o.split_external_local_origin_errors.unwrap_or(false),
        consecutive_local_origin_failure: o.consecutive_local_origin_failures.and_then(u32_value),
        interval: o.interval.map(|d| duration(d.0)),
        base_ejection_time: o.base_ejection_time.map(|d| duration(d.0)),
        max_ejection_percent: o.max_ejection_percent.and_then(u32_value),
        enforcing_success_rate: u32_value(0),
        ..Default::default()
    });
    if let Some(min) = o.min_health_percent {
        cluster
            .common_lb_config
            .get_or_insert_with(Default::default)
            .healthy_panic_threshold = Some(types::Percent {
            value: f64::from(min),
        });
    }
}

fn hash_policy(hash: &ConsistentHash) -> Option<HashPolicy> {
    use hash_policy::PolicySpecifier as P;
    let specifier = if let Some(name) = &hash.http_header_name {
        P::Header(hash_policy::Header {
            header_name: name.clone(),
            ..Default::default()
        })
    } else if let Some(cookie) = &hash.http_cookie {
        P::Cookie(hash_policy::Cookie {
            name: cookie.name.clone(),
            path: cookie.path.clone(),
            ttl: cookie.ttl.map(|d| duration(d.0)),
            ..Default::default()
        })
    } else if hash.use_source_ip == Some(true) {
        P::ConnectionProperties(hash_policy::ConnectionProperties { source_ip: true })
    } else if let Some(name) = &hash.http_query_parameter_name {
        P::QueryParameter(hash_policy::QueryParameter { name: name.clone() })
    } else {
        return None;
    };
    Some(HashPolicy {
        policy_specifier: Some(specifier),
        ..Default::default()
    })
}

/// Adds hash policies to a route action (consistent hashing needs them on the route). A
/// retry must then go to the same host again, so Istio drops the `previous_hosts` predicate.
pub(super) fn add_hash_policies(action: &mut RouteAction, policies: Vec<HashPolicy>) {
    for p in policies {
        if !action.hash_policy.contains(&p) {
            action.hash_policy.push(p);
        }
    }
    if !action.hash_policy.is_empty()
        && let Some(retry) = &mut action.retry_policy
    {
        retry.retry_host_predicate.clear();
        retry.host_selection_retry_max_attempts = 0;
    }
}

/// A protobuf duration.
pub(super) fn duration(d: std::time::Duration) -> PbDuration {
    PbDuration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}
