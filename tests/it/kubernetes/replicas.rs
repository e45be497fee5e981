//! Two replicas against one API server, which is all they share (as istiod's): exactly one
//! leads (its `/debug/leaderz` and `wayfinder_leader` say so), an invalid object gets exactly
//! one Kubernetes Event for the deployment, and when the leader stops (SIGTERM by pid) the
//! other takes the Lease over and posts the Event for the next invalid object, without
//! posting the first one again. The leader alone removes the auto-registered WorkloadEntries a
//! gone replica left behind.

use serde_json::{Value, json};
use tokio::process::Command;
use wayfinder_kubernetes::fake::FakeApiServer;

use crate::support::binary::{Wayfinder, path};
use crate::support::eventually;

/// A replica named `pod` (`POD_NAME`, `POD_NAMESPACE` as the downward API sets them),
/// reading `fake`'s cluster as a registry and a config source.
async fn replica(
    fake: &FakeApiServer,
    dir: &std::path::Path,
    pod: &str,
    extra: &[&str],
) -> Wayfinder {
    let kubeconfig = fake.write_kubeconfig(dir, "east").display().to_string();
    let mut command = Command::new(path());
    command
        .env("POD_NAME", pod)
        .env("POD_NAMESPACE", "wayfinder-system");
    let mut args = super::config_source_args(&kubeconfig);
    args.extend_from_slice(extra);
    Wayfinder::start_in(command, "127.0.0.1:0", &args).await
}

/// A VirtualService the server refuses (a weight over 100).
fn invalid_vs(name: &str) -> Value {
    json!({
        "apiVersion": "networking.istio.io/v1",
        "kind": "VirtualService",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"hosts": ["reviews"], "http": [{"route": [
            {"destination": {"host": "reviews"}, "weight": 250}
        ]}]},
    })
}

/// The InvalidConfig Events on the VirtualService `name`.
fn events(fake: &FakeApiServer, name: &str) -> usize {
    fake.events()
        .iter()
        .filter(|e| e["involvedObject"]["name"] == name && e["reason"] == "InvalidConfig")
        .count()
}

/// Waits until `w`'s `/debug/configz` lists the VirtualService `name` as refused.
async fn refused(w: &Wayfinder, name: &str) {
    eventually(&format!("{name} refused on {}", w.http), || async {
        let z = w.json("/debug/configz").await;
        z["refused"]
            .as_array()?
            .iter()
            .any(|r| r["kind"] == "VirtualService" && r["name"] == name)
            .then_some(())
    })
    .await;
}

/// `/debug/leaderz` once the replica has read the Lease (it names a holder).
async fn leaderz(w: &Wayfinder) -> Value {
    eventually("the replica to have read the Lease", || async {
        let z = w.json("/debug/leaderz").await;
        (!z["holder"].as_str()?.is_empty()).then_some(z)
    })
    .await
}

#[tokio::test]
async fn one_replica_leads_writes_events_once_and_another_takes_over_when_it_stops() {
    let fake = FakeApiServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut replicas = vec![
        replica(&fake, dir.path(), "wayfinder-a", &[]).await,
        replica(&fake, dir.path(), "wayfinder-b", &[]).await,
    ];
    for w in &replicas {
        w.ready().await;
    }
    let (a, b) = (leaderz(&replicas[0]).await, leaderz(&replicas[1]).await);
    assert_eq!(a["lease"], "wayfinder-system/wayfinder-leader", "{a}");
    assert_eq!(
        (&a["identity"], &b["identity"]),
        (&json!("wayfinder-a"), &json!("wayfinder-b"))
    );
    assert_eq!(a["holder"], b["holder"], "{a} {b}");
    assert!(a["leader"] != b["leader"], "exactly one leads: {a} {b}");
    let leader = usize::from(b["leader"] == true);
    let holder = if leader == 0 {
        "wayfinder-a"
    } else {
        "wayfinder-b"
    };
    assert_eq!(a["holder"], holder, "the holder is the leader: {a}");
    let lease = fake
        .get(
            "coordination.k8s.io/v1",
            "Lease",
            Some("wayfinder-system"),
            "wayfinder-leader",
        )
        .expect("the Lease");
    assert_eq!(lease["spec"]["holderIdentity"], holder, "{lease}");
    let gauge = |w: &Wayfinder| {
        let w = w.monitoring;
        async move {
            let (_, text) = crate::support::binary::get(w, "/metrics").await;
            text.lines()
                .find_map(|l| {
                    l.strip_prefix("wayfinder_leader{lease=\"wayfinder-system/wayfinder-leader\"} ")
                })
                .map(str::to_owned)
        }
    };
    assert_eq!(gauge(&replicas[leader]).await.as_deref(), Some("1"));
    assert_eq!(gauge(&replicas[1 - leader]).await.as_deref(), Some("0"));

    // One invalid object, refused by both: one Event for the deployment.
    fake.apply(invalid_vs("bad-one"));
    for w in &replicas {
        refused(w, "bad-one").await;
    }
    eventually("the leader's Event", || async {
        (events(&fake, "bad-one") > 0).then_some(())
    })
    .await;
    assert_eq!(events(&fake, "bad-one"), 1, "{:#?}", fake.events());

    // The leader stops; the other takes over and posts the next object's Event.
    let status = replicas[leader].terminate().await;
    assert!(status.success(), "{status}");
    let follower = &replicas[1 - leader];
    let now = eventually("the other replica to lead", || async {
        let z = follower.json("/debug/leaderz").await;
        (z["leader"] == true).then_some(z)
    })
    .await;
    let other = if leader == 0 {
        "wayfinder-b"
    } else {
        "wayfinder-a"
    };
    assert_eq!(now["holder"], other, "{now}");
    assert_eq!(gauge(follower).await.as_deref(), Some("1"));
    fake.apply(invalid_vs("bad-two"));
    refused(follower, "bad-two").await;
    eventually("the new leader's Event", || async {
        (events(&fake, "bad-two") > 0).then_some(())
    })
    .await;
    assert_eq!(events(&fake, "bad-two"), 1, "{:#?}", fake.events());
    // The first object's Event was the old leader's: the new one found it and posted none.
    follower
        .wait_log("the new leader finding bad-one's Event", |l| {
            l["message"].as_str().is_some_and(|m| {
                m.contains("bad-one") && m.contains("posted by the previous leader")
            })
        })
        .await;
    assert_eq!(events(&fake, "bad-one"), 1, "{:#?}", fake.events());
}

