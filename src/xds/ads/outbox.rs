//! A stream's way out: its response queue, sent to under the push throttle.
//!
//! The throttle (`--push-throttle`) bounds how many streams encode and queue responses at
//! once. A stream holds its place until its connection has taken the last response of the
//! batch, so the places measure responses actually on their way, not just queued; a client
//! that does not take them within [`DELIVERY_WAIT`] gives the place back, and until it catches
//! up its stream sends without one (its small queue alone bounds what it holds), so a stuck
//! client costs the others at most one wait.

use std::time::Instant;

use tokio::sync::oneshot;
use tokio::sync::oneshot::error::TryRecvError;
use tonic::Status;

use super::limits::DELIVERY_WAIT;
use super::protocol::Protocol;
use super::state::now as unix_now;
use super::wire::Outgoing;
use super::{AdsServer, Push, Responses};
use crate::xds::metrics::XdsMetrics;
use crate::xds::{TypeUrl, consistency};

/// A stream's response queue and whether its client is keeping up.
pub(super) struct Outbox {
    tx: Responses,
    /// Set when the client did not take a batch within [`DELIVERY_WAIT`]; fires when it has.
    undelivered: Option<oneshot::Receiver<()>>,
}

impl Outbox {
    pub(super) fn new(tx: Responses) -> Self {
        Self {
            tx,
            undelivered: None,
        }
    }

    /// Ends the stream with `status`.
    pub(super) async fn fail(&self, status: Status) {
        let _ = self.tx.send(Box::new(Err(status))).await;
    }

    /// True while the client has not taken a batch it was sent more than [`DELIVERY_WAIT`]
    /// ago.
    fn behind(&mut self) -> bool {
        let Some(rx) = &mut self.undelivered else {
            return false;
        };
        if let Err(TryRecvError::Empty) = rx.try_recv() {
            return true;
        }
        self.undelivered = None;
        false
    }
}

impl AdsServer {
    /// Sends a batch of responses (logged, counted, recorded for `/debug/push_status`);
    /// false when the client went away.
    pub(super) async fn send<P: Protocol>(
        &self,
        state: &P,
        responses: Vec<P::Response>,
        published: Option<Instant>,
        out: &mut Outbox,
    ) -> bool {
        let Some(last) = responses.len().checked_sub(1) else {
            return true;
        };
        let m = &self.inner.metrics;
        let mut permit = match out.behind() {
            true => None,
            false => self.inner.throttle.acquire().await,
        };
        if let Some(published) = published {
            // Out of istiod's push queue, in its terms: the push starts now.
            m.proxy_queue_time
                .observe(published.elapsed().as_secs_f64());
        }
        let deadline = tokio::time::Instant::now() + DELIVERY_WAIT;
        let (delivered_tx, mut delivered) = oneshot::channel();
        let mut delivered_tx = Some(delivered_tx);
        for (i, response) in responses.into_iter().enumerate() {
            let started = Instant::now();
            let (summary, encoded) = P::encode(response);
            let t = summary.type_url;
            if cfg!(debug_assertions) && t == TypeUrl::Listener {
                consistency::debug_assert_consistent(&self.current(), state.proxy());
            }
            if t == TypeUrl::Listener {
                // Istio sets these as it generates listeners; here a snapshot's listeners are
                // generated once per scope, so the gauges follow what it has generated so far.
                m.record_listener_conflicts(self.current().listener_conflicts());
            }
            let label = XdsMetrics::type_label(t);
            m.xds_pushes.get_or_create(&label).inc();
            m.xds_config_size
                .get_or_create(&label)
                .observe(summary.bytes as f64);
            tracing::debug!(proxy = %state.proxy(), %t, version = %summary.version, nonce = %summary.nonce, resources = summary.resources, removed = summary.removed, "push");
            self.record(Push {
                at: unix_now(),
                proxy: state.proxy().id.to_string(),
                variant: P::VARIANT,
                r#type: t.short(),
                resources: summary.resources,
                removed: summary.removed,
                bytes: summary.bytes,
                version: summary.version,
                after_publication: published.map(|p| p.elapsed().as_secs_f64()),
            });
            let item = Outgoing {
                encoded,
                delivered: if i == last { delivered_tx.take() } else { None },
            };
            let sending = Instant::now();
            let slot = if permit.is_some() {
                match tokio::time::timeout_at(deadline, out.tx.reserve()).await {
                    Ok(slot) => slot,
                    Err(_) => {
                        permit = None;
                        out.tx.reserve().await
                    }
                }
            } else {
                out.tx.reserve().await
            };
            m.xds_send_time.observe(sending.elapsed().as_secs_f64());
            let Ok(slot) = slot else { return false };
            slot.send(Box::new(Ok(item)));
            m.xds_push_time
                .get_or_create(&label)
                .observe(started.elapsed().as_secs_f64());
        }
        if permit.is_none()
            || tokio::time::timeout_at(deadline, &mut delivered)
                .await
                .is_err()
        {
            if !out.behind() {
                tracing::debug!(proxy = %state.proxy(), "the client is not taking its pushes; it sends without a place under the push throttle until it catches up");
            }
            out.undelivered = Some(delivered);
        }
        drop(permit);
        if let Some(published) = published {
            m.proxy_convergence
                .observe(published.elapsed().as_secs_f64());
        }
        true
    }
}
