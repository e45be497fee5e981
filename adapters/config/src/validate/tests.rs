//! Tests of [`validate`]: objects are written as YAML specs, as users write them, and each
//! failing case asserts the exact paths of its errors.

mod authorization_policy;
mod destination_rule;
mod envoy_filter;
mod gateway;
mod http;
mod names;
mod peer_authentication;
mod proxy_config;
mod request_authentication;
mod sidecar;
mod virtual_service;
mod workload_group;

use std::sync::Arc;

use serde::de::DeserializeOwned;

use super::{Problem, has_errors, validate};
use crate::{ConfigMeta, ConfigObject, ConfigSpec};

/// An object of the kind `wrap` builds from a YAML spec, named `reviews` in `default`.
fn object<T: DeserializeOwned>(yaml: &str, wrap: fn(T) -> ConfigSpec) -> ConfigObject {
    let spec = serde_saphyr::from_str(yaml).unwrap_or_else(|e| panic!("bad test YAML {yaml}: {e}"));
    ConfigObject {
        meta: ConfigMeta {
            name: Arc::from("reviews"),
            namespace: Arc::from("default"),
            ..ConfigMeta::default()
        },
        spec: wrap(spec),
    }
}

fn vs(yaml: &str) -> ConfigObject {
    object(yaml, ConfigSpec::VirtualService)
}

fn dr(yaml: &str) -> ConfigObject {
    object(yaml, |dr| ConfigSpec::DestinationRule(Box::new(dr)))
}

fn gw(yaml: &str) -> ConfigObject {
    object(yaml, ConfigSpec::Gateway)
}

fn sc(yaml: &str) -> ConfigObject {
    object(yaml, ConfigSpec::Sidecar)
}

/// The fields of the errors of `o`, in order.
fn errors(o: &ConfigObject) -> Vec<String> {
    fields(o, true)
}

/// The fields of the warnings of `o`, in order.
fn warnings(o: &ConfigObject) -> Vec<String> {
    fields(o, false)
}

fn fields(o: &ConfigObject, fatal: bool) -> Vec<String> {
    validate(o)
        .into_iter()
        .filter(|p| p.fatal == fatal)
        .map(|p| p.field)
        .collect()
}

/// Asserts that each YAML spec has exactly the errors listed, at those paths.
#[track_caller]
fn assert_errors(make: fn(&str) -> ConfigObject, cases: &[(&str, &[&str])]) {
    for (yaml, expected) in cases {
        let o = make(yaml);
        assert_eq!(
            errors(&o),
            *expected,
            "for spec:\n{yaml}\nproblems: {:#?}",
            validate(&o)
        );
    }
}

/// Asserts that the spec has no errors and warnings exactly at `expected`.
#[track_caller]
fn assert_warnings(o: &ConfigObject, expected: &[&str]) {
    let problems = validate(o);
    assert!(!has_errors(&problems), "unexpected errors: {problems:#?}");
    assert_eq!(warnings(o), expected, "problems: {problems:#?}");
}

#[test]
fn metadata_names_are_dns_labels() {
    let mut o = vs("{hosts: [reviews], http: [{route: [{destination: {host: reviews}}]}]}");
    assert!(validate(&o).is_empty());
    o.meta.name = Arc::from("Reviews_v1");
    o.meta.namespace = Arc::from("");
    assert_eq!(errors(&o), ["metadata.name", "metadata.namespace"]);
    o.meta.name = Arc::from("a".repeat(64));
    o.meta.namespace = Arc::from("-bad");
    assert_eq!(errors(&o), ["metadata.name", "metadata.namespace"]);
}

#[test]
fn problems_print_level_field_and_message() {
    let error = Problem::error("spec.host", "is required");
    let warning = Problem::warning("spec.tunnel", "ignored");
    assert_eq!(error.to_string(), "error: spec.host: is required");
    assert_eq!(warning.to_string(), "warning: spec.tunnel: ignored");
    assert!(has_errors(&[warning.clone(), error]));
    assert!(!has_errors(&[warning]));
    assert!(!has_errors(&[]));
}
