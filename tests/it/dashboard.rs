//! The Grafana dashboards against the binary's `/metrics`.
//!
//! Istio's "Istio Control Plane Dashboard": every metric a panel queries has a series from
//! the start, except those the control plane cannot serve, which are listed here with the
//! reason (and what wayfinder serves in their place, where it serves something). The
//! dashboard is Istio's file, unchanged (`istio/README.md`). The test fails if a listed
//! exception starts being served (the list is then wrong) or is no longer in the dashboard,
//! and if any other metric the dashboard names has no series.
//!
//! wayfinder's own dashboard, `deploy/grafana/wayfinder.json`: every metric a panel queries
//! has a series, with no exception, once the server has seen the events that give the
//! event-labelled counters their first series (a registry error, a refused stream); and every
//! query goes to the dashboard's `${datasource}` variable.
//!
//! A third test pushes a change to a proxy and reads what the push counted: its reason, its
//! time in the queue and to send.

use std::collections::BTreeSet;

use serde_json::Value;
use wayfinder::xds::TypeUrl;

use crate::support::ads::{Ads, sidecar};
use crate::support::binary::{Wayfinder, get};
use crate::support::eventually;
use crate::support::fixtures::{service_entry, write};

/// Istio's dashboard, as `manifests/addons/dashboards/pilot-dashboard.gen.json` holds it.
const ISTIO_DASHBOARD: &str = include_str!("istio/pilot-dashboard.gen.json");

/// wayfinder's dashboard (`deploy/grafana/README.md`).
const WAYFINDER_DASHBOARD: &str = include_str!("../../deploy/grafana/wayfinder.json");

/// The counters wayfinder's dashboard queries whose label (the registry, the reason) is known
/// only with their first event, so that they have no series before it: the test makes each
/// event happen.
const AFTER_AN_EVENT: [&str; 2] = [
    "wayfinder_registry_errors_total",
    "wayfinder_xds_refused_streams_total",
];

/// A metric the dashboard queries that the control plane cannot serve.
struct NotServed {
    name: &'static str,
    why: &'static str,
    /// What wayfinder serves in its place, which must have a series.
    instead: Option<&'static str>,
}

const CADVISOR: &str = "cAdvisor's, which the kubelet serves for every container it runs; \
                        a process cannot serve its container's metrics";
const GO_MEMORY: &str = "the Go runtime's heap statistics, which a Go binary (istiod) serves; \
                         wayfinder is not Go, and serves the process's resident memory";
const GO_ALLOCATIONS: &str = "the Go allocator's counters, which a Go binary (istiod) serves; \
                              wayfinder allocates with jemalloc, whose statistics it does not \
                              export";
const ENVOY: &str = "Envoy's own statistics, which each proxy serves (the agent's \
                     /stats/prometheus), not the control plane; pilot_xds counts the same \
                     connections from the server's side";
const VALIDATION: &str = "istiod's validating admission webhook, which wayfinder does not run \
                          (configuration is validated as it is read, refusals counted in \
                          pilot_total_rejected_configs, and by `wayfinder validate`)";
const INJECTION: &str = "istiod's sidecar injection webhook, which wayfinder does not run";

const NOT_SERVED: [NotServed; 13] = [
    not_served("container_memory_working_set_bytes", CADVISOR, None),
    not_served("container_cpu_usage_seconds_total", CADVISOR, None),
    not_served(
        "go_memstats_stack_inuse_bytes",
        GO_MEMORY,
        Some("process_resident_memory_bytes"),
    ),
    not_served(
        "go_memstats_heap_inuse_bytes",
        GO_MEMORY,
        Some("process_resident_memory_bytes"),
    ),
    not_served(
        "go_memstats_heap_alloc_bytes",
        GO_MEMORY,
        Some("process_resident_memory_bytes"),
    ),
    not_served("go_memstats_alloc_bytes_total", GO_ALLOCATIONS, None),
    not_served("go_memstats_mallocs_total", GO_ALLOCATIONS, None),
    not_served(
        "go_goroutines",
        "the Go runtime's goroutine count, which a Go binary (istiod) serves; wayfinder is \
         not Go, and serves its threads",
        Some("process_threads"),
    ),
    not_served("envoy_cluster_upstream_cx_active", ENVOY, Some("pilot_xds")),
    not_served("galley_validation_passed", VALIDATION, None),
    not_served(
        "galley_validation_failed",
        VALIDATION,
        Some("pilot_total_rejected_configs"),
    ),
    not_served("sidecar_injection_success_total", INJECTION, None),
    not_served("sidecar_injection_failure_total", INJECTION, None),
];

