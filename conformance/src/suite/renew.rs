//! Contract points 5 to 7: renewals extend from their send time, expiry
//! comes after the TTL and not much later, and a lapsed lease cannot be renewed.

use tokio::time::{sleep_until, Instant};

use super::candidate::Holder;
use super::checks::lease_lost;
use super::context::{Cx, Step};
use super::watcher::{elected, vacant, Watcher};
use crate::report::Property;

/// Checks a renewal's deadline counts from its own send time (point 5).
async fn renew_checked(cx: &Cx, a: &mut Holder) -> super::context::Step {
    let before = Instant::now();
    let previous = a.lease.valid_until();
    a.renew()
        .await
        .map_err(|e| super::context::Failure::Fail(format!("renewal failed: {e}")))?;
    let after = Instant::now();
    let sent = a.lease.sent_at();
    cx.check(Property::Contract, sent >= before && sent <= after, || {
        format!(
            "the renewed deadline counts from outside the renew call ({:?} after it began)",
            sent - before
        )
    })?;
    cx.check(Property::Contract, a.lease.valid_until() > previous, || {
        "a renewal did not move the deadline".into()
    })
}

/// Renewing every third of the TTL keeps the lease past its first TTL:
/// another candidate's attempt then still finds it held.
pub async fn renew_extends(cx: Cx) -> Step {
    let (ca, cb) = (cx.client().await?, cx.client().await?);
    let key = cx.new_key();
    let mut a = Holder::acquire(&cx, &ca, &key, "a").await?;
    let ttl = cx.ttl();
    let probe_at = a.lease.sent_at() + ttl + cx.caps().expiry_slack + cx.timing().round_trip;
    loop {
        let next = a.lease.sent_at() + ttl / 3;
        if next >= probe_at {
            break;
        }
        sleep_until(next).await;
        renew_checked(&cx, &mut a).await?;
    }
    sleep_until(probe_at).await;
    cx.check(Property::Contract, a.lease.is_valid(), || {
        "the renewed lease is no longer valid locally".into()
    })?;
    let probe = Holder::try_acquire(&cx, &cb, &key, "b").await?;
    let holder = probe.as_ref().err().map(|i| i.identity.clone());
    cx.check(Property::Contract, holder == Some(cx.identity("a")), || {
        format!("past the first TTL, the key is held by {holder:?}, not the renewing a")
    })?;
    a.release().await
}

/// After the lease ran out (and again after someone else took it), renewing
/// fails with `LeaseLost`.
pub async fn renew_after_expiry_is_lease_lost(cx: Cx) -> Step {
    let (ca, cb) = (cx.client().await?, cx.client().await?);
    let key = cx.new_key();
    let mut watcher = Watcher::open(&cb, &key).await?;
    let mut a = Holder::acquire(&cx, &ca, &key, "a").await?;
    watcher.until_expired(&cx, "a").await?;
    let lapsed = a.renew().await;
    lease_lost(&cx, &lapsed, "renewing an expired lease")?;
    let b = Holder::acquire(&cx, &cb, &key, "b").await?;
    let taken = a.renew().await;
    lease_lost(&cx, &taken, "renewing a lease now granted to b")?;
    b.release().await
}

/// Without renewals the key falls vacant no earlier than the TTL after the
/// grant was sent, and no later than the TTL plus the backend's slack plus
/// a round trip after its answer.
pub async fn expiry_after_ttl_not_before(cx: Cx) -> Step {
    let (ca, cb) = (cx.client().await?, cx.client().await?);
    let key = cx.new_key();
    let (ttl, round_trip, slack) = (cx.ttl(), cx.timing().round_trip, cx.caps().expiry_slack);
    let mut watcher = Watcher::open(&cb, &key).await?;
    watcher
        .until(&cx, round_trip, "the vacant key", vacant, |_| false)
        .await?;
    let sent = Instant::now();
    let a = Holder::acquire(&cx, &ca, &key, "a").await?;
    let answered = Instant::now();
    watcher
        .until(&cx, round_trip, "a's election", elected(&cx, "a"), |_| {
            false
        })
        .await?;
    // Shortly before the TTL runs out the key is still a's.
    if answered + round_trip < sent + ttl {
        sleep_until(sent + ttl - round_trip).await;
        let probe = Holder::try_acquire(&cx, &cb, &key, "b").await?;
        let early = probe.is_ok();
        cx.check(Property::Contract, !early, || {
            format!("b was granted the key {:?} after a's grant", sent.elapsed())
        })?;
    }
    let latest = answered + ttl + slack + round_trip;
    let limit = latest.saturating_duration_since(Instant::now()) + round_trip;
    let at = watcher
        .until(&cx, limit, "a's expiry", vacant, elected(&cx, "a"))
        .await?;
    cx.figures(|f| f.expiry_ms = Some((at - sent).as_secs_f64() * 1000.0));
    cx.check(Property::Contract, at >= sent + ttl, || {
        format!(
            "the key fell vacant {:?} after the grant was sent, before the TTL {ttl:?}",
            at - sent
        )
    })?;
    cx.check(Property::Timing, at <= latest, || {
        format!("the key fell vacant {:?} after the grant was answered (TTL {ttl:?} + slack {slack:?} + {round_trip:?})", at - answered)
    })?;
    let b = Holder::acquire(&cx, &cb, &key, "b").await?;
    drop(a);
    b.release().await
}
