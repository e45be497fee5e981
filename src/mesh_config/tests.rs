//! The file over the flags, and what a change keeps.

use std::time::Duration;

use super::*;

fn flags() -> MeshSettings {
    MeshSettings {
        trust_domain: "flags.local".into(),
        root_namespace: "flags-root".into(),
        ..Default::default()
    }
}

fn config(yaml: &str) -> MeshConfig {
    mesh_config::parse(yaml).unwrap().config
}

#[test]
fn what_the_file_sets_wins_and_the_flags_are_the_defaults() {
    let empty = overlay(&flags(), &MeshConfig::default(), None);
    assert_eq!(empty, flags());
    let set = overlay(
        &flags(),
        &config(
            "rootNamespace: mesh-root\ntrustDomain: mesh.local\n\
             outboundTrafficPolicy: {mode: REGISTRY_ONLY}\nenableAutoMtls: false\n\
             connectTimeout: 250ms\nlocalityLbSetting: {enabled: false}\n",
        ),
        None,
    );
    assert_eq!(&*set.root_namespace, "mesh-root");
    assert_eq!(&*set.trust_domain, "mesh.local");
    assert!(set.registry_only);
    assert!(!set.auto_mtls);
    assert_eq!(set.connect_timeout, Duration::from_millis(250));
    assert_eq!(set.locality_lb.and_then(|l| l.enabled), Some(false));
}

#[test]
fn the_trust_domain_read_at_start_stays() {
    let start = overlay(&flags(), &config("trustDomain: first.local\n"), None);
    let changed = overlay(
        &flags(),
        &config("trustDomain: second.local\nrootNamespace: other\n"),
        Some(&start),
    );
    assert_eq!(&*changed.trust_domain, "first.local");
    assert_eq!(&*changed.root_namespace, "other");
}

#[test]
fn a_file_that_does_not_read_or_is_refused_says_where() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mesh");
    assert!(load(&path, &flags()).unwrap_err().contains("no such file"));
    std::fs::write(&path, "outboundTrafficPolicy: {mode: BLOCK}\n").unwrap();
    let err = load(&path, &flags()).unwrap_err();
    assert!(
        err.starts_with(&format!("{}: outboundTrafficPolicy.mode:", path.display())),
        "{err}"
    );
    std::fs::write(&path, "rootNamespace: r\naccessLogFile: /dev/stdout\n").unwrap();
    let (settings, status) = load(&path, &flags()).unwrap();
    assert_eq!(&*settings.root_namespace, "r");
    assert_eq!(
        status.warnings,
        [
            "accessLogFile: not acted on: wayfinder does not read this field (or it is not one of MeshConfig)"
        ]
    );
}
