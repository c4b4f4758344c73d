//! The Elector on the backend: graceful hand-over, crash takeover, and a
//! cut-off leader stepping down before anyone else leads.

use std::time::Duration;

use tenure_core::LossReason;
use tokio::time::Instant;

use super::candidate::{elector, leader_and_standby, Holder, Leader, Running, Standby};
use super::checks::{after_deadline, failover_within, refused, told_by_deadline};
use super::context::{Context, Cx, Failure, Step};
use super::safety::TermId;
use crate::factory::LinkFault;
use crate::report::Property;

/// `resign` hands leadership to a campaigning standby at once, and the
/// resigned term is over (and its `lost()` resolved) before the release is
/// sent, as the witness at each standby's grant reads it. Two candidates
/// hand over once untimed, then [`Cx::AT_ONCE_SAMPLES`] times, each timed
/// from the resign call to the standby's grant, with the machine to
/// themselves, and once more untimed with the resigner's answers held back
/// for half a round trip, so that the standby is granted while the
/// release's answer is on its way: the median is within
/// [`Timing::at_once`](crate::Timing::at_once), each one within
/// [`Timing::at_once_max`](crate::Timing::at_once_max).
pub async fn resign_hands_over_at_once(cx: Cx) -> Step {
    let ([ca, cb], key, electors) = super::handover::two_electors(&cx).await?;
    let rt = cx.timing().round_trip;
    let mut leader = Leader::campaign(&cx, &electors[0], cx.set_up_limit()).await?;
    let mut samples = Vec::with_capacity(Cx::AT_ONCE_SAMPLES);
    // Round 0 warms the path up and is not timed; nor is the last, in
    // which the resigner's answers are held back.
    let last = Cx::AT_ONCE_SAMPLES + 1;
    for round in 0..=last {
        leader.write();
        let standby = Standby::start(&cx, electors[(round + 1) % 2].clone());
        cx.until_waiting(&key, 1).await?;
        // The last resigner's answers are held back while it resigns: the
        // standby is granted while the release's answer is on its way.
        let held = round == last && ca.link.is_some() && cb.link.is_some();
        let releaser = [&ca, &cb][round % 2].link.as_ref().filter(|_| held);
        if let Some(link) = releaser {
            link.set(LinkFault::DelayAnswers(rt / 2))
                .await
                .ctx("holding the resigner's answers")?;
        }
        let resigned = Instant::now();
        leader.resign().await?;
        if let Some(link) = releaser {
            link.set(LinkFault::Pass)
                .await
                .ctx("restoring the resigner's link")?;
        }
        let next = standby.leads(&cx, cx.ttl()).await?;
        if round > 0 && round < last {
            samples.push(cx.safety().get(next.id).start - resigned);
        }
        cx.check(Property::Contract, !leader.term.is_valid(), || {
            "the resigned term still claims validity".into()
        })?;
        let (_, reason) = cx
            .within(rt, "the resigned leader's loss", leader.lost())
            .await?;
        cx.check(Property::Contract, reason == LossReason::Resigned, || {
            format!("the resigned term ended as {reason:?}")
        })?;
        leader = next;
    }
    leader.write();
    leader.resign().await?;
    cx.at_once(&samples, "hand-over after resign")
}

/// Waits up to `limit` for `a`'s term to end, by its own deadline (the
/// loss reason `Expired`, told within a round trip of `valid_until`); returns
/// when it was told. A leader that goes on believing it leads after a fault
/// that stops its renewals breaks the contract (points 5 and 6), whatever
/// its backend said to its renewals.
pub(crate) async fn steps_down(cx: &Cx, a: &Leader, limit: Duration, after: &str) -> Step<Instant> {
    match tokio::time::timeout(limit, a.lost()).await {
        Ok((lost_at, reason)) => {
            cx.check(Property::Contract, reason == LossReason::Expired, || {
                format!("{after}, a's term ended as {reason:?}")
            })?;
            told_by_deadline(cx, lost_at, a.term.valid_until())?;
            Ok(lost_at)
        }
        Err(_) => {
            let left = a
                .term
                .valid_until()
                .saturating_duration_since(Instant::now());
            let why = format!(
                "{after}, the leader still believed it led {limit:?} later \
                 (valid for {left:?} more): its renewals went on without the servers"
            );
            cx.check(Property::Contract, false, || why.clone())?;
            Err(Failure::Fail(why))
        }
    }
}

/// The standby `b` leads within [`Cx::failover_bound`] of `died`, when the
/// leader whose term is `term` died (crashed, killed), and never before the
/// dead leader's last `valid_until`; returns it, once it wrote.
pub(crate) async fn takes_over(
    cx: &Cx,
    standby: Standby,
    term: TermId,
    died: Instant,
    whose: &str,
) -> Step<Leader> {
    let deadline = cx.safety().get(term).valid_until;
    let bound = cx.failover_bound();
    let b = standby.fails_over(cx, died, bound).await?;
    let b_start = cx.safety().get(b.id).start;
    after_deadline(cx, deadline, b_start, "b", whose)?;
    failover_within(cx, b_start - died, bound)?;
    b.write();
    Ok(b)
}

