//! The parts of a DestinationRule traffic policy: load balancing, connection pool, outlier
//! detection and client TLS. Locality-aware load balancing has its own module, `locality`.

pub(super) mod locality;

use super::{Problems, check_duration};
use crate::{
    ClientTlsMode, ClientTlsSettings, ConnectionPoolSettings, ConsistentHash, LoadBalancerSettings,
    OutlierDetection, SimpleLb, Warmup,
};

/// Envoy's largest Maglev table (a prime); Istio refuses anything from here up.
const MAGLEV_LIMIT: u64 = 5_000_011;

/// The parts a policy has both at its top and per port.
pub(super) struct Parts<'a> {
    pub(super) load_balancer: Option<&'a LoadBalancerSettings>,
    pub(super) connection_pool: Option<&'a ConnectionPoolSettings>,
    pub(super) outlier_detection: Option<&'a OutlierDetection>,
    pub(super) tls: Option<&'a ClientTlsSettings>,
}

impl Parts<'_> {
    /// True when no part is set.
    pub(super) fn is_empty(&self) -> bool {
        self.load_balancer.is_none()
            && self.connection_pool.is_none()
            && self.outlier_detection.is_none()
            && self.tls.is_none()
    }

    /// Checks each part that is set, under `path`.
    pub(super) fn check(&self, p: &mut Problems, path: &str) {
        if let Some(lb) = self.load_balancer {
            // Istio checks failover against the outlier detection of the same policy.
            let outlier = self.outlier_detection.is_some();
            check_load_balancer(p, &format!("{path}.loadBalancer"), lb, outlier);
        }
        if let Some(pool) = self.connection_pool {
            check_connection_pool(p, &format!("{path}.connectionPool"), pool);
        }
        if let Some(outlier) = self.outlier_detection {
            check_outlier_detection(p, &format!("{path}.outlierDetection"), outlier);
        }
        if let Some(tls) = self.tls {
            check_tls(p, &format!("{path}.tls"), tls);
        }
    }
}

/// One of `simple` and `consistentHash` (Istio's `oneof`); a policy that sets only locality or
/// warm-up settings keeps the default algorithm, as in Istio. `outlier` says whether the same
/// policy sets outlier detection, which locality failover needs.
fn check_load_balancer(p: &mut Problems, path: &str, lb: &LoadBalancerSettings, outlier: bool) {
    match (&lb.simple, &lb.consistent_hash) {
        (Some(_), Some(_)) => p.error(path, "set one of simple and consistentHash"),
        (None, None)
            if lb.locality_lb_setting.is_none()
                && lb.warmup.is_none()
                && lb.warmup_duration_secs.is_none() =>
        {
            p.error(path, "a load balancer needs simple or consistentHash");
        }
        _ => {}
    }
    if lb.simple == Some(SimpleLb::LeastConn) {
        p.deprecated(format!("{path}.simple"), "LEAST_REQUEST");
    }
    if let Some(hash) = &lb.consistent_hash {
        check_consistent_hash(p, &format!("{path}.consistentHash"), hash);
    }
    if let Some(setting) = &lb.locality_lb_setting {
        locality::check(p, &format!("{path}.localityLbSetting"), setting, outlier);
    }
    if let Some(warmup) = &lb.warmup {
        check_warmup(p, &format!("{path}.warmup"), warmup);
    }
    if lb.warmup.is_some() && lb.warmup_duration_secs.is_some() {
        p.warn(
            format!("{path}.warmupDurationSecs"),
            "ignored: warmup is set, and wins",
        );
    }
    if let Some(d) = &lb.warmup_duration_secs {
        check_duration(p, format!("{path}.warmupDurationSecs"), d);
    }
}

/// Slow start as Istio's CRD has it: a duration of at least 1 ms, a minimum percent from 0 to
/// 100, an aggression of at least 0.
fn check_warmup(p: &mut Problems, path: &str, w: &Warmup) {
    match &w.duration {
        None => p.error(
            format!("{path}.duration"),
            "Required value: the warmup's duration",
        ),
        Some(d) => check_duration(p, format!("{path}.duration"), d),
    }
    if let Some(percent) = w.minimum_percent
        && !(0.0..=100.0).contains(&percent)
    {
        p.error(
            format!("{path}.minimumPercent"),
            format!("Invalid value: {percent}: must be from 0 to 100"),
        );
    }
    if let Some(aggression) = w.aggression
        && (aggression.is_nan() || aggression < 0.0)
    {
        p.error(
            format!("{path}.aggression"),
            format!("Invalid value: {aggression}: must be at least 0"),
        );
    }
}

