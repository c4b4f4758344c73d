//! kube-lease-manager 0.10 (its last release on kube 2): a `LeaseManager`
//! per Lease, which takes a free Lease with a server-side apply, then
//! renews and releases it with strategic merge patches. `changed()` returns
//! once its state changes; `watch()` runs that loop in a task and reports
//! on a channel, and releases the Lease once the channel is dropped.

use std::time::Duration;

use kube_lease_manager::{LeaseManager, Result as LeaseResult};
use tenure::kube::kube::Client;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::kube_settings::lease_manager;
use crate::deploy::{ctx, BenchResult, Deployment};
use crate::figures::{Figure, Measure};
use crate::sampling::{after_warm_up, fresh_key};
use crate::tenure_measures::settle;

/// The peer's name in the tables.
pub const NAME: &str = "kube-lease-manager 0.10";

/// How a standby takes over after a crash, for the failover row.
pub const FAILOVER: &str = "a standby reads the Lease when the lease it last read runs out (renewTime + duration), clears an expired holder, waits 0.1–1 s, then applies";

/// What a renewal is, for the renew row: there is no call to time.
const NO_RENEW: &str = "not measurable: the manager renews inside changed() or watch()'s task, on its own schedule (duration − grace before its lease runs out), with no call to time; each renewal is a strategic merge patch of renewTime and a GET";

/// A client of the deployment's Lease server, with a connection of its own.
pub async fn client(d: &Deployment) -> BenchResult<Client> {
    ctx("kube client", Client::try_from(d.kube_config().await?))
}

async fn manager(
    client: &Client,
    key: &str,
    who: &str,
    ttl: Duration,
) -> BenchResult<LeaseManager> {
    ctx(
        "LeaseManager",
        lease_manager(client, key, who, ttl).build().await,
    )
}

/// A manager in `watch()` mode: its channel (dropping it releases) and task.
type Watching = (watch::Receiver<bool>, JoinHandle<LeaseResult<LeaseManager>>);

/// Waits (at most `limit`) until `state` says it leads.
async fn leads(state: &mut watch::Receiver<bool>, limit: Duration) -> BenchResult<Instant> {
    match tokio::time::timeout(limit, state.wait_for(|l| *l)).await {
        Ok(Ok(_)) => Ok(Instant::now()),
        Ok(Err(_)) => Err("the manager's task ended".into()),
        Err(_) => Err(format!("the manager did not lead within {limit:?}").into()),
    }
}

/// Acquire: a manager built for a free Lease (a GET, and a POST that
/// creates it, as tenure's acquire creates it too) and `changed()` until
/// it leads (GETs, the apply, a strategic merge patch of leaseTransitions);
/// released untimed. Renew: not measurable (see [`NO_RENEW`]).
pub async fn latency(d: &Deployment, ttl: Duration, samples: usize) -> BenchResult<[Figure; 2]> {
    let client = client(d).await?;
    let acquires = after_warm_up(samples, async || {
        let key = fresh_key("klm-acquire");
        let start = Instant::now();
        let m = manager(&client, &key, "a", ttl).await?;
        let led = ctx("changed", m.changed().await)?;
        let took = start.elapsed();
        if !led {
            return Err("a free Lease was not granted".into());
        }
        ctx("release", m.release().await)?;
        Ok(took)
    })
    .await?;
    let label = d.server.label();
    Ok([
        Figure::latency(Measure::Acquire, &label, NAME, &acquires).with_note(
            "LeaseManager built (GET, POST creating the Lease) + changed() until it leads",
        ),
        Figure::missing(Measure::Renew, &label, NAME, NO_RENEW),
    ])
}

/// Hand-over: two managers on their own clients in `watch()` mode; the
/// leader's channel is dropped (its task releases the Lease: the holder
/// emptied with a strategic merge patch), the standby's channel turns true.
/// Timed from the drop to the standby's notice, both in this process. The
/// old leader campaigns again with a new manager (a manager used again
/// starts its channel at its last state, true).
pub async fn handover(d: &Deployment, ttl: Duration, trials: usize) -> BenchResult<Figure> {
    let clients = [client(d).await?, client(d).await?];
    let key = fresh_key("klm-handover");
    let mut leader: Watching = manager(&clients[0], &key, "a", ttl).await?.watch().await;
    leads(&mut leader.0, ttl * 5).await?;
    let mut current = 0;
    let mut samples = Vec::with_capacity(trials);
    for _ in 0..trials {
        let who = ["a", "b"][1 - current];
        let (mut state, task) = manager(&clients[1 - current], &key, who, ttl)
            .await?
            .watch()
            .await;
        let waiting = tokio::spawn(async move {
            let led = leads(&mut state, ttl * 5).await.map_err(|e| e.to_string());
            (led, state)
        });
        // Let the standby queue up.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let (state, old) = leader;
        let resigned = Instant::now();
        drop(state);
        let (led, state) = waiting.await.map_err(|e| e.to_string())?;
        samples.push(led? - resigned);
        // The old leader's task has released the Lease and ends.
        let _ = old.await;
        leader = (state, task);
        current = 1 - current;
    }
    drop(leader.0);
    let _ = leader.1.await;
    let label = d.server.label();
    Ok(Figure::latency(Measure::Handover, &label, NAME, &samples).with_note(
        "the standby does not watch: it sleeps until the lease it last read runs out (renewTime + duration), then reads, and sees the emptied holder",
    ))
}

/// Herd: a holder and `waiters` managers in `watch()` mode, each on its own
/// client; `changes` times the holder's channel is dropped (it releases)
/// and a waiter leads; the server's writes and requests over the changes,
/// per change. The holders renew themselves meanwhile (TTL `ttl`), and the
/// waiters read the Lease each time the lease they last read would run out.
pub async fn herd(
    d: &Deployment,
    ttl: Duration,
    waiters: usize,
    changes: usize,
) -> BenchResult<Figure> {
    let key = fresh_key("klm-herd");
    let holder_client = client(d).await?;
    let (mut state, mut task): Watching = manager(&holder_client, &key, "holder", ttl)
        .await?
        .watch()
        .await;
    leads(&mut state, ttl * 5).await?;
    let (tx, mut led) = mpsc::unbounded_channel();
    let (mut managers, mut waiting, mut clients) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..waiters {
        let client = client(d).await?;
        let (mut state, task) = manager(&client, &key, &format!("w{i}"), ttl)
            .await?
            .watch()
            .await;
        let tx = tx.clone();
        waiting.push(tokio::spawn(async move {
            if state.wait_for(|l| *l).await.is_ok() {
                let _ = tx.send((i, state));
            }
        }));
        managers.push(Some(task));
        clients.push(client);
    }
    settle(d).await?;
    let (w0, r0) = (d.writes().await?, d.requests().await?);
    for _ in 0..changes {
        // Dropping the channel makes the manager release; its task returns.
        drop(state);
        let _ = task.await;
        let (i, next) = tokio::time::timeout(ttl * 5, led.recv())
            .await
            .map_err(|_| "no waiter led after the release")?
            .ok_or("every waiter ended")?;
        state = next;
        task = managers[i].take().ok_or("a waiter led twice")?;
    }
    let (w1, r1) = (d.writes().await?, d.requests().await?);
    drop(state);
    let _ = task.await;
    managers.iter().flatten().for_each(JoinHandle::abort);
    waiting.iter().for_each(JoinHandle::abort);
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
        "TTL {} s (the holder renews itself); a release wakes no waiter: each reads the Lease when the lease it last read runs out, and tries if it is free",
        ttl.as_secs()
    )))
}
