//! Configuration errors document by document, against the binary: what is refused is listed
//! on `/debug/configz` with its own error until it is fixed, counted, and never takes another
//! document down with it; Istio's fields are accepted with a warning, security policies
//! refused; and `/debug/configz` pages and filters.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::support::binary::{Wayfinder, get, path};
use crate::support::eventually;
use crate::support::fixtures::{istio_file, write};

use super::DR;

fn vs(name: &str, host: &str, weight: u32) -> String {
    format!(
        "apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: {name}, namespace: default}}
spec:
  hosts: [{host}]
  http:
  - route:
    - destination: {{host: {host}}}
      weight: {weight}
"
    )
}

async fn start(dir: &Path) -> Wayfinder {
    let dir = dir.to_str().expect("a UTF-8 temporary path");
    let w = Wayfinder::start(&["--config-dir", dir, "--debounce-after", "10ms"]).await;
    w.ready().await;
    w
}

/// Waits until `/debug/configz` lists exactly `count` refusals; returns the page.
async fn refused(w: &Wayfinder, count: usize) -> Value {
    let what = format!("{count} refusals on /debug/configz");
    eventually(&what, || async {
        let z = w.json("/debug/configz").await;
        (z["refused"].as_array().map(Vec::len) == Some(count)).then_some(z)
    })
    .await
}

/// `(kind, name)` of every object in force on a configz page.
fn objects(z: &Value) -> Vec<(String, String)> {
    z["objects"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|o| {
            let text = |f: &str| o[f].as_str().unwrap_or_default().to_string();
            (text("kind"), text("name"))
        })
        .collect()
}

fn has(z: &Value, kind: &str, name: &str) -> bool {
    objects(z).contains(&(kind.to_string(), name.to_string()))
}

async fn rejected_configs(w: &Wayfinder) -> u64 {
    let (_, metrics) = get(w.monitoring, "/metrics").await;
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("pilot_total_rejected_configs "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no pilot_total_rejected_configs in {metrics}"))
}

#[tokio::test]
async fn a_bad_document_is_refused_alone_listed_with_its_place_until_fixed_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules.yaml");
    let file = |reviews_weight| {
        format!(
            "{DR}---\n{}---\n{}",
            vs("reviews", "reviews", reviews_weight),
            vs("ratings", "ratings", 100)
        )
    };
    write(dir.path(), "rules.yaml", &file(250));
    let w = start(dir.path()).await;

    // The second document is refused; the first and third are in force.
    let z = refused(&w, 1).await;
    assert!(has(&z, "DestinationRule", "reviews"), "{z}");
    assert!(has(&z, "VirtualService", "ratings"), "{z}");
    assert!(!has(&z, "VirtualService", "reviews"), "{z}");
    let entry = &z["refused"][0];
    assert_eq!(entry["source"], "config-dir");
    assert_eq!(entry["file"], rules.display().to_string());
    assert_eq!(entry["document"], 2);
    assert_eq!(
        (&entry["kind"], &entry["namespace"], &entry["name"]),
        (
            &Value::from("VirtualService"),
            &Value::from("default"),
            &Value::from("reviews")
        )
    );
    let error = entry["error"].as_str().unwrap();
    assert!(error.contains("spec.http[0].route[0].weight"), "{error}");
    assert_eq!(rejected_configs(&w).await, 1);

    // A syntax error in the first document of another file costs only that document; it is
    // reported once although two readers (the config source and the Config registry) read it.
    let broken = format!("kind: [unclosed\n---\n{}", vs("details", "details", 100));
    write(dir.path(), "broken.yaml", &broken);
    let z = refused(&w, 2).await;
    let syntax = z["refused"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["file"].as_str().unwrap().ends_with("broken.yaml"))
        .unwrap_or_else(|| panic!("{z}"));
    assert_eq!(
        (&syntax["document"], &syntax["line"]),
        (&1.into(), &1.into())
    );
    assert!(syntax["kind"].is_null(), "{syntax}");
    let details = eventually(
        "the details VirtualService after the broken one",
        || async {
            let z = w.json("/debug/configz?kind=VirtualService").await;
            has(&z, "VirtualService", "details").then_some(z)
        },
    )
    .await;
    assert!(has(&details, "VirtualService", "ratings"), "{details}");
    assert_eq!(rejected_configs(&w).await, 2);

    // Fixed: the entry leaves the list and the object is in force; the other stays listed.
    write(dir.path(), "rules.yaml", &file(100));
    let z = refused(&w, 1).await;
    assert!(
        z["refused"][0]["file"]
            .as_str()
            .unwrap()
            .ends_with("broken.yaml"),
        "{z}"
    );
    let reviews = eventually("the fixed reviews in force", || async {
        let z = w
            .json("/debug/configz?name=reviews&kind=VirtualService")
            .await;
        (z["total"] == 1).then_some(z)
    })
    .await;
    assert_eq!(
        reviews["objects"][0]["spec"]["http"][0]["route"][0]["weight"], 100,
        "{reviews}"
    );
    write(dir.path(), "broken.yaml", &vs("details", "details", 100));
    refused(&w, 0).await;
}

