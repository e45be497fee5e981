//! Services used across tests.

use wayfinder_registry::{Endpoint, Locality, Protocol, Registration, Resolution, Service};

/// An HTTP service `NAME.default.svc.cluster.local` on 8080 with endpoints at `ips`.
pub(crate) fn http(name: &str, ips: &[&str]) -> Registration {
    let svc = Service::new(format!("{name}.default.svc.cluster.local"), "default").with_port(
        "http",
        8080,
        Protocol::Http,
    );
    Registration::new(svc, ips.iter().map(|ip| Endpoint::new(*ip)).collect())
}

/// The same with another protocol on the port, which changes the service (and its cluster)
/// but not its endpoints.
pub(crate) fn with_protocol(reg: &Registration, protocol: Protocol) -> Registration {
    let mut svc = (*reg.service).clone();
    svc.ports[0].protocol = protocol;
    Registration::new(svc, reg.endpoints.to_vec())
}

/// `outbound|8080||NAME.default.svc.cluster.local`.
pub(crate) fn cluster(name: &str) -> String {
    format!("outbound|8080||{name}.default.svc.cluster.local")
}

/// A small mesh that exercises every generator path: HTTP with VIP and several localities
/// and health states, gRPC (HTTP/2 upstream), TCP with and without VIP, DNS, passthrough, a
/// service private to another namespace, and a service whose endpoint is the test proxy itself.
pub(crate) fn mesh() -> Vec<Registration> {
    let mut out = Vec::new();
    let mut reviews = Service::new("reviews.default.svc.cluster.local", "default").with_port(
        "http",
        9080,
        Protocol::Http,
    );
    reviews.addresses = vec!["10.96.0.13".parse().expect("ip")];
    let ep = |ip: &str, version: &str, locality: &str| {
        let mut e = Endpoint::new(ip)
            .with_label("app", "reviews")
            .with_label("version", version);
        e.locality = Locality::parse(locality);
        e
    };
    let mut unhealthy = ep("10.1.0.3", "v3", "us-east1/b");
    unhealthy.health = wayfinder_registry::Health::Unhealthy;
    let mut heavy = ep("10.1.0.2", "v2", "us-east1/a");
    heavy.weight = 3;
    out.push(Registration::new(
        reviews,
        vec![ep("10.1.0.1", "v1", "us-east1/a"), heavy, unhealthy],
    ));

    let mut echo = Service::new("echo.default.svc.cluster.local", "default").with_port(
        "grpc",
        7070,
        Protocol::Grpc,
    );
    echo.ports[0].target_port = Some(17070);
    out.push(Registration::new(
        echo,
        vec![
            Endpoint::new("10.1.1.1"),
            Endpoint::new("10.1.1.2").with_port("grpc", 27070),
        ],
    ));

    let mut db = Service::new("db.default.svc.cluster.local", "default").with_port(
        "tcp",
        5432,
        Protocol::Tcp,
    );
    db.addresses = vec!["10.96.0.20".parse().expect("ip")];
    out.push(Registration::new(db, vec![Endpoint::new("10.1.2.1")]));

    let redis =
        Service::new("cache.example.com", "default").with_port("redis", 6379, Protocol::Redis);
    out.push(Registration::new(redis, vec![Endpoint::new("10.1.3.1")]));

    let mut api =
        Service::new("api.example.com", "default").with_port("https", 443, Protocol::Https);
    api.resolution = Resolution::Dns;
    api.mesh_external = true;
    out.push(Registration::new(
        api,
        vec![Endpoint::new("api.example.com")],
    ));

    let mut any =
        Service::new("wildcard.example.com", "default").with_port("tcp", 9000, Protocol::Tcp);
    any.resolution = Resolution::Passthrough;
    out.push(Registration::new(any, vec![]));

    // A ServiceEntry's CIDR address (`resolution: NONE`): its chain on the capture address's
    // listener, matched by the range, beside wildcard.example.com's catch-all.
    let mut ranged =
        Service::new("ranged.example.com", "default").with_port("tcp", 9000, Protocol::Tcp);
    ranged.resolution = Resolution::Passthrough;
    ranged.address_ranges = vec!["192.168.0.0/16".parse().expect("a range")];
    out.push(Registration::new(ranged, vec![]));

    let mut private = Service::new("ratings.prod.svc.cluster.local", "prod").with_port(
        "http",
        9080,
        Protocol::Http,
    );
    private.export_to = wayfinder_registry::ExportTo(vec![".".into()]);
    out.push(Registration::new(private, vec![Endpoint::new("10.2.0.1")]));

    let public = Service::new("details.prod.svc.cluster.local", "prod").with_port(
        "http",
        9080,
        Protocol::Http,
    );
    out.push(Registration::new(public, vec![Endpoint::new("10.2.0.2")]));
    out
}

/// Writes a file the way editors save: a temporary file renamed over the target, so a watcher
/// never reads half a file.
pub(crate) fn write(dir: &std::path::Path, name: &str, text: &str) {
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, text).expect("write a temporary file");
    std::fs::rename(&tmp, dir.join(name)).expect("rename it into place");
}

/// A `ServiceEntry` for `HOST` with one port and STATIC endpoints at `127.0.0.1:PORT`.
pub(crate) fn service_entry(
    name: &str,
    host: &str,
    port: (&str, u16, &str),
    endpoints: &[u16],
) -> String {
    let (port_name, number, protocol) = port;
    let mut text = format!(
        "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata:\n  name: {name}\n  namespace: default\n\
         spec:\n  hosts: [{host}]\n  location: MESH_INTERNAL\n  resolution: STATIC\n  ports:\n  \
         - {{name: {port_name}, number: {number}, protocol: {protocol}}}\n  endpoints:\n"
    );
    for p in endpoints {
        text.push_str(&format!(
            "  - {{address: 127.0.0.1, ports: {{{port_name}: {p}}}}}\n"
        ));
    }
    text
}

/// A file of Istio's corpus copied into `tests/it/istio` (see its README).
pub(crate) fn istio_file(name: &str) -> String {
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/it/istio")
        .join(name);
    std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("read {}: {e}", file.display()))
}
