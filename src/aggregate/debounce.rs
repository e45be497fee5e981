//! Batching registry changes before a snapshot is built (Istio's `PILOT_DEBOUNCE_AFTER` and
//! `PILOT_DEBOUNCE_MAX`), adaptively.
//!
//! **A single change goes out at once; a burst is batched.** With `leading` on (the default),
//! a change that arrives while the server is quiet (nothing pending, and the last snapshot
//! published at least `after` ago) is published as soon as every source that contributed to
//! it has settled. Changes that follow within `after` of a publication form a batch: it is
//! published once no change has arrived for `after` (the quiet period), or once `max` has
//! passed since its first change, whichever comes first, so a steady stream still publishes
//! every `max`. With `leading` off, every change waits for the quiet period, as Istio's
//! debounce does.
//!
//! **Settled.** One change of a source can arrive as several items (a configuration file
//! whose edit replaces one VirtualService and removes three). The task that forwards a
//! source's stream sends the items the stream has ready, then `Settled` once it would wait:
//! what the source sent so far is a complete change. The leading edge waits for it, so an edit
//! whose items the source yields together goes out in one snapshot. It waits no longer than the
//! quiet period would (a source that keeps having items ready is batched as a burst).

use std::time::Duration;

use tokio::time::Instant;

use super::Origin;

/// Debounce settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Debounce {
    /// Quiet period that ends a batch (default 100 ms).
    pub after: Duration,
    /// Longest a batch may wait (default 10 s).
    pub max: Duration,
    /// Publish a change that arrives after a quiet period as soon as its sources have settled
    /// (default on; see the module docs).
    pub leading: bool,
}

impl Default for Debounce {
    fn default() -> Self {
        Self {
            after: Duration::from_millis(100),
            max: Duration::from_secs(10),
            leading: true,
        }
    }
}

/// The batch being collected.
#[derive(Debug, Default)]
pub(crate) struct Batch {
    /// The pending batch.
    pending: Option<Pending>,
    /// When the last batch was published.
    published: Option<Instant>,
}

#[derive(Debug)]
struct Pending {
    first: Instant,
    last: Instant,
    /// Started while quiet: due once `unsettled` is empty.
    leading: bool,
    /// Sources that contributed changes and have not settled since.
    unsettled: Vec<Origin>,
}

impl Pending {
    /// When the quiet period or the maximum delay ends the batch.
    fn trailing(&self, settings: Debounce) -> Instant {
        (self.last + settings.after).min(self.first + settings.max)
    }
}

impl Batch {
    /// Notes a change from `origin` at `now`.
    pub(crate) fn record(&mut self, origin: Origin, now: Instant, settings: Debounce) {
        let pending = self.pending.get_or_insert_with(|| {
            let quiet = self
                .published
                .is_none_or(|at| now.saturating_duration_since(at) >= settings.after);
            Pending {
                first: now,
                last: now,
                leading: settings.leading && quiet,
                unsettled: Vec::new(),
            }
        });
        pending.last = now;
        if !pending.unsettled.contains(&origin) {
            pending.unsettled.push(origin);
        }
    }

    /// Notes that `origin` has nothing more ready (or has ended): its changes so far are
    /// complete.
    pub(crate) fn settled(&mut self, origin: Origin) {
        if let Some(pending) = &mut self.pending {
            pending.unsettled.retain(|o| *o != origin);
        }
    }

    /// When the pending batch is due, if there is one: a leading batch as soon as its sources
    /// have settled, and any batch at the end of its quiet period or maximum delay.
    pub(crate) fn deadline(&self, settings: Debounce) -> Option<Instant> {
        self.pending.as_ref().map(|p| {
            if p.leading && p.unsettled.is_empty() {
                p.first
            } else {
                p.trailing(settings)
            }
        })
    }

    /// If the batch is due at `now`, ends it and returns when it started.
    pub(crate) fn take_due(&mut self, settings: Debounce, now: Instant) -> Option<Instant> {
        let deadline = self.deadline(settings)?;
        if now < deadline {
            return None;
        }
        self.published = Some(now);
        self.pending.take().map(|p| p.first)
    }

