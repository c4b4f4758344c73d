//! Timings the lesson tests take over many trials.

use std::time::Duration;

use tenure_core::Lease;
use tokio::time::Instant;

/// How long after `since` (the blow: a record deleted out of band, a take-over)
/// `lease` was told it was lost. Panics, naming `trial`, unless it was told
/// within `within` and no longer counts itself valid.
pub async fn until_told_lost(
    lease: &Lease,
    since: Instant,
    within: Duration,
    trial: usize,
) -> Duration {
    let told = tokio::time::timeout(within, lease.loss_signalled()).await;
    let took = since.elapsed();
    assert!(told.is_ok(), "trial {trial}: never told within {within:?}");
    assert!(!lease.is_valid(), "trial {trial}: told, but still valid");
    took
}

/// Sorts `took` (one timing per trial), prints its median, 99th percentile
/// and maximum as `what`, and returns the 99th percentile.
pub fn p99(took: &mut [Duration], what: &str) -> Duration {
    assert!(!took.is_empty(), "{what}: no trials");
    took.sort();
    let at = |q: f64| took[((took.len() as f64 * q).ceil() as usize).saturating_sub(1)];
    let (p50, p99, max) = (at(0.5), at(0.99), took[took.len() - 1]);
    println!("{what}: p50 {p50:?}, p99 {p99:?}, max {max:?}");
    p99
}
