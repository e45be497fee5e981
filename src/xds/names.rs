//! Resource names users meet in Envoy's admin pages and Istio's documentation.

/// The cluster that drops traffic (`STATIC`, no endpoints).
pub const BLACKHOLE_CLUSTER: &str = "BlackHoleCluster";
/// The cluster that forwards outbound traffic to the address the client dialed.
pub const PASSTHROUGH_CLUSTER: &str = "PassthroughCluster";
/// The cluster that forwards inbound traffic for unknown ports to the original destination.
pub const INBOUND_PASSTHROUGH_CLUSTER: &str = "InboundPassthroughCluster";
/// The outbound capture listener.
pub const VIRTUAL_OUTBOUND: &str = "virtualOutbound";
/// The inbound capture listener.
pub const VIRTUAL_INBOUND: &str = "virtualInbound";

/// `outbound|<port>|<subset>|<host>`, e.g. `outbound|9080||reviews.default.svc.cluster.local`.
pub fn outbound_cluster(port: u16, subset: &str, host: &str) -> String {
    format!("outbound|{port}|{subset}|{host}")
}

/// `inbound|<port>||`: the cluster for a proxy's own instance serving `port` (Istio 1.8+).
pub fn inbound_cluster(port: u16) -> String {
    format!("inbound|{port}||")
}

/// `<address>_<port>`, e.g. `0.0.0.0_9080` or `10.96.0.12_5432`.
pub fn listener(address: &str, port: u16) -> String {
    format!("{address}_{port}")
}

/// Splits `outbound|port|subset|host` into its parts.
pub fn parse_outbound_cluster(name: &str) -> Option<(u16, &str, &str)> {
    let mut parts = name.splitn(4, '|');
    if parts.next()? != "outbound" {
        return None;
    }
    let port = parts.next()?.parse().ok()?;
    Some((port, parts.next()?, parts.next()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_names_round_trip() {
        let name = outbound_cluster(9080, "v1", "reviews.default.svc.cluster.local");
        assert_eq!(name, "outbound|9080|v1|reviews.default.svc.cluster.local");
        assert_eq!(
            parse_outbound_cluster(&name),
            Some((9080, "v1", "reviews.default.svc.cluster.local"))
        );
        assert_eq!(parse_outbound_cluster("inbound|80||"), None);
    }
}
