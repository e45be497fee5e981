//! The signing keys of RequestAuthentication's JWT issuers, fetched by the control plane and
//! inlined into proxies' configuration, as istiod does (its default, `PILOT_JWT_ENABLE_REMOTE_JWKS`
//! unset): proxies never fetch keys themselves, so they need no route to the issuer.
//!
//! [`spawn`] starts the resolver: a task that follows the model, finds the keys its
//! RequestAuthentications name (a rule's `jwksUri`, or, with neither `jwksUri` nor `jwks`, the
//! issuer's OpenID discovery document), fetches those it does not have, and refetches them all
//! every `--jwks-refresh-interval` (20 minutes, Istio's `PILOT_JWT_PUB_KEY_REFRESH_INTERVAL`).
//! After a failed round the next comes after a minute, then two, four, up to an hour, as
//! istiod's. What it has is a [`JwksTable`], published whole on a watch channel whenever it
//! changes; the xDS server generates from the table beside the model.
//!
//! **A failure keeps the last good keys**: the table keeps them with the error beside them
//! (logged at WARN once per change, shown on `/debug/configz`). Keys never fetched are the
//! table's fallback, a public key whose private key was never kept (made and dropped when the
//! table was): every token is refused, and requests without one pass, as istiod's
//! `PublicOnlyJwks` does. Keys the model no longer names leave the table.
//!
//! What a fetch accepts is in [`fetch`]: `http` and `https` only, no link-local or cloud
//! metadata address (after DNS and across redirects), at most `--max-jwks-bytes`, and a body
//! that is a JWKS with a usable key; anything else is a failure.

pub mod fetch;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use wayfinder_config::ConfigSpec;

use crate::snapshot::{Snapshot, SnapshotReader};

/// Istio's default fetch timeout of a rule without `timeout`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// The resolver's settings.
#[derive(Clone, Debug)]
pub struct Settings {
    /// How often every key is fetched again (`--jwks-refresh-interval`).
    pub refresh: Duration,
    /// The first retry after a failed round; each further failed round doubles it.
    pub retry: Duration,
    /// The longest wait between rounds while they fail.
    pub max_retry: Duration,
    /// The largest JWKS or discovery document read (`--max-jwks-bytes`).
    pub max_bytes: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            refresh: Duration::from_secs(20 * 60),
            retry: Duration::from_secs(60),
            max_retry: Duration::from_secs(60 * 60),
            max_bytes: 256 * 1024,
        }
    }
}

/// Where an issuer's keys are: its `jwksUri`, or none for its OpenID discovery document.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct JwksKey {
    /// The issuer (`iss`).
    pub issuer: Arc<str>,
    /// The rule's `jwksUri`; empty: discovered from the issuer.
    pub uri: Arc<str>,
}

/// What the resolver has for one key.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Fetched {
    /// The last good JWKS document, as served (inlined verbatim).
    pub jwks: Option<Arc<str>>,
    /// When it was fetched (RFC 3339).
    pub fetched_at: Option<String>,
    /// Why the last fetch failed, while it does.
    pub error: Option<String>,
}

/// Every key the model names and what the resolver has for it.
#[derive(Debug)]
pub struct JwksTable {
    entries: BTreeMap<JwksKey, Fetched>,
    /// See [`fetch::public_only_jwks`]; `None` only when the system's random source failed.
    fallback: Option<Arc<str>>,
}

impl JwksTable {
    /// An empty table, with a fallback key made now.
    pub fn new() -> Self {
        let fallback = fetch::public_only_jwks();
        if fallback.is_none() {
            tracing::error!(
                "the system's random source failed: no fallback JWKS, so an issuer whose keys \
                 are not fetched yet has no provider (its tokens are refused as of an unknown \
                 issuer, or not checked when no issuer of the workload has keys)"
            );
        }
        Self {
            entries: BTreeMap::new(),
            fallback: fallback.map(Arc::from),
        }
    }

    /// The JWKS to inline for `issuer`'s keys at `uri`: the last good one, else the fallback,
    /// which refuses every token.
    pub fn jwks(&self, issuer: &str, uri: &str) -> Option<Arc<str>> {
        let key = JwksKey {
            issuer: issuer.into(),
            uri: uri.into(),
        };
        self.entries
            .get(&key)
            .and_then(|f| f.jwks.clone())
            .or_else(|| self.fallback.clone())
    }

    /// Every key and what the resolver has for it, for debug pages.
    pub fn entries(&self) -> &BTreeMap<JwksKey, Fetched> {
        &self.entries
    }
}

impl Default for JwksTable {
    fn default() -> Self {
        Self::new()
    }
}

/// Members of an asymmetric JWK that are private key material.
const PRIVATE_MEMBERS: [&str; 6] = ["d", "p", "q", "dp", "dq", "qi"];

/// `jwks` without private key material: the private members of asymmetric keys, and, with
/// `drop_symmetric`, symmetric (`oct`) keys, which are secrets whole. `None` when there is
/// nothing to remove (or it is not a JWKS document).
pub fn without_private_keys(jwks: &str, drop_symmetric: bool) -> Option<String> {
    let mut document = serde_json::from_str::<serde_json::Value>(jwks).ok()?;
    let keys = document.get_mut("keys")?.as_array_mut()?;
    let private = |key: &serde_json::Value| {
        PRIVATE_MEMBERS.iter().any(|m| key.get(m).is_some())
            || (drop_symmetric && key["kty"] == "oct")
    };
    if !keys.iter().any(private) {
        return None;
    }
    if drop_symmetric {
        keys.retain(|key| key["kty"] != "oct");
    }
    for key in keys.iter_mut() {
        if let Some(members) = key.as_object_mut() {
            for m in PRIVATE_MEMBERS {
                members.remove(m);
            }
        }
    }
    Some(document.to_string())
}

