//! The models fed with one-line JSON blobs, as the Kubernetes config source feeds them: the
//! same results as files give, origins that are the blobs' names, the same health rules.

use std::path::PathBuf;

use wayfinder_registry::{Event, RegistryError};

use super::Feed;
use crate::model::Model;
use crate::services::Services;
use crate::{ConfigEvent, ConfigObject, ConfigSpec};

const REVIEWS: &str = "/apis/networking.istio.io/v1/namespaces/default/virtualservices/reviews";
const RATINGS: &str = "/apis/networking.istio.io/v1/namespaces/default/virtualservices/ratings";

/// A VirtualService as the API server writes it: compact JSON (the file crate has no JSON
/// serializer, so it is spelled out).
fn vs(name: &str, weight: i64) -> String {
    vs_with(name, weight, "")
}

/// [`vs`] with more `spec` fields (`,"key":value`).
fn vs_with(name: &str, weight: i64, extra: &str) -> String {
    format!(
        r#"{{"apiVersion":"networking.istio.io/v1","kind":"VirtualService","metadata":{{"name":"{name}","namespace":"default","uid":"u-1","resourceVersion":"7"}},"spec":{{"hosts":["{name}"],"http":[{{"route":[{{"destination":{{"host":"{name}"}},"weight":{weight}}}]}}]{extra}}}}}"#
    )
}

fn bytes(text: &str) -> &[u8] {
    text.as_bytes()
}

fn weight(object: &ConfigObject) -> Option<i32> {
    match &object.spec {
        ConfigSpec::VirtualService(vs) => vs.http[0].route[0].weight,
        other => panic!("not a VirtualService: {other:?}"),
    }
}

#[test]
fn config_objects_are_validated_named_by_their_blob_and_keep_their_last_good_version() {
    let mut feed = Feed::config();
    assert!(
        feed.apply(REVIEWS, Some(bytes(&vs("reviews", 100))))
            .is_empty()
    );
    assert!(
        feed.apply(RATINGS, Some(bytes(&vs("ratings", 100))))
            .is_empty()
    );
    let items = feed.commit();
    let [Ok(ConfigEvent::Reset(objects))] = items.as_slice() else {
        panic!("expected a Reset, got {items:?}");
    };
    let origins: Vec<&str> = objects.iter().map(|o| &*o.meta.origin).collect();
    assert_eq!(origins, [RATINGS, REVIEWS]);

    let errors = feed.apply(REVIEWS, Some(bytes(&vs("reviews", 120))));
    let want = RegistryError::Invalid {
        origin: REVIEWS.into(),
        detail: "VirtualService default/reviews: spec.http[0].route[0].weight: \
                 weight 120 is out of range 0..=100"
            .into(),
    };
    assert_eq!(errors, std::slice::from_ref(&want));
    let items = feed.commit();
    let [Ok(ConfigEvent::Refused(refused)), Err(err)] = items.as_slice() else {
        panic!("the refused list and the error, and no change: {items:?}");
    };
    assert_eq!(*err, want, "the last good version stays");
    assert_eq!(refused.len(), 1);
    assert_eq!(&*refused[0].file, REVIEWS);
    assert_eq!(
        (refused[0].document, refused[0].name.as_deref()),
        (None, Some("reviews")),
        "a one-line blob is named alone"
    );

    feed.apply(REVIEWS, Some(bytes(&vs("reviews", 100))));
    let items = feed.commit();
    assert!(
        matches!(items.as_slice(), [Ok(ConfigEvent::Refused(r))] if r.is_empty()),
        "the same content again is no change, and nothing is refused: {items:?}"
    );

    feed.apply(RATINGS, None);
    assert_eq!(
        feed.commit(),
        [Ok(ConfigEvent::Remove(
            objects[0].key() // ratings
        ))]
    );
}

