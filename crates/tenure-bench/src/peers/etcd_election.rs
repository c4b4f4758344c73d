//! etcd's server-side election API (v3electionpb) through etcd-client's
//! `ElectionClient`: campaign with a lease, resign, the lease kept alive.

use std::time::Duration;

use etcd_client::{Client, LeaderKey};
use tokio::time::Instant;

use crate::deploy::{ctx, BenchResult, Deployment};
use crate::figures::{Figure, Measure};
use crate::sampling::{after_warm_up, fresh_key, timed};

/// The peer's name in the tables.
pub const NAME: &str = "etcd election API (etcd-client ElectionClient)";

async fn connect(endpoints: &[String]) -> BenchResult<Client> {
    ctx("etcd connect", Client::connect(endpoints, None).await)
}

/// Acquire (lease grant + campaign on a free election, as tenure's acquire
/// grants its lease too) and renew (one keep-alive round trip).
pub async fn latency(d: &Deployment, ttl: Duration, samples: usize) -> BenchResult<[Figure; 2]> {
    let mut client = connect(&d.endpoints()).await?;
    let secs = ttl.as_secs().max(1) as i64;
    let acquires = after_warm_up(samples, async || {
        let name = fresh_key("ec-acquire");
        let start = Instant::now();
        let lease = ctx("lease grant", client.lease_grant(secs, None).await)?;
        let won = ctx("campaign", client.campaign(name, "a", lease.id()).await)?;
        let took = start.elapsed();
        if let Some(leader) = won.leader() {
            ctx(
                "resign",
                client
                    .resign(Some(
                        etcd_client::ResignOptions::new().with_leader(leader.clone()),
                    ))
                    .await,
            )?;
        }
        ctx("revoke", client.lease_revoke(lease.id()).await)?;
        Ok(took)
    })
    .await?;
    let lease = ctx("lease grant", client.lease_grant(secs, None).await)?;
    let (mut keeper, mut answers) = ctx("keep-alive", client.lease_keep_alive(lease.id()).await)?;
    let renewals = timed(samples, async || {
        ctx("keep-alive", keeper.keep_alive().await)?;
        ctx("keep-alive answer", answers.message().await)?;
        Ok(())
    })
    .await?;
    let _ = client.lease_revoke(lease.id()).await;
    let label = d.server.label();
    Ok([
        Figure::latency(Measure::Acquire, &label, NAME, &acquires),
        Figure::latency(Measure::Renew, &label, NAME, &renewals)
            .with_note("one LeaseKeepAlive round trip"),
    ])
}

/// Hand-over: two clients on their own connections; the leader resigns, the
/// standby's pending `campaign` returns. Leases are long enough that no
/// keep-alive is needed within a trial.
pub async fn handover(d: &Deployment, trials: usize) -> BenchResult<Figure> {
    let endpoints = d.endpoints();
    let mut a = connect(&endpoints).await?;
    let b = connect(&endpoints).await?;
    let name = fresh_key("ec-handover");
    let mut samples = Vec::with_capacity(trials);
    for _ in 0..trials {
        let la = ctx("lease grant", a.lease_grant(30, None).await)?;
        let won = ctx("campaign", a.campaign(name.clone(), "a", la.id()).await)?;
        let leader: LeaderKey = won
            .leader()
            .cloned()
            .ok_or("campaign returned no leader key")?;
        let mut standby = b.clone();
        let lb = ctx("lease grant", standby.lease_grant(30, None).await)?;
        let n = name.clone();
        let waiting = tokio::spawn(async move {
            let won = standby.campaign(n, "b", lb.id()).await;
            (Instant::now(), won, standby, lb.id())
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        let resigned = Instant::now();
        ctx(
            "resign",
            a.resign(Some(etcd_client::ResignOptions::new().with_leader(leader)))
                .await,
        )?;
        let (led, won, mut standby, lease_b) =
            tokio::time::timeout(Duration::from_secs(10), waiting)
                .await
                .map_err(|_| "the standby did not lead after the resign")?
                .map_err(|e| e.to_string())?;
        let won = ctx("standby campaign", won)?;
        samples.push(led - resigned);
        if let Some(l) = won.leader() {
            let _ = standby
                .resign(Some(
                    etcd_client::ResignOptions::new().with_leader(l.clone()),
                ))
                .await;
        }
        let _ = standby.lease_revoke(lease_b).await;
        let _ = a.lease_revoke(la.id()).await;
    }
    let label = d.server.label();
    Ok(Figure::latency(Measure::Handover, &label, NAME, &samples))
}
