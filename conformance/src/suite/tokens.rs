//! Contract point 9: every grant's token is greater than every earlier one.

use std::time::Duration;

use tenure_core::LossReason;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::candidate::Holder;
use super::checks::{lease_lost, tokens_increase};
use super::context::{Cx, Failure, Step};
use super::faults::millis;
use crate::report::Property;

/// Tokens strictly increase over grants by a single attempt, to the same
/// identity again, through the waiting line, and after an expiry.
pub async fn tokens_strictly_increase(cx: Cx) -> Step {
    let (ca, cb) = (cx.client().await?, cx.client().await?);
    let key = cx.new_key();
    let a1 = Holder::acquire(&cx, &ca, &key, "a").await?;
    a1.write();
    a1.release().await?;
    let a2 = Holder::acquire(&cx, &ca, &key, "a").await?; // the same identity again
    a2.write();
    a2.release().await?;
    let b1 = Holder::acquire(&cx, &cb, &key, "b").await?;
    b1.write();
    let spawn_wait = |name: &'static str, client: crate::factory::Client| {
        let (cx, key) = (cx.clone(), key.clone());
        tokio::spawn(async move { Holder::acquire_waiting(&cx, &client, &key, name).await })
    };
    let join = |r: Result<Step<Holder>, tokio::task::JoinError>| -> Step<Holder> {
        r.map_err(|e| Failure::Fail(format!("waiting task: {e}")))?
    };
    let waiting = spawn_wait("a", ca.clone());
    cx.until_waiting(&key, 1).await?;
    b1.release().await?;
    let a3 = join(
        cx.within(cx.ttl(), "a's grant through the line", waiting)
            .await?,
    )?;
    a3.write();
    // a3 is left to expire; b's grant then comes from the expiry.
    let waiting = spawn_wait("b", cb.clone());
    let limit = cx.ttl() * 2 + cx.caps().expiry_slack + cx.timing().round_trip;
    let b2 = join(
        cx.within(limit, "b's grant after a's expiry", waiting)
            .await?,
    )?;
    b2.write();
    b2.release().await?;
    tokens_increase(&cx, "")?;
    Ok(())
}

/// Deletes `key`'s state on the servers out of band (skipping the case
/// where the factory cannot).
async fn wipe(cx: &super::context::Cx, key: &tenure_core::ElectionKey) -> Step {
    match cx.factory().wipe_election(key).await {
        None => Err(Failure::Skip(
            "the factory cannot delete an election's server state".into(),
        )),
        Some(result) => result.map_err(|e| Failure::Fail(format!("wiping the election: {e}"))),
    }
}

/// While a candidate holds a key, its election's state on the servers is
/// deleted out of band (as an operator could): the next grant's token is
/// still greater than every earlier one, so the deposed holder's writes are
/// refused, and the deposed holder learns of its loss at its next renewal;
/// where the backend says holders watch their own records
/// (`holder_watches_own_record`), its lease ends within
/// [`Timing::at_once_max`](crate::factory::Timing) of the wipe instead
/// (the figure: the later of the two wipes).
pub async fn token_increases_after_state_wiped(cx: Cx) -> Step {
    if !cx.caps().fencing {
        return Err(Failure::Skip("capabilities: fencing = false".into()));
    }
    if !cx.caps().tokens_survive_state_loss {
        return Err(Failure::Skip(
            "capabilities: tokens_survive_state_loss = false (documented by the backend)".into(),
        ));
    }
    let (ca, cb, cc) = (cx.client().await?, cx.client().await?, cx.client().await?);
    let key = cx.new_key();
    let mut a = Holder::acquire(&cx, &ca, &key, "a").await?;
    a.write();
    let heard = listen(&a);
    wipe(&cx, &key).await?;
    let mut deletions = vec![noticed(&cx, &a, heard, Instant::now()).await?];
    // Out of band: a is deposed (and perhaps told); only fencing covers
    // its writes now.
    a.crash();
    let b = Holder::acquire(&cx, &cb, &key, "b").await?;
    b.write();
    a.write(); // stale: the store must refuse it
    let lost = a.renew().await;
    lease_lost(&cx, &lost, "the deposed holder's renewal")?;
    let heard = listen(&b);
    wipe(&cx, &key).await?;
    deletions.push(noticed(&cx, &b, heard, Instant::now()).await?);
    b.crash();
    let c = Holder::acquire(&cx, &cc, &key, "c").await?;
    c.write();
    b.write();
    tokens_increase(&cx, " across two wipes")?;
    let noticed: Vec<Duration> = deletions.into_iter().flatten().collect();
    if let Some(worst) = noticed.iter().max() {
        cx.figures(|f| f.deletion_noticed_ms = Some(millis(*worst)));
        let each: Vec<String> = noticed
            .iter()
            .map(|d| format!("{:.1}", millis(*d)))
            .collect();
        cx.note(format!(
            "the holder's lease ended {} ms after each wipe",
            each.join(" and ")
        ));
    } else {
        cx.note(
            "holders learn of a wipe at their next renewal \
             (capabilities: holder_watches_own_record = false)",
        );
    }
    c.release().await
}

/// When the holder's lease says it is gone (its backend's loss signal),
/// heard from now on.
fn listen(holder: &Holder) -> JoinHandle<(LossReason, Instant)> {
    let lease = holder.lease.clone();
    tokio::spawn(async move {
        let reason = lease.loss_signalled().await;
        (reason, Instant::now())
    })
}

/// Where the backend says its holders watch their own records: how long
/// after the wipe (which returned at `wiped`) the holder's lease stopped
/// being valid, within [`Timing::at_once_max`](crate::factory::Timing),
/// and why. `None` where holders learn at their next renewal.
async fn noticed(
    cx: &Cx,
    holder: &Holder,
    heard: JoinHandle<(LossReason, Instant)>,
    wiped: Instant,
) -> Step<Option<Duration>> {
    if !cx.caps().holder_watches_own_record {
        heard.abort();
        return Ok(None);
    }
    let bound = cx.timing().at_once_max;
    let outcome = tokio::time::timeout_at(wiped + bound, heard).await;
    let Ok(Ok((reason, at))) = outcome else {
        let valid = holder.lease.is_valid();
        cx.check(Property::Contract, false, || {
            format!(
                "capabilities say holders watch their own records, but {bound:?} after the wipe \
                 the holder's lease gave no sign of its loss (is_valid: {valid})"
            )
        })?;
        return Ok(None);
    };
    let took = at.saturating_duration_since(wiped);
    cx.check(Property::Contract, !holder.lease.is_valid(), || {
        "the holder's lease fired its loss signal yet is still valid".into()
    })?;
    cx.check(
        Property::Contract,
        matches!(reason, LossReason::Deleted | LossReason::TakenOver),
        || format!("the wiped holder's loss was given as {reason:?}, not Deleted or TakenOver"),
    )?;
    Ok(Some(took))
}
