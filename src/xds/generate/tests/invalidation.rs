//! The generation cache against its declarations. A model with services, every kind of
//! traffic configuration and every kind of proxy is served in full; then each kind of change
//! in turn is served again through [`XdsSnapshot::next`], and the test checks which scopes were
//! rebuilt against a table written out here (not derived from the declarations), and that
//! every proxy receives exactly what a fresh snapshot of the same model generates.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use wayfinder_config::{ConfigMeta, ConfigObject, ConfigSpec, Kind};
use wayfinder_registry::{Endpoint, Protocol, Registration, RegistryId, Service};

use super::super::memo::Reuse;
use crate::aggregate::{snapshot_from, snapshot_with_config};
use crate::snapshot::Snapshot;
use crate::xds::fixtures::{DOMAIN, grpc_client, registration, sidecar};
use crate::xds::proxy::{Proxy, ProxyKind};
use crate::xds::resource::Resource;
use crate::xds::{TypeUrl, XdsSnapshot};

/// What a change did to one scope's values, of the keys asked for before and after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rebuilt {
    /// None: every value was carried.
    No,
    /// Those of the changed services; the others were carried.
    Part,
    /// Every one.
    All,
}
use Rebuilt::{All, No, Part};

/// The scopes, in the columns' order below.
const SCOPES: [&str; 11] = [
    "sidecar_services",
    "grpc_services",
    "outbound",
    "grpc_scopes",
    "grpc_routing",
    "listeners",
    "gateways",
    "routes",
    "inbound",
    "secrets",
    "localized",
];

/// A change to the model: the next model after one.
type Change = fn(&Snapshot) -> Snapshot;

/// Each kind of change, and what it rebuilds, by scope in the order of `SCOPES`. Per-service
/// scopes read their service and the configuration; `outbound` and `grpc_scopes` read
/// everything; `grpc_routing`, `listeners`, `gateways` and `routes` everything but endpoints;
/// `inbound` nothing but its key; `secrets` nothing of the model (only the credentials);
/// `localized` what `outbound` reads.
#[rustfmt::skip]
const CASES: [(&str, Change, [Rebuilt; 11]); 11] = [
    // Columns: sidecar_services, grpc_services, outbound, grpc_scopes, grpc_routing,
    // listeners, gateways, routes, inbound, secrets, localized.
    ("nothing",             unchanged,         [No,   No,   No,  No,  No,  No,  No,  No,  No, No, No]),
    ("endpoints of svc-1",  endpoints,         [Part, Part, All, All, No,  No,  No,  No,  No, No, All]),
    ("definition of svc-2", definition,        [Part, Part, All, All, All, All, All, All, No, No, All]),
    ("svc-3 added",         added,             [No,   No,   All, All, All, All, All, All, No, No, All]),
    ("svc-2 removed",       removed,           [No,   No,   All, All, All, All, All, All, No, No, All]),
    ("a VirtualService",    virtual_service,   [All,  All,  All, All, All, All, All, All, No, No, All]),
    ("a DestinationRule",   destination_rule,  [All,  All,  All, All, All, All, All, All, No, No, All]),
    ("a Gateway",           gateway,           [All,  All,  All, All, All, All, All, All, No, No, All]),
    ("a Sidecar",           scoping,           [All,  All,  All, All, All, All, All, All, No, No, All]),
    // The mesh sidecar's inbound key holds its PeerAuthentication mode: its layers are made
    // for a new key, none rebuilt; the plaintext sidecar's are carried.
    ("a PeerAuthentication", peer_authentication, [All, All, All, All, All, All, All, All, No, No, All]),
    // The scoped sidecar's inbound key holds its AuthorizationPolicy: made for a new key,
    // the other sidecars' carried.
    ("an AuthorizationPolicy", authorization_policy, [All, All, All, All, All, All, All, All, No, No, All]),
];