/// The keys the RequestAuthentications of `model` name, with the longest fetch timeout of the
/// rules that name each. Rules with inline `jwks` name none.
pub fn wanted(model: &Snapshot) -> BTreeMap<JwksKey, Duration> {
    let mut wanted: BTreeMap<JwksKey, Duration> = BTreeMap::new();
    for object in model.config.objects.values() {
        let ConfigSpec::RequestAuthentication(ra) = &object.spec else {
            continue;
        };
        for rule in ra.jwt_rules.iter().filter(|r| r.jwks.is_empty()) {
            let key = JwksKey {
                issuer: rule.issuer.as_str().into(),
                uri: rule.jwks_uri.as_str().into(),
            };
            let timeout = rule.timeout.map_or(DEFAULT_TIMEOUT, |t| t.0);
            let longest = wanted.entry(key).or_default();
            *longest = (*longest).max(timeout);
        }
    }
    wanted
}

/// Starts the resolver over `model`'s snapshots until `shutdown`: the table, published
/// whenever it changes.
pub fn spawn(
    model: SnapshotReader,
    settings: Settings,
    shutdown: CancellationToken,
) -> watch::Receiver<Arc<JwksTable>> {
    let (tx, rx) = watch::channel(Arc::new(JwksTable::new()));
    tokio::spawn(resolve(model, settings, tx, shutdown));
    rx
}

async fn resolve(
    model: SnapshotReader,
    settings: Settings,
    tx: watch::Sender<Arc<JwksTable>>,
    shutdown: CancellationToken,
) {
    let client = match fetch::client() {
        Ok(client) => client,
        Err(e) => {
            tracing::error!("JWKS resolver: no HTTP client ({e}); keys of jwksUri are not fetched");
            return;
        }
    };
    let mut versions = model.versions();
    let mut wait = settings.refresh;
    let mut next_round = Instant::now() + wait;
    loop {
        let wanted = wanted(&model.snapshot());
        let current = tx.borrow().clone();
        // Keys the model no longer names leave; new ones are fetched now.
        let mut entries: BTreeMap<JwksKey, Fetched> = current
            .entries
            .iter()
            .filter(|(key, _)| wanted.contains_key(*key))
            .map(|(key, fetched)| (key.clone(), fetched.clone()))
            .collect();
        let new: Vec<(JwksKey, Duration)> = wanted
            .iter()
            .filter(|(key, _)| !entries.contains_key(*key))
            .map(|(key, timeout)| (key.clone(), *timeout))
            .collect();
        if !new.is_empty() {
            let failed = round(&client, &settings, &new, &mut entries).await;
            if failed && next_round > Instant::now() + settings.retry {
                wait = settings.retry;
                next_round = Instant::now() + wait;
            }
        }
        publish(&tx, &current, entries);
        tokio::select! {
            () = shutdown.cancelled() => return,
            changed = versions.changed() => if changed.is_err() { return },
            () = tokio::time::sleep_until(next_round) => {
                let all: Vec<(JwksKey, Duration)> =
                    wanted.iter().map(|(k, t)| (k.clone(), *t)).collect();
                let current = tx.borrow().clone();
                let mut entries = current.entries.clone();
                let failed = round(&client, &settings, &all, &mut entries).await;
                publish(&tx, &current, entries);
                wait = if !failed {
                    settings.refresh
                } else if wait >= settings.refresh {
                    settings.retry
                } else {
                    (wait * 2).min(settings.max_retry)
                };
                next_round = Instant::now() + wait;
            }
        }
    }
}

/// Fetches `keys` into `entries`, all at once; true when any failed. A failure keeps the last
/// good document and is logged once per new error.
async fn round(
    client: &reqwest::Client,
    settings: &Settings,
    keys: &[(JwksKey, Duration)],
    entries: &mut BTreeMap<JwksKey, Fetched>,
) -> bool {
    let fetches = keys
        .iter()
        .map(|(key, timeout)| fetch::jwks(client, key, *timeout, settings.max_bytes));
    let results = futures::future::join_all(fetches).await;
    let mut failed = false;
    for ((key, _), result) in keys.iter().zip(results) {
        let entry = entries.entry(key.clone()).or_default();
        match result {
            Ok(jwks) => {
                if entry.error.is_some() || entry.jwks.is_none() {
                    tracing::info!(issuer = %key.issuer, uri = %key.uri, "fetched the JWKS");
                }
                entry.jwks = Some(jwks.into());
                entry.fetched_at = Some(now());
                entry.error = None;
            }
            Err(e) => {
                failed = true;
                let error = e.to_string();
                if entry.error.as_deref() != Some(error.as_str()) {
                    let kept = if entry.jwks.is_some() {
                        "the last good keys stay in force"
                    } else {
                        "no token of this issuer is accepted until it succeeds"
                    };
                    tracing::warn!(
                        issuer = %key.issuer,
                        uri = %key.uri,
                        "cannot fetch the JWKS: {error}; {kept}"
                    );
                }
                entry.error = Some(error);
            }
        }
    }
    failed
}

/// Publishes `entries` when they differ from `current`'s.
fn publish(
    tx: &watch::Sender<Arc<JwksTable>>,
    current: &JwksTable,
    entries: BTreeMap<JwksKey, Fetched>,
) {
    if entries == current.entries {
        return;
    }
    tx.send_replace(Arc::new(JwksTable {
        entries,
        fallback: current.fallback.clone(),
    }));
}

fn now() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests;
