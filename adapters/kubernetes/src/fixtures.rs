//! Kubernetes objects as JSON, the way the API server and its controllers write them, for
//! tests and load runs against the fake API server: a Service, the EndpointSlice the
//! EndpointSlice controller makes for it, its pods and their nodes.

use serde_json::{Value, json};

/// A `ClusterIP` Service with ports `(name, port, targetPort)` selecting `app: <name>`.
pub fn service(namespace: &str, name: &str, cluster_ip: &str, ports: &[(&str, u16, u16)]) -> Value {
    let ports: Vec<Value> = ports
        .iter()
        .map(|(port_name, port, target)| {
            json!({"name": port_name, "port": port, "targetPort": target, "protocol": "TCP"})
        })
        .collect();
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": name}},
        "spec": {
            "type": "ClusterIP",
            "clusterIP": cluster_ip,
            "clusterIPs": [cluster_ip],
            "ipFamilies": ["IPv4"],
            "selector": {"app": name},
            "ports": ports,
        },
    })
}

/// One endpoint of an EndpointSlice.
#[derive(Clone, Debug)]
pub struct SliceEndpoint {
    /// Its address.
    pub ip: String,
    /// The pod behind it.
    pub pod: Option<String>,
    /// The node it runs on.
    pub node: Option<String>,
    /// `conditions.ready`.
    pub ready: bool,
}

impl SliceEndpoint {
    /// A ready endpoint of pod `pod` on node `node`.
    pub fn new(ip: &str, pod: &str, node: &str) -> Self {
        Self {
            ip: ip.into(),
            pod: Some(pod.into()),
            node: Some(node.into()),
            ready: true,
        }
    }

    /// The same endpoint, not ready.
    pub fn not_ready(mut self) -> Self {
        self.ready = false;
        self
    }
}

/// An IPv4 EndpointSlice of Service `service` with ports `(name, port)`.
pub fn endpoint_slice(
    namespace: &str,
    name: &str,
    service: &str,
    ports: &[(&str, u16)],
    endpoints: &[SliceEndpoint],
) -> Value {
    let ports: Vec<Value> = ports
        .iter()
        .map(|(port_name, port)| json!({"name": port_name, "port": port, "protocol": "TCP"}))
        .collect();
    let endpoints: Vec<Value> = endpoints
        .iter()
        .map(|e| {
            let mut ep = json!({
                "addresses": [e.ip],
                "conditions": {"ready": e.ready, "serving": e.ready, "terminating": false},
            });
            if let Some(pod) = &e.pod {
                ep["targetRef"] = json!({"kind": "Pod", "namespace": namespace, "name": pod});
            }
            if let Some(node) = &e.node {
                ep["nodeName"] = json!(node);
            }
            ep
        })
        .collect();
    json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {
                "kubernetes.io/service-name": service,
                "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
            },
        },
        "addressType": "IPv4",
        "ports": ports,
        "endpoints": endpoints,
    })
}

/// A running pod with labels, a service account and a node.
pub fn pod(
    namespace: &str,
    name: &str,
    ip: &str,
    node: &str,
    labels: &[(&str, &str)],
    service_account: &str,
) -> Value {
    let labels: serde_json::Map<String, Value> = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), json!(v)))
        .collect();
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "serviceAccountName": service_account,
            "nodeName": node,
            "containers": [{"name": "app", "image": "example/app:1", "ports": [{"containerPort": 8080, "name": "web"}]}],
        },
        "status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}]},
    })
}

/// A node in `region` and `zone`.
/// A Namespace with `labels`.
pub fn namespace(name: &str, labels: &[(&str, &str)]) -> Value {
    let labels: serde_json::Map<String, Value> = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), json!(v)))
        .collect();
    json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": labels},
    })
}

/// A Node in `region` and `zone`.
pub fn node(name: &str, region: &str, zone: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "topology.kubernetes.io/region": region,
                "topology.kubernetes.io/zone": zone,
            },
        },
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    })
}

/// The one EndpointSlice (`<service>-abc`) of a Service whose endpoints have no pods (a
/// selector-less Service, or pods a test does not model), on port `(name, number)`.
pub fn address_slice(namespace: &str, service: &str, port: (&str, u16), ips: &[String]) -> Value {
    let endpoints: Vec<SliceEndpoint> = ips
        .iter()
        .map(|ip| SliceEndpoint {
            ip: ip.clone(),
            pod: None,
            node: None,
            ready: true,
        })
        .collect();
    let name = format!("{service}-abc");
    endpoint_slice(namespace, &name, service, &[port], &endpoints)
}
