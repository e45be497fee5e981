//! Every seed of `fuzz/corpus/TARGET/` through its target, without libFuzzer: the harness
//! works, the seeds read as intended, and inputs that once crashed (kept there once fixed)
//! stay fixed.

use std::fs;
use std::path::{Path, PathBuf};

use wayfinder_registry::Event;

fn seeds(target: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target);
    let mut seeds: Vec<_> = fs::read_dir(&dir)
        .and_then(|entries| entries.map(|e| e.map(|e| e.path())).collect())
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    seeds.sort();
    assert!(seeds.len() >= 3, "{}: too few seeds", dir.display());
    seeds
}

fn seed(target: &str, name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target)
        .join(name);
    fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn replay(target: &str, run: impl Fn(&[u8])) {
    for path in seeds(target) {
        let data = fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        eprintln!("{target}: {}", path.display());
        run(&data);
    }
}

/// The hostnames a stream's first `Reset` holds.
fn reset_hosts(items: &[Result<Event, wayfinder_registry::RegistryError>]) -> Vec<String> {
    let reset = items.iter().find_map(|item| match item {
        Ok(Event::Reset(all)) => Some(all),
        _ => None,
    });
    let mut hosts: Vec<String> = reset
        .unwrap_or_else(|| panic!("no Reset in {items:?}"))
        .iter()
        .map(|r| r.service.hostname.to_string())
        .collect();
    hosts.sort();
    hosts
}

#[test]
fn config_seeds_parse_and_a_broken_edit_is_reported() {
    replay("config", |data| {
        wayfinder_fuzz::config(data);
    });
    assert_eq!(
        wayfinder_fuzz::config(&seed("config", "golden-config.yaml")),
        0
    );
    assert!(wayfinder_fuzz::config(&seed("config", "edits-two-files.yaml")) > 0);
}

#[test]
fn consul_seeds_reach_the_model() {
    replay("consul", |data| {
        wayfinder_fuzz::consul(data);
    });
    let items = wayfinder_fuzz::consul(&seed("consul", "sync-two-datacenters-then-changes"));
    assert_eq!(
        reset_hosts(&items),
        [
            "api.service.consul",
            "redis.default.svc.cluster.local",
            // web-1 in namespace `shop` (its meta), web-2 in `default`.
            "web.service.consul",
            "web.service.consul"
        ]
    );
    assert!(
        items
            .iter()
            .any(|i| matches!(i, Ok(Event::Remove(k)) if k.hostname.starts_with("redis"))),
        "redis leaves the catalog: {items:?}"
    );
}

#[test]
fn eureka_seeds_reach_the_model() {
    replay("eureka", |data| {
        wayfinder_fuzz::eureka(data);
    });
    let items = wayfinder_fuzz::eureka(&seed("eureka", "full-then-deltas"));
    assert_eq!(reset_hosts(&items), ["ratings", "reviews"]);
    assert!(
        items
            .iter()
            .filter(|i| matches!(i, Ok(Event::Upsert(_))))
            .count()
            >= 2,
        "the deltas change services: {items:?}"
    );
}

#[test]
fn ads_seeds_are_served_and_bad_streams_refused() {
    replay("ads", |data| {
        let _ = wayfinder_fuzz::ads(data);
    });
    for name in [
        "sotw-sidecar-session",
        "sotw-sidecar-session-in-7-byte-frames",
    ] {
        let sent = wayfinder_fuzz::ads(&seed("ads", name));
        // Four types asked, a new name, then the push of the second snapshot.
        assert!(matches!(sent, Ok(n) if n >= 5), "{name}: {sent:?}");
    }
    let delta = wayfinder_fuzz::ads(&seed("ads", "delta-sidecar-session"));
    assert!(matches!(delta, Ok(n) if n >= 3), "{delta:?}");
    let refused = wayfinder_fuzz::ads(&seed("ads", "sotw-first-request-without-node"));
    assert_eq!(
        refused.map_err(|s| s.code()),
        Err(tonic::Code::InvalidArgument)
    );
    // The target's limits are small enough for its inputs to reach them.
    let refused = wayfinder_fuzz::ads(&seed("ads", "sotw-too-many-names"));
    assert_eq!(
        refused.map_err(|s| s.code()),
        Err(tonic::Code::ResourceExhausted)
    );
}