/// A leader that stops renewing without releasing (a crash) is replaced by
/// a campaigning standby within [`Cx::failover_bound`] (the TTL, the
/// backend's slack up to 1 s, and 250 ms), never before the crashed leader's
/// last `valid_until`; the crashed leader's late write is refused.
pub async fn crashed_leader_taken_over_after_ttl(cx: Cx) -> Step {
    let (ca, cb) = (cx.client().await?, cx.client().await?);
    let key = cx.new_key();
    let a = Holder::acquire(&cx, &ca, &key, "a").await?;
    drop(ca); // a's renewer task owns the only handle on its client
    a.write();
    let (token, identity) = (a.lease.token(), a.identity().to_owned());
    let ttl = cx.ttl();
    let (term, renewer, mut renewals) = a.keep_renewing();
    let standby = Standby::start(&cx, elector(&cx, &cb, &key, "b")?);
    cx.until_waiting(&key, 1).await?;
    // a crashes once it renewed with b waiting (its deadline then counts
    // from a renewal, not from the grant).
    let seen = *renewals.borrow_and_update();
    let limit = ttl / 3 + cx.timing().round_trip * 2;
    cx.within(limit, "a's renewal", renewals.wait_for(|n| *n > seen))
        .await?
        .map_err(|_| Failure::Fail("a's renewals failed before its crash".into()))?;
    let crashed = Instant::now();
    renewer.abort(); // drops a's lease and client, releasing nothing
    let _ = renewer.await; // a renewal in flight is over
    cx.safety().end(term, crashed);
    let mut b = takes_over(&cx, standby, term, crashed, "the crashed a's").await?;
    let zombie = cx.store().write(term, &identity, token);
    refused(&cx, zombie, "the crashed leader's late write")?;
    b.resign().await
}

/// A leader cut off from the server loses leadership at its `valid_until`,
/// strictly before the standby is granted; its write after the new leader's
/// is refused, and once the link heals it does not disturb the new leader.
/// Then a leader whose work runs in `Elector::run` is cut off: `run`
/// cancels the work by the term's `valid_until` (plus a round trip) and
/// before the standby is granted.
pub async fn partitioned_leader_steps_down_before_anyone_else_leads(cx: Cx) -> Step {
    let (ca, cb, cc) = (cx.client().await?, cx.client().await?, cx.client().await?);
    let Some(link) = ca.link.clone() else {
        return Err(Failure::Skip("the factory cannot cut a client off".into()));
    };
    let key = cx.new_key();
    let rt = cx.timing().round_trip;
    let (a, standby) = leader_and_standby(&cx, [&ca, &cb], &key).await?;
    let cut = Instant::now();
    link.set(LinkFault::Blackhole).await.ctx("cutting a off")?;
    let lost_at = steps_down(&cx, &a, cx.ttl() + rt, "cut off").await?;
    let deadline = a.term.valid_until();
    let bound = cx.failover_bound();
    let mut b = standby.fails_over(&cx, cut, bound).await?;
    let b_start = cx.safety().get(b.id).start;
    after_deadline(&cx, deadline, b_start, "b", "a's")?;
    cx.check(Property::Timing, lost_at < b_start, || {
        format!(
            "a's lost() fired {:?} after b began leading",
            lost_at - b_start
        )
    })?;
    failover_within(&cx, b_start - cut, bound)?;
    b.write();
    let stale = a.write();
    refused(&cx, stale, "the cut-off leader's write")?;
    // Healed, a's late renewal or release must not touch b's grant.
    let healed = Instant::now();
    link.set(LinkFault::Pass).await.ctx("healing a's link")?;
    // What the cut held (a's late renewal) lands: wait until it has been
    // answered (at most a round trip, as long as a link that cannot tell waits).
    match cx.until_link_quiet(link.as_ref(), healed, rt).await {
        Some(waited) if waited < rt => cx.note(format!(
            "a's held traffic landed {:.1} ms after its link healed",
            waited.as_secs_f64() * 1000.0
        )),
        Some(_) => cx.note("a's link had not gone quiet a round trip after it healed"),
        None => {}
    }
    let probe = Holder::try_acquire(&cx, &cc, &key, "c").await?;
    let holder = probe.as_ref().err().map(|i| i.identity.clone());
    cx.check(
        Property::Contract,
        holder == Some(cx.identity("b")) && b.term.is_valid(),
        || {
            format!(
                "after a's link healed the key is held by {holder:?}; b valid: {}",
                b.term.is_valid()
            )
        },
    )?;
    drop(a);
    b.resign().await?;

    // Again with the leader's work run by `run`: cut off, its term
    // expires, and `run` cancels the work by the term's deadline and
    // before anyone else is granted. On a client of its own: a's may
    // still be recovering from the cut (a ZooKeeper session that
    // expired meanwhile is replaced when the client next connects),
    // which is not what this round times.
    let cr = cx.client().await?;
    let link2 = cr
        .link
        .clone()
        .ok_or_else(|| Failure::Fail("a second client of the factory has no link".into()))?;
    let a2 = elector(&cx, &cr, &key, "a2")?;
    let running = Running::start(&cx, &a2);
    let (_, a2_term) = running.leads(&cx, rt).await?;
    let standby = Standby::start(&cx, elector(&cx, &cc, &key, "c2")?);
    cx.until_waiting(&key, 1).await?;
    let cut = Instant::now();
    link2
        .set(LinkFault::Blackhole)
        .await
        .ctx("cutting a2 off")?;
    let mut c2 = standby.fails_over(&cx, cut, bound).await?;
    running.cancelled_in_time(&cx, &a2_term, c2.id, rt)?;
    link2.set(LinkFault::Pass).await.ctx("healing a2's link")?;
    a2.shutdown().await;
    c2.resign().await
}
