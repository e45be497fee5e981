//! Writes through kube's `Api`: create, replace, patches, status, delete, errors, Events.

use k8s_openapi::api::core::v1::{Event, ObjectReference, Service};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;
use wayfinder_kubernetes::fake::FakeApiServer;

use crate::{raw, service, virtual_service};

fn vs_resource() -> ApiResource {
    ApiResource {
        group: "networking.istio.io".into(),
        version: "v1".into(),
        api_version: "networking.istio.io/v1".into(),
        kind: "VirtualService".into(),
        plural: "virtualservices".into(),
    }
}

fn code(err: &kube::Error) -> (u16, String) {
    match err {
        kube::Error::Api(s) => (s.code, s.reason.clone()),
        other => panic!("not an API error: {other:?}"),
    }
}

#[tokio::test]
async fn virtual_service_create_replace_patch_status_delete() {
    let fake = FakeApiServer::start().await;
    let ar = vs_resource();
    let api: Api<DynamicObject> = Api::namespaced_with(fake.client(), "default", &ar);
    let body: DynamicObject =
        serde_json::from_value(virtual_service("default", "reviews", "reviews")).unwrap();

    let created = api.create(&PostParams::default(), &body).await.unwrap();
    let uid = created.metadata.uid.clone().unwrap();
    assert_eq!(created.metadata.generation, Some(1));
    assert_eq!(
        created.types.as_ref().unwrap().api_version,
        "networking.istio.io/v1"
    );
    assert_eq!(
        code(&api.create(&PostParams::default(), &body).await.unwrap_err()),
        (409, "AlreadyExists".into())
    );

    // Replace with the current resourceVersion; a stale one conflicts.
    let mut changed = created.clone();
    changed.data["spec"]["hosts"] = json!(["reviews", "reviews.example.com"]);
    let replaced = api
        .replace("reviews", &PostParams::default(), &changed)
        .await
        .unwrap();
    assert_eq!(replaced.metadata.uid.as_deref(), Some(uid.as_str()));
    assert_eq!(replaced.metadata.generation, Some(2));
    assert_ne!(
        replaced.metadata.resource_version,
        created.metadata.resource_version
    );
    assert_eq!(
        code(
            &api.replace("reviews", &PostParams::default(), &changed)
                .await
                .unwrap_err()
        ),
        (409, "Conflict".into())
    );

    // Merge patch on the object ignores status; the status subresource changes only status.
    let patch = json!({ "metadata": { "labels": { "team": "books" } }, "status": { "x": 1 } });
    let patched = api
        .patch("reviews", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    assert_eq!(patched.metadata.labels.as_ref().unwrap()["team"], "books");
    assert!(patched.data.get("status").is_none());
    assert_eq!(patched.metadata.generation, Some(2));
    let status =
        json!({ "status": { "validationMessages": [] }, "spec": { "hosts": ["ignored"] } });
    let with_status = api
        .patch_status("reviews", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    assert_eq!(
        with_status.data["status"],
        json!({ "validationMessages": [] })
    );
    assert_eq!(
        with_status.data["spec"]["hosts"],
        json!(["reviews", "reviews.example.com"])
    );
    let managers = with_status.metadata.managed_fields.unwrap();
    assert!(
        managers
            .iter()
            .any(|m| m.subresource.as_deref() == Some("status"))
    );
    let stored = fake
        .get(
            "networking.istio.io/v1alpha3",
            "VirtualService",
            Some("default"),
            "reviews",
        )
        .unwrap();
    assert_eq!(stored["apiVersion"], "networking.istio.io/v1alpha3");
    assert_eq!(stored["status"], json!({ "validationMessages": [] }));

    // A write that changes nothing takes no resourceVersion.
    let again = api
        .patch("reviews", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    assert_eq!(
        again.metadata.resource_version,
        with_status.metadata.resource_version
    );

    let deleted = api
        .delete("reviews", &DeleteParams::default())
        .await
        .unwrap();
    assert!(deleted.is_left());
    assert_eq!(
        code(
            &api.delete("reviews", &DeleteParams::default())
                .await
                .unwrap_err()
        ),
        (404, "NotFound".into())
    );
    assert_eq!(
        code(&api.get("reviews").await.unwrap_err()),
        (404, "NotFound".into())
    );
    let missing = api
        .patch("nope", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_err();
    assert_eq!(code(&missing).0, 404);
    assert!(fake.counts().writes >= 9);
}

#[tokio::test]
async fn errors_are_status_bodies() {
    let fake = FakeApiServer::start().await;
    let url = fake.url();
    let missing = raw::get(&url, "/api/v1/namespaces/a/services/x")
        .await
        .json()
        .await;
    assert_eq!(
        missing,
        json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "services \"x\" not found", "reason": "NotFound",
            "details": { "name": "x", "kind": "services" }, "code": 404,
        })
    );
    let no_name = raw::request(
        &url,
        "POST",
        "/api/v1/namespaces/a/services",
        Some((
            "application/json",
            r#"{"kind":"Service","apiVersion":"v1","metadata":{}}"#,
        )),
    )
    .await;
    assert_eq!(no_name.status, 422);
    let generated = raw::request(
        &url,
        "POST",
        "/api/v1/namespaces/a/pods",
        Some((
            "application/json",
            r#"{"metadata":{"generateName":"web-"}}"#,
        )),
    )
    .await;
    assert_eq!(generated.status, 201);
    let pod = generated.json().await;
    assert!(
        pod["metadata"]["name"]
            .as_str()
            .unwrap()
            .starts_with("web-")
    );
    assert_eq!(pod["status"]["phase"], "Pending");
    fake.apply(service("a", "s1", &[]));
    let apply = raw::request(
        &url,
        "PATCH",
        "/api/v1/namespaces/a/services/s1",
        Some(("application/apply-patch+yaml", "{}")),
    )
    .await;
    assert_eq!(apply.status, 415);
    let json_patch = r#"[{"op":"add","path":"/metadata/labels/x","value":"y"}]"#;
    let patched = raw::request(
        &url,
        "PATCH",
        "/api/v1/namespaces/a/services/s1",
        Some(("application/json-patch+json", json_patch)),
    )
    .await;
    assert_eq!(patched.status, 200);
    assert_eq!(patched.json().await["metadata"]["labels"]["x"], "y");
    let services: Api<Service> = Api::namespaced(fake.client(), "b");
    let wrong_ns: Service = serde_json::from_value(service("a", "s2", &[])).unwrap();
    assert_eq!(
        code(
            &services
                .create(&PostParams::default(), &wrong_ns)
                .await
                .unwrap_err()
        )
        .0,
        400
    );
    let unknown = raw::request(
        &url,
        "PUT",
        "/api/v1/services",
        Some(("application/json", "{}")),
    )
    .await;
    assert_eq!(unknown.status, 405);
}

#[tokio::test]
async fn finalizers_hold_a_delete_until_removed() {
    let fake = FakeApiServer::start().await;
    let mut svc = service("a", "s1", &[]);
    svc["metadata"]["finalizers"] = json!(["example.com/hold"]);
    fake.apply(svc);
    let services: Api<Service> = Api::namespaced(fake.client(), "a");
    let held = services
        .delete("s1", &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .unwrap();
    assert!(held.metadata.deletion_timestamp.is_some());
    assert!(fake.get("v1", "Service", Some("a"), "s1").is_some());
    let release = json!({ "metadata": { "finalizers": null } });
    services
        .patch("s1", &PatchParams::default(), &Patch::Merge(&release))
        .await
        .unwrap();
    assert!(fake.get("v1", "Service", Some("a"), "s1").is_none());
}

#[tokio::test]
async fn created_core_events_are_recorded() {
    let fake = FakeApiServer::start().await;
    let events: Api<Event> = Api::namespaced(fake.client(), "default");
    let event = Event {
        metadata: kube::api::ObjectMeta {
            generate_name: Some("reviews.".into()),
            ..Default::default()
        },
        involved_object: ObjectReference {
            kind: Some("Service".into()),
            name: Some("reviews".into()),
            namespace: Some("default".into()),
            ..Default::default()
        },
        reason: Some("Synced".into()),
        message: Some("reviews synced".into()),
        type_: Some("Normal".into()),
        ..Default::default()
    };
    let created = events.create(&PostParams::default(), &event).await.unwrap();
    assert!(created.metadata.name.unwrap().starts_with("reviews."));
    let recorded = fake.events();
    assert_eq!(recorded.len(), 1);
    assert_eq!(
        (
            recorded[0]["apiVersion"].as_str(),
            recorded[0]["kind"].as_str()
        ),
        (Some("v1"), Some("Event"))
    );
    assert_eq!(recorded[0]["reason"], "Synced");
    assert_eq!(fake.list("v1", "Event").len(), 1);
}
