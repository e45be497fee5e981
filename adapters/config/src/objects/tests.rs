//! The config source's model without a watch: files in, events and errors out. A stand-in
//! validator rejects objects labelled `broken`, so the per-object rules are tested whatever
//! the real validator's rules are.

mod security;

use std::path::{Path, PathBuf};

use wayfinder_registry::RegistryError;

use super::decode::{self, Item, Judged};
use super::state::ConfigState;
use crate::documents::Origin;
use crate::model::{FileKey, Model};
use crate::validate::Problem;
use crate::{ConfigEvent, ConfigKey, ConfigObject, ConfigSpec, Kind};

fn problem(fatal: bool, field: &str, message: &str) -> Problem {
    Problem {
        field: field.into(),
        message: message.into(),
        fatal,
    }
}

/// Rejects an object labelled `broken` with two fatal problems and a warning, and warns about
/// one labelled `odd`.
fn stand_in(object: &ConfigObject) -> Vec<Problem> {
    let mut problems = Vec::new();
    if object.meta.labels.contains_key("broken") {
        problems.push(problem(true, "spec.hosts[0]", "not a host"));
        problems.push(problem(false, "spec.exportTo", "ignored"));
        problems.push(problem(true, "spec.http[0].route[0].weight", "too heavy"));
    }
    if object.meta.labels.contains_key("odd") {
        problems.push(problem(false, "spec.gateways", "odd"));
    }
    problems
}

fn vs(name: &str, host: &str, labels: &str) -> String {
    format!(
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: {name}\n  labels: {{{labels}}}\nspec:\n  hosts: [{host}]\n"
    )
}

fn key(name: &str) -> ConfigKey {
    ConfigKey {
        kind: Kind::VirtualService,
        namespace: "default".into(),
        name: name.into(),
    }
}

fn file(index: usize, name: &str) -> FileKey {
    (index, PathBuf::from("/cfg").join(name))
}

fn hosts(object: &ConfigObject) -> Vec<String> {
    match &object.spec {
        ConfigSpec::VirtualService(vs) => vs.hosts.clone(),
        other => panic!("not a VirtualService: {other:?}"),
    }
}

struct Fixture {
    state: ConfigState,
}

impl Fixture {
    fn new() -> Self {
        Self {
            state: ConfigState::new(stand_in),
        }
    }

    fn apply(&mut self, file: &FileKey, text: Option<&str>) -> Vec<RegistryError> {
        self.state.apply(file, text.map(str::as_bytes))
    }

    fn commit(&mut self, first: bool) -> (Vec<ConfigEvent>, Vec<RegistryError>) {
        self.state.commit(first)
    }

    /// The events of a commit but for the refused list, and the list when it was sent:
    /// `(document, name)` of each refusal.
    #[allow(clippy::type_complexity)]
    fn changes(
        &mut self,
    ) -> (
        Vec<ConfigEvent>,
        Option<Vec<(Option<usize>, Option<String>)>>,
    ) {
        let (events, _) = self.commit(false);
        split(events)
    }
}

/// Events but for `Refused`, and the refused list's `(document, name)`s when one was sent.
#[allow(clippy::type_complexity)]
fn split(
    events: Vec<ConfigEvent>,
) -> (
    Vec<ConfigEvent>,
    Option<Vec<(Option<usize>, Option<String>)>>,
) {
    let mut refused = None;
    let mut rest = Vec::new();
    for event in events {
        match event {
            ConfigEvent::Refused(list) => {
                let list = list
                    .iter()
                    .map(|r| (r.document, r.name.as_deref().map(str::to_string)))
                    .collect();
                refused = Some(list);
            }
            other => rest.push(other),
        }
    }
    (rest, refused)
}

fn named(document: usize, name: &str) -> (Option<usize>, Option<String>) {
    (Some(document), Some(name.to_string()))
}

#[test]
fn a_rejection_names_the_object_and_lists_every_fatal_problem() {
    let origin = Origin {
        path: Path::new("/cfg/vs.yaml").into(),
        document: 2,
        line: 9,
    };
    let object = ConfigObject {
        meta: crate::ConfigMeta {
            name: "reviews".into(),
            namespace: "default".into(),
            labels: [("broken".to_string(), String::new())].into(),
            ..Default::default()
        },
        spec: ConfigSpec::VirtualService(Default::default()),
    };
    let mut judged = Judged {
        origin,
        problems: stand_in(&object),
        object: object.into(),
    };
    assert_eq!(
        judged.rejection(),
        Some(RegistryError::Invalid {
            origin: "/cfg/vs.yaml: document 2 (line 9)".into(),
            detail: "VirtualService default/reviews: spec.hosts[0]: not a host; \
                     spec.http[0].route[0].weight: too heavy"
                .into(),
        })
    );
    assert_eq!(judged.warnings().count(), 1);

    judged.problems.retain(|p| !p.fatal);
    assert_eq!(judged.rejection(), None);
}