#[test]
fn each_change_rebuilds_exactly_the_scopes_that_read_it_and_serves_what_a_fresh_snapshot_does() {
    let first = XdsSnapshot::new(Arc::new(base()), DOMAIN).with_inputs(inputs("a"));
    serve(&first);
    for (case, change, expected) in CASES {
        let next = XdsSnapshot::next(Arc::new(change(first.model())), DOMAIN, &first);
        let served = serve(&next);
        let reuse = next.reuse_since(&first);
        assert_eq!(
            reuse.keys().copied().collect::<Vec<_>>(),
            BTreeSet::from(SCOPES).into_iter().collect::<Vec<_>>(),
            "every scope is in the table"
        );
        for (scope, expected) in SCOPES.into_iter().zip(expected) {
            let r = reuse[scope];
            assert!(
                r.carried + r.rebuilt > 0,
                "{case}: {scope} was filled: {r:?}"
            );
            let got = match (r.carried, r.rebuilt) {
                (_, 0) => No,
                (0, _) => All,
                _ => Part,
            };
            assert_eq!(got, expected, "{case}: {scope} {r:?}");
        }
        let fresh = XdsSnapshot::new(next.model().clone(), DOMAIN).with_inputs(next.inputs());
        for ((what, got), (_, want)) in served.iter().zip(&serve(&fresh)) {
            // Not `assert_eq!`: its message would be every resource's bytes.
            assert!(
                got == want,
                "{case}: {what} differs from a fresh snapshot's"
            );
        }
    }
}

/// New JWT keys with the same model rebuild what reads them (gateways' listeners) and nothing
/// else: a sidecar's inbound side keys on its own keys, and these sidecars have none.
#[test]
fn new_jwt_keys_rebuild_only_the_gateways() {
    let first = XdsSnapshot::new(Arc::new(base()), DOMAIN).with_inputs(inputs("a"));
    serve(&first);
    let keys = Arc::new(crate::jwks::JwksTable::new());
    let next = XdsSnapshot::next_with_keys(first.model().clone(), DOMAIN, &first, keys);
    serve(&next);
    let reuse = next.reuse_since(&first);
    for (scope, r) in reuse {
        let rebuilt = r.rebuilt > 0;
        assert_eq!(rebuilt, scope == "gateways", "{scope}: {r:?}");
    }
}

/// New credentials with the same model rebuild the secrets and nothing else, and the
/// gateway is served the new certificate.
#[test]
fn new_credentials_rebuild_only_the_secrets() {
    let first = XdsSnapshot::new(Arc::new(base()), DOMAIN).with_inputs(inputs("a"));
    let before = serve(&first);
    let keys = first.keys().clone();
    let credentials = inputs("b").credentials;
    let next = XdsSnapshot::next_with(
        first.model().clone(),
        DOMAIN,
        &first,
        crate::xds::Inputs {
            jwks: keys,
            credentials,
            ..first.inputs()
        },
    );
    let after = serve(&next);
    let reuse = next.reuse_since(&first);
    for (scope, r) in reuse {
        let rebuilt = r.rebuilt > 0;
        assert_eq!(rebuilt, scope == "secrets", "{scope}: {r:?}");
    }
    let changed: Vec<&String> = before
        .iter()
        .zip(&after)
        .filter(|((_, a), (_, b))| a != b)
        .map(|((what, _), _)| what)
        .collect();
    assert_eq!(
        changed,
        [
            "sidecar~10.0.0.1~app.default~default.svc.cluster.local sds",
            "router~10.0.0.3~ingress.default~default.svc.cluster.local sds",
        ],
        "the proxies with a certificate, and nothing but their secrets"
    );
}

/// The secret every proxy asks for (a gateway's credential).
const CREDENTIAL: &str = "kubernetes://ingress-cert";

/// Credentials where `default/app` (the identity of the proxies with a certificate) may read
/// the Secret `default/ingress-cert`, whose certificate is `version`.
fn inputs(version: &str) -> crate::xds::Inputs {
    let secret = wayfinder_config::credentials::Secret::new(
        "default",
        "ingress-cert",
        [
            ("tls.crt", format!("cert {version}").into_bytes()),
            ("tls.key", b"key".to_vec()),
        ],
    );
    let table =
        crate::credentials::Credentials::fixed("Kubernetes", vec![secret], &[("default", "app")]);
    crate::xds::Inputs {
        credentials: Arc::new(table),
        ..Default::default()
    }
}

