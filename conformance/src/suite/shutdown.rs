//! `Elector::shutdown` and `run` release before they return: a process that
//! exits right after them leaves nothing for a standby to wait out.

use std::time::Duration;

use tenure_core::Elector;
use tokio::time::Instant;

use super::candidate::{elector, Leader, Running, Standby};
use super::context::{Context, Cx, Failure, Step};
use crate::factory::{Client, LinkFault};
use crate::report::Property;

/// `link`'s process "exits": nothing it sends gets out any more.
async fn exit(client: &Client) -> Step {
    let link = client.link.as_ref().expect("checked by the case");
    link.set(LinkFault::Blackhole)
        .await
        .ctx("cutting the exited process off")
}

/// Shuts down the leader `elector` on `client`, then its process "exits";
/// returns when shutdown returned. The answers to `client` are held back
/// for half a round trip meanwhile (requests still pass at once), so that a
/// standby is granted while the answer to the release is on its way: the
/// Elector must have ended the term before it sent the release, not once
/// the backend confirmed it.
async fn shut_down_leader(cx: &Cx, elector: &Elector, client: &Client) -> Step<Instant> {
    let link = client.link.as_ref().expect("checked by the case");
    link.set(LinkFault::DelayAnswers(cx.timing().round_trip / 2))
        .await
        .ctx("holding the releaser's answers")?;
    elector.shutdown().await;
    let returned = Instant::now();
    exit(client).await?;
    Ok(returned)
}

/// The standby must lead within one round trip of `since`.
async fn leads_at_once(cx: &Cx, standby: Standby, since: Instant, what: &str) -> Step<Leader> {
    let round_trip = cx.timing().round_trip;
    let left = (since + round_trip).saturating_duration_since(Instant::now());
    match standby.leads(cx, left).await {
        Err(Failure::Fail(why)) => {
            cx.check(Property::Contract, false, || {
                format!("after {what} returned and the process was cut off: {why}")
            })?;
            unreachable!("a failed check ends the case")
        }
        other => other,
    }
}

/// Three ways out, each followed at once by cutting the process off (as if
/// it exited): `shutdown()` of a leading elector, `shutdown()` while `run`
/// leads (and `run` must have returned), and `shutdown()` of an elector
/// whose campaign waits in line ahead of a standby. Each time the standby
/// must lead within one round trip. The first two release with their
/// answers held back: the standby is granted while the release's answer is
/// on its way, so a term the Elector ends only once the release is
/// confirmed is still valid then (the witness at the grant sees it). The
/// work `run` runs must be cancelled before the standby is granted.
pub async fn shutdown_releases_before_returning(cx: Cx) -> Step {
    let (ca, cb, cc, cd) = (
        cx.client().await?,
        cx.client().await?,
        cx.client().await?,
        cx.client().await?,
    );
    if [&ca, &cb, &cc].iter().any(|c| c.link.is_none()) {
        return Err(Failure::Skip("the factory cannot cut a client off".into()));
    }
    let round_trip = cx.timing().round_trip;
    let key = cx.new_key();
    cx.measure_round_trip(&cd).await?;

    // 1. A leads; B waits; A shuts down.
    let a = elector(&cx, &ca, &key, "a")?;
    let a_leads = Leader::campaign(&cx, &a, cx.set_up_limit()).await?;
    let b = Standby::start(&cx, elector(&cx, &cb, &key, "b")?);
    cx.until_waiting(&key, 1).await?;
    // a's release answer is held back: b is granted while it is on its
    // way, and a must have ended its term before sending the release.
    let returned = shut_down_leader(&cx, &a, &ca).await?;
    cx.check(Property::Contract, !a_leads.term.is_valid(), || {
        "a still believes it leads after shutdown returned".into()
    })?;
    let mut b_leads = leads_at_once(&cx, b, returned, "a's shutdown").await?;

    // 2. C runs the leader's work through `run`; B resigns; C leads; C shuts down.
    let c = elector(&cx, &cc, &key, "c")?;
    let mut running = Running::start(&cx, &c);
    cx.until_waiting(&key, 1).await?;
    b_leads.resign().await?;
    let (_, c_term) = match running.leads(&cx, round_trip).await {
        Ok(led) => led,
        Err(_) => {
            let why = format!("c's run did not lead within {round_trip:?} of b's resignation");
            cx.check(Property::Contract, false, || why.clone())?;
            return Err(Failure::Fail(why));
        }
    };
    let d = Standby::start(&cx, elector(&cx, &cd, &key, "d")?);
    cx.until_waiting(&key, 1).await?;
    let returned = shut_down_leader(&cx, &c, &cc).await?;
    // Shutdown waits for `run` to return; its task ends right after (a
    // task wake-up: 20 ms, or two round trips of the machine as it is).
    let limit = cx.allowing_for_load(Duration::from_millis(20), 2);
    let ran = tokio::time::timeout(limit, &mut running.handle).await;
    cx.check(Property::Contract, ran.is_ok(), || {
        format!("run had not returned {limit:?} after shutdown returned")
    })?;
    let ran = ran.map_err(|_| Failure::Fail("checked above".into()))?;
    ran.map_err(|e| Failure::Fail(format!("run task: {e}")))?
        .ctx("run")?;
    let mut d_leads = leads_at_once(&cx, d, returned, "c's shutdown (c was in run)").await?;
    // `run` cancelled c's work before d was granted, within c's term.
    running.cancelled_in_time(&cx, &c_term, d_leads.id, Duration::ZERO)?;

    // 3. B waits in line right behind D, E behind B; B shuts down; D resigns.
    let b = elector(&cx, &cb, &key, "b2")?;
    let b_waits = {
        let b = b.clone();
        tokio::spawn(async move { b.campaign().await })
    };
    cx.until_waiting(&key, 1).await?;
    let ce = cx.client().await?;
    let e = Standby::start(&cx, elector(&cx, &ce, &key, "e")?);
    cx.until_waiting(&key, 2).await?;
    b.shutdown().await;
    let withdrew = b_waits
        .await
        .map_err(|e| Failure::Fail(format!("campaign task: {e}")))?;
    cx.check(
        Property::Contract,
        matches!(withdrew, Err(tenure_core::Error::Shutdown)),
        || format!("b's pending campaign ended with {withdrew:?}, not Shutdown"),
    )?;
    exit(&cb).await?;
    let resigned = Instant::now();
    d_leads.resign().await?;
    let mut e_leads =
        leads_at_once(&cx, e, resigned, "b's shutdown while it waited in line").await?;
    e_leads.resign().await
}
