//! Core `v1` Secrets: served like the other built-in kinds, without a status subresource, and
//! selectable by `type` as on a real server.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};
use wayfinder_kubernetes::fake::FakeApiServer;

use crate::raw;

fn secret(ns: &str, name: &str, type_: Option<&str>) -> Value {
    let mut object = json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": { "name": name, "namespace": ns },
        "data": { "tls.crt": "Q0VSVA==" },
    });
    if let Some(type_) = type_ {
        object["type"] = json!(type_);
    }
    object
}

#[tokio::test]
async fn secrets_are_selected_by_type() {
    let fake = FakeApiServer::start().await;
    fake.apply_many([
        secret("a", "tls", Some("kubernetes.io/tls")),
        secret("a", "token", Some("kubernetes.io/service-account-token")),
        secret("b", "helm", Some("helm.sh/release.v1")),
        secret("b", "opaque", Some("Opaque")),
        secret("b", "untyped", None),
    ]);
    let secrets: Api<Secret> = Api::all(fake.client());
    let names = |fields: &'static str| {
        let secrets = secrets.clone();
        async move {
            let list = secrets
                .list(&ListParams::default().fields(fields))
                .await
                .unwrap();
            list.items
                .into_iter()
                .map(|s| s.metadata.name.unwrap())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        names("type!=helm.sh/release.v1,type!=kubernetes.io/service-account-token").await,
        ["tls", "opaque", "untyped"]
    );
    assert_eq!(names("type=kubernetes.io/tls").await, ["tls"]);
    // The fake does no defaulting: an untyped Secret is not `Opaque` (a real server's would be).
    assert_eq!(names("type=Opaque").await, ["opaque"]);
    let tls = Api::<Secret>::namespaced(fake.client(), "a")
        .get("tls")
        .await
        .unwrap();
    assert_eq!(
        tls.data.unwrap()["tls.crt"],
        ByteString(b"CERT".to_vec()),
        "data is base64 on the wire"
    );
    let err = secrets
        .list(&ListParams::default().fields("data.tls.crt=x"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 400),
        "{err:?}"
    );
}

#[tokio::test]
async fn secrets_are_created_over_http_and_have_no_status_subresource() {
    let fake = FakeApiServer::start().await;
    let secrets: Api<Secret> = Api::namespaced(fake.client(), "a");
    let created = secrets
        .create(
            &PostParams::default(),
            &Secret {
                metadata: kube::api::ObjectMeta {
                    name: Some("tls".into()),
                    ..Default::default()
                },
                data: Some(BTreeMap::from([(
                    "tls.key".to_owned(),
                    ByteString(b"KEY".to_vec()),
                )])),
                type_: Some("kubernetes.io/tls".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(created.type_.as_deref(), Some("kubernetes.io/tls"));
    let stored = fake.get("v1", "Secret", Some("a"), "tls").unwrap();
    assert_eq!(stored["data"]["tls.key"], "S0VZ");
    let status = raw::get(&fake.url(), "/api/v1/namespaces/a/secrets/tls/status").await;
    assert_eq!(status.status, 404);
    let list = raw::get(&fake.url(), "/api/v1/secrets").await;
    let list = list.json().await;
    assert_eq!(list["kind"], "SecretList");
    assert!(
        list["items"][0].get("kind").is_none(),
        "items of built-in kinds carry no kind"
    );
}