/// A WorkloadEntry with `annotations`, as a replica's auto-registration leaves it.
fn entry(name: &str, annotations: Value) -> Value {
    json!({
        "apiVersion": "networking.istio.io/v1",
        "kind": "WorkloadEntry",
        "metadata": {"name": name, "namespace": "default", "annotations": annotations},
        "spec": {"address": "10.9.0.1"},
    })
}

fn exists(fake: &FakeApiServer, name: &str) -> bool {
    fake.get(
        "networking.istio.io/v1",
        "WorkloadEntry",
        Some("default"),
        name,
    )
    .is_some()
}

#[tokio::test]
async fn the_leader_removes_the_entries_of_a_replica_that_has_gone() {
    let fake = FakeApiServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let gone = "wayfinder-gone";
    let long_ago = "2026-01-01T00:00:00Z";
    // Disconnected long before the grace period, by a replica that stopped before deleting it.
    fake.apply(entry(
        "vm-disconnected",
        json!({"istio.io/autoRegistrationGroup": "vm", "istio.io/workloadController": gone,
               "istio.io/connectedAt": long_ago, "istio.io/disconnectedAt": long_ago}),
    ));
    // Connected longer than a connection lives: its replica died without a word.
    fake.apply(entry(
        "vm-lost",
        json!({"istio.io/autoRegistrationGroup": "vm", "istio.io/workloadController": gone,
               "istio.io/connectedAt": long_ago}),
    ));
    // Connected now (the API server's clock: its creation time).
    fake.apply(entry(
        "vm-connected",
        json!({"istio.io/autoRegistrationGroup": "vm"}),
    ));
    let created = fake
        .get(
            "networking.istio.io/v1",
            "WorkloadEntry",
            Some("default"),
            "vm-connected",
        )
        .unwrap()["metadata"]["creationTimestamp"]
        .clone();
    fake.apply(entry(
        "vm-connected",
        json!({"istio.io/autoRegistrationGroup": "vm", "istio.io/workloadController": gone,
               "istio.io/connectedAt": created}),
    ));
    // Written by someone else, not auto-registered: never the cleanup's.
    fake.apply(entry("db", json!({"istio.io/disconnectedAt": long_ago})));
    let extra = ["--workload-entry-grace-period", "100ms"];
    let replicas = [
        replica(&fake, dir.path(), "wayfinder-a", &extra).await,
        replica(&fake, dir.path(), "wayfinder-b", &extra).await,
    ];
    eventually("the gone replica's entries removed", || async {
        (!exists(&fake, "vm-disconnected") && !exists(&fake, "vm-lost")).then_some(())
    })
    .await;
    // One pass judged all four from one list.
    assert!(exists(&fake, "vm-connected") && exists(&fake, "db"));
    let removals = |w: &Wayfinder| {
        w.logs_matching(|l| {
            l["message"]
                .as_str()
                .is_some_and(|m| m.contains("removed an auto-registered WorkloadEntry"))
        })
        .len()
    };
    let leader = leaderz(&replicas[0]).await["leader"] == true;
    let (leader, follower) = match leader {
        true => (&replicas[0], &replicas[1]),
        false => (&replicas[1], &replicas[0]),
    };
    assert_eq!(removals(leader), 2, "the leader removed both");
    assert_eq!(removals(follower), 0, "the follower removed none");
}
