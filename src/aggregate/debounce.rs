//! Batching registry changes before a snapshot is built (Istio's `PILOT_DEBOUNCE_AFTER` and
//! `PILOT_DEBOUNCE_MAX`).
//!
//! The first change of a batch starts the clock. The batch is published once no change has
//! arrived for `after` (the quiet period), or once `max` has passed since its first change,
//! whichever comes first, so a steady stream of changes still publishes every `max`.

use std::time::Duration;

use tokio::time::Instant;

/// Debounce settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Debounce {
    /// Quiet period that ends a batch (default 100 ms).
    pub after: Duration,
    /// Longest a batch may wait (default 10 s).
    pub max: Duration,
}

impl Default for Debounce {
    fn default() -> Self {
        Self {
            after: Duration::from_millis(100),
            max: Duration::from_secs(10),
        }
    }
}

/// The batch being collected.
#[derive(Debug, Default)]
pub(crate) struct Batch {
    /// First and latest change of the pending batch.
    pending: Option<(Instant, Instant)>,
}

impl Batch {
    /// Notes a change at `now`.
    pub(crate) fn record(&mut self, now: Instant) {
        let first = self.pending.map_or(now, |(first, _)| first);
        self.pending = Some((first, now));
    }

    /// When the pending batch is due, if there is one.
    pub(crate) fn deadline(&self, settings: Debounce) -> Option<Instant> {
        self.pending
            .map(|(first, last)| (last + settings.after).min(first + settings.max))
    }

    /// If the batch is due at `now`, ends it and returns when it started.
    pub(crate) fn take_due(&mut self, settings: Debounce, now: Instant) -> Option<Instant> {
        let deadline = self.deadline(settings)?;
        if now < deadline {
            return None;
        }
        self.pending.take().map(|(first, _)| first)
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
    };

    #[test]
    fn waits_for_quiet_then_publishes() {
        let t0 = Instant::now();
        let mut b = Batch::default();
        assert_eq!(b.deadline(S), None);
        b.record(t0);
        assert_eq!(b.deadline(S), Some(t0 + Duration::from_millis(100)));
        b.record(t0 + Duration::from_millis(50));
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
            b.record(t);
            t += Duration::from_millis(30);
        }
        assert_eq!(b.deadline(S), Some(t0 + Duration::from_secs(1)));
        assert_eq!(b.take_due(S, t0 + Duration::from_secs(1)), Some(t0));
    }
}