const fn not_served(
    name: &'static str,
    why: &'static str,
    instead: Option<&'static str>,
) -> NotServed {
    NotServed { name, why, instead }
}

/// The other Istio metrics wayfinder documents (README, "Metrics"), which dashboards other
/// than this one read: each has a series from the start too.
const ALSO_SERVED: [&str; 22] = [
    "pilot_virt_services",
    "pilot_destrule_subsets",
    "pilot_duplicate_envoy_clusters",
    "pilot_eds_no_instances",
    "pilot_endpoint_not_ready",
    "pilot_conflict_inbound_listener",
    "pilot_conflict_outbound_listener_tcp_over_current_tcp",
    "pilot_conflict_outbound_listener_tcp_over_current_http",
    "pilot_conflict_outbound_listener_http_over_current_tcp",
    "pilot_xds_send_time_bucket",
    "pilot_xds_write_timeout",
    "pilot_proxy_queue_time_bucket",
    "pilot_proxy_convergence_time_bucket",
    "pilot_xds_expired_nonce",
    "pilot_inbound_updates",
    "pilot_services",
    "process_cpu_seconds_total",
    "process_resident_memory_bytes",
    "process_virtual_memory_bytes",
    "process_open_fds",
    "process_max_fds",
    "process_start_time_seconds",
];

#[tokio::test]
async fn every_metric_of_istio_s_control_plane_dashboard_is_served_from_the_start() {
    let queried = dashboard_metrics(ISTIO_DASHBOARD);
    // At start: no proxy connected, nothing pushed, perhaps not even synced.
    let w = Wayfinder::start(&[]).await;
    let (status, text) = get(w.monitoring, "/metrics").await;
    assert_eq!(status, 200, "{text}");
    let problems = judge(&queried, &sample_names(&text), &NOT_SERVED, &ALSO_SERVED);
    assert!(problems.is_empty(), "{}\nin:\n{text}", problems.join("\n"));
}

