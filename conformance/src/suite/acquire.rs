//! Contract points 2 to 4: acquire once, acquire when held, withdraw on drop.

use tenure_core::{AcquireMode, LeaderEvent};

use super::candidate::Holder;
use super::context::{Context, Cx, Step};
use super::watcher::{elected, show, vacant, Watcher};
use crate::report::Property;

/// A vacant key is granted at once to a single attempt, and to a waiting one.
pub async fn acquire_uncontended(cx: Cx) -> Step {
    let client = cx.client().await?;
    let key = cx.new_key();
    let a = Holder::acquire(&cx, &client, &key, "a").await?;
    let round_trip = cx.timing().round_trip;
    let mut watcher = Watcher::open(&client, &key).await?;
    watcher
        .until(&cx, round_trip, "a's election", elected(&cx, "a"), |_| {
            false
        })
        .await?;
    a.release().await?;
    watcher
        .until(
            &cx,
            round_trip,
            "vacancy after release",
            vacant,
            elected(&cx, "a"),
        )
        .await?;
    // A waiting acquire on a vacant key returns at once.
    let other = cx.new_key();
    let wait = Holder::acquire_waiting(&cx, &client, &other, "b");
    let b = cx
        .within(round_trip, "a waiting acquire on a vacant key", wait)
        .await??;
    b.release().await
}

/// A second candidate's single attempt reports the holder and its token,
/// and disturbs nothing.
pub async fn acquire_when_held_reports_holder(cx: Cx) -> Step {
    let (ca, cb) = (cx.client().await?, cx.client().await?);
    let key = cx.new_key();
    let mut a = Holder::acquire(&cx, &ca, &key, "a").await?;
    let held = Holder::try_acquire(&cx, &cb, &key, "b").await?;
    let info = match held {
        Err(info) => info,
        Ok(b) => {
            let token = b.lease.token();
            cx.check(Property::Exclusive, false, || {
                format!("b was granted a held key (token {token:?})")
            })?;
            return Ok(());
        }
    };
    cx.check(
        Property::Contract,
        info.identity == cx.identity("a"),
        || format!("Held names {}, not a", info.identity),
    )?;
    cx.check(Property::Fencing, info.token == a.lease.token(), || {
        format!(
            "Held reports token {:?}, a holds {:?}",
            info.token,
            a.lease.token()
        )
    })?;
    if let Some(Ok(n)) = cx.factory().waiting(&key).await {
        cx.check(Property::Contract, n == 0, || {
            format!("a single attempt left {n} queue entries")
        })?;
    }
    a.renew().await.ctx("a renews after b's attempt")?;
    a.release().await
}

/// Dropping a waiting acquire withdraws it: when the holder releases, the
/// key falls vacant and nobody is granted it on the withdrawn candidate's behalf.
pub async fn dropped_waiting_acquire_leaves_no_queue_entry(cx: Cx) -> Step {
    let (ca, cb, cc) = (cx.client().await?, cx.client().await?, cx.client().await?);
    let key = cx.new_key();
    let a = Holder::acquire(&cx, &ca, &key, "a").await?;
    let waiting = {
        let (backend, candidacy) = (cb.backend.clone(), cx.candidacy(&key, "b"));
        tokio::spawn(async move { backend.acquire(&candidacy, AcquireMode::Wait).await })
    };
    cx.until_waiting(&key, 1).await?;
    waiting.abort();
    let aborted = waiting.await;
    cx.check(
        Property::Contract,
        aborted.as_ref().is_err_and(|e| e.is_cancelled()),
        || format!("the waiting acquire ended by itself: {aborted:?}"),
    )?;
    // The backend may remove the entry by itself, but at once: within a round trip.
    let round_trip = cx.timing().round_trip;
    let withdrawn_by = tokio::time::Instant::now() + round_trip;
    while let Some(Ok(n)) = cx.factory().waiting(&key).await {
        if n == 0 || tokio::time::Instant::now() >= withdrawn_by {
            cx.check(Property::Contract, n == 0, || {
                format!("{n} queue entries left a round trip ({round_trip:?}) after withdrawing")
            })?;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let mut watcher = Watcher::open(&cc, &key).await?;
    watcher
        .until(&cx, round_trip, "a's election", elected(&cx, "a"), |_| {
            false
        })
        .await?;
    a.release().await?;
    watcher
        .until(&cx, round_trip, "vacancy", vacant, |_| false)
        .await?;
    // Nobody got the key for the withdrawn b: a third candidate gets it.
    let c = Holder::try_acquire(&cx, &cc, &key, "c").await?;
    let held_by = c.as_ref().err().map(|i| i.identity.to_string());
    cx.check(Property::Contract, c.is_ok(), || {
        format!("the key went to {held_by:?} after b withdrew")
    })?;
    let late = watcher
        .seen
        .iter()
        .find(|(e, _)| matches!(e, LeaderEvent::Elected(i) if i.identity == cx.identity("b")));
    cx.check(Property::Contract, late.is_none(), || {
        format!("the watch saw {}", show(&late.expect("found").0))
    })?;
    match c {
        Ok(c) => c.release().await,
        Err(_) => Ok(()),
    }
}
