//! A raw ADS client against the in-process server over the Kubernetes registry: scaling a
//! deployment is an EDS push only; a Service port change reaches CDS, LDS and RDS.

use std::collections::{BTreeMap, BTreeSet};

use wayfinder::xds::TypeUrl::{Cluster as CDS, Endpoint as EDS, Listener as LDS, Route as RDS};
use wayfinder::xds::pb::endpoint::ClusterLoadAssignment;
use wayfinder::xds::pb::route::RouteConfiguration;
use wayfinder_kubernetes::fake::FakeApiServer;
use wayfinder_kubernetes::fixtures::service;
use wayfinder_kubernetes::{Config, KubernetesRegistry};
use wayfinder_registry::RegistryId;

use crate::support::ads::{Ads, decode_all, names_of, sidecar};
use crate::support::fixtures::cluster;
use crate::support::inproc;

fn names(r: &wayfinder::xds::pb::discovery::DiscoveryResponse) -> BTreeSet<String> {
    names_of(r).into_iter().collect()
}

#[tokio::test]
async fn scaling_is_an_eds_push_only_and_a_port_change_reaches_cds_lds_rds() {
    let fake = FakeApiServer::start().await;
    fake.apply(service(
        "default",
        "db",
        "10.96.0.11",
        &[("tcp", 5432, 5432)],
    ));
    super::web(&fake, 1, 2);
    let registry = KubernetesRegistry::new(
        RegistryId::new("Kubernetes"),
        fake.client(),
        "Kubernetes",
        &Config::default(),
    );
    let srv = inproc::start_with(vec![Box::new(registry)]).await;
    let mut ads = Ads::connect(
        srv.grpc_addr.expect("a plaintext port"),
        sidecar("10.9.0.1", "default"),
    )
    .await;
    let web = cluster("web");
    let mut rds = None;
    for (t, ask) in [
        (CDS, vec![]),
        (EDS, vec![web.as_str()]),
        (LDS, vec![]),
        (RDS, vec!["8080"]),
    ] {
        ads.subscribe(t, &ask).await;
        let r = ads.recv_type(t).await;
        ads.ack(&r, &ask).await;
        rds = Some(r);
    }
    let rds = rds.unwrap();

    // The deployment scales: one EDS push, with three endpoints.
    fake.apply(super::web_slice(1, 3));
    let r = ads.recv().await;
    assert_eq!(
        (r.type_url.as_str(), names(&r)),
        (EDS.as_str(), BTreeSet::from([web.clone()]))
    );
    let cla: ClusterLoadAssignment = decode_all(&r).remove(&web).unwrap();
    assert_eq!(
        cla.endpoints
            .iter()
            .map(|l| l.lb_endpoints.len())
            .sum::<usize>(),
        3
    );
    ads.ack(&r, &[&web]).await;
    // Fence: the next scaling's push comes next, so nothing else was sent in between.
    fake.apply(super::web_slice(1, 1));
    let r = ads.recv().await;
    assert_eq!(
        (r.type_url.as_str(), names(&r)),
        (EDS.as_str(), BTreeSet::from([web.clone()]))
    );
    ads.ack(&r, &[&web]).await;

    // The Service's port changes from 8080 to 8081: new clusters and listeners, in that
    // order, and a route configuration for the new port with web's virtual host.
    fake.apply(service(
        "default",
        "web",
        "10.96.0.10",
        &[("http", 8081, 9080)],
    ));
    let new = "outbound|8081||web.default.svc.cluster.local";
    let mut order = Vec::new();
    let (mut cds, mut lds) = (None, None);
    while lds.is_none() {
        let r = ads.recv().await;
        order.push(r.type_url.rsplit('.').next().unwrap().to_string());
        if r.type_url == CDS.as_str() {
            cds = Some(r);
        } else if r.type_url == LDS.as_str() {
            lds = Some(r);
        }
    }
    let (cds, lds) = (cds.expect("clusters before listeners"), lds.unwrap());
    assert_eq!(
        order.first().map(String::as_str),
        Some("Cluster"),
        "{order:?}"
    );
    let clusters = names(&cds);
    assert!(
        clusters.contains(new) && !clusters.contains(&web),
        "{clusters:?}"
    );
    let listeners = names(&lds);
    assert!(
        listeners.iter().any(|n| n.ends_with("_8081")),
        "{listeners:?}"
    );
    ads.ack(&cds, &[]).await;
    ads.ack(&lds, &[]).await;
    ads.resubscribe(&rds, &["8081"]).await;
    let r = ads.recv_type(RDS).await;
    let routes: BTreeMap<String, RouteConfiguration> = decode_all(&r);
    let hosts: Vec<&str> = routes["8081"]
        .virtual_hosts
        .iter()
        .map(|v| v.name.as_str())
        .collect();
    assert!(
        hosts.contains(&"web.default.svc.cluster.local:8081"),
        "{hosts:?}"
    );
    srv.shutdown();
}