#[test]
fn a_rejected_object_keeps_its_last_good_version_until_fixed_or_deleted() {
    let mut f = Fixture::new();
    let a = file(0, "vs.yaml");
    let good = format!(
        "{}---\n{}",
        vs("one", "one.example.com", ""),
        vs("two", "two.example.com", "")
    );
    assert_eq!(f.apply(&a, Some(&good)), vec![]);
    let (events, errors) = f.commit(true);
    assert!(errors.is_empty());
    let [ConfigEvent::Reset(objects)] = &events[..] else {
        panic!("{events:?}")
    };
    assert_eq!(objects.len(), 2);

    // `one` changes, `two` breaks: one Upsert, one error, `two` stays as it was.
    let edited = format!(
        "{}---\n{}",
        vs("one", "uno.example.com", ""),
        vs("two", "broken.example.com", "broken: x")
    );
    let errors = f.apply(&a, Some(&edited));
    let [RegistryError::Invalid { origin, detail }] = &errors[..] else {
        panic!("{errors:?}")
    };
    assert_eq!(origin, "/cfg/vs.yaml: document 2 (line 9)");
    assert!(
        detail.starts_with("VirtualService default/two: spec.hosts[0]: not a host"),
        "{detail}"
    );
    let (events, composed) = f.commit(false);
    assert!(composed.is_empty());
    let (events, refused) = split(events);
    let [ConfigEvent::Upsert(one)] = &events[..] else {
        panic!("{events:?}")
    };
    assert_eq!(hosts(one), vec!["uno.example.com"]);
    assert_eq!(
        refused,
        Some(vec![named(2, "two")]),
        "refused with its document"
    );

    // Fixed as it was: nothing changed for the consumer but the refused list, now empty.
    let fixed = format!(
        "{}---\n{}",
        vs("one", "uno.example.com", ""),
        vs("two", "two.example.com", "")
    );
    assert_eq!(f.apply(&a, Some(&fixed)), vec![]);
    assert_eq!(f.changes(), (vec![], Some(vec![])));

    // Broken again, then deleted from the file while broken: removed.
    f.apply(&a, Some(&edited));
    assert_eq!(f.changes(), (vec![], Some(vec![named(2, "two")])));
    assert_eq!(f.apply(&a, Some(&vs("one", "uno.example.com", ""))), vec![]);
    let removed = (vec![ConfigEvent::Remove(key("two"))], Some(vec![]));
    assert_eq!(f.changes(), removed);

    // A new object that is broken from the start is not used at all.
    let errors = f.apply(&a, Some(&edited));
    assert_eq!(errors.len(), 1);
    assert_eq!(f.changes(), (vec![], Some(vec![named(2, "two")])));

    // Deleting the file removes what it had, and what it had refused.
    assert_eq!(f.apply(&a, None), vec![]);
    let removed = (vec![ConfigEvent::Remove(key("one"))], Some(vec![]));
    assert_eq!(f.changes(), removed);
}

#[test]
fn a_document_that_does_not_parse_costs_only_itself() {
    let mut f = Fixture::new();
    let a = file(0, "vs.yaml");
    let two = format!(
        "{}---\n{}",
        vs("one", "one.example.com", ""),
        vs("two", "two.example.com", "")
    );
    f.apply(&a, Some(&two));
    f.commit(true);
    // `one` changes; the second document breaks so that it does not say which object it
    // holds: `two`, the object it may have been, stays.
    let bad = format!(
        "{}---\nkind: [unclosed\n",
        vs("one", "changed.example.com", "")
    );
    let errors = f.apply(&a, Some(&bad));
    let [RegistryError::Malformed { origin, .. }] = &errors[..] else {
        panic!("{errors:?}")
    };
    assert!(
        origin.starts_with("/cfg/vs.yaml: document 2 (line "),
        "{origin}"
    );
    let (events, refused) = f.changes();
    let [ConfigEvent::Upsert(one)] = &events[..] else {
        panic!("{events:?}")
    };
    assert_eq!(hosts(one), vec!["changed.example.com"]);
    assert_eq!(refused, Some(vec![(Some(2), None)]));

    let wrong_type = vs("one", "one.example.com", "").replace(
        "hosts: [one.example.com]",
        "hosts: [a]\n  http: [{route: [{destination: {host: a}, weight: heavy}]}]",
    );
    let errors = f.apply(&a, Some(&wrong_type));
    let [RegistryError::Malformed { origin, detail }] = &errors[..] else {
        panic!("{errors:?}")
    };
    assert_eq!(origin, "/cfg/vs.yaml: document 1 (line 8)");
    assert!(detail.contains("invalid i32"), "{detail}");
    // A wrong type still says which object it is: `one` keeps its last good version, and
    // `two`, gone from a file that now parses up to its objects' names, is removed.
    let (events, refused) = f.changes();
    assert_eq!(events, vec![ConfigEvent::Remove(key("two"))]);
    assert_eq!(refused, Some(vec![named(1, "one")]));
}

