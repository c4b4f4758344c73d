//! An observer whose watch is on a server node that can no longer tell it
//! anything: the node cut off from its peers, or frozen. The holder dies
//! and a standby takes over meanwhile; the observer must not wait for that
//! node to come back to say so.

use std::time::Duration;

use tokio::time::Instant;

use super::candidate::{elector, Holder, Standby};
use super::context::{Context, Cx, Failure, Step};
use super::cutoff::{each_node, faultable, Crash, Fault};
use super::faults::applied;
use super::watcher::{elected, show, vacant, Watcher};
use crate::factory::ServerFaults;
use crate::report::Property;

/// In a deployment of three or more nodes, for each node X in turn (cut off
/// from its peers; then frozen, unless X leads the servers, as in
/// [`standby_sees_failover_when_its_node_is_cut_off`](super::standby_sees_failover_when_its_node_is_cut_off)):
/// an observer starts `Elector::observe` while its client can reach X only
/// (so its watch is on X) and sees the holder, then reaches every node
/// again; X is cut off or frozen, the holder crashes, and a standby on a
/// client of its own takes over. While X stays cut off or frozen, the
/// observer reports the standby's election within [`observed_within`] (a
/// quarter of the TTL plus [`Timing::round_trip`](crate::Timing::round_trip))
/// of the standby's grant, or, where later, of the time X takes to notice
/// the cut ([`Timing::cut_off_noticed`](crate::Timing::cut_off_noticed)).
///
/// That is what a backend that doubts its watch can do, as an etcd waiter
/// next in line does: a look past the watch every eighth of the TTL, one try
/// lost on the silent node, one more elsewhere. A watch that is only trusted
/// hears nothing until X is back, or until its connection is given up for
/// dead (etcd: a stream that requires a leader is cancelled three election
/// timeouts after the cut; a frozen member's connection, once its HTTP/2
/// pings go unanswered, 15 s).
pub async fn observer_sees_failover_when_its_node_is_cut_off(cx: Cx) -> Step {
    let servers = faultable(&cx).await?;
    let figures = each_node(servers, "the observer's", |node, fault| {
        round(&cx, servers, node, fault)
    })
    .await?;
    cx.note(format!(
        "the observer reported the new leader, ms after its grant (or after the node noticed the cut) of the bound, by the observer's node: {}",
        figures.join(", ")
    ));
    Ok(())
}

/// How soon after a new leader's grant an observer whose watch is on a
/// silent node must report it: a quarter of the TTL (a look every eighth
/// of it, and a try of as long lost on the silent node) plus a round trip.
pub fn observed_within(cx: &Cx) -> Duration {
    cx.ttl() / 4 + cx.timing().round_trip
}

/// One crash with the observer's node `node` cut off or frozen; how long
/// the observer took to report the new leader, and its bound.
async fn round(
    cx: &Cx,
    servers: &dyn ServerFaults,
    node: usize,
    fault: Fault,
) -> Step<(Duration, Duration)> {
    let (ca, cb, co) = (cx.client().await?, cx.client().await?, cx.client().await?);
    let Some(link) = co.link.clone() else {
        return Err(Failure::Skip(
            "the observer's client has no link to confine to one node".into(),
        ));
    };
    let key = cx.new_key();
    let a = Holder::acquire(cx, &ca, &key, "a").await?;
    drop(ca); // a's renewer task owns the only handle on its client
    let (term, renewer, _) = a.keep_renewing();
    applied(
        link.confine_to(Some(node)).await,
        format_args!("confining the observer's client to node {node}"),
    )?;
    let observer = elector(cx, &co, &key, "o")?;
    drop(co);
    let mut watcher = Watcher::observing(&observer);
    // Not what the case times: a client that can reach one node may try
    // the others a few times before it finds it.
    watcher
        .until(
            cx,
            cx.failover_bound(),
            "a's election, the observer's first event",
            elected(cx, "a"),
            |_| false,
        )
        .await?;
    link.confine_to(None)
        .await
        .ctx("letting the observer's client reach every node")?;
    let standby = Standby::start(cx, elector(cx, &cb, &key, "b")?);
    drop(cb);
    cx.until_waiting(&key, 1).await?;
    let crash = Crash::during(cx, servers, node, fault, (term, renewer)).await?;
    let outcome = async {
        let (since, bound) = crash.failover_clock(cx, servers).await?;
        let b = standby.fails_over(cx, since, bound).await?;
        let granted = cx.safety().get(b.id).start;
        // A node that serves on for a while after the cut hides the
        // failover from its clients until it lets them go.
        let from = granted.max(crash.faulted() + fault.noticed(cx));
        let limit = observed_within(cx);
        let left = (from + limit).saturating_duration_since(Instant::now());
        let seen = watcher
            .until(cx, left, "b's election", elected(cx, "b"), |e| {
                vacant(e) || elected(cx, "a")(e)
            })
            .await;
        Ok::<_, Failure>((b, from, limit, seen))
    }
    .await;
    let restored = fault.lift(servers, node).await;
    let settled = servers.settle().await.ctx("letting the servers settle");
    let (mut b, from, limit, seen) = outcome?;
    restored?;
    settled?;
    let took = match seen {
        Ok(at) => at.saturating_duration_since(from),
        Err(Failure::Fail(why)) => {
            let events: Vec<String> = watcher.seen.iter().map(|(e, _)| show(e)).collect();
            cx.check(Property::Timing, false, || {
                format!(
                    "the observer did not report b's election within {limit:?} of its grant \
                     (while its node stayed {fault}): {why}; it reported {}",
                    events.join(" → ")
                )
            })?;
            unreachable!("a failed check ends the case")
        }
        Err(skip) => return Err(skip),
    };
    cx.check(Property::Timing, took <= limit, || {
        format!("the observer reported b's election {took:?} after its grant, bound {limit:?}")
    })?;
    b.write();
    b.resign().await?;
    drop(watcher);
    observer.shutdown().await;
    Ok((took, limit))
}
