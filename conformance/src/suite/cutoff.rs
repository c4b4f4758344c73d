//! A standby whose watch is on a server node that can no longer tell it
//! anything: the node cut off from its peers (it still answers clients,
//! but has no leader and hears of no change), or frozen (its connections
//! open and silent). The holder dies meanwhile; the standby must not wait
//! for that node to come back.

use std::future::Future;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::{sleep, Instant};

use super::candidate::{elector, Holder, Standby};
use super::checks::{after_deadline, refused, three_or_more_nodes};
use super::context::{Context, Cx, Failure, Step};
use super::faults::{applied, millis, server_leader};
use super::safety::TermId;
use crate::factory::ServerFaults;
use crate::report::Property;

/// In a deployment of three or more nodes, for each node X in turn: the
/// standby queues while its client can reach X only (so its watch is on
/// X), then reaches every node again; X is cut off from its peers (not
/// from clients), or frozen (then the servers' own leader is spared: that
/// is [`servers_leader_paused_longer_than_ttl`](super::servers_leader_paused_longer_than_ttl)),
/// and the holder crashes. The standby leads within
/// [`Cx::failover_bound`] of the crash while X stays cut off (from the
/// servers' re-election, plus the time it took, where X led them; or,
/// where later, within [`Cx::FAILOVER_MARGIN`] of the time X takes to notice
/// the cut, [`Timing::cut_off_noticed`](crate::Timing::cut_off_noticed)), never
/// before the crashed holder's `valid_until`; the crashed holder's write is
/// refused.
pub async fn standby_sees_failover_when_its_node_is_cut_off(cx: Cx) -> Step {
    let servers = faultable(&cx).await?;
    let figures = each_node(servers, "the standby's", |node, fault| {
        round(&cx, servers, node, fault)
    })
    .await?;
    cx.note(format!(
        "the standby led, ms after the crash (or the re-election where its node led the servers) of the bound, by the standby's node: {}",
        figures.join(", ")
    ));
    Ok(())
}

/// The servers to fault, or why the cut-off cases do not apply: the
/// factory cannot fault server nodes, there are fewer than 3 of them, or
/// they are independent (no peers to be cut off from).
pub(super) async fn faultable(cx: &Cx) -> Step<&dyn ServerFaults> {
    let servers = three_or_more_nodes(cx, "fault")?;
    if let Err(tenure_core::Error::Unsupported { .. }) = servers.leader().await {
        return Err(Failure::Skip(
            "the servers are independent (no peers to be cut off from)".into(),
        ));
    }
    Ok(servers)
}

/// Runs `round` with each node cut off, then with each node frozen but the
/// servers' own leader (that is [`servers_leader_paused_longer_than_ttl`](super::servers_leader_paused_longer_than_ttl));
/// a failure names the node, as `whose` node. Returns each round's figure:
/// its time of its bound, in ms.
pub(super) async fn each_node<F, Fut>(
    servers: &dyn ServerFaults,
    whose: &str,
    mut round: F,
) -> Step<Vec<String>>
where
    F: FnMut(usize, Fault) -> Fut,
    Fut: Future<Output = Step<(Duration, Duration)>>,
{
    let mut figures = Vec::new();
    for fault in [Fault::CutOff, Fault::Frozen] {
        for node in 0..servers.nodes() {
            if fault == Fault::Frozen && servers.leader().await.ok().flatten() == Some(node) {
                figures.push(format!("{fault} node {node}: spared, it leads the servers"));
                continue;
            }
            let (took, bound) = round(node, fault).await.map_err(|failure| match failure {
                Failure::Fail(why) => {
                    Failure::Fail(format!("with {whose} node {node} {fault}: {why}"))
                }
                other => other,
            })?;
            figures.push(format!(
                "{fault} node {node}: {:.0} of {:.0}",
                millis(took),
                millis(bound)
            ));
        }
    }
    Ok(figures)
}

/// What befalls the node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Fault {
    /// Cut off from its peers, not from clients.
    CutOff,
    /// Paused: its connections open and silent.
    Frozen,
}

impl Fault {
    /// Cuts `node` off from its peers, or freezes it.
    pub(super) async fn apply(self, servers: &dyn ServerFaults, node: usize) -> Step {
        match self {
            Fault::CutOff => applied(
                servers.isolate(node).await,
                format_args!("cutting node {node} off from its peers"),
            ),
            Fault::Frozen => applied(
                servers.pause(node).await,
                format_args!("pausing node {node}"),
            ),
        }
    }

    /// Reconnects `node` to its peers, or thaws it.
    pub(super) async fn lift(self, servers: &dyn ServerFaults, node: usize) -> Step {
        match self {
            Fault::CutOff => servers
                .rejoin(node)
                .await
                .ctx(format_args!("reconnecting node {node} to its peers")),
            Fault::Frozen => servers
                .unpause(node)
                .await
                .ctx(format_args!("unpausing node {node}")),
        }
    }

