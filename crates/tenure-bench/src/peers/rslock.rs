//! The `rslock` crate (Redlock over independent masters): `lock` (one
//! attempt, with rslock's own retries), `extend`, and `acquire` (loops until
//! locked) for a standby.

use std::time::Duration;

use rslock::LockManager;
use tokio::time::Instant;

use crate::deploy::{ctx, BenchResult};
use crate::figures::{Figure, Measure};
use crate::tenure_measures::fresh_key;

/// The peer's name in the tables.
pub const NAME: &str = "rslock 0.10";

fn manager(endpoints: &[String]) -> LockManager {
    LockManager::new(
        endpoints
            .iter()
            .map(|e| format!("redis://{e}"))
            .collect::<Vec<_>>(),
    )
}

/// Acquire (one `lock` on a free resource) and renew (`extend`).
pub async fn latency(
    label: &str,
    endpoints: &[String],
    ttl: Duration,
    samples: usize,
) -> BenchResult<[Figure; 2]> {
    let m = manager(endpoints);
    let mut acquires = Vec::with_capacity(samples);
    for i in 0..samples + 5 {
        let key = fresh_key("rslock");
        let start = Instant::now();
        let lock = ctx("lock", m.lock(key.as_bytes(), ttl).await)?;
        let took = start.elapsed();
        m.unlock(&lock).await;
        if i >= 5 {
            acquires.push(took);
        }
    }
    let key = fresh_key("rslock-renew");
    let mut lock = ctx("lock", m.lock(key.as_bytes(), ttl).await)?;
    let mut renewals = Vec::with_capacity(samples);
    for _ in 0..samples {
        let start = Instant::now();
        lock = ctx("extend", m.extend(&lock, ttl).await)?;
        renewals.push(start.elapsed());
    }
    m.unlock(&lock).await;
    Ok([
        Figure::latency(Measure::Acquire, label, NAME, &acquires),
        Figure::latency(Measure::Renew, label, NAME, &renewals),
    ])
}

/// Hand-over: the holder unlocks; a standby looping in `acquire` (rslock's
/// default retry: 3 attempts 200 ms apart per `lock`) gets it.
pub async fn handover(
    label: &str,
    endpoints: &[String],
    ttl: Duration,
    trials: usize,
) -> BenchResult<Figure> {
    let a = manager(endpoints);
    let b = manager(endpoints);
    let key = fresh_key("rslock-handover");
    let mut samples = Vec::with_capacity(trials);
    for _ in 0..trials {
        let held = ctx("lock", a.lock(key.as_bytes(), ttl).await)?;
        let (standby, k) = (b.clone(), key.clone());
        let waiting = tokio::spawn(async move {
            let got = standby.acquire_no_guard(k.as_bytes(), ttl).await;
            (Instant::now(), got)
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        let released = Instant::now();
        a.unlock(&held).await;
        let (led, got) = tokio::time::timeout(ttl * 5, waiting)
            .await
            .map_err(|_| "the standby did not lock after the unlock")?
            .map_err(|e| e.to_string())?;
        let lock = ctx("standby acquire", got)?;
        samples.push(led - released);
        b.unlock(&lock).await;
    }
    Ok(Figure::latency(Measure::Handover, label, NAME, &samples)
        .with_note("the standby polls: rslock has no wait or notification"))
}
