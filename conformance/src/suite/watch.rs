//! Contract point 10: watch starts with the current state, then reports
//! every change in order, vacancy included.

use tenure_core::{LeaderEvent, LeaderInfo};

use super::candidate::Holder;
use super::context::{Cx, Step};
use super::watcher::{show, Watcher};
use crate::factory::Client;
use crate::report::Property;

fn elected_as(h: &Holder) -> LeaderEvent {
    LeaderEvent::Elected(LeaderInfo {
        identity: h.lease.holder().clone(),
        token: h.lease.token(),
    })
}

/// The first event of a fresh watch must be `want`, within a round trip.
async fn first_event(
    cx: &Cx,
    client: &Client,
    key: &tenure_core::ElectionKey,
    want: &LeaderEvent,
    when: &str,
) -> Step {
    let mut watcher = Watcher::open(client, key).await?;
    let limit = cx.timing().round_trip;
    let first = watcher.next_within(limit).await?.map(|(e, _)| e);
    cx.check(Property::Contract, first.as_ref() == Some(want), || {
        let began = first
            .as_ref()
            .map_or(format!("nothing for {limit:?}"), show);
        format!(
            "{when}, a new watch began with {began} instead of {}",
            show(want)
        )
    })
}

/// Waits for `next`, letting through only repeats of the state before it:
/// another event, or none within `limit`, breaks the contract.
async fn step(
    cx: &Cx,
    w: &mut Watcher,
    now: &mut LeaderEvent,
    next: LeaderEvent,
    limit: std::time::Duration,
    what: &str,
) -> Step {
    let previous = std::mem::replace(now, next.clone());
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let event = w.next_within(left).await?.map(|(e, _)| e);
        if event.as_ref() == Some(&next) {
            return Ok(());
        }
        if event.as_ref() != Some(&previous) {
            return cx.check(Property::Contract, false, || match &event {
                Some(e) => format!("waiting for {what}, the watch reported {}", show(e)),
                None => format!("the watch did not report {what} within {limit:?}"),
            });
        }
    }
}

/// A new watch reports the state at the time it is opened: vacant, held, vacant again.
pub async fn watch_starts_with_current_state(cx: Cx) -> Step {
    let (ca, cb) = (cx.client().await?, cx.client().await?);
    let key = cx.new_key();
    first_event(&cx, &cb, &key, &LeaderEvent::Vacant, "on an unused key").await?;
    let a = Holder::acquire(&cx, &ca, &key, "a").await?;
    first_event(&cx, &cb, &key, &elected_as(&a), "while a holds the key").await?;
    a.release().await?;
    first_event(&cx, &cb, &key, &LeaderEvent::Vacant, "after a released").await
}

/// One watch follows grant, release, a new holder, expiry and the same
/// identity's new term, in that order and each promptly.
pub async fn watch_reports_changes_in_order_and_vacancy(cx: Cx) -> Step {
    let (ca, cb, cw) = (cx.client().await?, cx.client().await?, cx.client().await?);
    let key = cx.new_key();
    let round_trip = cx.timing().round_trip;
    let mut w = Watcher::open(&cw, &key).await?;
    let mut now = LeaderEvent::Vacant;
    macro_rules! expect {
        ($next:expr, $limit:expr, $what:expr) => {
            step(&cx, &mut w, &mut now, $next, $limit, $what)
        };
    }
    expect!(LeaderEvent::Vacant, round_trip, "the initial vacancy").await?;
    let a = Holder::acquire(&cx, &ca, &key, "a").await?;
    expect!(elected_as(&a), round_trip, "a's election").await?;
    a.release().await?;
    expect!(LeaderEvent::Vacant, round_trip, "vacancy after a's release").await?;
    let b = Holder::acquire(&cx, &cb, &key, "b").await?;
    expect!(elected_as(&b), round_trip, "b's election").await?;
    let limit = cx.ttl() + cx.caps().expiry_slack + round_trip * 2;
    expect!(LeaderEvent::Vacant, limit, "vacancy after b's expiry").await?;
    let a2 = Holder::acquire_after_expiry(&cx, &ca, &key, "a").await?;
    expect!(elected_as(&a2), round_trip, "a's new term").await?;
    drop(b);
    a2.release().await?;
    expect!(
        LeaderEvent::Vacant,
        round_trip,
        "vacancy after a's second release"
    )
    .await?;
    let seen: Vec<String> = w.seen.iter().map(|(e, _)| show(e)).collect();
    cx.note(format!("events: {}", seen.join(" → ")));
    Ok(())
}