#[test]
fn a_fixed_object_is_upserted_and_malformed_blobs_are_named_too() {
    let mut feed = Feed::config();
    feed.apply(REVIEWS, Some(bytes(&vs("reviews", 120))));
    let items = feed.commit();
    assert!(
        matches!(items.as_slice(), [Ok(ConfigEvent::Reset(o)), Ok(ConfigEvent::Refused(_)), Err(_)] if o.is_empty()),
        "{items:?}"
    );
    feed.apply(REVIEWS, Some(bytes(&vs("reviews", 100))));
    let items = feed.commit();
    let [Ok(ConfigEvent::Upsert(object)), Ok(ConfigEvent::Refused(_))] = items.as_slice() else {
        panic!("expected an Upsert, got {items:?}");
    };
    assert_eq!(weight(object), Some(100));
    assert_eq!(&*object.meta.origin, REVIEWS);

    let typo = vs_with("reviews", 100, r#","colour":"red""#);
    let errors = feed.apply(REVIEWS, Some(bytes(&typo)));
    assert!(
        matches!(&errors[..], [RegistryError::Invalid { origin, detail }]
            if origin == REVIEWS && detail.contains("spec.colour: unknown field")),
        "{errors:?}"
    );
    let bad = vs_with("reviews", 100, r#","hosts":"not a list""#);
    let errors = feed.apply(REVIEWS, Some(bytes(&bad)));
    assert!(
        matches!(&errors[..], [RegistryError::Malformed { origin, .. }] if origin == REVIEWS),
        "{errors:?}"
    );
}

#[test]
fn failures_of_the_caller_are_items_until_cleared_then_recovered() {
    let mut feed = Feed::config();
    let down = RegistryError::Unavailable {
        origin: "watch".into(),
        detail: "503".into(),
    };
    assert_eq!(feed.fail("watch", down.clone()), [Err(down.clone())]);
    feed.apply(REVIEWS, Some(bytes(&vs("reviews", 100))));
    let items = feed.commit();
    assert!(
        matches!(items.as_slice(), [Ok(ConfigEvent::Reset(_)), Err(e)] if *e == down),
        "a change while a failure is outstanding repeats it: {items:?}"
    );
    assert!(feed.commit().is_empty(), "still failing, nothing changed");
    feed.clear("watch");
    assert!(matches!(
        feed.commit().as_slice(),
        [Ok(ConfigEvent::Recovered)]
    ));
}

#[test]
fn entries_give_the_registrations_the_same_objects_give_in_a_file() {
    let entry = concat!(
        r#"{"apiVersion":"networking.istio.io/v1","kind":"ServiceEntry","#,
        r#""metadata":{"name":"db","namespace":"data","uid":"u-2"},"#,
        r#""spec":{"hosts":["db.example.com"],"location":"MESH_INTERNAL","resolution":"STATIC","#,
        r#""ports":[{"number":5432,"name":"tcp-pg"}],"workloadSelector":{"labels":{"app":"db"}}}}"#,
    );
    let workload = concat!(
        r#"{"apiVersion":"networking.istio.io/v1","kind":"WorkloadEntry","#,
        r#""metadata":{"name":"db-1","namespace":"data"},"#,
        r#""spec":{"address":"10.0.0.5","labels":{"app":"db"},"locality":"r/z"}}"#,
    );
    let mut feed = Feed::entries();
    feed.apply("se/db", Some(bytes(entry)));
    feed.apply("we/db-1", Some(bytes(workload)));
    let fed = feed.commit();

    let mut file = Services::default();
    let text = format!("{entry}\n---\n{workload}\n");
    let path = (0, PathBuf::from("/etc/istio/db.yaml"));
    assert!(file.apply(&path, Some(text.as_bytes())).is_empty());
    let (events, _) = file.commit(true);

    let [Ok(Event::Reset(registrations))] = fed.as_slice() else {
        panic!("expected a Reset, got {fed:?}");
    };
    assert_eq!(registrations.len(), 1);
    assert_eq!(registrations[0].endpoints.len(), 1);
    assert_eq!(events, [Event::Reset(registrations.clone())]);
}
