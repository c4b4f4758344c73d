//! The `rslock` crate (Redlock over independent masters): `lock` (one
//! attempt, with rslock's own retries), `extend`, and `acquire` (loops until
//! locked) for a standby.

use std::time::Duration;

use rslock::LockManager;
use tokio::time::Instant;

use crate::deploy::{ctx, BenchResult, Deployment};
use crate::figures::{Figure, Measure};
use crate::sampling::{after_warm_up, fresh_key, timed};

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
pub async fn latency(d: &Deployment, ttl: Duration, samples: usize) -> BenchResult<[Figure; 2]> {
    let m = manager(&d.endpoints());
    let acquires = after_warm_up(samples, async || {
        let key = fresh_key("rslock");
        let start = Instant::now();
        let lock = ctx("lock", m.lock(key.as_bytes(), ttl).await)?;
        let took = start.elapsed();
        m.unlock(&lock).await;
        Ok(took)
    })
    .await?;
    let key = fresh_key("rslock-renew");
    let mut lock = ctx("lock", m.lock(key.as_bytes(), ttl).await)?;
    let renewals = timed(samples, async || {
        lock = ctx("extend", m.extend(&lock, ttl).await)?;
        Ok(())
    })
    .await?;
    m.unlock(&lock).await;
    let label = d.server.label();
    Ok([
        Figure::latency(Measure::Acquire, &label, NAME, &acquires),
        Figure::latency(Measure::Renew, &label, NAME, &renewals),
    ])
}

/// Hand-over: the holder unlocks; a standby looping in `acquire` (rslock's
/// default retry: 3 attempts 200 ms apart per `lock`) gets it.
pub async fn handover(d: &Deployment, ttl: Duration, trials: usize) -> BenchResult<Figure> {
    let endpoints = d.endpoints();
    let a = manager(&endpoints);
    let b = manager(&endpoints);
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
    let label = d.server.label();
    Ok(Figure::latency(Measure::Handover, &label, NAME, &samples)
        .with_note("the standby polls: rslock has no wait or notification"))
}