#[tokio::test]
async fn every_metric_of_wayfinder_s_dashboard_is_served() {
    let queried = dashboard_metrics(WAYFINDER_DASHBOARD);
    for name in AFTER_AN_EVENT {
        assert!(
            queried.contains(name),
            "the dashboard no longer queries {name}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    // A registry error: the File registry refuses a document.
    write(
        dir.path(),
        "broken.yaml",
        "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: broken}\n\
         spec:\n  hosts: [broken.example.com]\n  ports: [{number: eighty, name: http}]\n",
    );
    let w = Wayfinder::with_files("", dir.path()).await;
    w.wait_health("File", "degraded").await;
    // A refused stream: its first request carries no node.
    let mut ads = Ads::connect(w.grpc, sidecar("10.9.0.1", "default"))
        .await
        .without_node();
    ads.try_subscribe(TypeUrl::Cluster).await;
    ads.recv_error().await;
    let text = eventually("the events' counters to have series", || async {
        let (status, text) = get(w.monitoring, "/metrics").await;
        let names = sample_names(&text);
        (status == 200 && AFTER_AN_EVENT.iter().all(|n| names.contains(n))).then_some(text)
    })
    .await;
    let problems = judge(&queried, &sample_names(&text), &[], &[]);
    assert!(problems.is_empty(), "{}\nin:\n{text}", problems.join("\n"));

    let dashboard: Value = serde_json::from_str(WAYFINDER_DASHBOARD).unwrap();
    let variables = &dashboard["templating"]["list"];
    assert!(
        variables
            .as_array()
            .into_iter()
            .flatten()
            .any(|v| v["name"] == "datasource"
                && v["type"] == "datasource"
                && v["query"] == "prometheus"),
        "no Prometheus datasource variable: {variables}"
    );
    let mut sources = Vec::new();
    collect_targets(&dashboard, &mut |t| {
        sources.push(t["datasource"]["uid"].clone())
    });
    assert!(
        sources.iter().all(|uid| uid == "${datasource}"),
        "a query not to ${{datasource}}: {sources:?}"
    );
}

#[tokio::test]
async fn a_push_counts_its_reason_its_queue_time_and_its_send_time() {
    let dir = tempfile::tempdir().unwrap();
    let entry =
        |ports: &[u16]| service_entry("echo", "echo.example.com", ("http", 80, "HTTP"), ports);
    write(dir.path(), "echo.yaml", &entry(&[9001]));
    let w = Wayfinder::with_files("", dir.path()).await;
    w.ready().await;
    let mut ads = Ads::connect(w.grpc, sidecar("10.9.0.1", "default")).await;
    ads.subscribe(TypeUrl::Endpoint, &["outbound|80||echo.example.com"])
        .await;
    let first = ads.recv_type(TypeUrl::Endpoint).await;
    ads.ack(&first, &["outbound|80||echo.example.com"]).await;
    let metric = |name: &'static str| {
        let w = &w;
        async move { w.metric(name).await.unwrap_or_else(|| panic!("no {name}")) }
    };
    assert_eq!(metric("pilot_push_triggers{type=\"endpoint\"}").await, 0);
    let sent = metric("pilot_xds_send_time_count").await;
    assert!(sent >= 1, "the answer to the request was sent");

    // Only the endpoints change: one endpoint trigger for the one stream, pushed over EDS.
    write(dir.path(), "echo.yaml", &entry(&[9001, 9002]));
    ads.recv_type(TypeUrl::Endpoint).await;
    eventually("the push to be counted", || async {
        (metric("pilot_push_triggers{type=\"endpoint\"}").await == 1).then_some(())
    })
    .await;
    assert_eq!(metric("pilot_push_triggers{type=\"service\"}").await, 0);
    assert_eq!(metric("pilot_proxy_queue_time_count").await, 1);
    assert!(metric("pilot_xds_send_time_count").await > sent);
    assert_eq!(metric("pilot_xds_write_timeout").await, 0);
    assert_eq!(metric("pilot_total_xds_internal_errors").await, 0);
}

#[test]
fn the_judge_fails_a_served_exception_a_stale_one_and_a_missing_name() {
    let queried: BTreeSet<String> = ["pilot_xds", "go_goroutines", "galley_validation_failed"]
        .map(String::from)
        .into();
    let exceptions = [
        not_served("go_goroutines", "Go's", Some("process_threads")),
        not_served("galley_validation_failed", "a webhook's", None),
        not_served("go_gc_duration_seconds", "Go's", None),
    ];
    let served: BTreeSet<&str> = ["go_goroutines"].into();
    assert_eq!(
        judge(&queried, &served, &exceptions, &["pilot_virt_services"]),
        [
            "go_goroutines is served now, but listed as not served because it is Go's: \
             remove it from the list",
            "process_threads, served in place of go_goroutines, is missing",
            "go_gc_duration_seconds is listed as not served, but the dashboard does not \
             query it: remove it from the list",
            "the dashboard queries pilot_xds, which has no series",
            "pilot_virt_services, which README lists, has no series",
        ][..],
        "each kind of problem, in the order judged"
    );
}

/// What is wrong with `served` (sample names) for a dashboard querying `queried`, given the
/// `exceptions`, and for the `documented` names that must be served too.
fn judge(
    queried: &BTreeSet<String>,
    served: &BTreeSet<&str>,
    exceptions: &[NotServed],
    documented: &[&str],
) -> Vec<String> {
    let mut problems = Vec::new();
    for e in exceptions {
        if served.contains(e.name) {
            problems.push(format!(
                "{} is served now, but listed as not served because it is {}: remove it \
                 from the list",
                e.name, e.why
            ));
        }
        if let Some(instead) = e.instead.filter(|i| !served.contains(i)) {
            problems.push(format!(
                "{instead}, served in place of {}, is missing",
                e.name
            ));
        }
        if !queried.contains(e.name) {
            problems.push(format!(
                "{} is listed as not served, but the dashboard does not query it: remove it \
                 from the list",
                e.name
            ));
        }
    }
    for name in queried {
        if !exceptions.iter().any(|e| e.name == name) && !served.contains(name.as_str()) {
            problems.push(format!("the dashboard queries {name}, which has no series"));
        }
    }
    for name in documented.iter().filter(|n| !served.contains(**n)) {
        problems.push(format!("{name}, which README lists, has no series"));
    }
    problems
}

#[test]
fn metric_names_are_what_expressions_select() {
    for (expr, names) in [
        (
            "sum(rate(pilot_xds_push_time_bucket{}[$__rate_interval])) by (le)",
            &["pilot_xds_push_time_bucket"][..],
        ),
        (
            r#"sum by (pod) (container_memory_working_set_bytes{container="discovery",pod=~"istiod-.*"})"#,
            &["container_memory_working_set_bytes"],
        ),
        (
            "sum by (type,event) (rate(pilot_k8s_reg_events[$__rate_interval]))",
            &["pilot_k8s_reg_events"],
        ),
        (
            "pilot_total_xds_internal_errors",
            &["pilot_total_xds_internal_errors"],
        ),
        (
            "a_total / on (x) group_left (y) b offset 5m",
            &["a_total", "b"],
        ),
        (
            "sum without (le) (x) > bool 2 unless count by (pod) (y)",
            &["x", "y"],
        ),
    ] {
        assert_eq!(metric_names(expr), names, "{expr}");
    }
}

/// Every metric name a dashboard's panels query, rows' panels included.
fn dashboard_metrics(json: &str) -> BTreeSet<String> {
    let dashboard: Value = serde_json::from_str(json).expect("the dashboard is JSON");
    let mut exprs = Vec::new();
    collect_targets(&dashboard, &mut |t| {
        exprs.extend(t["expr"].as_str().map(str::to_owned));
    });
    assert!(!exprs.is_empty(), "no panel target in the dashboard");
    exprs.iter().flat_map(|e| metric_names(e)).collect()
}

/// Calls `each` with every panel's targets (queries), rows' panels included.
fn collect_targets(node: &Value, each: &mut impl FnMut(&Value)) {
    for panel in node["panels"].as_array().into_iter().flatten() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            each(target);
        }
        collect_targets(panel, each);
    }
}

