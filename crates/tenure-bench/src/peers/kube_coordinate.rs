//! kube-coordinate 2.0.0-rc.0: a `LeaderElector` task per candidate, after
//! client-go's (expiry judged by the follower's own clock from the last
//! change it saw), that writes the Lease with server-side apply (force, and
//! the resourceVersion it last saw) and watches it; its state comes on a
//! channel. It has no release: shutting the task down leaves the Lease to
//! run out.

use std::time::Duration;

use kube_coordinate::{LeaderElector, LeaderElectorHandle, LeaderState};
use tenure::kube::kube::Client;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::kube_lease_manager::client;
use super::kube_settings::coordinate;
use crate::deploy::{ctx, BenchResult, Deployment};
use crate::figures::{Figure, Measure};
use crate::sampling::{after_warm_up, fresh_key};
use crate::tenure_measures::settle;

/// The peer's name in the tables.
pub const NAME: &str = "kube-coordinate 2.0.0-rc.0";

/// How a standby takes over after a crash, for the failover row.
pub const FAILOVER: &str = "a follower tries lease_duration plus a jitter of up to 1.2 × lease_duration after the last change it saw";

/// What a renewal is, for the renew row: there is no call to time.
const NO_RENEW: &str = "not measurable: the elector renews in its own task, renew_deadline after the last change it saw (an apply with force and the resourceVersion it saw), with no call to time";

/// What a standby waits for, for the hand-over and herd rows.
const NO_RELEASE: &str = "no release: shutdown() ends the task and leaves the Lease held; a follower tries lease_duration plus a jitter of up to 1.2 × lease_duration after the last change it saw";

fn spawn(client: &Client, key: &str, who: &str, ttl: Duration) -> BenchResult<LeaderElectorHandle> {
    ctx(
        "LeaderElector",
        LeaderElector::spawn(coordinate(key, who, ttl), client.clone()),
    )
}

/// Waits (at most `limit`) until `state` is `wanted`.
async fn until(
    state: &mut watch::Receiver<LeaderState>,
    wanted: LeaderState,
    limit: Duration,
) -> BenchResult<Instant> {
    match tokio::time::timeout(limit, state.wait_for(|s| *s == wanted)).await {
        Ok(Ok(_)) => Ok(Instant::now()),
        Ok(Err(_)) => Err("the elector's task ended".into()),
        Err(_) => Err(format!("the elector was not {wanted:?} within {limit:?}").into()),
    }
}

/// Acquire: an elector spawned for a free Lease (a GET that finds none, an
/// apply that creates it) until its state says it leads; shut down untimed.
/// Renew: not measurable (see [`NO_RENEW`]).
pub async fn latency(d: &Deployment, ttl: Duration, samples: usize) -> BenchResult<[Figure; 2]> {
    let client = client(d).await?;
    let acquires = after_warm_up(samples, async || {
        let key = fresh_key("kc-acquire");
        let start = Instant::now();
        let handle = spawn(&client, &key, "a", ttl)?;
        let led = until(&mut handle.state(), LeaderState::Leading, ttl * 5).await?;
        let took = led - start;
        ctx("shutdown", handle.shutdown().await)?;
        Ok(took)
    })
    .await?;
    let label = d.server.label();
    Ok([
        Figure::latency(Measure::Acquire, &label, NAME, &acquires)
            .with_note("LeaderElector::spawn until its state is Leading"),
        Figure::missing(Measure::Renew, &label, NAME, NO_RENEW),
    ])
}

/// Hand-over: two electors on their own clients; the leader's task is shut
/// down (it has no release), the standby's state turns Leading. Timed from
/// the shutdown call to the standby's notice, both in this process. The old
/// leader campaigns again with a new elector.
pub async fn handover(d: &Deployment, ttl: Duration, trials: usize) -> BenchResult<Figure> {
    let clients = [client(d).await?, client(d).await?];
    let key = fresh_key("kc-handover");
    let mut leader = spawn(&clients[0], &key, "a", ttl)?;
    until(&mut leader.state(), LeaderState::Leading, ttl * 5).await?;
    let mut current = 0;
    let mut samples = Vec::with_capacity(trials);
    let limit = ttl * 5;
    for _ in 0..trials {
        let standby = spawn(&clients[1 - current], &key, ["a", "b"][1 - current], ttl)?;
        let mut state = standby.state();
        until(&mut state, LeaderState::Following, limit).await?;
        let waiting = tokio::spawn(async move {
            until(&mut state, LeaderState::Leading, limit)
                .await
                .map_err(|e| e.to_string())
        });
        // Let the standby queue up.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let resigned = Instant::now();
        ctx("shutdown", leader.shutdown().await)?;
        let led = waiting.await.map_err(|e| e.to_string())??;
        samples.push(led - resigned);
        leader = standby;
        current = 1 - current;
    }
    let _ = leader.shutdown().await;
    let label = d.server.label();
    Ok(Figure::latency(Measure::Handover, &label, NAME, &samples).with_note(NO_RELEASE))
}

/// Herd: a holder and `waiters` electors, each on its own client;
/// `changes` times the holder is shut down and a waiter leads; the
/// server's writes and requests over the changes, per change. The holders
/// renew themselves meanwhile (TTL `ttl`); every waiter watches the Lease.
pub async fn herd(
    d: &Deployment,
    ttl: Duration,
    waiters: usize,
    changes: usize,
) -> BenchResult<Figure> {
    let key = fresh_key("kc-herd");
    let mut holder = spawn(&client(d).await?, &key, "holder", ttl)?;
    until(&mut holder.state(), LeaderState::Leading, ttl * 5).await?;
    let (tx, mut led) = mpsc::unbounded_channel();
    let (mut electors, mut waiting) = (Vec::new(), Vec::new());
    for i in 0..waiters {
        let elector = spawn(&client(d).await?, &key, &format!("w{i}"), ttl)?;
        let mut state = elector.state();
        let tx = tx.clone();
        waiting.push(tokio::spawn(async move {
            if state.wait_for(LeaderState::is_leader).await.is_ok() {
                let _ = tx.send(i);
            }
        }));
        electors.push(Some(elector));
    }
    settle(d).await?;
    let (w0, r0) = (d.writes().await?, d.requests().await?);
    let limit = ttl * 5;
    for _ in 0..changes {
        ctx("shutdown", holder.shutdown().await)?;
        let i = tokio::time::timeout(limit, led.recv())
            .await
            .map_err(|_| format!("no waiter led within {limit:?} of the shutdown"))?
            .ok_or("every waiter ended")?;
        holder = electors[i].take().ok_or("a waiter led twice")?;
    }
    let (w1, r1) = (d.writes().await?, d.requests().await?);
    let _ = holder.shutdown().await;
    for elector in electors.into_iter().flatten() {
        let _ = elector.shutdown().await;
    }
    waiting.iter().for_each(tokio::task::JoinHandle::abort);
    let per = |a: Option<u64>, b: Option<u64>| {
        a.zip(b)
            .map(|(a, b)| b.saturating_sub(a) as f64 / changes as f64)
    };
    let mut f = Figure::new(Measure::Herd, &d.server.label(), NAME);
    f.waiters = Some(waiters);
    f.samples = changes;
    f.writes_per_change = per(w0, w1);
    f.requests_per_change = per(r0, r1);
    Ok(f.with_note(format!(
        "TTL {} s (the holder renews itself); {NO_RELEASE}",
        ttl.as_secs()
    )))
}