#[tokio::test]
async fn fields_of_istios_crds_warn_and_typos_are_refused_for_their_document_only() {
    let dir = tempfile::tempdir().unwrap();
    // Istio's own test file: four valid DestinationRules, three of them of one name (Istio's
    // CRD test applies each alone; together, the second and third are duplicates here).
    write(
        dir.path(),
        "destinationrule-valid.yaml",
        &istio_file("corpus/crdtest/destinationrule-valid.yaml"),
    );
    let typo = vs("ratings", "ratings", 100).replace("  hosts:", "  hostz: [x]\n  hosts:");
    write(
        dir.path(),
        "typo.yaml",
        &format!("{typo}---\n{}", vs("details", "details", 100)),
    );
    let w = start(dir.path()).await;

    let field = "spec.trafficPolicy.connectionPool.http.http2KeepAlive";
    let line = w
        .wait_log("the warning about http2KeepAlive", |l| {
            l["level"] == "WARN"
                && l["message"].as_str().is_some_and(|m| {
                    m.contains("DestinationRule default/bookinfo-ratings-http2-ping")
                        && m.contains(field)
                })
        })
        .await;
    assert!(
        line["message"]
            .as_str()
            .unwrap()
            .contains("not supported yet"),
        "{line}"
    );

    let z = refused(&w, 3).await;
    // Shown with the object, and its spec on request by name.
    let ping = w
        .json("/debug/configz?name=bookinfo-ratings-http2-ping")
        .await;
    let object = &ping["objects"][0];
    assert_eq!(object["kind"], "DestinationRule", "{ping}");
    assert!(
        object["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w.as_str().unwrap().starts_with(field)),
        "{object}"
    );
    assert_eq!(object["spec"]["host"], "ratings.prod.svc.cluster.local");
    // The first of the three of one name is in force, its warmup acted on (no warning).
    let first = w
        .json("/debug/configz?name=bookinfo-ratings&spec=false")
        .await;
    assert!(first["objects"][0]["spec"].is_null(), "{first}");
    assert_eq!(
        first["objects"][0]["warnings"],
        serde_json::json!([]),
        "{first}"
    );

    // The other two of that name are duplicates; the typo refuses its own document only.
    let refusals: Vec<(String, u64)> = z["refused"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let file = r["file"].as_str().unwrap();
            let name = Path::new(file).file_name().unwrap().to_string_lossy();
            (name.into_owned(), r["document"].as_u64().unwrap())
        })
        .collect();
    assert_eq!(
        refusals,
        [
            ("destinationrule-valid.yaml".to_string(), 2),
            ("destinationrule-valid.yaml".to_string(), 3),
            ("typo.yaml".to_string(), 1),
        ],
        "{z}"
    );
    let typo = &z["refused"][2];
    assert_eq!(typo["name"], "ratings");
    assert!(
        typo["error"]
            .as_str()
            .unwrap()
            .contains("spec.hostz: unknown field"),
        "{typo}"
    );
    assert!(has(&z, "VirtualService", "details"), "{z}");
    assert!(!has(&z, "VirtualService", "ratings"), "{z}");
}

/// An AuthorizationPolicy with the CUSTOM action, which wayfinder does not enforce yet.
const CUSTOM: &str = "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\n\
    metadata: {name: ext-authz, namespace: foo}\nspec:\n  action: CUSTOM\n  \
    provider: {name: my-authorizer}\n  rules: [{to: [{operation: {paths: [/admin]}}]}]\n";

#[tokio::test]
async fn security_policies_are_refused_not_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let policy = CUSTOM;
    write(
        dir.path(),
        "mesh.yaml",
        &format!("{}---\n{policy}", vs("reviews", "reviews", 100)),
    );

    let out = Command::new(path())
        .arg("validate")
        .arg(dir.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("AuthorizationPolicy foo/ext-authz")
            && text.contains("CUSTOM needs an external authorizer"),
        "{text}"
    );

    let w = start(dir.path()).await;
    let line = w
        .wait_log("the refusal's log line", |l| {
            l["level"] == "WARN"
                && l["error"]
                    .as_str()
                    .is_some_and(|m| m.contains("CUSTOM needs an external authorizer"))
        })
        .await;
    assert!(
        line["error"]
            .as_str()
            .unwrap()
            .contains("mesh.yaml: document 2"),
        "{line}"
    );
    let z = refused(&w, 1).await;
    let entry = &z["refused"][0];
    assert_eq!(
        (&entry["kind"], &entry["namespace"], &entry["name"]),
        (
            &Value::from("AuthorizationPolicy"),
            &Value::from("foo"),
            &Value::from("ext-authz")
        ),
        "{z}"
    );
    assert!(
        has(&z, "VirtualService", "reviews"),
        "the rest of the file is read: {z}"
    );
}

