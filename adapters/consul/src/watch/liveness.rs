//! The liveness probe: a cheap `GET /v1/status/leader` per datacenter every few seconds.
//!
//! A watch's blocking query can stay parked for `wait` plus its jitter (5 min 24 s by
//! default) on a Consul that has stopped answering anything new: a cluster that lost its
//! quorum, an agent that lost its servers, a partition that new connections do not cross.
//! Without the probe such an outage would show only when a parked query returned. The probe
//! has a short timeout of its own, so a refusal, an error status, no answer, or an empty
//! leader shows within one interval plus one timeout (10 s by default).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use wayfinder_registry::RegistryError;
use wayfinder_registry::backoff::jittered;

use crate::client::{Client, Query};

/// The probe's timeout is its interval, at least this and at most the client's timeout.
const MIN_TIMEOUT: Duration = Duration::from_secs(1);

/// Probes the leader of datacenter `dc` (`None`: the agent's own) every `every` until the
/// receiver goes away, sending every result: an `Ok` also tells the supervisor that Consul
/// knows its leader again.
pub(crate) async fn run<R>(
    client: Arc<Client>,
    dc: Option<String>,
    every: Duration,
    tx: mpsc::Sender<R>,
    wrap: impl Fn(Result<(), RegistryError>) -> R,
) {
    let query = Query {
        path: "status/leader".into(),
        dc,
    };
    let timeout = every.max(MIN_TIMEOUT).min(client.timeout());
    loop {
        let result = probe(&client, &query, timeout).await;
        if tx.send(wrap(result)).await.is_err() {
            return;
        }
        tokio::time::sleep(jittered(every, 0.1)).await;
    }
}

async fn probe(client: &Client, query: &Query, timeout: Duration) -> Result<(), RegistryError> {
    match client.get_plain::<String>(query, timeout).await {
        Ok(leader) if !leader.is_empty() => Ok(()),
        Ok(_) => Err(RegistryError::Unavailable {
            origin: client.origin(query),
            detail: "Consul has no cluster leader (it answered \"\"): its servers lost their \
                     quorum, or the agent is not joined to them; the last good state is kept"
                .into(),
        }),
        Err(RegistryError::Unavailable { origin, detail }) => Err(RegistryError::Unavailable {
            origin,
            detail: format!(
                "{detail} (liveness probe: Consul does not answer new requests, whatever \
                 blocking queries still wait; the last good state is kept)"
            ),
        }),
        Err(other) => Err(other),
    }
}
