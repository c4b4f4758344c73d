//! A holder whose session a server shrinks when it reconnects: a server
//! node that gives sessions less than they ask for (ZooKeeper's
//! `maxSessionTimeout` below the timeout asked for, on servers that
//! disagree or in a rolling configuration change) expires the holder's
//! session that much sooner than its lease counts.

use std::time::Duration;

use tokio::time::{sleep, Instant};

use super::candidate::{elector, Leader, Standby};
use super::checks::refused;
use super::context::{Context, Cx, Failure, Step};
use super::faults::{applied, millis, server_leader};
use crate::factory::{Client, Link, LinkFault, ServerFaults};
use crate::report::Property;

/// In a deployment of three or more nodes: a leads and b waits, each
/// client confined to the servers' leader; a node that does not lead the
/// servers is made to give every session that (re)connects to it a fifth of
/// the TTL ([`ServerFaults::limit_sessions`](crate::ServerFaults::limit_sessions)); then a's client is moved to
/// that node ([`Link::confine_to`](crate::Link::confine_to)), so its session reconnects there. Once a
/// stopped believing it leads, or has renewed through that node (two fifths
/// of the TTL after the move, so that what the other nodes knew of its
/// session has reached the servers), that node is cut off from its peers
/// (`ServerFaults::isolate`): it goes on answering a's client, but the
/// servers hear of a's session no more. a's term must end before
/// b is granted (its `lost()` fires, `is_valid()` turns false: the backend
/// learns of the shrink, or never counts a deadline past it), and b leads
/// within [`Cx::failover_bound`] of the cut; a's write after b's is refused.
/// (Cutting a's client off instead would let zookeeper-client expire the
/// shrunk session on its own, 7/5 of its timeout after its last answer,
/// which hides the fault half the time.)
/// The node gets its defaults back whatever the outcome.
pub async fn session_shrunk_on_reconnect_holder_stops_first(cx: Cx) -> Step {
    let Some(servers) = cx.factory().servers() else {
        return Err(Failure::Skip(
            "the factory cannot fault server nodes".into(),
        ));
    };
    if servers.nodes() < 3 {
        return Err(Failure::Skip(format!(
            "needs 3 or more server nodes (one that shrinks sessions, another for the \
             standby, a majority serving while the first restarts); the deployment has {}",
            servers.nodes()
        )));
    }
    // Both clients exist before any node shrinks sessions: a backend
    // may refuse to connect to servers that disagree (tenure-zookeeper).
    let (ca, cb) = (cx.client().await?, cx.client().await?);
    let (Some(la), Some(lb)) = (ca.link.clone(), cb.link.clone()) else {
        return Err(Failure::Skip(
            "the factory's clients have no link to move to one server node".into(),
        ));
    };
    let leader = server_leader(servers, |_| true).await?;
    // A node that does not lead the servers: they keep their leader
    // while it restarts with its new settings.
    let low = (0..servers.nodes())
        .rev()
        .find(|&i| Some(i) != leader)
        .expect("3 or more nodes");
    let keep = leader.unwrap_or(0);
    for (link, whose) in [(&la, "a's"), (&lb, "b's")] {
        applied(
            link.confine_to(Some(keep)).await,
            format_args!("confining {whose} client to node {keep}"),
        )?;
    }
    let max = cx.ttl() / 5;
    let limited = applied(
        servers.limit_sessions(low, Some(max)).await,
        format_args!("giving the sessions on node {low} at most {max:?}"),
    );
    let skipped = matches!(limited, Err(Failure::Skip(_)));
    let outcome = match limited {
        Ok(()) => shrink(&cx, servers, &ca, &cb, &*la, low, max).await,
        failed => failed,
    };
    // The node gets its defaults back even after a failed restart.
    let restored = if skipped {
        Ok(())
    } else {
        servers
            .limit_sessions(low, None)
            .await
            .ctx(format_args!("giving node {low} its defaults again"))
    };
    let healed = la.set(LinkFault::Pass).await.ctx("healing a's link");
    let freed = lb
        .confine_to(None)
        .await
        .ctx("letting b's client reach every node");
    let settled = if skipped {
        Ok(())
    } else {
        servers.settle().await.ctx("letting the servers settle")
    };
    outcome.and(restored).and(healed).and(freed).and(settled)
}

