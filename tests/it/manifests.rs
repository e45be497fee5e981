//! The Kubernetes manifests (`deploy/kubernetes`: the base and the overlays `single-cluster`
//! and `secondary`), rendered by kubectl's kustomize and checked against the code.
//!
//! - **RBAC, derived from the code, exact both ways.** Two sources of the API calls the
//!   server makes: a static scan of the source ([`calls`]: every `Api<T>` kind, Istio kind
//!   table and `ApiResource` with the kube verbs called on them, `watcher` being list and
//!   watch), which also covers a code path a run would not reach; and a run ([`run`]): the
//!   real binary against two in-process API servers (a primary and a secondary cluster) that
//!   record every request as RBAC names it (verb, group, resource), while the server does
//!   every kind of thing it does with a cluster (watches, an Event, a VM's WorkloadEntry
//!   written and deleted, TokenReviews, Secrets, a SubjectAccessReview). The primary's
//!   recorded calls must be exactly the scan's (the scan misses nothing the run sees, the run
//!   reaches every call the scan finds), and the base's ClusterRole must grant exactly them:
//!   no call missing, no grant unused. The secondary's reader role must grant exactly the
//!   scanned calls made of every cluster (the files of the registry, the Secrets and the
//!   access review, which `src/registries.rs` runs per cluster), and the secondary's recorded
//!   calls must be among them. A new watch without a rule fails; so does a rule the code no
//!   longer needs. The example gateway's Role grants exactly what the access review asks
//!   about its service account.
//! - **The scan itself**, over a tree of its own: a new `Api<ConfigMap>` watch is seen and
//!   missing from the ClusterRole; an unknown kind, a raw request and verbs on no kind fail it.
//! - **A planted missing verb is caught**: each verb of each rule is removed in turn, and the
//!   check reports exactly the calls that verb granted, and nothing else.
//! - **Ports against the flags**: the Deployment's args are parsed with the binary's own flag
//!   definitions ([`ports`]), and the container ports, probes, Services and the agents'
//!   discovery addresses must agree with them.
//! - **`kubectl apply --dry-run=client`** of the base and each overlay, against the
//!   in-process API server (whose discovery serves the kinds the manifests hold, for
//!   kubectl's REST mapping): every object is accepted. `--validate=false`, because the fake
//!   serves no OpenAPI schema to validate against (kubectl fails asking for it); the shape of
//!   the objects is checked by kubectl's decoding and by the tests above.
//!
//! kubectl is `.tools/bin/kubectl` (or `$WAYFINDER_KUBECTL`); without it these tests skip
//! with a notice, and fail under `WAYFINDER_REQUIRE_TOOLS=1`.

mod calls;
mod ports;
mod rbac;
mod render;
mod run;

use std::collections::BTreeSet;

use wayfinder_kubernetes::fake::{Call, FakeApiServer};

use self::calls::call;
use self::rbac::{Verdict, check, rules};
use self::render::{KUSTOMIZATIONS, container, find, kustomize, objects, pod_spec, root};
use crate::tools::kubectl;

/// The files whose calls are made of every cluster, the secondaries' too (`src/registries.rs`
/// builds the registry, the Secrets and the access review per cluster; the rest for the
/// primary only).
const EVERY_CLUSTER: [&str; 4] = [
    "adapters/kubernetes/src/watch.rs",
    "adapters/kubernetes/src/watch/streams.rs",
    "adapters/kubernetes/src/secrets.rs",
    "adapters/kubernetes/src/access_review.rs",
];

/// The scan's calls: (all of them, those made of every cluster).
fn scanned() -> (BTreeSet<Call>, BTreeSet<Call>) {
    let by_file = calls::scan(&root()).unwrap_or_else(|p| panic!("the scan: {p:#?}"));
    for file in EVERY_CLUSTER {
        assert!(
            by_file.contains_key(std::path::Path::new(file)),
            "{file} makes no call: {by_file:#?}"
        );
    }
    let all = by_file.values().flatten().cloned().collect();
    let every = by_file
        .iter()
        .filter(|(f, _)| {
            EVERY_CLUSTER
                .iter()
                .any(|e| f.as_path() == std::path::Path::new(e))
        })
        .flat_map(|(_, c)| c.iter().cloned())
        .collect();
    (all, every)
}

#[test]
fn the_scan_finds_the_calls_of_the_code() {
    let (all, every) = scanned();
    // Spot checks of the scan itself, one per way it finds a call.
    for expected in [
        call("watch", "discovery.k8s.io", "endpointslices"),
        call("list", "", "nodes"),
        call("watch", "networking.istio.io", "virtualservices"),
        call("list", "security.istio.io", "peerauthentications"),
        call("create", "", "events"),
        call("patch", "networking.istio.io", "workloadentries/status"),
        call("delete", "networking.istio.io", "workloadentries"),
        call("create", "authentication.k8s.io", "tokenreviews"),
    ] {
        assert!(all.contains(&expected), "{expected:?} not found: {all:#?}");
    }
    assert!(every.contains(&call(
        "create",
        "authorization.k8s.io",
        "subjectaccessreviews"
    )));
    assert!(
        !every.contains(&call("create", "", "events")),
        "the primary's only"
    );
}