    /// How long the node may go on serving its clients as if nothing
    /// happened ([`Timing::cut_off_noticed`](crate::Timing::cut_off_noticed)
    /// where cut off; a frozen node serves nothing).
    pub(super) fn noticed(self, cx: &Cx) -> Duration {
        match self {
            Fault::CutOff => cx.timing().cut_off_noticed,
            Fault::Frozen => Duration::ZERO,
        }
    }
}

/// A holder crashed while one server node was faulted.
pub(super) struct Crash {
    node: usize,
    /// The node that led the servers before the fault, where they say.
    servers_leader: Option<usize>,
    faulted: Instant,
    crashed: Instant,
}

impl Crash {
    /// Applies `fault` to `node`, then crashes the holder whose renewals
    /// `renewer` runs ([`Holder::keep_renewing`]): its lease and client are
    /// dropped, nothing released; its term `term` ends then.
    pub(super) async fn during(
        cx: &Cx,
        servers: &dyn ServerFaults,
        node: usize,
        fault: Fault,
        (term, renewer): (TermId, JoinHandle<()>),
    ) -> Step<Crash> {
        let servers_leader = servers.leader().await.ok().flatten();
        let faulted = Instant::now();
        fault.apply(servers, node).await?;
        renewer.abort(); // drops a's lease and client, releasing nothing
        let _ = renewer.await;
        let crashed = Instant::now();
        cx.safety().end(term, crashed);
        Ok(Crash {
            node,
            servers_leader,
            faulted,
            crashed,
        })
    }

    /// When the failover clock starts, and its bound. Where the faulted
    /// node led the servers, the others elect a leader first, and a new
    /// leader may refresh every lease by its election timeout (etcd), which
    /// is no longer than the servers took to elect it: the clock starts at
    /// their re-election and the bound grows by the time it took.
    pub(super) async fn failover_clock(
        &self,
        cx: &Cx,
        servers: &dyn ServerFaults,
    ) -> Step<(Instant, Duration)> {
        if self.servers_leader != Some(self.node) {
            return Ok((self.crashed, cx.failover_bound()));
        }
        server_leader(servers, |i| i != self.node).await?;
        let reelected = Instant::now();
        Ok((reelected, cx.failover_bound() + (reelected - self.faulted)))
    }

    /// When the fault began.
    pub(super) fn faulted(&self) -> Instant {
        self.faulted
    }
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Fault::CutOff => "cut off",
            Fault::Frozen => "frozen",
        })
    }
}

/// One crash with the standby's node `node` cut off or frozen; the
/// failover time and its bound.
async fn round(
    cx: &Cx,
    servers: &dyn ServerFaults,
    node: usize,
    fault: Fault,
) -> Step<(Duration, Duration)> {
    let (ca, cb) = (cx.client().await?, cx.client().await?);
    let Some(link) = cb.link.clone() else {
        return Err(Failure::Skip(
            "the standby's client has no link to confine to one node".into(),
        ));
    };
    let rt = cx.timing().round_trip;
    let key = cx.new_key();
    let a = Holder::acquire(cx, &ca, &key, "a").await?;
    drop(ca); // a's renewer task owns the only handle on its client
    a.write();
    let (token, identity) = (a.lease.token(), a.identity().to_owned());
    let (term, renewer, _) = a.keep_renewing();
    applied(
        link.confine_to(Some(node)).await,
        format_args!("confining the standby's client to node {node}"),
    )?;
    let standby = Standby::start(cx, elector(cx, &cb, &key, "b")?);
    cx.until_waiting(&key, 1).await?;
    // Its watch opens once it has read its place in line.
    sleep(rt).await;
    link.confine_to(None)
        .await
        .ctx("letting the standby's client reach every node")?;
    let crash = Crash::during(cx, servers, node, fault, (term, renewer)).await?;
    let deadline = cx.safety().get(term).valid_until;
    let outcome = async {
        let (since, bound) = crash.failover_clock(cx, servers).await?;
        // A node that serves on for a while after the cut hides the
        // failover until it lets its clients go.
        let noticed = crash.faulted() + fault.noticed(cx) + Cx::FAILOVER_MARGIN;
        let bound = bound.max(noticed.saturating_duration_since(since));
        let b = standby.fails_over(cx, since, bound).await?;
        Ok::<_, Failure>((b, since, bound))
    }
    .await;
    let restored = fault.lift(servers, node).await;
    let settled = servers.settle().await.ctx("letting the servers settle");
    let (mut b, since, bound) = outcome?;
    restored?;
    settled?;
    let b_start = cx.safety().get(b.id).start;
    after_deadline(cx, deadline, b_start, "b", "the crashed a's")?;
    let took = b_start.saturating_duration_since(since);
    cx.check(Property::Timing, took <= bound, || {
        format!("b led {took:?} after the crash (or the servers' re-election), bound {bound:?}")
    })?;
    b.write();
    let zombie = cx.store().write(term, &identity, token);
    refused(cx, zombie, "the crashed leader's late write")?;
    b.resign().await?;
    Ok((took, bound))
}
