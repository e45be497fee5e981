//! ServiceEntry and WorkloadEntry objects read from the API give the registrations the same
//! objects give in a file read by the File registry's model.

use std::path::PathBuf;

use serde_json::{Value, json};
use wayfinder_config::model::{Model, Services};
use wayfinder_kubernetes::fake::FakeApiServer;
use wayfinder_registry::{Event, Registration};

use crate::support::{Items, entries};

fn service_entry() -> Value {
    json!({
        "apiVersion": "networking.istio.io/v1",
        "kind": "ServiceEntry",
        "metadata": {"name": "db", "namespace": "data", "labels": {"team": "storage"}},
        "spec": {
            "hosts": ["db.example.com"],
            "addresses": ["240.0.0.10"],
            "location": "MESH_INTERNAL",
            "resolution": "STATIC",
            "ports": [{"number": 5432, "name": "tcp-pg"}, {"number": 8080, "name": "http-admin"}],
            "workloadSelector": {"labels": {"app": "db"}},
        },
    })
}

fn workload_entry(name: &str, namespace: &str, address: &str) -> Value {
    json!({
        "apiVersion": "networking.istio.io/v1",
        "kind": "WorkloadEntry",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "address": address,
            "labels": {"app": "db", "version": "v1"},
            "ports": {"tcp-pg": 15432},
            "locality": "eu-west/zone-a",
            "serviceAccount": "db",
        },
    })
}

/// The objects as the File registry reads them from one JSON file (a `kind: List`): the
/// bytes the registry would read, given to the model it gives them to.
fn from_a_file(objects: &[Value]) -> Vec<Registration> {
    let list = json!({"apiVersion": "v1", "kind": "List", "items": objects});
    let mut model = Services::new(false);
    let file = (0, PathBuf::from("/config/objects.json"));
    let errors = model.apply(&file, Some(list.to_string().as_bytes()));
    assert!(errors.is_empty(), "{errors:?}");
    match model.commit(true) {
        (events, errors) if errors.is_empty() => match <[Event; 1]>::try_from(events) {
            Ok([Event::Reset(registrations)]) => registrations,
            other => panic!("the model's first events: {other:?}"),
        },
        (_, errors) => panic!("the model's errors: {errors:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_give_the_registrations_a_file_of_the_same_objects_gives() {
    let objects = [
        service_entry(),
        workload_entry("db-1", "data", "10.0.0.5"),
        workload_entry("db-2", "data", "10.0.0.6"),
        // Another namespace's workload is not selected.
        workload_entry("db-3", "other", "10.0.0.7"),
    ];
    let fake = FakeApiServer::start().await;
    for object in &objects {
        fake.apply(object.clone());
    }
    let mut items: Items<Event> = entries(fake.client());
    let registrations = items.reset().await;
    assert_eq!(registrations, from_a_file(&objects));
    let [db] = registrations.as_slice() else {
        panic!("one service expected: {registrations:#?}");
    };
    assert_eq!(&*db.service.hostname, "db.example.com");
    assert_eq!(db.endpoints.len(), 2);

    // A workload leaves: the service is sent again with the other endpoint only.
    assert!(fake.delete(
        "networking.istio.io/v1",
        "WorkloadEntry",
        Some("data"),
        "db-1"
    ));
    let (event, errors) = items.next_ok().await;
    assert!(errors.is_empty(), "{errors:?}");
    let Event::Upsert(db) = event else {
        panic!("expected db's Upsert, got {event:?}");
    };
    let addresses: Vec<&str> = db.endpoints.iter().map(|e| &*e.address).collect();
    assert_eq!(addresses, ["10.0.0.6"]);
    assert_eq!(
        db,
        from_a_file(&[objects[0].clone(), objects[2].clone()])[0]
    );
    items.stop().await;
}
