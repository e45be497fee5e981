//! Retry delays for adapters that talk to a server: exponential, capped, and jittered so that
//! many watches failing together (a Consul outage seen by a thousand service watches) do not
//! retry together.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

/// Exponential backoff with "equal jitter": each delay is half the current step plus a random
/// part of the other half, and the step doubles up to `max`. [`Backoff::reset`] after a
/// success starts again from `initial`.
#[derive(Clone, Debug)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    step: Duration,
    random: Random,
}

impl Backoff {
    /// A backoff starting at `initial` and never waiting longer than `max`.
    pub fn new(initial: Duration, max: Duration) -> Self {
        Self {
            initial,
            max: max.max(initial),
            step: initial,
            random: Random::new(),
        }
    }

    /// The delay before the next attempt; each call doubles the step up to `max`.
    pub fn next_delay(&mut self) -> Duration {
        let step = self.step;
        self.step = (self.step * 2).min(self.max);
        let half = step / 2;
        half + self.random.below(step - half)
    }

    /// Starts again from the initial delay (call after a success).
    pub fn reset(&mut self) {
        self.step = self.initial;
    }
}

/// `period` stretched by a random fraction in `[0, fraction)`: spreads periodic work of many
/// tasks (polls, restarts) so that it does not line up.
pub fn jittered(period: Duration, fraction: f64) -> Duration {
    let extra = period.mul_f64(fraction.clamp(0.0, 1.0));
    period + Random::new().below(extra)
}

/// A small pseudo-random source seeded by the standard library's per-process random keys.
/// Good enough to spread retries; not for anything that needs real randomness.
#[derive(Clone, Debug)]
struct Random {
    state: RandomState,
    counter: u64,
}

impl Random {
    fn new() -> Self {
        Self {
            state: RandomState::new(),
            counter: 0,
        }
    }

    /// A duration uniformly in `[0, bound)` (zero when `bound` is zero).
    fn below(&mut self, bound: Duration) -> Duration {
        let nanos = bound.as_nanos() as u64;
        if nanos == 0 {
            return Duration::ZERO;
        }
        self.counter += 1;
        let mut h = self.state.build_hasher();
        h.write_u64(self.counter);
        Duration::from_nanos(h.finish() % nanos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_to_the_cap_with_jitter_and_reset() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
        let delays: Vec<Duration> = (0..8).map(|_| b.next_delay()).collect();
        let steps = [100u64, 200, 400, 800, 1000, 1000, 1000, 1000];
        for (d, step) in delays.iter().zip(steps) {
            let step = Duration::from_millis(step);
            assert!(
                *d >= step / 2 && *d < step,
                "{d:?} not in [{:?}, {step:?})",
                step / 2
            );
        }
        b.reset();
        assert!(b.next_delay() < Duration::from_millis(100));
    }

    #[test]
    fn jitter_spreads_delays() {
        let mut b = Backoff::new(Duration::from_secs(10), Duration::from_secs(10));
        let distinct: std::collections::BTreeSet<Duration> =
            (0..20).map(|_| b.next_delay()).collect();
        assert!(distinct.len() > 10, "{distinct:?}");
        let j = jittered(Duration::from_secs(1), 0.5);
        assert!(j >= Duration::from_secs(1) && j < Duration::from_millis(1500));
    }
}
