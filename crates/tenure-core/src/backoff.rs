//! Randomized delays: renewal jitter and retry back-off.

use std::time::Duration;

use rand::Rng;

/// `d` scaled by a random factor in `[1 - fraction, 1 + fraction]`.
pub(crate) fn jittered(d: Duration, fraction: f64) -> Duration {
    if fraction <= 0.0 || d.is_zero() {
        return d;
    }
    let f = crate::simulation::random(|r| r.random_range((1.0 - fraction)..=(1.0 + fraction)));
    d.mul_f64(f.max(0.0))
}

/// Exponential back-off with full jitter (each delay uniform in `[min, cap]`,
/// the cap starting at twice `min` and doubling per attempt up to `max`), so
/// candidates that failed together do not retry together, not even the
/// first time.
#[derive(Clone, Debug)]
pub struct Backoff {
    min: Duration,
    max: Duration,
    attempt: u32,
    /// Randomized, always but in a planted bug (`ElectorBug::BackoffWithoutJitter`).
    jitter: bool,
}

impl Backoff {
    /// Delays from `min` up to at most `max`.
    pub fn new(min: Duration, max: Duration) -> Self {
        Backoff {
            min,
            max: max.max(min),
            attempt: 0,
            jitter: true,
        }
    }

    /// The same delays without their randomness: each the cap (for a
    /// planted bug, `ElectorBug::BackoffWithoutJitter`).
    pub(crate) fn without_jitter(mut self) -> Self {
        self.jitter = false;
        self
    }

    /// The next delay: uniform in `[min, cap]`, the cap doubling per call.
    pub fn next_delay(&mut self) -> Duration {
        let cap = self
            .min
            .saturating_mul(2u32 << self.attempt.min(16))
            .min(self.max);
        self.attempt += 1;
        if cap <= self.min {
            return self.min;
        }
        if !self.jitter {
            return cap; // the planted bug: every candidate waits the same
        }
        let min = self.min;
        crate::simulation::random(|r| r.random_range(min..=cap))
    }

    /// Starts over from the shortest delays (after a success).
    pub fn reset(&mut self) {
        self.attempt = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_stays_within_bounds_and_grows() {
        let (min, max) = (Duration::from_millis(10), Duration::from_millis(200));
        let mut b = Backoff::new(min, max);
        let delays: Vec<_> = (0..20).map(|_| b.next_delay()).collect();
        assert!(delays.iter().all(|d| *d >= min && *d <= max));
        assert!(
            delays[10..].iter().any(|d| *d > Duration::from_millis(40)),
            "{delays:?}"
        );
        b.reset();
        assert!(b.next_delay() <= Duration::from_millis(20));
    }

    #[test]
    fn the_first_delay_is_jittered_too() {
        // Candidates that failed together (a member restart) must not
        // re-campaign in the same instant: their first delays differ.
        let (min, max) = (Duration::from_millis(50), Duration::from_secs(2));
        let firsts: Vec<_> = (0..50)
            .map(|_| Backoff::new(min, max).next_delay())
            .collect();
        assert!(
            firsts.iter().all(|d| *d >= min && *d <= min * 2),
            "{firsts:?}"
        );
        let distinct: std::collections::BTreeSet<_> = firsts.iter().collect();
        assert!(distinct.len() > 10, "first delays: {firsts:?}");
    }

    #[test]
    fn jitter_stays_within_fraction() {
        let d = Duration::from_millis(1000);
        for _ in 0..100 {
            let j = jittered(d, 0.1);
            assert!(j >= Duration::from_millis(900) && j <= Duration::from_millis(1100));
        }
        assert_eq!(jittered(d, 0.0), d);
    }
}