impl XdsSnapshot {
    /// How each scope's values came to be against `previous`'s, by scope name.
    fn reuse_since(&self, previous: &Self) -> BTreeMap<&'static str, Reuse> {
        // Every field by name: a memo added to `XdsSnapshot` does not compile here until this
        // test reports it (and then fails until the table has its column).
        let Self {
            model: _,
            domain: _,
            mesh: _,
            jwks: _,
            credentials: _,
            published: _,
            sidecar_services,
            grpc_services,
            outbound,
            grpc_scopes,
            grpc_routing,
            listeners,
            gateways,
            routes,
            inbound,
            secrets,
            localized,
            instances: _,
            conflicts: _,
            // Not memos: the EnvoyFilters read from the configuration (kept while it is the
            // same object) and the patched layers, made afresh for each snapshot.
            envoy_filters: _,
            patched: _,
        } = self;
        [
            (
                sidecar_services.name(),
                sidecar_services.reuse_since(&previous.sidecar_services),
            ),
            (
                grpc_services.name(),
                grpc_services.reuse_since(&previous.grpc_services),
            ),
            (outbound.name(), outbound.reuse_since(&previous.outbound)),
            (
                grpc_scopes.name(),
                grpc_scopes.reuse_since(&previous.grpc_scopes),
            ),
            (
                grpc_routing.name(),
                grpc_routing.reuse_since(&previous.grpc_routing),
            ),
            (listeners.name(), listeners.reuse_since(&previous.listeners)),
            (gateways.name(), gateways.reuse_since(&previous.gateways)),
            (routes.name(), routes.reuse_since(&previous.routes)),
            (inbound.name(), inbound.reuse_since(&previous.inbound)),
            (secrets.name(), secrets.reuse_since(&previous.secrets)),
            (localized.name(), localized.reuse_since(&previous.localized)),
        ]
        .into()
    }
}

/// Every resource of every type for every proxy, by proxy and type.
fn serve(snap: &XdsSnapshot) -> Vec<(String, Vec<Resource>)> {
    let grpc_names: BTreeSet<Arc<str>> = [
        "svc-1.default.svc.cluster.local:8080".into(),
        // A short name, generated on demand beside the namespace's layers.
        "svc-0:8080".into(),
    ]
    .into();
    let none = BTreeSet::new();
    let credential: BTreeSet<Arc<str>> = [CREDENTIAL.into()].into();
    let mut out = Vec::new();
    for proxy in proxies() {
        for t in TypeUrl::PUSH_ORDER {
            let requested = match (proxy.kind, t) {
                (ProxyKind::Grpc, _) => &grpc_names,
                (_, TypeUrl::Secret) => &credential,
                _ => &none,
            };
            let resources = snap.resources(&proxy, t, requested);
            let list: Vec<Resource> = resources.iter().map(|r| (**r).clone()).collect();
            // Only a proxy with a certificate is served secrets.
            let secret = t == TypeUrl::Secret && proxy.certificate.is_none();
            assert!(
                !list.is_empty() || t == TypeUrl::Route || secret,
                "{proxy} {t}"
            );
            out.push((format!("{proxy} {t}"), list));
        }
    }
    out
}

