//! Locality-aware load balancing (`loadBalancer.localityLbSetting`), checked as Istio's
//! `ValidateLocalityLbSetting` checks it (`pkg/config/validation/agent/validation.go`), with
//! Istio's messages.
//!
//! Istio stops at the first problem of some kinds (both `distribute` and `failover`, a topology
//! label beside `failover`, a bad weight) and reports the others together. This module does the
//! same, so that a setting Istio accepts is accepted here, and the other way round.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::ControlFlow;

use crate::validate::{Problems, key_path};
use crate::{LocalityDistribute, LocalityFailover, LocalityLbSetting};

/// The labels of the proxy's and endpoints' topology. `failover` already orders regions, and
/// Envoy's locality priorities order zones and subzones, so ranking by these labels as well
/// would give two conflicting orders; Istio refuses them beside `failover`.
const TOPOLOGY_LABELS: [&str; 3] = [
    "topology.kubernetes.io/region",
    "topology.kubernetes.io/zone",
    "topology.istio.io/subzone",
];

/// A wildcard region, zone or subzone; Istio also records a shorter locality (`a`, `a/b`) as
/// if it ended in one.
const ANY: &str = "*";

/// Localities seen so far: regions, their zones, and the zones' subzones.
type Seen<'a> = BTreeMap<&'a str, BTreeMap<&'a str, BTreeSet<&'a str>>>;

/// Checks the locality settings `lb` at `path`. `outlier` says whether the same traffic policy
/// (the top-level one, a port's or a subset's) sets outlier detection: without it, failover
/// never notices that the nearer endpoints are failing.
pub(in crate::validate) fn check(
    p: &mut Problems,
    path: &str,
    lb: &LocalityLbSetting,
    outlier: bool,
) {
    // `Break` means Istio stopped there; there is nothing more to do either way.
    let _ = check_until_stop(p, path, lb, outlier);
}

fn check_until_stop(
    p: &mut Problems,
    path: &str,
    lb: &LocalityLbSetting,
    outlier: bool,
) -> ControlFlow<()> {
    if !lb.distribute.is_empty() && !lb.failover.is_empty() {
        p.error(
            path,
            "can not simultaneously specify 'distribute' and 'failover'",
        );
        return ControlFlow::Break(());
    }
    if !lb.failover.is_empty()
        && let Some((i, label)) = lb
            .failover_priority
            .iter()
            .enumerate()
            .find(|(_, label)| TOPOLOGY_LABELS.contains(&label.as_str()))
    {
        p.error(
            format!("{path}.failoverPriority[{i}]"),
            format!(
                "can not simultaneously set 'failover' and topology label '{label}' in \
                 'failover_priority'"
            ),
        );
        return ControlFlow::Break(());
    }
    check_distribute(p, path, &lb.distribute)?;
    if (!lb.failover.is_empty() || !lb.failover_priority.is_empty()) && !outlier {
        p.warn(
            path,
            "outlier detection policy must be provided for failover",
        );
    }
    for (i, failover) in lb.failover.iter().enumerate() {
        check_failover(p, &format!("{path}.failover[{i}]"), failover);
    }
    ControlFlow::Continue(())
}

/// Each entry's weights lie in [1, 100] and sum to 100, its destinations do not overlap, and
/// the sources of all entries do not overlap. A bad weight stops the checks, as in Istio.
fn check_distribute(
    p: &mut Problems,
    path: &str,
    distribute: &[LocalityDistribute],
) -> ControlFlow<()> {
    for (i, d) in distribute.iter().enumerate() {
        let to = format!("{path}.distribute[{i}].to");
        // u64: the sum of many weights of at most 100 cannot overflow it.
        let mut total: u64 = 0;
        for (locality, &weight) in &d.to {
            if !(1..=100).contains(&weight) {
                p.error(
                    key_path(&to, locality),
                    "locality weight must be in range [1, 100]",
                );
                return ControlFlow::Break(());
            }
            total += u64::from(weight);
        }
        if total != 100 {
            p.error(&to, format!("total locality weight {total} != 100"));
            return ControlFlow::Break(());
        }
        let destinations: Vec<&str> = d.to.keys().map(String::as_str).collect();
        if let Err((j, message)) = check_localities(&destinations) {
            p.error(key_path(&to, destinations[j]), message);
        }
    }
    let sources: Vec<&str> = distribute.iter().map(|d| d.from.as_str()).collect();
    if let Err((i, message)) = check_localities(&sources) {
        p.error(format!("{path}.distribute[{i}].from"), message);
    }
    ControlFlow::Continue(())
}

/// Failover is between two different regions, named without zones or wildcards.
fn check_failover(p: &mut Problems, path: &str, f: &LocalityFailover) {
    if f.from == f.to {
        p.error(
            path,
            "locality lb failover settings must specify different regions",
        );
    }
    if f.from.contains('/') || f.to.contains('/') {
        p.error(path, "locality lb failover only specify region");
    }
    if f.from.contains('*') || f.to.contains('*') {
        p.error(
            path,
            "locality lb failover region should not contain '*' wildcard",
        );
    }
}

/// Istio's `validateLocalities`: each locality is `region[/zone[/subzone]]` with no empty part
/// and at most one `*`, at its end, and none is covered by an earlier one. The first bad
/// locality gives its index and the message.
///
/// Order matters, as in Istio: a locality covered by a wildcard before it is refused, but a
/// wildcard after the localities it covers is not. `to` keys come in sorted order, where `*`
/// sorts before letters, digits and `/`, so `a/*` comes before `a/b` and the overlap is found;
/// Istio walks them in Go's random map order.
fn check_localities(localities: &[&str]) -> Result<(), (usize, String)> {
    let mut seen = Seen::new();
    for (i, &locality) in localities.iter().enumerate() {
        let fail = |message: &str| Err((i, format!("locality {locality} {message}")));
        let stars = locality.matches('*').count();
        if stars > 1 || (stars == 1 && !locality.ends_with('*')) {
            return fail("wildcard '*' number can not exceed 1 and must be in the end");
        }
        let overlap = "overlap with previous specified ones";
        if seen.contains_key(ANY) {
            return fail(overlap);
        }
        let parts: Vec<&str> = locality.splitn(3, '/').collect();
        if parts.contains(&"") {
            return fail("must not contain empty region/zone/subzone info");
        }
        if !record(&mut seen, &parts) {
            return fail(overlap);
        }
    }
    Ok(())
}

/// Records a locality split into 1 to 3 parts; false if an earlier one covers it or it
/// repeats one.
fn record<'a>(seen: &mut Seen<'a>, parts: &[&'a str]) -> bool {
    match *parts {
        [region] => {
            if seen.contains_key(region) {
                return false;
            }
            seen.insert(region, BTreeMap::from([(ANY, BTreeSet::from([ANY]))]));
        }
        [region, zone] => {
            let zones = seen.entry(region).or_default();
            if zones.contains_key(ANY) || zones.contains_key(zone) {
                return false;
            }
            zones.insert(zone, BTreeSet::from([ANY]));
        }
        [region, zone, subzone] => {
            let zones = seen.entry(region).or_default();
            if zones.contains_key(ANY) {
                return false;
            }
            let subzones = zones.entry(zone).or_default();
            if subzones.contains(ANY) || !subzones.insert(subzone) {
                return false;
            }
        }
        // `splitn(3, ..)` yields one to three parts.
        _ => {}
    }
    true
}
