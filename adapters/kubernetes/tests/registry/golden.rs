//! Services, EndpointSlices, Pods and Nodes of a small cluster (`cluster.json`) into the model
//! (`model.golden.json`). `WAYFINDER_BLESS=1` rewrites the golden file.

use std::path::Path;

use wayfinder_kubernetes::Config;
use wayfinder_kubernetes::fake::FakeApiServer;

use crate::support::watch;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_objects_give_the_golden_model() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/registry");
    let objects: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(dir.join("cluster.json")).unwrap()).unwrap();
    let fake = FakeApiServer::start().await;
    fake.apply_many(objects);
    let mut regs = watch(&fake, Config::default()).reset().await;
    regs.sort_by_key(|r| r.key());
    let got = serde_json::to_string_pretty(&regs).unwrap() + "\n";
    let golden = dir.join("model.golden.json");
    if std::env::var("WAYFINDER_BLESS").as_deref() == Ok("1") {
        std::fs::write(&golden, &got).unwrap();
    }
    let want = std::fs::read_to_string(&golden).unwrap_or_default();
    assert!(
        got == want,
        "the model differs from {} (WAYFINDER_BLESS=1 rewrites it):\n{got}",
        golden.display()
    );
}
