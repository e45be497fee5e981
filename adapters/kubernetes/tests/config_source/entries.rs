//! ServiceEntry and WorkloadEntry objects read from the API give the registrations the same
//! objects give in a file read by the File registry.

use std::path::PathBuf;

use serde_json::{Value, json};
use wayfinder_kubernetes::fake::FakeApiServer;
use wayfinder_registry::{CancellationToken, Event, Registration, Registry, RegistryId};

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

/// The objects as a File registry reads them from one JSON file (a `kind: List`).
async fn from_a_file(objects: &[Value]) -> Vec<Registration> {
    let dir = std::env::temp_dir().join(format!(
        "wayfinder-config-source-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let path: PathBuf = dir.join("objects.json");
    let list = json!({"apiVersion": "v1", "kind": "List", "items": objects});
    std::fs::write(&path, list.to_string()).unwrap();
    let config = wayfinder_file::Config {
        paths: vec![path],
        ..Default::default()
    };
    let registry = config.build(RegistryId::new("File")).unwrap();
    let shutdown = CancellationToken::new();
    let mut stream = Box::new(registry).watch(shutdown.clone());
    let first = tokio::time::timeout(
        crate::support::DEADLINE,
        futures::StreamExt::next(&mut stream),
    )
    .await
    .unwrap();
    shutdown.cancel();
    std::fs::remove_dir_all(&dir).unwrap();
    match first {
        Some(Ok(Event::Reset(registrations))) => registrations,
        other => panic!("the File registry's first item: {other:?}"),
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
    assert_eq!(registrations, from_a_file(&objects).await);
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
        from_a_file(&[objects[0].clone(), objects[2].clone()]).await[0]
    );
    items.stop().await;
}