/// The scan over a tree of its own: a new watch is seen (and then missing from the
/// ClusterRole), and what it cannot attribute fails it.
#[test]
fn the_scan_sees_a_new_watch_and_refuses_what_it_cannot_read() {
    let tree = tempfile::tempdir().unwrap();
    let file = |path: &str, text: &str| {
        let path = tree.path().join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    file(
        "adapters/kubernetes/src/maps.rs",
        "use k8s_openapi::api::core::v1::ConfigMap as Map;\n\
         fn watch(client: kube::Client) { let api: Api<Map> = Api::all(client); \
         let _ = watcher(api, Default::default()); }\n\
         #[cfg(test)] mod tests { fn t(api: Api<Secret>) { api.delete(\"x\", &p); } }",
    );
    file(
        "src/lib.rs",
        "fn unrelated(map: &HashMap<u8, u8>) { map.get(&1); }",
    );
    let found = calls::scan(tree.path()).unwrap();
    let new: BTreeSet<Call> = found.values().flatten().cloned().collect();
    let expected = BTreeSet::from([
        call("list", "", "configmaps"),
        call("watch", "", "configmaps"),
    ]);
    assert_eq!(
        new, expected,
        "the watch, its alias read, the test module left out"
    );
    if let Some(kubectl) = kubectl() {
        let (mut all, _) = scanned();
        all.extend(new);
        let objects = objects(&kustomize(&kubectl, KUSTOMIZATIONS[0]));
        let verdict = check(&rules(&objects, "ClusterRole", "wayfinder"), &all);
        assert_eq!(
            verdict.missing, expected,
            "a new watch without a rule fails"
        );
    }

    file(
        "src/raw.rs",
        "fn raw(client: kube::Client) { client.request_text(req); }",
    );
    file(
        "src/odd.rs",
        "fn odd(c: kube::Client) { let api: Api<Widget> = Api::all(c); }",
    );
    file(
        "src/lost.rs",
        "fn lost(api: Handle) { api.create(&p, &o); }",
    );
    let problems = calls::scan(tree.path()).unwrap_err().join("\n");
    for expected in [
        "src/raw.rs: .request_text",
        "src/odd.rs: Api<Widget>",
        "src/lost.rs: verbs",
    ] {
        assert!(problems.contains(expected), "{expected} in:\n{problems}");
    }
}

#[test]
fn rbac_grants_exactly_the_calls_of_the_code_and_a_missing_verb_is_caught() {
    let Some(kubectl) = kubectl() else { return };
    let (all, every) = scanned();
    for dir in &KUSTOMIZATIONS[..2] {
        let objects = objects(&kustomize(&kubectl, dir));
        let role = rules(&objects, "ClusterRole", "wayfinder");
        assert_eq!(
            check(&role, &all),
            Verdict::default(),
            "{dir}: ClusterRole wayfinder"
        );
        planted(&role, &all);
        // The example gateway: what the access review asks of its service account.
        let gateway = rules(&objects, "Role", "istio-ingressgateway-sds");
        let asked = BTreeSet::from([call("list", "", "secrets")]);
        assert_eq!(
            check(&gateway, &asked),
            Verdict::default(),
            "{dir}: the gateway's Role"
        );
    }
    let objects = objects(&kustomize(&kubectl, KUSTOMIZATIONS[2]));
    let reader = rules(&objects, "ClusterRole", "wayfinder-reader");
    assert_eq!(
        check(&reader, &every),
        Verdict::default(),
        "secondary: wayfinder-reader"
    );
    planted(&reader, &every);
    assert!(
        !objects
            .iter()
            .any(|o| o["kind"] == "Deployment" || o["kind"] == "Service"),
        "a secondary runs no control plane"
    );
}

/// Removes each verb of each rule in turn: the check must report exactly the calls that
/// verb granted as missing, and nothing unused.
fn planted(role: &[rbac::Rule], calls: &BTreeSet<Call>) {
    let mut planted = 0;
    for (i, rule) in role.iter().enumerate() {
        for verb in &rule.verbs {
            let mut broken = role.to_vec();
            broken[i].verbs.retain(|v| v != verb);
            let lost: BTreeSet<Call> = calls
                .iter()
                .filter(|c| {
                    c.verb == *verb
                        && rule.groups.contains(&c.group)
                        && rule.resources.contains(&c.resource)
                })
                .cloned()
                .collect();
            assert!(!lost.is_empty(), "rule {i} grants {verb} for nothing");
            let verdict = check(&broken, calls);
            assert_eq!(verdict.missing, lost, "without {verb} in rule {i}");
            assert!(verdict.unused.is_empty(), "without {verb} in rule {i}");
            planted += 1;
        }
    }
    assert!(planted > 5, "{planted} verbs planted missing");
}

#[tokio::test]
async fn the_server_s_calls_to_both_clusters_are_granted_and_found_by_the_scan() {
    let Some(kubectl) = kubectl() else { return };
    let (all, every) = scanned();
    let (primary, secondary) = run::record().await;
    let unseen: Vec<&Call> = primary
        .union(&secondary)
        .filter(|c| !all.contains(c))
        .collect();
    assert!(
        unseen.is_empty(),
        "calls the scan does not see: {unseen:#?}"
    );
    // And the run reaches every call the scan finds: the two sources agree exactly.
    let missed: Vec<&Call> = all.iter().filter(|c| !primary.contains(c)).collect();
    assert!(missed.is_empty(), "calls the run never made: {missed:#?}");
    let stray: Vec<&Call> = secondary.iter().filter(|c| !every.contains(c)).collect();
    assert!(
        stray.is_empty(),
        "calls to a secondary beyond its role's: {stray:#?}"
    );
    let base = objects(&kustomize(&kubectl, KUSTOMIZATIONS[0]));
    let role = rules(&base, "ClusterRole", "wayfinder");
    assert_eq!(
        check(&role, &primary),
        Verdict::default(),
        "the primary's calls"
    );
    let remote = objects(&kustomize(&kubectl, KUSTOMIZATIONS[2]));
    let reader = rules(&remote, "ClusterRole", "wayfinder-reader");
    assert!(
        check(&reader, &secondary).missing.is_empty(),
        "{:#?}",
        check(&reader, &secondary)
    );
}

#[test]
fn ports_probes_and_services_agree_with_the_flags() {
    let Some(kubectl) = kubectl() else { return };
    for dir in &KUSTOMIZATIONS[..2] {
        let objects = objects(&kustomize(&kubectl, dir));
        let server = ports::check_server(&objects);
        ports::check_services(&objects);
        let gateway = pod_spec(find(&objects, "Deployment", "istio-ingressgateway"));
        ports::check_agent(&objects, gateway, "istio-proxy", &server);
        let sidecar = pod_spec(find(&objects, "PodTemplate", "wayfinder-sidecar-injection"));
        ports::check_agent(&objects, sidecar, "istio-proxy", &server);
        let init = container(sidecar, "istio-init");
        assert_eq!(init["image"], "wayfinder:dev-proxy");
        let deployment = find(&objects, "Deployment", "wayfinder");
        assert_eq!(deployment["spec"]["replicas"], 2, "{dir}");
        let pdb = find(&objects, "PodDisruptionBudget", "wayfinder");
        assert_eq!(pdb["spec"]["selector"]["matchLabels"]["app"], "wayfinder");
        let hpa = find(&objects, "HorizontalPodAutoscaler", "wayfinder");
        assert_eq!(hpa["spec"]["scaleTargetRef"]["name"], "wayfinder");
        assert_eq!(hpa["spec"]["minReplicas"], 2);
    }
}

#[tokio::test]
async fn kubectl_apply_dry_run_accepts_every_object() {
    let Some(kubectl) = kubectl() else { return };
    let fake = FakeApiServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = fake.write_kubeconfig(dir.path(), "fake");
    for kustomization in KUSTOMIZATIONS {
        let rendered = objects(&kustomize(&kubectl, kustomization));
        let out = tokio::process::Command::new(&kubectl)
            .args(["apply", "--dry-run=client", "--validate=false", "-k"])
            .arg(root().join(kustomization))
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .env("HOME", dir.path())
            .output()
            .await
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "kubectl apply -k {kustomization}: {}\n{stdout}",
            String::from_utf8_lossy(&out.stderr)
        );
        for object in &rendered {
            let kind = object["kind"].as_str().unwrap().to_lowercase();
            let name = object["metadata"]["name"].as_str().unwrap();
            let line = format!("/{name} created (dry run)");
            assert!(
                stdout.lines().any(|l| {
                    let rest = l.strip_prefix(&kind).unwrap_or_default();
                    (rest.starts_with('/') || rest.starts_with('.')) && l.ends_with(&line)
                }),
                "{kustomization}: {kind} {name} not accepted:\n{stdout}"
            );
        }
        assert_eq!(stdout.lines().count(), rendered.len(), "{stdout}");
    }
    assert_eq!(fake.counts().writes, 0, "a dry run writes nothing");
}
