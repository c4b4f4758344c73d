//! One server node paused (frozen, its connections open and silent) for
//! longer than the TTL: the node the leader's client uses, or the servers'
//! own leader. A frozen node is the fault clients handle worst: nothing
//! fails, answers just stop coming.

use tokio::time::{sleep_until, Instant};

use super::candidate::{elector, Leader, Standby};
use super::checks::{after_deadline, three_or_more_nodes};
use super::context::{Context, Cx, Failure, Step};
use super::faults::{applied, millis, server_leader};
use super::nodes::{finish, hand_over, still_leads};
use crate::factory::ServerFaults;
use crate::report::Property;

/// Which node the case pauses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Paused {
    /// The node the leader's client has connections to.
    Holders,
    /// The node the servers elected their leader (raft, zab).
    ServersLeader,
}

/// The node the leader's client uses (not the servers' leader, where the
/// client uses another too) is paused for longer than the TTL. The others
/// are a majority and serve on: a client given every endpoint renews
/// through them, so the leader must go on leading, its `valid_until`
/// moving, and hand over when it resigns. (A backend whose servers are
/// independent, or whose client has one endpoint, skips the case.)
pub async fn holders_server_node_paused_longer_than_ttl(cx: Cx) -> Step {
    paused_node(cx, Paused::Holders).await
}

/// The servers' own leader is paused for longer than the TTL: the others
/// elect a new one meanwhile. The leader either goes on leading (its client
/// moved to another node and renewed in time) or steps down by its
/// `valid_until`; then a standby leads, never before that `valid_until`,
/// within two TTLs plus [`Cx::failover_bound`] of the servers being whole
/// again, and the old leader's write is refused.
pub async fn servers_leader_paused_longer_than_ttl(cx: Cx) -> Step {
    paused_node(cx, Paused::ServersLeader).await
}

async fn paused_node(cx: Cx, which: Paused) -> Step {
    let servers = three_or_more_nodes(&cx, "pause")?;
    let leader = servers.leader().await.ok().flatten();
    // A's client on a node other than the servers' leader where one can
    // be had (pausing the leader is the other case): a client that uses
    // the leader only is replaced, a few times at most.
    let mut ca = cx.client().await?;
    if which == Paused::Holders {
        for _ in 0..servers.nodes() {
            match ca.link.as_ref().and_then(|link| link.nodes_in_use()) {
                Some(nodes) if !nodes.is_empty() && nodes.iter().all(|&n| Some(n) == leader) => {
                    ca = cx.client().await?;
                }
                _ => break,
            }
        }
    }
    let cb = cx.client().await?;
    let key = cx.new_key();
    let (ttl, rt) = (cx.ttl(), cx.timing().round_trip);
    let a = Leader::campaign(&cx, &elector(&cx, &ca, &key, "a")?, cx.set_up_limit()).await?;
    a.write();
    let standby = Standby::start(&cx, elector(&cx, &cb, &key, "b")?);
    cx.until_waiting(&key, 1).await?;
    let node = match which {
        Paused::Holders => {
            let nodes = ca.link.as_ref().and_then(|link| link.nodes_in_use());
            let Some(nodes) = nodes else {
                return Err(Failure::Skip(
                    "the client's link cannot tell which server node it uses".into(),
                ));
            };
            if nodes.is_empty() {
                return Err(Failure::Fail(
                    "a's client, leading, has no connection open to any server node".into(),
                ));
            }
            // Best a node b does not use and that does not lead the
            // servers: the fault then cuts a off and leaves b and the
            // servers whole.
            let b_uses = cb
                .link
                .as_ref()
                .and_then(|link| link.nodes_in_use())
                .unwrap_or_default();
            let not_leader = |n: &&usize| Some(**n) != leader;
            nodes
                .iter()
                .filter(not_leader)
                .find(|n| !b_uses.contains(n))
                .or_else(|| nodes.iter().find(not_leader))
                .copied()
                .unwrap_or(nodes[0])
        }
        Paused::ServersLeader => match server_leader(servers, |_| true).await? {
            Some(node) => node,
            None => {
                return Err(Failure::Skip(
                    "the servers elect no leader of their own".into(),
                ))
            }
        },
    };
    let opened = || {
        ca.link
            .as_ref()
            .and_then(|link| link.connections_opened())
            .and_then(|counts| counts.get(node).copied())
    };
    let opened_before = opened();
    let paused = Instant::now();
    applied(
        servers.pause(node).await,
        format_args!("pausing node {node}"),
    )?;
    sleep_until(paused + ttl + rt * 2).await; // the fault lasts longer than the TTL
    let unpaused = servers
        .unpause(node)
        .await
        .ctx(format_args!("unpausing node {node}"));
    let resumed = Instant::now();
    // Connections a's client opened to the frozen node while it was.
    let retried = opened()
        .zip(opened_before)
        .map(|(after, before)| after - before);
    unpaused?;
    cx.note(format!(
        "node {node} ({}) paused for {:.0} ms",
        match which {
            Paused::Holders => "the one a's client used",
            Paused::ServersLeader => "the servers' leader",
        },
        millis(resumed - paused)
    ));
    after_pause(&cx, servers, which, a, standby, paused, retried).await
}