/// The metric names a PromQL expression selects: its identifiers, less functions and
/// aggregations (a name before `(`, and aggregation operators), keywords, label matchers
/// (`{…}`), ranges (`[…]`),
/// strings, and the label lists of `by`, `without`, `on`, `ignoring`, `group_left` and
/// `group_right`. A histogram query names its `_bucket` series, which is what must exist.
fn metric_names(expr: &str) -> Vec<String> {
    // Aggregations may take their grouping before their parentheses (`sum by (pod) (x)`).
    const KEYWORDS: [&str; 19] = [
        "bool",
        "and",
        "or",
        "unless",
        "offset",
        "sum",
        "min",
        "max",
        "avg",
        "group",
        "stddev",
        "stdvar",
        "count",
        "count_values",
        "bottomk",
        "topk",
        "quantile",
        "limitk",
        "limit_ratio",
    ];
    const LABEL_LISTS: [&str; 6] = [
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
    ];
    let chars: Vec<char> = expr.chars().collect();
    let mut names = Vec::new();
    let mut i = 0;
    let mut skip_list = false;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '"' | '\'' | '`' => i = closing(&chars, i, c),
            '{' => i = closing(&chars, i, '}'),
            '[' => i = closing(&chars, i, ']'),
            '(' if skip_list => {
                i = closing(&chars, i, ')');
                skip_list = false;
            }
            c if c.is_ascii_alphabetic() || c == '_' || c == ':' => {
                let start = i;
                while i < chars.len()
                    && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':')
                {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                let next = chars[i..].iter().find(|c| !c.is_whitespace());
                if LABEL_LISTS.contains(&word.as_str()) {
                    skip_list = true;
                } else if next != Some(&'(') && !KEYWORDS.contains(&word.as_str()) {
                    names.push(word);
                }
                continue;
            }
            c if c.is_ascii_digit() => {
                // A number, or a duration such as `5m`.
                while i < chars.len() && chars[i].is_ascii_alphanumeric() {
                    i += 1;
                }
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    names
}

/// The position of the `close` that ends what opens at `open` (quotes: the next unescaped
/// one; brackets: the matching one, strings inside skipped).
fn closing(chars: &[char], open: usize, close: char) -> usize {
    let quote = matches!(chars[open], '"' | '\'' | '`');
    let mut depth = 0;
    let mut i = open + 1;
    while i < chars.len() {
        let c = chars[i];
        if quote {
            if c == '\\' {
                i += 2;
                continue;
            }
            if c == close {
                return i;
            }
        } else if matches!(c, '"' | '\'' | '`') {
            i = closing(chars, i, c);
        } else if c == chars[open] {
            depth += 1;
        } else if c == close {
            if depth == 0 {
                return i;
            }
            depth -= 1;
        }
        i += 1;
    }
    chars.len()
}

/// The names of the samples in a Prometheus text exposition.
fn sample_names(text: &str) -> BTreeSet<&str> {
    text.lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split(['{', ' ']).next())
        .collect()
}
