//! Every server node stopped for several TTLs, then started again.

use std::time::Duration;

use futures::future::join_all;
use tenure_core::{Elector, ElectorState};
use tokio::time::{sleep, sleep_until, Instant};

use super::candidate::{elector, Running};
use super::context::{Context, Cx, Failure, Step};
use super::faults::{applied, millis, RECOVERY};
use crate::report::Property;

/// How many TTLs the servers stay down: long enough for every term to end
/// and every cleanup that waits out a TTL to give up.
const OUTAGE_TTLS: u32 = 4;

fn leads(elector: &Elector) -> bool {
    matches!(*elector.state().borrow(), ElectorState::Leader { .. })
}

/// `a` leads in `Elector::run` (which campaigns again whenever a term
/// ends) when every server node is killed; [`OUTAGE_TTLS`] TTLs later,
/// with a's term long over and every release and cleanup given up, they
/// are all started again. Once the servers have a leader, a candidate
/// leads within the TTL, the backend's expiry slack and a round trip:
/// what the outage left on the servers (the old term's record, whose
/// delete never landed, revived with a fresh TTL by the servers' recovery,
/// as a new etcd leader's `Promote` revives every lease) may outlive the
/// outage by a TTL, never for good. A client that keeps such a record
/// alive (etcd keys on one lease per client: the client's next campaign
/// keeps the lease, and the old key, alive) leaves its own new candidacy
/// queued behind it forever, while the servers name it leader.
pub async fn servers_stopped_for_several_ttls_then_a_candidate_leads(cx: Cx) -> Step {
    let Some(servers) = cx.factory().servers() else {
        return Err(Failure::Skip("the factory cannot stop the servers".into()));
    };
    let ca = cx.client().await?;
    let key = cx.new_key();
    let a = elector(&cx, &ca, &key, "a")?;
    let running = Running::start(&cx, &a);
    running.leads(&cx, cx.set_up_limit()).await?;
    let mut down = Vec::new();
    let result = outage(&cx, &a, servers, &mut down).await;
    // Whatever happened, the servers are whole for the next case.
    let restored = join_all(down.iter().map(|&node| servers.start(node))).await;
    a.shutdown().await;
    let _ = running.handle.await;
    result?;
    for (node, started) in down.iter().zip(restored) {
        started.ctx(format_args!("starting node {node} again"))?;
    }
    Ok(())
}

async fn outage(
    cx: &Cx,
    a: &Elector,
    servers: &dyn crate::factory::ServerFaults,
    down: &mut Vec<usize>,
) -> Step {
    let (ttl, rt, slack) = (cx.ttl(), cx.timing().round_trip, cx.caps().expiry_slack);
    let killing = Instant::now();
    for node in 0..servers.nodes() {
        applied(
            servers.kill(node).await,
            format_args!("killing node {node}"),
        )?;
        down.push(node);
    }
    // Counted from the last kill: killing one container after another can
    // take seconds, and a leader renews through the last one standing.
    let stopped = Instant::now();
    sleep_until(stopped + ttl * OUTAGE_TTLS).await;
    cx.check(Property::Timing, !leads(a), || {
        format!(
            "a still led {:?} after every server node was killed",
            stopped.elapsed()
        )
    })?;
    // All at once: a node of a cluster serves only once a majority is up.
    let started = join_all(down.iter().map(|&node| servers.start(node))).await;
    for (node, result) in down.iter().zip(started) {
        applied(result, format_args!("starting node {node}"))?;
    }
    down.clear();
    let restarted = Instant::now();
    // The servers may elect a leader of their own before they serve: count
    // from when they have one (at once where they elect none).
    let recovered = loop {
        match servers.leader().await {
            Ok(Some(_)) | Err(_) => break Instant::now(),
            Ok(None) if restarted.elapsed() > RECOVERY => {
                return Err(Failure::Fail(format!(
                    "the servers had no leader {RECOVERY:?} after they were started"
                )))
            }
            Ok(None) => sleep(Duration::from_millis(20)).await,
        }
    };
    let bound = ttl + slack + rt;
    while !leads(a) && recovered.elapsed() <= bound + rt {
        sleep(Duration::from_millis(5)).await;
    }
    let took = recovered.elapsed();
    let led = leads(a);
    cx.note(format!(
        "servers killed in {:.0} ms, all down {:.0} ms; a {} {:.0} ms after they had a leader again",
        millis(stopped - killing),
        millis(restarted - stopped),
        if led { "led" } else { "had not led" },
        millis(took)
    ));
    let named = a.leader().await;
    cx.check(Property::Timing, led && took <= bound, || {
        format!(
            "no candidate led within {bound:?} (TTL + slack + round trip) of the servers' \
             recovery (waited {took:?}); the servers name {named:?} as leader while a's \
             state is {:?}",
            *a.state().borrow()
        )
    })
}
