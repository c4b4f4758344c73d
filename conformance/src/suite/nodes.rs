//! Server nodes killed under a leading candidate: a follower, then the
//! servers' own leader.

use tenure_core::LossReason;
use tokio::time::{sleep_until, Instant};

use super::candidate::{elector, Leader, Standby};
use super::checks::{after_deadline, refused, three_or_more_nodes, told_by_deadline};
use super::context::{Cx, Step};
use super::faults::{applied, millis, restore, server_leader};
use crate::factory::ServerFaults;
use crate::report::Property;

/// In a cluster of three or more nodes: killing a node that is not the
/// servers' leader leaves the candidate leading (its renewals go on); killing
/// the servers' own leader (raft, zab) either leaves it leading once the
/// servers re-elect, or it steps down by its `valid_until` and the standby
/// leads within [`Cx::failover_bound`] of the re-election, plus the time
/// the servers took to re-elect (a new leader may refresh
/// every lease by its election timeout, as etcd's does). Never two leaders;
/// the old leader's write is refused; killed nodes are started again.
pub async fn server_node_killed_leader_survives_or_fails_over(cx: Cx) -> Step {
    let servers = three_or_more_nodes(&cx, "kill")?;
    let mut down = Vec::new();
    let result = kill_nodes(&cx, servers, &mut down).await;
    let restored = restore(servers, &down).await;
    result.and(restored)
}

async fn kill_nodes(cx: &Cx, servers: &dyn ServerFaults, down: &mut Vec<usize>) -> Step {
    let (ca, cb) = (cx.client().await?, cx.client().await?);
    let key = cx.new_key();
    let (ttl, rt) = (cx.ttl(), cx.timing().round_trip);
    let leader = server_leader(servers, |_| true).await?;
    // Not what the case measures: the first call may also connect.
    let a = Leader::campaign(cx, &elector(cx, &ca, &key, "a")?, cx.set_up_limit()).await?;
    a.write();
    let standby = Standby::start(cx, elector(cx, &cb, &key, "b")?);
    cx.until_waiting(&key, 1).await?;

    // A node that is not the servers' leader (any node where none is elected).
    let follower = (0..servers.nodes())
        .rev()
        .find(|&i| Some(i) != leader)
        .expect("3 or more nodes");
    let killed = Instant::now();
    applied(
        servers.kill(follower).await,
        format_args!("killing node {follower}"),
    )?;
    down.push(follower);
    sleep_until(killed + ttl * 2 + rt).await;
    still_leads(
        cx,
        &a,
        killed,
        "a node that is not the servers' leader died",
    )?;
    applied(
        servers.start(follower).await,
        format_args!("starting node {follower}"),
    )?;
    down.retain(|&n| n != follower);
    still_leads(cx, &a, killed, "the killed node rejoined")?;
    cx.note(format!("node {follower} killed: a kept leading"));

    let Some(old) = server_leader(servers, |_| true).await? else {
        cx.note("the servers elect no leader of their own: no leader to kill");
        return hand_over(cx, a, standby).await;
    };
    let killed = Instant::now();
    applied(servers.kill(old).await, format_args!("killing node {old}"))?;
    down.push(old);
    let new = server_leader(servers, |i| i != old).await?;
    let reelected = Instant::now();
    cx.note(format!(
        "servers' leader node {old} killed; node {} led them {:.0} ms later",
        new.map_or("none".into(), |n| n.to_string()),
        millis(reelected - killed)
    ));
    // By now a renewal sent after the re-election has been answered, or
    // a's deadline (at most the TTL after the kill) has passed.
    sleep_until(reelected + ttl + rt * 2).await;
    if a.term.ended().is_none() {
        still_leads(cx, &a, killed, "the servers' leader died")?;
        cx.note("a kept leading through the servers' re-election (0 ms without a leader)");
        start_again(servers, down).await?;
        return hand_over(cx, a, standby).await;
    }
    let (lost_at, reason) = cx.within(rt, "a's loss", a.lost()).await?;
    let deadline = a.term.valid_until();
    cx.check(
        Property::Contract,
        // Any loss but a voluntary one: the backend may say why (the
        // session, and with it the node, is gone: Deleted; or the
        // lease expired there: Revoked), or a's own deadline passed.
        !matches!(reason, LossReason::Resigned | LossReason::Shutdown),
        || format!("a's term ended as {reason:?}, a voluntary end"),
    )?;
    told_by_deadline(cx, lost_at, deadline)?;
    // A new raft leader refreshes every lease by its election timeout
    // (etcd), which is no longer than the servers took to elect it.
    let bound = cx.failover_bound() + (reelected - killed);
    let b = standby.fails_over(cx, reelected, bound).await?;
    let b_start = cx.safety().get(b.id).start;
    after_deadline(cx, deadline, b_start, "b", "a's")?;
    cx.check(
        Property::Timing,
        b_start.saturating_duration_since(reelected) <= bound,
        || {
            format!(
                "b led {:?} after the servers re-elected, bound {bound:?}",
                b_start - reelected
            )
        },
    )?;
    cx.figures(|f| f.failover_ms = Some(millis(b_start - killed)));
    cx.note(format!(
        "a stepped down ({reason:?}); {:.0} ms without a valid leader",
        millis(b_start.saturating_duration_since(lost_at.min(deadline)))
    ));
    start_again(servers, down).await?;
    finish(cx, a, b).await
}

/// Starts the killed nodes before the closing hand-over and resign, which
/// this case does not measure.
async fn start_again(servers: &dyn ServerFaults, down: &mut Vec<usize>) -> Step {
    restore(servers, down).await?;
    down.clear();
    Ok(())
}

/// `a` still leads `since` a fault: not ended, valid, and renewed since.
pub(super) fn still_leads(cx: &Cx, a: &Leader, since: Instant, what: &str) -> Step {
    let (ended, valid, until) = (a.term.ended(), a.term.is_valid(), a.term.valid_until());
    cx.check(
        Property::Contract,
        ended.is_none() && valid && until > since + cx.ttl(),
        || {
            format!(
                "after {what}, a's term ended {ended:?}, valid {valid}, \
                 valid_until {:?} after the fault",
                until.saturating_duration_since(since)
            )
        },
    )
}

/// `a` resigns and the standby leads (the case's end when `a` kept leading).
pub(super) async fn hand_over(cx: &Cx, mut a: Leader, standby: Standby) -> Step {
    let resigned = Instant::now();
    a.resign().await?;
    let b = standby.leads(cx, cx.ttl() + cx.timing().round_trip).await?;
    let handover = cx.safety().get(b.id).start - resigned;
    cx.figures(|f| f.handover_ms = Some(millis(handover)));
    finish(cx, a, b).await
}

/// The new leader writes, the old one's write is refused, the new one resigns.
pub(super) async fn finish(cx: &Cx, a: Leader, mut b: Leader) -> Step {
    b.write();
    let stale = a.write();
    refused(cx, stale, "the old leader's write")?;
    b.resign().await
}