#[test]
fn moving_an_object_is_not_a_change_but_the_next_change_carries_its_new_origin() {
    let mut f = Fixture::new();
    let a = file(0, "vs.yaml");
    f.apply(&a, Some(&vs("one", "one.example.com", "")));
    f.commit(true);
    let moved = format!("# a comment\n\n{}", vs("one", "one.example.com", ""));
    f.apply(&a, Some(&moved));
    assert_eq!(f.commit(false), (vec![], vec![]));

    let changed = format!("# a comment\n\n{}", vs("one", "uno.example.com", ""));
    f.apply(&a, Some(&changed));
    let (events, _) = f.commit(false);
    let [ConfigEvent::Upsert(one)] = &events[..] else {
        panic!("{events:?}")
    };
    assert_eq!(&*one.meta.origin, "/cfg/vs.yaml: document 1 (line 3)");
}

#[test]
fn an_object_moved_to_another_file_is_announced_with_its_new_origin() {
    let mut f = Fixture::new();
    let (a, b) = (file(0, "a.yaml"), file(1, "b.yaml"));
    f.apply(&a, Some(&vs("one", "one.example.com", "")));
    f.commit(true);
    f.apply(&a, None);
    f.apply(&b, Some(&vs("one", "one.example.com", "")));
    let (events, _) = f.commit(false);
    let [ConfigEvent::Upsert(one)] = &events[..] else {
        panic!("{events:?}")
    };
    assert_eq!(&*one.meta.origin, "/cfg/b.yaml: document 1 (line 1)");
}

#[test]
fn the_first_of_two_objects_with_one_key_wins_and_the_other_is_reported() {
    let mut f = Fixture::new();
    let (a, b) = (file(0, "a.yaml"), file(1, "b.yaml"));
    f.apply(&a, Some(&vs("dup", "a.example.com", "")));
    f.apply(&b, Some(&vs("dup", "b.example.com", "")));
    let (events, errors) = f.commit(true);
    let (events, refused) = split(events);
    let [ConfigEvent::Reset(objects)] = &events[..] else {
        panic!("{events:?}")
    };
    assert_eq!(hosts(&objects[0]), vec!["a.example.com"]);
    assert_eq!(refused, Some(vec![named(1, "dup")]));
    assert_eq!(
        errors,
        vec![RegistryError::Invalid {
            origin: "/cfg/b.yaml: document 1 (line 1)".into(),
            detail: "duplicate VirtualService default/dup, first defined at \
                     /cfg/a.yaml: document 1 (line 1)"
                .into(),
        }]
    );

    // The first one goes: the other takes its place.
    f.apply(&a, None);
    let (events, errors) = f.commit(false);
    assert!(errors.is_empty());
    let (events, refused) = split(events);
    assert_eq!(refused, Some(vec![]));
    let [ConfigEvent::Upsert(dup)] = &events[..] else {
        panic!("{events:?}")
    };
    assert_eq!(hosts(dup), vec!["b.example.com"]);
}

#[test]
fn warnings_do_not_reject_and_unnamed_objects_do() {
    let mut f = Fixture::new();
    let a = file(0, "vs.yaml");
    let text = format!(
        "{}---\n{}",
        vs("one", "one.example.com", "odd: x"),
        vs("\"\"", "x.example.com", "")
    );
    let errors = f.apply(&a, Some(&text));
    let [RegistryError::Invalid { detail, .. }] = &errors[..] else {
        panic!("{errors:?}")
    };
    assert!(detail.contains("metadata.name: "), "{detail}");
    let (events, _) = f.commit(true);
    let (events, refused) = split(events);
    assert_eq!(refused, Some(vec![named(2, "")]));
    let [ConfigEvent::Reset(objects)] = &events[..] else {
        panic!("{events:?}")
    };
    assert_eq!(objects.len(), 1);
}

