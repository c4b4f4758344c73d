//! Holders on a 3-member etcd cluster while one member at a time is frozen
//! (`docker pause`) or cut off from its peers for a minute: a majority
//! serves throughout, so no holder may lose its lease.
//!
//! Twenty holders at TTL 2 s and twenty at 10 s, each an Elector of its own
//! with a client given all three endpoints, lead one election each. Every
//! member in turn is frozen for `FAULT` (60 s), then cut off for as long;
//! between faults the cluster settles. The program counts step-downs and
//! the least validity any holder had left (sampled every 50 ms), and exits
//! non-zero if any holder stepped down.
//!
//! Run (Docker and the conformance image, as the suite needs):
//! `cargo run -p tenure-conformance --features harness --example frozen_member`
//! (`FAULT_SECS=10` shortens each fault.)

use std::sync::Arc;
use std::time::Duration;

use tenure_conformance::harness::{Cluster, Topology};
use tenure_core::Elector;
use tenure_etcd::{EtcdBackend, EtcdOptions};
use tokio::time::{sleep, Instant};

const HOLDERS_PER_TTL: usize = 20;
const TTLS: [Duration; 2] = [Duration::from_secs(2), Duration::from_secs(10)];

/// One holder's record.
struct Holder {
    ttl: Duration,
    elector: Elector,
    /// Step-downs seen, and the least validity left at any sample.
    step_downs: usize,
    least_left: Duration,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn".into()),
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
    let mut holders = Vec::new();
    for ttl in TTLS {
        for i in 0..HOLDERS_PER_TTL {
            let backend = EtcdBackend::connect(&endpoints, EtcdOptions::default()).await?;
            let elector = Elector::builder(Arc::new(backend))
                .key(format!("frozen-member/{}s/{i}", ttl.as_secs()))
                .identity(format!("holder-{i}"))
                .ttl(ttl)
                .build()?;
            holders.push(Holder {
                ttl,
                elector,
                step_downs: 0,
                least_left: ttl,
            });
        }
    }
    let mut terms = Vec::new();
    for h in &holders {
        terms.push(h.elector.campaign().await?);
    }
    println!(
        "{} holders lead (TTL {:?}); each fault lasts {fault:?}",
        holders.len(),
        TTLS
    );
    let faults: Vec<(&str, usize)> = (0..3)
        .map(|n| ("frozen", n))
        .chain((0..3).map(|n| ("cut off", n)))
        .collect();
    for (what, node) in faults {
        let leader = cluster.leader_index().await.ok().flatten();
        match what {
            "frozen" => cluster.pause(node).await?,
            _ => cluster.partition(node).await?,
        }
        let began = Instant::now();
        let lost_before: usize = holders.iter().map(|h| h.step_downs).sum();
        while began.elapsed() < fault {
            for (h, term) in holders.iter_mut().zip(terms.iter_mut()) {
                if let Some(reason) = term.term().ended() {
                    h.step_downs += 1;
                    println!(
                        "  TTL {:?}: a holder stepped down ({reason:?}) {:.1} s into the fault",
                        h.ttl,
                        began.elapsed().as_secs_f64()
                    );
                    *term = h.elector.campaign().await?;
                    continue;
                }
                let left = term.term().valid_until().saturating_duration_since(Instant::now());
                h.least_left = h.least_left.min(left);
            }
            sleep(Duration::from_millis(50)).await;
        }
        match what {
            "frozen" => cluster.unpause(node).await?,
            _ => cluster.heal(node).await?,
        }
        cluster.settle(Duration::from_secs(2)).await?;
        let lost: usize = holders.iter().map(|h| h.step_downs).sum::<usize>() - lost_before;
        println!(
            "member {node} {what} for {:.1} s (it {} the servers' leader): {lost} step-downs",
            began.elapsed().as_secs_f64(),
            if leader == Some(node) { "was" } else { "was not" }
        );
    }
    for ttl in TTLS {
        let of_ttl: Vec<&Holder> = holders.iter().filter(|h| h.ttl == ttl).collect();
        let step_downs: usize = of_ttl.iter().map(|h| h.step_downs).sum();
        let least = of_ttl.iter().map(|h| h.least_left).min().unwrap_or_default();
        println!(
            "TTL {ttl:?}: {} holders, {step_downs} step-downs over 6 faults; least validity left {:.0} ms ({:.0}% of the TTL)",
            of_ttl.len(),
            least.as_secs_f64() * 1000.0,
            least.as_secs_f64() / ttl.as_secs_f64() * 100.0
        );
    }
    let total: usize = holders.iter().map(|h| h.step_downs).sum();
    for h in &holders {
        h.elector.shutdown().await;
    }
    drop(terms);
    if total > 0 {
        std::process::exit(1);
    }
    Ok(())
}