fn check_consistent_hash(p: &mut Problems, path: &str, h: &ConsistentHash) {
    let keys = [
        h.http_header_name.is_some(),
        h.http_cookie.is_some(),
        h.use_source_ip == Some(true),
        h.http_query_parameter_name.is_some(),
    ];
    match keys.into_iter().filter(|k| *k).count() {
        0 => p.error(
            path,
            "consistent hashing needs a key: httpHeaderName, httpCookie, useSourceIp: true or \
             httpQueryParameterName",
        ),
        1 => {}
        _ => p.error(path, "set only one hash key"),
    }
    for (value, name) in [
        (&h.http_header_name, "httpHeaderName"),
        (&h.http_query_parameter_name, "httpQueryParameterName"),
    ] {
        if value.as_deref() == Some("") {
            p.error(format!("{path}.{name}"), "is empty");
        }
    }
    if let Some(cookie) = &h.http_cookie {
        if cookie.name.is_empty() {
            p.error(format!("{path}.httpCookie.name"), "is required");
        }
        if !cookie.attributes.is_empty() {
            p.ignored(format!("{path}.httpCookie.attributes"));
        }
    }
    if h.ring_hash.is_some() && h.maglev.is_some() {
        p.error(path, "set one of ringHash and maglev");
    }
    if h.minimum_ring_size.is_some() {
        let field = format!("{path}.minimumRingSize");
        if h.ring_hash.is_some() || h.maglev.is_some() {
            p.error(
                field,
                "cannot be used with ringHash or maglev: use ringHash.minimumRingSize",
            );
        } else {
            p.deprecated(field, "ringHash.minimumRingSize");
        }
    }
    if let Some(size) = h.maglev.and_then(|m| m.table_size)
        && (size >= MAGLEV_LIMIT || !is_prime(size))
    {
        p.error(
            format!("{path}.maglev.tableSize"),
            format!("{size} is not a prime below {MAGLEV_LIMIT}"),
        );
    }
}

/// Counts must be at least 1 where given: 0 would refuse every connection or request.
pub(super) fn check_connection_pool(p: &mut Problems, path: &str, pool: &ConnectionPoolSettings) {
    if pool.tcp.is_none() && pool.http.is_none() {
        p.error(path, "a connection pool needs tcp or http settings");
    }
    let mut count = |field: &str, value: Option<u32>| {
        if value == Some(0) {
            p.error(format!("{path}.{field}"), "must be at least 1");
        }
    };
    if let Some(tcp) = &pool.tcp {
        count("tcp.maxConnections", tcp.max_connections);
        count(
            "tcp.tcpKeepalive.probes",
            tcp.tcp_keepalive.as_ref().and_then(|k| k.probes),
        );
    }
    if let Some(http) = &pool.http {
        count(
            "http.http1MaxPendingRequests",
            http.http1_max_pending_requests,
        );
        count("http.http2MaxRequests", http.http2_max_requests);
        count(
            "http.maxRequestsPerConnection",
            http.max_requests_per_connection,
        );
        count("http.maxRetries", http.max_retries);
        count("http.maxConcurrentStreams", http.max_concurrent_streams);
    }
    if let Some(tcp) = &pool.tcp {
        let keepalive = tcp.tcp_keepalive.as_ref();
        for (field, value) in [
            ("tcp.connectTimeout", &tcp.connect_timeout),
            ("tcp.maxConnectionDuration", &tcp.max_connection_duration),
            ("tcp.tcpKeepalive.time", &keepalive.and_then(|k| k.time)),
            (
                "tcp.tcpKeepalive.interval",
                &keepalive.and_then(|k| k.interval),
            ),
        ] {
            if let Some(d) = value {
                check_duration(p, format!("{path}.{field}"), d);
            }
        }
        // 0s disables the idle timeout, as in Istio.
        if let Some(idle) = tcp.idle_timeout.filter(|d| !d.0.is_zero()) {
            check_duration(p, format!("{path}.tcp.idleTimeout"), &idle);
        }
    }
    if let Some(http) = &pool.http {
        if let Some(idle) = &http.idle_timeout {
            check_duration(p, format!("{path}.http.idleTimeout"), idle);
        }
        if http.h2_upgrade_policy.is_some() {
            p.ignored(format!("{path}.http.h2UpgradePolicy"));
        }
        if http.use_client_protocol.is_some() {
            p.ignored(format!("{path}.http.useClientProtocol"));
        }
    }
}