/// What must hold once the paused node is back.
async fn after_pause(
    cx: &Cx,
    servers: &dyn ServerFaults,
    which: Paused,
    a: Leader,
    standby: Standby,
    paused: Instant,
    retried: Option<usize>,
) -> Step {
    let (ttl, rt) = (cx.ttl(), cx.timing().round_trip);
    servers
        .settle()
        .await
        .ctx("waiting for the servers to settle after the pause")?;
    let settled = Instant::now();
    if which == Paused::Holders && a.term.ended().is_some() {
        let (lost_at, reason) = a.lost().await;
        // Excused only where the backend says its client may go back to a
        // frozen node and the link shows it did; then the step-down must
        // still be safe and on time (checked below).
        match (cx.factory().retries_frozen_nodes(), retried) {
            (Some(why), Some(n)) if n > 0 => cx.note(format!(
                "a stepped down ({reason:?}) {:.0} ms after its node was paused: its client \
                 opened {n} connection(s) to the frozen node during the pause ({why})",
                millis(lost_at - paused)
            )),
            (declared, retried) => {
                return cx.check(Property::Contract, false, || {
                    format!(
                        "a stepped down ({reason:?}) {:.0} ms after its node was paused, though \
                         the other nodes, a majority, served throughout{}",
                        millis(lost_at - paused),
                        match (declared, retried) {
                            (Some(_), Some(0)) => {
                                " (and its client opened no connection to the frozen node)"
                            }
                            (Some(_), _) => " (its link cannot count connections per node)",
                            _ => "",
                        }
                    )
                });
            }
        }
    }
    if a.term.ended().is_none() {
        still_leads(cx, &a, paused, "its server node was paused")?;
        cx.note("a kept leading through the pause");
        return hand_over(cx, a, standby).await;
    }
    let (lost_at, reason) = a.lost().await;
    let deadline = a.term.valid_until();
    cx.check(Property::Timing, lost_at <= deadline + rt, || {
        format!(
            "a's loss ({reason:?}) came {:?} after its valid_until",
            lost_at - deadline
        )
    })?;
    let limit = ttl * 2 + cx.failover_bound();
    let b = standby.leads(cx, limit).await?;
    let b_start = cx.safety().get(b.id).start;
    after_deadline(cx, deadline, b_start, "b", "a's")?;
    cx.figures(|f| f.failover_ms = Some(millis(b_start - paused)));
    cx.note(format!(
        "a stepped down ({reason:?}) {:.0} ms after the pause began; b led {:.0} ms after it began, {:.0} ms after the servers settled",
        millis(lost_at - paused),
        millis(b_start - paused),
        millis(b_start.saturating_duration_since(settled))
    ));
    finish(cx, a, b).await
}
