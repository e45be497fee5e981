//! Batching registry changes before a snapshot is built (Istio's `PILOT_DEBOUNCE_AFTER` and
//! `PILOT_DEBOUNCE_MAX`), adaptively.
//!
//! **A single change goes out at once; a burst is batched.** With `leading` on, a change that
//! arrives while the server is quiet (nothing pending, and the last snapshot
//! published at least `after` ago) is published immediately, with whatever arrived in the
//! same instant. Changes that follow within `after` of a publication form a batch: it is
//! published once no change has arrived for `after` (the quiet period), or once `max` has
//! passed since its first change, whichever comes first, so a steady stream still publishes
//! every `max`. With `leading` off (the default), every change waits for the quiet period, as
//! Istio's debounce does.
//!
//! Why `leading` is not the default yet: one change of a source can arrive as several items a
//! few milliseconds apart (a configuration file whose edit replaces one VirtualService and
//! removes three), and publishing on the first item pushes an intermediate state that the
//! next snapshot corrects. A source-side "end of change" marker would make the leading edge
//! safe; until then it is opt-in.

use std::time::Duration;

use tokio::time::Instant;

/// Debounce settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Debounce {
    /// Quiet period that ends a batch (default 100 ms).
    pub after: Duration,
    /// Longest a batch may wait (default 10 s).
    pub max: Duration,
    /// Publish a change that arrives after a quiet period at once (default off; see the
    /// module docs).
    pub leading: bool,
}

impl Default for Debounce {
    fn default() -> Self {
        Self {
            after: Duration::from_millis(100),
            max: Duration::from_secs(10),
            leading: false,
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

#[derive(Clone, Copy, Debug)]
struct Pending {
    first: Instant,
    last: Instant,
    /// Started while quiet: due at once.
    leading: bool,
}

impl Batch {
    /// Notes a change at `now`.
    pub(crate) fn record(&mut self, now: Instant, settings: Debounce) {
        match &mut self.pending {
            Some(pending) => pending.last = now,
            None => {
                let quiet = self
                    .published
                    .is_none_or(|at| now.saturating_duration_since(at) >= settings.after);
                self.pending = Some(Pending {
                    first: now,
                    last: now,
                    leading: settings.leading && quiet,
                });
            }
        }
    }

    /// When the pending batch is due, if there is one.
    pub(crate) fn deadline(&self, settings: Debounce) -> Option<Instant> {
        self.pending.map(|p| {
            if p.leading {
                p.first
            } else {
                (p.last + settings.after).min(p.first + settings.max)
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

    #[test]
    fn a_change_after_quiet_goes_out_at_once_and_a_burst_is_batched() {
        let t0 = Instant::now();
        let mut b = Batch::default();
        b.record(t0, LEADING);
        assert_eq!(
            b.deadline(LEADING),
            Some(t0),
            "the first change is due at once"
        );
        assert_eq!(b.take_due(LEADING, t0), Some(t0));
        // The burst that follows is batched behind the quiet period.
        let t1 = t0 + Duration::from_millis(10);
        b.record(t1, LEADING);
        b.record(t1 + Duration::from_millis(20), LEADING);
        assert_eq!(b.deadline(LEADING), Some(t1 + Duration::from_millis(120)));
        assert_eq!(
            b.take_due(LEADING, t1 + Duration::from_millis(120)),
            Some(t1)
        );
        // Quiet again for `after`: the next single change goes out at once.
        let t2 = t1 + Duration::from_millis(300);
        b.record(t2, LEADING);
        assert_eq!(b.deadline(LEADING), Some(t2));
    }

    #[test]
    fn waits_for_quiet_then_publishes() {
        let t0 = Instant::now();
        let mut b = Batch::default();
        assert_eq!(b.deadline(S), None);
        b.record(t0, S);
        assert_eq!(b.deadline(S), Some(t0 + Duration::from_millis(100)));
        b.record(t0 + Duration::from_millis(50), S);
        assert_eq!(
            b.take_due(S, t0 + Duration::from_millis(100)),
            None,
            "a later change extends the quiet period"
        );
        assert_eq!(b.take_due(S, t0 + Duration::from_millis(150)), Some(t0));
        assert_eq!(b.deadline(S), None);
    }

    #[test]
    fn a_steady_stream_still_publishes_at_max() {
        let t0 = Instant::now();
        let mut b = Batch::default();
        let mut t = t0;
        while t < t0 + Duration::from_millis(990) {
            b.record(t, S);
            t += Duration::from_millis(30);
        }
        assert_eq!(b.deadline(S), Some(t0 + Duration::from_secs(1)));
        assert_eq!(b.take_due(S, t0 + Duration::from_secs(1)), Some(t0));
    }
}
