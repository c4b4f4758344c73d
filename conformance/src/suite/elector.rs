//! The Elector on the backend: graceful hand-over, crash takeover, and a
//! cut-off leader stepping down before anyone else leads.

use std::sync::Arc;
use std::time::Duration;

use tenure_core::LossReason;
use tokio::time::{sleep, Instant};

use super::candidate::{elector, Holder, Leader, Standby};
use super::context::{Context, Failure};
use super::runner::{run_case, Meta, Quiet};
use super::safety::Write;
use crate::factory::{BackendFactory, LinkFault};
use crate::report::{CaseReport, Property};

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// `resign` hands leadership to a campaigning standby within one round trip,
/// and the resigned term is over before the release is sent.
pub async fn resign_hands_over_at_once(factory: Arc<dyn BackendFactory>) -> CaseReport {
    let meta = Meta {
        name: "resign_hands_over_at_once",
        contract: "3, 8",
        quiet: Quiet::Shared,
    };
    run_case(factory, meta, |cx| async move {
        let (ca, cb) = (cx.client().await?, cx.client().await?);
        let key = cx.new_key();
        let rt = cx.timing().round_trip;
        let mut a = Leader::campaign(&cx, &elector(&cx, &ca, &key, "a")?, rt).await?;
        a.write();
        let standby = Standby::start(&cx, elector(&cx, &cb, &key, "b")?);
        cx.until_waiting(&key, 1).await?;
        let resigned = Instant::now();
        a.resign().await?;
        let mut b = standby.leads(&cx, cx.ttl()).await?;
        let handover = cx.safety().get(b.id).start - resigned;
        cx.figures(|f| f.handover_ms = Some(millis(handover)));
        cx.check(Property::Contract, !a.term.is_valid(), || {
            "the resigned term still claims validity".into()
        })?;
        let (_, reason) = cx.within(rt, "a's loss", a.lost()).await?;
        cx.check(Property::Contract, reason == LossReason::Resigned, || {
            format!("a's term ended as {reason:?}")
        })?;
        cx.check(Property::Timing, handover <= rt, || {
            format!("hand-over took {handover:?}, more than one round trip ({rt:?})")
        })?;
        b.write();
        b.resign().await
    })
    .await
}

/// A leader that stops renewing without releasing (a crash) is replaced by
/// a campaigning standby within the TTL plus the backend's slack plus 1 s;
/// the crashed leader's late write is refused.
pub async fn crashed_leader_taken_over_after_ttl(factory: Arc<dyn BackendFactory>) -> CaseReport {
    let meta = Meta {
        name: "crashed_leader_taken_over_after_ttl",
        contract: "6, 9",
        quiet: Quiet::Shared,
    };
    run_case(factory, meta, |cx| async move {
        let (ca, cb) = (cx.client().await?, cx.client().await?);
        let key = cx.new_key();
        let a = Holder::acquire(&cx, &ca, &key, "a").await?;
        drop(ca); // a's renewer task owns the only handle on its client
        a.write();
        let (term, token, identity) = (a.term, a.lease.token(), a.identity().to_owned());
        let ttl = cx.ttl();
        let renewer = tokio::spawn(async move {
            let mut a = a;
            loop {
                sleep(ttl / 3).await;
                if a.renew().await.is_err() {
                    return;
                }
            }
        });
        let standby = Standby::start(&cx, elector(&cx, &cb, &key, "b")?);
        cx.until_waiting(&key, 1).await?;
        sleep(ttl / 2).await; // let a renew at least once
        let crashed = Instant::now();
        renewer.abort(); // drops a's lease and client, releasing nothing
        cx.safety().end(term, crashed);
        let bound = ttl + cx.caps().expiry_slack + Duration::from_secs(1);
        let mut b = standby.leads(&cx, bound + cx.timing().round_trip).await?;
        let failover = cx.safety().get(b.id).start - crashed;
        cx.figures(|f| f.failover_ms = Some(millis(failover)));
        cx.check(Property::Timing, failover <= bound, || {
            format!("failover took {failover:?}, bound {bound:?}")
        })?;
        b.write();
        let zombie = cx.store().write(term, &identity, token);
        cx.check(Property::Fencing, zombie == Write::Refused, || {
            "the crashed leader's late write was accepted".into()
        })?;
        b.resign().await
    })
    .await
}

/// A leader cut off from the server loses leadership at its `valid_until`,
/// strictly before the standby is granted; its write after the new leader's
/// is refused, and once the link heals it does not disturb the new leader.
pub async fn partitioned_leader_steps_down_before_anyone_else_leads(
    factory: Arc<dyn BackendFactory>,
) -> CaseReport {
    let meta = Meta {
        name: "partitioned_leader_steps_down_before_anyone_else_leads",
        contract: "5, 6, 8",
        quiet: Quiet::Shared,
    };
    run_case(factory, meta, |cx| async move {
        let (ca, cb, cc) = (cx.client().await?, cx.client().await?, cx.client().await?);
        let Some(link) = ca.link.clone() else {
            return Err(Failure::Skip("the factory cannot cut a client off".into()));
        };
        let key = cx.new_key();
        let rt = cx.timing().round_trip;
        let a = Leader::campaign(&cx, &elector(&cx, &ca, &key, "a")?, rt).await?;
        a.write();
        let standby = Standby::start(&cx, elector(&cx, &cb, &key, "b")?);
        cx.until_waiting(&key, 1).await?;
        let cut = Instant::now();
        link.set(LinkFault::Blackhole).await.ctx("cutting a off")?;
        let (lost_at, reason) = cx.within(cx.ttl() + rt, "a's loss", a.lost()).await?;
        let deadline = a.term.valid_until();
        cx.check(Property::Contract, reason == LossReason::Expired, || {
            format!("cut off, a's term ended as {reason:?}")
        })?;
        cx.check(Property::Timing, lost_at <= deadline + rt, || {
            format!("lost() fired {:?} after valid_until", lost_at - deadline)
        })?;
        let bound = cx.ttl() + cx.caps().expiry_slack + rt;
        let mut b = standby.leads(&cx, bound + rt).await?;
        let b_start = cx.safety().get(b.id).start;
        cx.figures(|f| f.failover_ms = Some(millis(b_start - cut)));
        cx.check(Property::Exclusive, deadline < b_start, || {
            format!("b leads {:?} before a's valid_until", deadline - b_start)
        })?;
        cx.check(Property::Timing, lost_at < b_start, || {
            format!(
                "a's lost() fired {:?} after b began leading",
                lost_at - b_start
            )
        })?;
        cx.check(Property::Timing, b_start - cut <= bound, || {
            format!("failover took {:?}, bound {bound:?}", b_start - cut)
        })?;
        b.write();
        let stale = a.write();
        cx.check(Property::Fencing, stale == Write::Refused, || {
            "the cut-off leader's write was accepted".into()
        })?;
        // Healed, a's late renewal or release must not touch b's grant.
        link.set(LinkFault::Pass).await.ctx("healing a's link")?;
        sleep(rt).await;
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
        b.resign().await
    })
    .await
}