fn check_outlier_detection(p: &mut Problems, path: &str, o: &OutlierDetection) {
    for (field, value) in [
        ("maxEjectionPercent", o.max_ejection_percent),
        ("minHealthPercent", o.min_health_percent),
    ] {
        if let Some(v) = value.filter(|v| *v > 100) {
            p.error(
                format!("{path}.{field}"),
                format!("{v} is out of range 0..=100"),
            );
        }
    }
    for (field, value) in [
        ("interval", &o.interval),
        ("baseEjectionTime", &o.base_ejection_time),
    ] {
        if let Some(d) = value {
            check_duration(p, format!("{path}.{field}"), d);
        }
    }
    if o.consecutive_errors.is_some() {
        let field = format!("{path}.consecutiveErrors");
        if o.consecutive_5xx_errors.is_some() {
            p.error(
                field,
                "cannot be used with consecutive5xxErrors: set only consecutive5xxErrors",
            );
        } else {
            p.deprecated(field, "consecutive5xxErrors or consecutiveGatewayErrors");
        }
    }
    if o.consecutive_local_origin_failures.is_some_and(|n| n > 0)
        && o.split_external_local_origin_errors != Some(true)
    {
        p.error(
            format!("{path}.consecutiveLocalOriginFailures"),
            "counts only when splitExternalLocalOriginErrors is true",
        );
    }
}

fn check_tls(p: &mut Problems, path: &str, t: &ClientTlsSettings) {
    let mode = t.mode.unwrap_or(ClientTlsMode::Disable);
    // As Istio: mesh mTLS takes its certificates from the mesh, never from files.
    let given = !t.client_certificate.is_empty()
        || !t.private_key.is_empty()
        || !t.ca_certificates.is_empty()
        || !t.credential_name.is_empty();
    if mode == ClientTlsMode::IstioMutual && given {
        p.error(
            format!("{path}.mode"),
            "ISTIO_MUTUAL uses the mesh's certificates: clientCertificate, privateKey, \
             caCertificates and credentialName cannot be given with it",
        );
    }
    if !t.credential_name.is_empty() {
        p.error(
            format!("{path}.credentialName"),
            "not supported yet: wayfinder has no secret store; use certificate files",
        );
    }
    let files = [
        ("clientCertificate", &t.client_certificate),
        ("privateKey", &t.private_key),
        ("caCertificates", &t.ca_certificates),
        ("caCrl", &t.ca_crl),
    ];
    for (field, value) in files {
        if !value.is_empty() && value.trim().is_empty() {
            p.error(format!("{path}.{field}"), "is blank: give a file path");
        }
    }
    if mode == ClientTlsMode::Mutual && t.credential_name.is_empty() {
        for (field, value) in &files[..2] {
            if value.is_empty() {
                p.error(
                    format!("{path}.{field}"),
                    "MUTUAL needs a client certificate and its private key",
                );
            }
        }
    }
    if t.insecure_skip_verify == Some(true)
        && (!t.ca_certificates.is_empty() || !t.subject_alt_names.is_empty())
    {
        p.error(
            format!("{path}.insecureSkipVerify"),
            "cannot be used with caCertificates or subjectAltNames, which verify the server",
        );
    }
}

/// Envoy's primality test for Maglev table sizes.
fn is_prime(n: u64) -> bool {
    if n < 4 {
        return n >= 2;
    }
    if n.is_multiple_of(2) {
        return false;
    }
    (3..)
        .step_by(2)
        .take_while(|f| f * f <= n)
        .all(|f| !n.is_multiple_of(f))
}
