//! What every measure shares, tenure's and the peers': fresh keys, and
//! latency samples taken after a warm-up.

use std::time::Duration;

use tokio::time::Instant;

use crate::deploy::BenchResult;

/// Untimed rounds before the samples: they warm the connection up.
pub const WARM_UP: usize = 5;

/// A key no earlier run or trial used.
pub fn fresh_key(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static SEQ: AtomicU64 = AtomicU64::new(0);
    format!(
        "bench-{prefix}-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

/// Runs `round` [`WARM_UP`] times, then `samples` times; the durations the
/// sampled rounds report (each times the part it measures).
pub async fn after_warm_up(
    samples: usize,
    mut round: impl AsyncFnMut() -> BenchResult<Duration>,
) -> BenchResult<Vec<Duration>> {
    for _ in 0..WARM_UP {
        round().await?;
    }
    let mut took = Vec::with_capacity(samples);
    for _ in 0..samples {
        took.push(round().await?);
    }
    Ok(took)
}

/// Times `samples` calls of `op`, one after the other.
pub async fn timed(
    samples: usize,
    mut op: impl AsyncFnMut() -> BenchResult<()>,
) -> BenchResult<Vec<Duration>> {
    let mut took = Vec::with_capacity(samples);
    for _ in 0..samples {
        let start = Instant::now();
        op().await?;
        took.push(start.elapsed());
    }
    Ok(took)
}