#[test]
fn kinds_versions_and_metadata_are_read_like_the_registry_reads_them() {
    let text = "\
apiVersion: networking.istio.io/v1alpha3
kind: DestinationRule
metadata:
  name: reviews
  namespace: shop
  uid: 0b7c6a6e
  annotations: {note: kept}
spec:
  host: reviews
status: {anything: [1]}
---
apiVersion: networking.istio.io/v1beta1
kind: Gateway
metadata: {name: gw}
spec:
  servers: [{port: {number: 80, protocol: HTTP}, hosts: ['*']}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: se}
spec: {not: read here}
---
apiVersion: networking.istio.io/v1
kind: EnvoyFilter
metadata: {name: ef}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: cm}
";
    let items = decode::read(Path::new("x.yaml"), text.as_bytes(), stand_in);
    let [
        Item::Object(dr),
        Item::Object(gw),
        Item::Registry,
        Item::Unknown { origin, meta },
        Item::Unknown { .. },
    ] = &items[..]
    else {
        panic!("{items:#?}")
    };
    assert_eq!(dr.object.key().to_string(), "DestinationRule shop/reviews");
    assert_eq!(dr.object.meta.annotations["note"], "kept");
    assert_eq!(&*dr.object.meta.origin, "x.yaml: document 1 (line 1)");
    assert_eq!(gw.object.key().to_string(), "Gateway default/gw");
    assert_eq!(origin.to_string(), "x.yaml: document 4 (line 23)");
    let warning = decode::unknown_kind(meta);
    assert!(
        warning.contains("EnvoyFilter (networking.istio.io/v1)"),
        "{warning}"
    );

    // A field nobody defines rejects its object alone; one Istio defines is a warning.
    let strict = text
        .replace("host: reviews", "host: reviews\n  hostt: typo")
        .replace("{name: gw}\nspec:\n", "{name: gw}\nspec:\n  colour: red\n");
    let items = decode::read(Path::new("x.yaml"), strict.as_bytes(), stand_in);
    let [Item::Object(dr), Item::Object(gw), ..] = &items[..] else {
        panic!("{items:#?}")
    };
    let err = dr
        .rejection()
        .expect("the typo rejects the DestinationRule");
    assert!(
        err.to_string().contains("spec.hostt: unknown field"),
        "{err}"
    );
    assert!(gw.rejection().is_some(), "{:?}", gw.problems);
    let istio = text.replace(
        "host: reviews",
        "host: reviews\n  trafficPolicy:\n    connectionPool:\n      http:\n        http2KeepAlive: {interval: 15s}",
    );
    let items = decode::read(Path::new("x.yaml"), istio.as_bytes(), stand_in);
    let [Item::Object(dr), ..] = &items[..] else {
        panic!("{items:#?}")
    };
    assert_eq!(dr.rejection(), None);
    assert_eq!(
        *dr.object.meta.warnings,
        [
            "spec.trafficPolicy.connectionPool.http.http2KeepAlive: not supported yet: wayfinder \
          ignores this field"
        ]
    );
}

/// What a file of VirtualServices costs once read: each object holds its lists at their
/// lengths, not at the room serde grew them to (a memory bound: 75,000 VirtualServices held
/// three times their rules' size before).
#[test]
fn objects_read_hold_no_spare_room() {
    let yaml = "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  \
                name: reviews\nspec:\n  hosts: [reviews]\n  http:\n  - match:\n    \
                - headers: {end-user: {exact: tester}}\n    route:\n    \
                - destination: {host: canary}\n  - route:\n    \
                - destination: {host: reviews}\n      weight: 90\n    \
                - destination: {host: old}\n      weight: 10\n";
    let items = decode::read(Path::new("/cfg/vs.yaml"), yaml.as_bytes(), stand_in);
    let [Item::Object(judged)] = items.as_slice() else {
        panic!("one object expected: {items:?}");
    };
    let ConfigSpec::VirtualService(vs) = &judged.object.spec else {
        panic!("not a VirtualService");
    };
    let capacities = (
        vs.hosts.capacity(),
        vs.http.capacity(),
        vs.http[0].matches.capacity(),
        vs.http[0].route.capacity(),
        vs.http[1].route.capacity(),
    );
    assert_eq!(capacities, (1, 2, 1, 1, 2));
}