#[tokio::test]
async fn configz_lists_objects_by_name_a_page_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let many: Vec<String> = (0..250)
        .map(|i| vs(&format!("vs-{i:03}"), &format!("h{i}.example.com"), 100))
        .collect();
    write(dir.path(), "many.yaml", &many.join("---\n"));
    write(dir.path(), "dr.yaml", DR);
    let w = start(dir.path()).await;

    let z = eventually("251 objects", || async {
        let z = w.json("/debug/configz").await;
        (z["total"] == 251).then_some(z)
    })
    .await;
    let page = z["objects"].as_array().unwrap();
    assert_eq!(page.len(), 100, "100 objects by default");
    assert_eq!(z["next"], 100);
    assert!(
        page.iter().all(|o| o.get("spec").is_none()),
        "no specs by default"
    );
    assert_eq!(page[0]["name"], "vs-000", "by kind, namespace, name");
    let origin = page[0]["origin"].as_str().unwrap();
    assert!(
        origin.ends_with("many.yaml: document 1 (line 1)"),
        "{origin}"
    );

    let last = w.json("/debug/configz?start=200").await;
    assert_eq!(last["objects"].as_array().unwrap().len(), 51);
    assert!(last["next"].is_null(), "{}", last["next"]);
    assert_eq!(last["objects"][49]["name"], "vs-249");
    assert_eq!(last["objects"][50]["kind"], "DestinationRule");

    let drs = w.json("/debug/configz?kind=DestinationRule").await;
    assert_eq!(
        (&drs["total"], &drs["objects"][0]["name"]),
        (&1.into(), &"reviews".into())
    );
    let one = w
        .json("/debug/configz?kind=VirtualService&namespace=default&name=vs-007")
        .await;
    assert_eq!(one["total"], 1);
    assert_eq!(one["objects"][0]["spec"]["hosts"][0], "h7.example.com");

    let specs = w
        .json("/debug/configz?kind=VirtualService&spec=true&limit=500")
        .await;
    let specs = specs["objects"].as_array().unwrap();
    assert_eq!(specs.len(), 20, "at most 20 objects with their specs");
    assert!(specs.iter().all(|o| o["spec"]["hosts"].is_array()));
    let small = w.json("/debug/configz?limit=7&start=3").await;
    assert_eq!(small["objects"].as_array().unwrap().len(), 7);
    assert_eq!(small["next"], 10);
}

#[tokio::test]
async fn workload_groups_are_validated_as_istio_validates_them() {
    let dir = tempfile::tempdir().unwrap();
    // Istio's own dataset object: accepted, its template address ignored with a warning.
    write(
        dir.path(),
        "wg.yaml",
        &istio_file("corpus/dataset/networking-v1-WorkloadGroup.yaml"),
    );
    // A probe with two handlers: refused, with its place.
    write(
        dir.path(),
        "bad.yaml",
        "apiVersion: networking.istio.io/v1beta1\nkind: WorkloadGroup\n\
         metadata: {name: bad, namespace: default}\nspec:\n  template: {}\n  \
         probe: {tcpSocket: {port: 80}, exec: {command: [true]}}\n",
    );
    let out = Command::new(path())
        .arg("validate")
        .arg(dir.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("bad.yaml: document 1 (line 1): WorkloadGroup default/bad: spec.probe: needs exactly one of httpGet, tcpSocket and exec"),
        "{text}"
    );
    assert!(
        text.contains("WorkloadGroup default/reviews: spec.template.address: ignored"),
        "{text}"
    );
    assert!(text.contains("1 error, 1 warning"), "{text}");

    // The server keeps the good one in force and lists the bad one as refused.
    let w = start(dir.path()).await;
    let z = refused(&w, 1).await;
    assert!(
        objects(&z).contains(&("WorkloadGroup".to_string(), "reviews".to_string())),
        "{z}"
    );
    assert!(
        z["refused"][0]["file"]
            .as_str()
            .unwrap()
            .contains("bad.yaml"),
        "{z}"
    );
}