/// a leads on `ca`, b waits on `cb`; a's client (behind `la`) moves to node
/// `low`, which gives sessions at most `max`; that node is cut off from its
/// peers; b must be granted after a's term ended, and soon.
async fn shrink(
    cx: &Cx,
    servers: &dyn ServerFaults,
    ca: &Client,
    cb: &Client,
    la: &dyn Link,
    low: usize,
    max: Duration,
) -> Step {
    let key = cx.new_key();
    let a = Leader::campaign(cx, &elector(cx, ca, &key, "a")?, cx.set_up_limit()).await?;
    a.write();
    // When b is granted, its task first looks at a's term: ended by then
    // (the backend ended it before it let go), it is recorded as ended
    // there, before b's term begins. a's own watcher task, woken by the
    // same end, may be scheduled after b's grant where that follows within
    // microseconds (a release on the memory backend).
    let (term, id, seen_by) = (a.term.clone(), a.id, cx.clone());
    let standby = Standby::start_then(cx, elector(cx, cb, &key, "b")?, move || {
        let seen = Instant::now();
        if term.ended().is_some() {
            seen_by.safety().end(id, seen);
        }
    });
    cx.until_waiting(&key, 1).await?;

    let moved = Instant::now();
    la.confine_to(Some(low))
        .await
        .ctx(format_args!("moving a's client to node {low}"))?;
    let renewed_there = reconnected(cx, &a, la, low, moved).await?;
    // a's client keeps talking to its node, which answers it as before but
    // passes nothing on: the servers hear of a's session no more, while a
    // (were it unaware of the shrink) has no reason to doubt its session
    // before its own deadline.
    applied(
        servers.isolate(low).await,
        format_args!("cutting node {low} off from its peers"),
    )?;
    let cut = Instant::now();
    let judged = judge(cx, a, standby, low, max, cut).await;
    let rejoined = servers
        .rejoin(low)
        .await
        .ctx(format_args!("reconnecting node {low} to its peers"));
    match renewed_there {
        Some(after) => cx.note(format!(
            "a renewed through node {low} {:.0} ms after its client moved there (node {low} \
             gives sessions {max:?}); node {low} cut off from its peers then",
            millis(after - moved)
        )),
        None => cx.note(format!(
            "a stopped believing it leads {:.0} ms after its client moved to node {low} \
             (which gives sessions {max:?})",
            millis(cut - moved)
        )),
    }
    judged.and(rejoined)
}

/// a's node was cut off from its peers at `cut`: b must be granted after
/// a's term ended, and within the failover bound; a's late write is refused.
async fn judge(
    cx: &Cx,
    a: Leader,
    standby: Standby,
    low: usize,
    max: Duration,
    cut: Instant,
) -> Step {
    let (ttl, rt) = (cx.ttl(), cx.timing().round_trip);
    let bound = cx.failover_bound();
    let mut b = standby.fails_over(cx, cut, bound).await?;
    let (lost_at, reason) = cx.within(ttl + rt, "a's loss", a.lost()).await?;
    let a_end = cx.safety().get(a.id).end();
    let b_start = cx.safety().get(b.id).start;
    cx.check(Property::Exclusive, a_end <= b_start, || {
        format!(
            "b was granted {:?} before a stopped believing it leads (a's term ended as \
             {reason:?} {:?} after node {low} was cut off, its valid_until {:?} after): a's \
             session, shrunk to {max:?} by node {low} at its reconnect, was let go while a \
             still led",
            a_end - b_start,
            lost_at.saturating_duration_since(cut),
            a.term.valid_until().saturating_duration_since(cut),
        )
    })?;
    cx.check(Property::Contract, !reason.is_voluntary(), || {
        format!("a's term ended as {reason:?}, a voluntary end")
    })?;
    let took = b_start.saturating_duration_since(cut);
    cx.figures(|f| f.failover_ms = Some(millis(took)));
    cx.check(Property::Timing, took <= bound, || {
        format!("b led {took:?} after a's node was cut off, bound {bound:?}")
    })?;
    cx.note(format!(
        "a's term ended ({reason:?}) {:.0} ms before b was granted; b led {:.0} ms after a's \
         node was cut off",
        millis(b_start - a_end),
        millis(took)
    ));
    b.write();
    let stale = a.write();
    refused(cx, stale, "the shrunk leader's write")?;
    b.resign().await
}

/// Waits, from `moved`, until `a`'s term ended (`None`), or `a`'s client
/// reaches node `low` alone (where its link can tell), two fifths of the TTL
/// have passed there (the other nodes may still pass on what they knew of
/// the session, with the timeout they gave it: ZooKeeper followers tell
/// their leader at its next ping), and a renewal is answered (the instant,
/// `Some`); at most 3 TTLs.
async fn reconnected(
    cx: &Cx,
    a: &Leader,
    la: &dyn Link,
    low: usize,
    moved: Instant,
) -> Step<Option<Instant>> {
    let limit = cx.ttl() * 3;
    let deadline = moved + limit;
    let step = Duration::from_millis(1);
    let ended = || a.term.ended().is_some();
    loop {
        if ended() {
            return Ok(None);
        }
        match la.nodes_in_use() {
            None => break,
            Some(nodes) if nodes == [low] => break,
            nodes if Instant::now() >= deadline => {
                return Err(Failure::Fail(format!(
                    "a's client did not move to node {low} within {limit:?} (it uses {nodes:?})"
                )))
            }
            _ => sleep(step).await,
        }
    }
    let settled = Instant::now() + cx.ttl() * 2 / 5;
    while Instant::now() < settled {
        if ended() {
            return Ok(None);
        }
        sleep(step).await;
    }
    let before = a.term.valid_until();
    loop {
        if ended() {
            return Ok(None);
        }
        if a.term.valid_until() > before {
            return Ok(Some(Instant::now()));
        }
        if Instant::now() >= deadline {
            return Err(Failure::Fail(format!(
                "a neither renewed through node {low} nor stopped leading within {limit:?} of \
                 its move there"
            )));
        }
        sleep(step).await;
    }
}