    /// Ends the batch regardless of time (used when a snapshot is built for another reason).
    pub(crate) fn clear(&mut self) {
        self.pending = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Debounce = Debounce {
        after: Duration::from_millis(100),
        max: Duration::from_secs(1),
        leading: false,
    };
    const LEADING: Debounce = Debounce { leading: true, ..S };
    const A: Origin = Origin::Registry(0);
    const B: Origin = Origin::Config(0);
    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn leading_is_the_default() {
        assert!(Debounce::default().leading);
    }

    #[test]
    fn a_change_after_quiet_goes_out_once_settled_and_a_burst_is_batched() {
        let t0 = Instant::now();
        let mut b = Batch::default();
        b.record(A, t0, LEADING);
        b.settled(A);
        assert_eq!(
            b.deadline(LEADING),
            Some(t0),
            "the first change is due at once"
        );
        assert_eq!(b.take_due(LEADING, t0), Some(t0));
        // The burst that follows is batched behind the quiet period, settled or not.
        let t1 = t0 + 10 * MS;
        b.record(A, t1, LEADING);
        b.settled(A);
        b.record(A, t1 + 20 * MS, LEADING);
        b.settled(A);
        assert_eq!(b.deadline(LEADING), Some(t1 + 120 * MS));
        assert_eq!(b.take_due(LEADING, t1 + 119 * MS), None);
        assert_eq!(b.take_due(LEADING, t1 + 120 * MS), Some(t1));
        // Quiet again for `after`: the next single change goes out once settled.
        let t2 = t1 + 300 * MS;
        b.record(A, t2, LEADING);
        b.settled(A);
        assert_eq!(b.deadline(LEADING), Some(t2));
    }

    #[test]
    fn a_leading_change_waits_for_its_source_to_settle() {
        let t0 = Instant::now();
        let mut b = Batch::default();
        b.record(A, t0, LEADING);
        assert_eq!(
            b.take_due(LEADING, t0),
            None,
            "the source may have more of the change ready"
        );
        b.record(A, t0, LEADING);
        b.settled(A);
        assert_eq!(b.take_due(LEADING, t0), Some(t0));
    }

    #[test]
    fn a_leading_change_waits_for_every_source_that_contributed() {
        let t0 = Instant::now();
        let mut b = Batch::default();
        b.record(A, t0, LEADING);
        b.record(B, t0 + MS, LEADING);
        b.settled(A);
        b.settled(Origin::Registry(1));
        assert_eq!(b.take_due(LEADING, t0 + MS), None, "B has not settled");
        b.settled(B);
        assert_eq!(b.take_due(LEADING, t0 + MS), Some(t0));
    }

    #[test]
    fn a_source_that_does_not_settle_is_batched_as_a_burst() {
        let t0 = Instant::now();
        let mut b = Batch::default();
        b.record(A, t0, LEADING);
        assert_eq!(b.deadline(LEADING), Some(t0 + 100 * MS));
        assert_eq!(b.take_due(LEADING, t0 + 100 * MS), Some(t0));
    }

    #[test]
    fn settling_matters_only_to_the_leading_edge() {
        let t0 = Instant::now();
        let mut b = Batch::default();
        b.record(A, t0, S);
        b.settled(A);
        assert_eq!(b.deadline(S), Some(t0 + 100 * MS), "Istio's debounce waits");
        b.settled(A);
        assert_eq!(b.take_due(S, t0 + 99 * MS), None);
    }

    #[test]
    fn waits_for_quiet_then_publishes() {
        let t0 = Instant::now();
        let mut b = Batch::default();
        assert_eq!(b.deadline(S), None);
        b.record(A, t0, S);
        assert_eq!(b.deadline(S), Some(t0 + 100 * MS));
        b.record(A, t0 + 50 * MS, S);
        assert_eq!(
            b.take_due(S, t0 + 100 * MS),
            None,
            "a later change extends the quiet period"
        );
        assert_eq!(b.take_due(S, t0 + 150 * MS), Some(t0));
        assert_eq!(b.deadline(S), None);
    }

    #[test]
    fn a_steady_stream_still_publishes_at_max() {
        for settings in [S, LEADING] {
            let t0 = Instant::now();
            let mut b = Batch {
                published: Some(t0),
                ..Batch::default()
            };
            let mut t = t0;
            while t < t0 + 990 * MS {
                b.record(A, t, settings);
                b.settled(A);
                t += 30 * MS;
            }
            assert_eq!(b.deadline(settings), Some(t0 + Duration::from_secs(1)));
            assert_eq!(b.take_due(settings, t0 + Duration::from_secs(1)), Some(t0));
        }
    }
}
