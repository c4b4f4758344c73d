//! Holders on a 3-member etcd cluster while one member at a time is frozen
//! (`docker pause`) or cut off from its peers for a minute: a majority
//! serves throughout, so no holder may lose its lease.
//!
//! Twenty holders at TTL 2 s and twenty at 10 s, each an Elector of its own
//! with a client given all three endpoints, lead one election each. Every
//! member in turn is frozen for `FAULT` (60 s), then cut off for as long;
//! after each fault the cluster settles for a TTL, and the step-downs from
//! a fault's start to the next fault's are that fault's. The program counts
//! them by reason, and the least validity any holder had left (sampled every
//! 50 ms). It exits non-zero if any holder's term expired: a renewal could
//! not get through while a majority served. A term the servers ended
//! (Deleted, Revoked) is shown but not the client's to prevent: on etcd
//! before 3.4.31 and 3.5.13 a frozen leader that resumes revokes leases kept
//! alive through its successor (etcd#15247). A holder that stepped down
//! campaigns again; the next fault waits until every holder leads.
//!
//! Run (Docker and the conformance image, as the suite needs):
//! `cargo run -p tenure-etcd --example frozen_member`
//! (`FAULT_SECS=10` shortens each fault.)

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tenure_core::{Elector, LossReason};
use tenure_etcd::{EtcdBackend, EtcdOptions};
use tenure_testkit::harness::{Cluster, Topology};
use tokio::time::{sleep, Instant};

const HOLDERS_PER_TTL: usize = 20;
const TTLS: [Duration; 2] = [Duration::from_secs(2), Duration::from_secs(10)];

/// What the holders' tasks record.
#[derive(Default)]
struct Record {
    /// Step-downs: when, the holder's TTL, and why.
    step_downs: Vec<(Instant, Duration, String)>,
    /// The least validity each TTL's holders had left at any sample.
    least_left: Vec<(Duration, Duration)>,
    /// How many hold their election now.
    leading: usize,
}

/// One holder: campaigns, samples its validity every 50 ms while it
/// leads, records its step-downs, and campaigns again.
fn holder(elector: Elector, ttl: Duration, record: Arc<Mutex<Record>>) {
    tokio::spawn(async move {
        loop {
            let Ok(leadership) = elector.campaign().await else {
                return; // shut down
            };
            let term = leadership.term();
            record.lock().unwrap().leading += 1;
            let mut least = ttl;
            let reason = loop {
                if let Some(reason) = term.ended() {
                    break reason;
                }
                least = least.min(term.valid_until().saturating_duration_since(Instant::now()));
                sleep(Duration::from_millis(50)).await;
            };
            let mut r = record.lock().unwrap();
            r.leading -= 1;
            r.least_left.push((ttl, least));
            if reason != LossReason::Shutdown {
                r.step_downs
                    .push((Instant::now(), ttl, format!("{reason:?}")));
            }
            drop(r);
            drop(leadership);
        }
    });
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "error".into()),
        )
        .init();
    let fault = Duration::from_secs(
        std::env::var("FAULT_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(60),
    );
    let cluster = Arc::new(Cluster::start(Topology::Etcd { nodes: 3 }).await?);
    let endpoints = cluster.endpoints();
    let record = Arc::new(Mutex::new(Record::default()));
    let mut electors = Vec::new();
    for ttl in TTLS {
        for i in 0..HOLDERS_PER_TTL {
            let backend = EtcdBackend::connect(&endpoints, EtcdOptions::default()).await?;
            let elector = Elector::builder(Arc::new(backend))
                .key(format!("frozen-member/{}s/{i}", ttl.as_secs()))
                .identity(format!("holder-{i}"))
                .ttl(ttl)
                .build()?;
            holder(elector.clone(), ttl, record.clone());
            electors.push(elector);
        }
    }
    let holders = electors.len();
    println!("{holders} holders (TTL {TTLS:?}); each fault lasts {fault:?}");
    let faults: Vec<(&str, usize)> = (0..3)
        .map(|n| ("frozen", n))
        .chain((0..3).map(|n| ("cut off", n)))
        .collect();
    // Each fault's window runs from its start to the next fault's: a
    // member's effects after it resumes (a stalled leader revoking leases,
    // etcd#15247) are counted against the fault that caused them.
    let mut windows = Vec::new();
    for (what, node) in faults {
        // Every holder leads before the fault, and the servers have a leader.
        let ready = Instant::now();
        while record.lock().unwrap().leading < holders && ready.elapsed() < Duration::from_secs(60)
        {
            sleep(Duration::from_millis(100)).await;
        }
        let leader = cluster.leader_index().await.ok().flatten();
        let began = Instant::now();
        match what {
            "frozen" => cluster.pause(node).await?,
            _ => cluster.partition(node).await?,
        }
        sleep(fault).await;
        match what {
            "frozen" => cluster.unpause(node).await?,
            _ => cluster.heal(node).await?,
        }
        cluster.settle(Duration::from_secs(2)).await?;
        // Whatever the member's return sets off shows within a TTL.
        sleep(TTLS[TTLS.len() - 1]).await;
        let role = if leader == Some(node) {
            "the servers' leader"
        } else {
            "a follower"
        };
        windows.push((
            began,
            format!(
                "member {node} ({role}) {what} for {:.0} s",
                fault.as_secs_f64()
            ),
        ));
    }
    let mut expired_total = 0;
    // A block, not drop(): clippy sees a guard as held to the end of its scope.
    {
        let r = record.lock().unwrap();
        for (i, (began, label)) in windows.iter().enumerate() {
            let until = windows.get(i + 1).map(|(next, _)| *next);
            let during: Vec<&(Instant, Duration, String)> = r
                .step_downs
                .iter()
                .filter(|(at, _, _)| at >= began && until.is_none_or(|u| *at < u))
                .collect();
            // Expired: no renewal got through in time, which tenure must
            // prevent while a majority serves. Deleted or Revoked: the servers
            // removed a lease its holder had kept alive (on etcd before 3.4.31
            // and 3.5.13, a stalled leader that resumes does: etcd#15247).
            let expired = during.iter().filter(|(_, _, why)| why == "Expired").count();
            expired_total += expired;
            let detail: Vec<String> = during
                .iter()
                .map(|(at, ttl, why)| {
                    format!("TTL {ttl:?} {why} at {:.1} s", (*at - *began).as_secs_f64())
                })
                .collect();
            println!(
                "{label}: {} step-downs, {expired} of them Expired{}",
                during.len(),
                if detail.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", detail.join(", "))
                }
            );
        }
    }
    for e in &electors {
        e.shutdown().await;
    }
    sleep(Duration::from_millis(200)).await;
    let r = record.lock().unwrap();
    for ttl in TTLS {
        let least = r
            .least_left
            .iter()
            .filter(|(t, _)| *t == ttl)
            .map(|(_, l)| *l)
            .min()
            .unwrap_or_default();
        let downs = r.step_downs.iter().filter(|(_, t, _)| *t == ttl).count();
        println!(
            "TTL {ttl:?}: {HOLDERS_PER_TTL} holders, {downs} step-downs over 6 faults; least validity left at a sample {:.0} ms ({:.0}% of the TTL)",
            least.as_secs_f64() * 1000.0,
            least.as_secs_f64() / ttl.as_secs_f64() * 100.0
        );
    }
    drop(r);
    drop(cluster); // removes the containers
    if expired_total > 0 {
        return Err(format!("{expired_total} holders expired while a majority served").into());
    }
    Ok(())
}