/// A sidecar, the same sidecar with a mesh certificate, one scoped by the Sidecar object, a
/// gateway with a mesh certificate, and a proxyless gRPC client.
fn proxies() -> [Proxy; 5] {
    let labelled = |id: &str, ip: [u8; 4], kind, label: (&str, &str)| Proxy {
        id: id.into(),
        kind,
        ips: vec![ip.into()],
        labels: [(label.0.to_string(), label.1.to_string())].into(),
        ..sidecar()
    };
    let mesh = |proxy: Proxy| Proxy {
        certificate: Some((
            "spiffe://cluster.local/ns/default/sa/app".into(),
            "2030-01-01T00:00:00Z".into(),
        )),
        service_account: Some("app".into()),
        ..proxy
    };
    [
        sidecar(),
        mesh(sidecar()),
        labelled(
            "sidecar~10.0.0.2~scoped.default~default.svc.cluster.local",
            [10, 0, 0, 2],
            ProxyKind::Sidecar,
            ("app", "scoped"),
        ),
        mesh(labelled(
            "router~10.0.0.3~ingress.default~default.svc.cluster.local",
            [10, 0, 0, 3],
            ProxyKind::Router,
            ("istio", "ingressgateway"),
        )),
        grpc_client(),
    ]
}

/// svc-0, svc-1 and svc-2 (HTTP on 8080), the sidecar's own service `app` (its instance is
/// the sidecar's address, so it has inbound resources), and the traffic configuration.
fn registrations() -> Vec<Registration> {
    let app = Service::new("app.default.svc.cluster.local", "default").with_port(
        "http",
        9080,
        Protocol::Http,
    );
    let mut all: Vec<Registration> = (0..3).map(|i| registration(i, 2)).collect();
    all.push(Registration::new(app, vec![Endpoint::new("10.0.0.1")]));
    all
}

fn base() -> Snapshot {
    let model = snapshot_with_config(mock(registrations()), config(None)).unwrap();
    assert_eq!(model.config.objects.len(), 7, "every object is valid");
    model
}

fn mock(registrations: Vec<Registration>) -> Vec<(RegistryId, Vec<Registration>)> {
    vec![(RegistryId::new("Mock"), registrations)]
}

/// A DestinationRule with a subset and a VirtualService to it for svc-1, a Gateway and a
/// VirtualService bound to it routing to svc-2 (whose port the route takes from its
/// definition), a Sidecar that lets the `app: scoped` workload see svc-0 only, and the
/// namespace's PeerAuthentication, and an AuthorizationPolicy of the `app: scoped` workload.
/// The object of kind `edited` is changed.
fn config(edited: Option<Kind>) -> Vec<ConfigObject> {
    let yaml = |kind: Kind, before: &str, after: &str| -> String {
        if edited == Some(kind) { after } else { before }.to_string()
    };
    let rule = yaml(
        Kind::DestinationRule,
        "{host: svc-1, trafficPolicy: {outlierDetection: {consecutive5xxErrors: 3}}, subsets: [{name: v1, labels: {version: v1}}]}",
        "{host: svc-1, trafficPolicy: {outlierDetection: {consecutive5xxErrors: 3}}, subsets: [{name: v2, labels: {version: v2}}]}",
    );
    let routing = yaml(
        Kind::VirtualService,
        "{hosts: [svc-1], http: [{route: [{destination: {host: svc-1, subset: v1}}]}]}",
        "{hosts: [svc-1], http: [{timeout: 5s, route: [{destination: {host: svc-1, subset: v1}}]}]}",
    );
    let gateway = yaml(
        Kind::Gateway,
        "{selector: {istio: ingressgateway}, servers: [{port: {number: 80, name: http, protocol: HTTP}, hosts: ['*']}]}",
        "{selector: {istio: ingressgateway}, servers: [{port: {number: 8080, name: http, protocol: HTTP}, hosts: ['*']}]}",
    );
    let scoped = yaml(
        Kind::Sidecar,
        "{workloadSelector: {labels: {app: scoped}}, egress: [{hosts: [./svc-0.default.svc.cluster.local]}]}",
        "{workloadSelector: {labels: {app: scoped}}, egress: [{hosts: [./svc-1.default.svc.cluster.local]}]}",
    );
    let peers = yaml(
        Kind::PeerAuthentication,
        "{mtls: {mode: STRICT}}",
        "{mtls: {mode: PERMISSIVE}}",
    );
    let authz = yaml(
        Kind::AuthorizationPolicy,
        "{selector: {matchLabels: {app: scoped}}, action: DENY, rules: [{to: [{operation: {methods: [DELETE]}}]}]}",
        "{selector: {matchLabels: {app: scoped}}, action: DENY, rules: [{to: [{operation: {methods: [PUT]}}]}]}",
    );
    let ingress = "{hosts: [svc-2.example.com], gateways: [ingress], http: [{route: [{destination: {host: svc-2}}]}]}";
    [
        ("svc-1", ConfigSpec::DestinationRule(Box::new(parse(&rule)))),
        ("svc-1", ConfigSpec::VirtualService(parse(&routing))),
        ("ingress", ConfigSpec::Gateway(parse(&gateway))),
        ("ingress", ConfigSpec::VirtualService(parse(ingress))),
        ("scoped", ConfigSpec::Sidecar(parse(&scoped))),
        ("default", ConfigSpec::PeerAuthentication(parse(&peers))),
        (
            "deny-delete",
            ConfigSpec::AuthorizationPolicy(Box::new(parse(&authz))),
        ),
    ]
    .into_iter()
    .map(|(name, spec)| ConfigObject {
        meta: ConfigMeta {
            name: name.into(),
            namespace: "default".into(),
            ..Default::default()
        },
        spec,
    })
    .collect()
}

