//! `/version`, discovery documents and the kubeconfig the fake writes.

use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, ListParams};
use wayfinder_kubernetes::fake::FakeApiServer;

use crate::{raw, service};

#[tokio::test]
async fn version_discovery_and_kubeconfig() {
    let fake = FakeApiServer::start().await;
    let client = fake.client();
    let version = client.apiserver_version().await.unwrap();
    assert_eq!(
        (version.major.as_str(), version.minor.as_str()),
        ("1", "33")
    );
    let discovery = kube::Discovery::new(client).run().await.unwrap();
    assert!(discovery.has_group("networking.istio.io") && discovery.has_group("discovery.k8s.io"));
    let (vs, caps) = discovery
        .resolve_gvk(&kube::api::GroupVersionKind::gvk(
            "networking.istio.io",
            "v1",
            "VirtualService",
        ))
        .unwrap();
    assert_eq!(vs.plural, "virtualservices");
    assert_eq!(caps.scope, kube::discovery::Scope::Namespaced);
    let missing = raw::get(&fake.url(), "/apis/example.com/v1/widgets").await;
    assert_eq!(missing.status, 404);
    assert_eq!(missing.json().await["reason"], "NotFound");

    let dir = std::env::temp_dir().join(format!("fake-api-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = fake.write_kubeconfig(&dir, "east");
    let kubeconfig = kube::config::Kubeconfig::read_from(&path).unwrap();
    let options = kube::config::KubeConfigOptions::default();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .unwrap();
    assert_eq!(config.default_namespace, "default");
    let client = kube::Client::try_from(config).unwrap();
    fake.apply(service("default", "s1", &[]));
    let services: Api<Service> = Api::default_namespaced(client);
    assert_eq!(
        services
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        1
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
