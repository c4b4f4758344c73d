//! tenure's own in-process measures: acquire and renew latency, graceful
//! hand-over, and the herd's server cost per leadership change.

use std::time::Duration;

use tenure::backend::{AcquireMode, Acquisition, Candidacy};
use tenure::{CandidateId, ElectionKey, Elector};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::deploy::{ctx, BenchResult, Deployment};
use crate::figures::{Figure, Measure};
use crate::sampling::{after_warm_up, fresh_key, timed};

fn candidacy(key: &str, who: &str, ttl: Duration) -> BenchResult<Candidacy> {
    let key = ctx("key", ElectionKey::new(key))?;
    let who = ctx("identity", CandidateId::new(who))?;
    ctx("candidacy", Candidacy::new(key, who, ttl))
}

/// Uncontended acquire (one attempt on a free key; released untimed) and
/// renewal of one held lease, `samples` of each.
pub async fn latency(d: &Deployment, ttl: Duration, samples: usize) -> BenchResult<[Figure; 2]> {
    let label = d.server.label();
    let backend = d.client(ttl).await?;
    let acquires = after_warm_up(samples, async || {
        let c = candidacy(&fresh_key("acquire"), "a", ttl)?;
        let start = Instant::now();
        let got = ctx("acquire", backend.acquire(&c, AcquireMode::Once).await)?;
        let took = start.elapsed();
        let lease = got.granted().ok_or("a free key was held")?;
        ctx("release", backend.release(&lease).await)?;
        Ok(took)
    })
    .await?;
    let c = candidacy(&fresh_key("renew"), "r", ttl)?;
    let mut lease = ctx("acquire", backend.acquire(&c, AcquireMode::Once).await)?
        .granted()
        .ok_or("a free key was held")?;
    let renewals = timed(samples, async || {
        lease = ctx("renew", backend.renew(&lease).await)?;
        Ok(())
    })
    .await?;
    ctx("release", backend.release(&lease).await)?;
    let _ = backend.close().await;
    Ok([
        Figure::latency(Measure::Acquire, &label, "tenure", &acquires),
        Figure::latency(Measure::Renew, &label, "tenure", &renewals),
    ])
}

/// Graceful hand-over between two Electors on their own clients: the
/// leader resigns, the standby's `campaign()` (already waiting) returns.
pub async fn handover(d: &Deployment, ttl: Duration, trials: usize) -> BenchResult<Figure> {
    let label = d.server.label();
    let key = fresh_key("handover");
    let mut electors = Vec::new();
    for who in ["a", "b"] {
        let backend = d.client(ttl).await?;
        let elector = ctx(
            "elector",
            Elector::builder(backend)
                .key(key.clone())
                .identity(who)
                .ttl(ttl)
                .allow_unfenced()
                .build(),
        )?;
        electors.push(elector);
    }
    let mut leader = ctx("first campaign", electors[0].campaign().await)?;
    let mut current = 0;
    let mut samples = Vec::with_capacity(trials);
    for _ in 0..trials {
        let standby = electors[1 - current].clone();
        let waiting = tokio::spawn(async move {
            let leadership = standby.campaign().await;
            (Instant::now(), leadership)
        });
        // Let the standby queue up.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let resigned = Instant::now();
        ctx("resign", leader.resign().await)?;
        let (led, next) = tokio::time::timeout(ttl * 5, waiting)
            .await
            .map_err(|_| "the standby did not lead after the resign")?
            .map_err(|e| e.to_string())?;
        leader = ctx("standby campaign", next)?;
        samples.push(led - resigned);
        current = 1 - current;
    }
    ctx("resign", leader.resign().await)?;
    for e in &electors {
        e.shutdown().await;
    }
    Ok(Figure::latency(
        Measure::Handover,
        &label,
        "tenure",
        &samples,
    ))
}

/// Leadership changes counted per herd.
const CHANGES: usize = 5;

/// With `waiters` candidates waiting (each on its own client), hands the
/// lease down the line [`CHANGES`] times and counts the server's writes and
/// requests per change.
pub async fn herd(d: &Deployment, ttl: Duration, waiters: usize) -> BenchResult<Figure> {
    let label = d.server.label();
    let key = fresh_key("herd");
    let holder_client = d.counted_client(ttl).await?;
    let c = candidacy(&key, "holder", ttl)?;
    let mut current = ctx(
        "acquire",
        holder_client.acquire(&c, AcquireMode::Once).await,
    )?
    .granted()
    .ok_or("a free key was held")?;
    let mut current_client = holder_client.clone();
    let (tx, mut grants) = mpsc::unbounded_channel();
    let mut tasks = Vec::with_capacity(waiters);
    let mut clients = vec![holder_client];
    for i in 0..waiters {
        let client = d.counted_client(ttl).await?;
        clients.push(client.clone());
        let c = candidacy(&key, &format!("w{i}"), ttl)?;
        let tx = tx.clone();
        tasks.push(tokio::spawn(async move {
            let got = client.acquire(&c, AcquireMode::Wait).await;
            let _ = tx.send((got, client));
        }));
    }
    settle(d).await?;
    let (w0, r0) = (d.writes().await?, d.requests().await?);
    for _ in 0..CHANGES {
        ctx("release", current_client.release(&current).await)?;
        let (got, client) = tokio::time::timeout(ttl * 3, grants.recv())
            .await
            .map_err(|_| "no waiter was granted after the release")?
            .ok_or("every waiter ended")?;
        match ctx("waiting acquire", got)? {
            Acquisition::Granted(lease) => current = lease,
            Acquisition::Held(_) => return Err("a waiting acquire returned Held".into()),
        }
        current_client = client;
    }
    let (w1, r1) = (d.writes().await?, d.requests().await?);
    let _ = current_client.release(&current).await;
    for t in &tasks {
        t.abort();
    }
    for client in clients {
        let _ = client.close().await;
    }
    let per = |a: Option<u64>, b: Option<u64>| {
        a.zip(b)
            .map(|(a, b)| b.saturating_sub(a) as f64 / CHANGES as f64)
    };
    let mut f = Figure::new(Measure::Herd, &label, "tenure");
    f.waiters = Some(waiters);
    f.samples = CHANGES;
    f.writes_per_change = per(w0, w1);
    f.requests_per_change = per(r0, r1);
    if w0.is_none() {
        f = f.with_note("no server counters (in-process)");
    }
    Ok(f)
}

/// Waits until the herd has queued: the request counter still for 300 ms
/// (at most 30 s); memory: a moment.
pub async fn settle(d: &Deployment) -> BenchResult<()> {
    tokio::time::sleep(Duration::from_millis(300)).await;
    let Some(mut last) = d.requests().await? else {
        return Ok(());
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut since = Instant::now();
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = d.requests().await?.unwrap_or(last);
        if now != last {
            (last, since) = (now, Instant::now());
        } else if since.elapsed() >= Duration::from_millis(300) {
            break;
        }
    }
    Ok(())
}