fn parse<T: serde::de::DeserializeOwned>(yaml: &str) -> T {
    serde_saphyr::from_str(yaml).unwrap()
}

/// The next model as the aggregate builds it: `before`'s services but the `removed` hosts,
/// with those of `changed` merged afresh, and every other object shared.
fn with_services(before: &Snapshot, changed: Vec<Registration>, removed: &[&str]) -> Snapshot {
    let fresh = snapshot_from(mock(changed)).unwrap();
    let mut services = before.services.clone();
    services.retain(|key, _| !removed.contains(&&*key.hostname));
    services.extend(fresh.services.clone());
    Snapshot::new(
        before.version + 1,
        services,
        Vec::new(),
        Vec::new(),
        before.config.clone(),
    )
}

fn unchanged(before: &Snapshot) -> Snapshot {
    with_services(before, Vec::new(), &[])
}

fn endpoints(before: &Snapshot) -> Snapshot {
    with_services(before, vec![registration(1, 3)], &[])
}

fn definition(before: &Snapshot) -> Snapshot {
    let svc_2 = registration(2, 2);
    let service = (*svc_2.service)
        .clone()
        .with_port("grpc", 9090, Protocol::Grpc);
    let svc_2 = Registration::new(service, svc_2.endpoints.to_vec());
    with_services(before, vec![svc_2], &[])
}

fn added(before: &Snapshot) -> Snapshot {
    with_services(before, vec![registration(3, 2)], &[])
}

fn removed(before: &Snapshot) -> Snapshot {
    with_services(before, Vec::new(), &["svc-2.default.svc.cluster.local"])
}

fn virtual_service(before: &Snapshot) -> Snapshot {
    edited(before, Kind::VirtualService)
}

fn destination_rule(before: &Snapshot) -> Snapshot {
    edited(before, Kind::DestinationRule)
}

fn gateway(before: &Snapshot) -> Snapshot {
    edited(before, Kind::Gateway)
}

fn scoping(before: &Snapshot) -> Snapshot {
    edited(before, Kind::Sidecar)
}

fn peer_authentication(before: &Snapshot) -> Snapshot {
    edited(before, Kind::PeerAuthentication)
}

fn authorization_policy(before: &Snapshot) -> Snapshot {
    edited(before, Kind::AuthorizationPolicy)
}

/// `before` with the object of `kind` changed, its services shared.
fn edited(before: &Snapshot, kind: Kind) -> Snapshot {
    let config = snapshot_with_config(mock(registrations()), config(Some(kind)))
        .unwrap()
        .config
        .clone();
    Snapshot::new(
        before.version + 1,
        before.services.clone(),
        Vec::new(),
        Vec::new(),
        config,
    )
}
