//! Contract point 8: release frees the key at once, only for its own grant.

use tokio::time::Instant;

use super::candidate::Holder;
use super::checks::link_to;
use super::context::{Context, Cx, Failure, Step};
use super::watcher::{show, Watcher};
use crate::factory::{Client, LinkFault};
use crate::report::Property;

fn millis(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Starts `name` waiting for `key` in the background and waits until it is queued.
async fn standby(
    cx: &Cx,
    client: &Client,
    key: &tenure_core::ElectionKey,
    name: &'static str,
) -> Step<tokio::task::JoinHandle<Step<Holder>>> {
    let (task_cx, client, task_key) = (cx.clone(), client.clone(), key.clone());
    let handle =
        tokio::spawn(
            async move { Holder::acquire_waiting(&task_cx, &client, &task_key, name).await },
        );
    cx.until_waiting(key, 1).await?;
    Ok(handle)
}

/// Waits for a background standby's grant, at most `limit`.
async fn granted(
    cx: &Cx,
    handle: tokio::task::JoinHandle<Step<Holder>>,
    limit: std::time::Duration,
) -> Step<Holder> {
    let abort = handle.abort_handle();
    let joined = cx.within(limit, "the standby's grant", handle).await;
    abort.abort();
    joined?.map_err(|e| Failure::Fail(format!("standby task: {e}")))?
}

/// Releasing hands the key to a waiting candidate at once: after one untimed
/// hand-over, over [`Cx::AT_ONCE_SAMPLES`] hand-overs between two candidates,
/// each timed from the release call to the standby's grant with the machine
/// to the case, the median is within
/// [`Timing::at_once`](crate::Timing::at_once) and each one within
/// [`Timing::at_once_max`](crate::Timing::at_once_max).
pub async fn release_lets_waiting_standby_lead_at_once(cx: Cx) -> Step {
    let clients = [cx.client().await?, cx.client().await?];
    let names = ["a", "b"];
    let key = cx.new_key();
    cx.measure_round_trip(&clients[1]).await?;
    let mut holder = Holder::acquire(&cx, &clients[0], &key, names[0]).await?;
    let mut samples = Vec::with_capacity(Cx::AT_ONCE_SAMPLES);
    // Round 0 warms the path up and is not timed.
    for round in 0..=Cx::AT_ONCE_SAMPLES {
        holder.write();
        let who = (round + 1) % 2;
        let waiting = standby(&cx, &clients[who], &key, names[who]).await?;
        let released = Instant::now();
        holder.release().await?;
        let next = granted(&cx, waiting, cx.ttl()).await?;
        if round > 0 {
            samples.push(cx.safety().get(next.term).start - released);
        }
        holder = next;
    }
    holder.write();
    holder.release().await?;
    cx.at_once(&samples, "hand-over after release")
}

/// A renewal cancelled after it reached the server does not stop the
/// following release from freeing the key at once (kubernetes#131867).
pub async fn release_after_cancelled_renew_frees_at_once(cx: Cx) -> Step {
    let (ca, cb) = (cx.client().await?, cx.client().await?);
    let link = link_to(&ca, "delay")?;
    let key = cx.new_key();
    let mut a = Holder::acquire(&cx, &ca, &key, "a").await?;
    let waiting = standby(&cx, &cb, &key, "b").await?;
    let delay = cx.timing().round_trip;
    link.set(LinkFault::Delay(delay))
        .await
        .ctx("delaying a's link")?;
    // Past the request's half of the delay, before the answer's.
    let cancelled = tokio::time::timeout(delay * 3 / 4, a.renew()).await;
    cx.check(Property::Contract, cancelled.is_err(), || {
        format!("the delayed renewal finished early: {cancelled:?}")
    })?;
    link.set(LinkFault::Pass).await.ctx("restoring a's link")?;
    let released = Instant::now();
    a.release().await?;
    let b = granted(&cx, waiting, cx.ttl()).await?;
    let handover = cx.safety().get(b.term).start - released;
    cx.figures(|f| f.handover_ms = Some(millis(handover)));
    let bound = cx.timing().round_trip + delay;
    cx.check(Property::Contract, handover <= bound, || {
        format!("the key stayed held {handover:?} after the release (bound {bound:?}): the cancelled renewal kept it")
    })?;
    b.release().await
}

/// Releasing a lease that expired and was granted to another candidate
/// leaves the new holder in place: release compares the grant (etcd#22082).
pub async fn stale_release_leaves_new_holder_in_place(cx: Cx) -> Step {
    let (ca, cb, cc) = (cx.client().await?, cx.client().await?, cx.client().await?);
    let key = cx.new_key();
    let opened = Instant::now();
    let mut watcher = Watcher::open(&cc, &key).await?;
    let a = Holder::acquire(&cx, &ca, &key, "a").await?;
    watcher.until_expired(&cx, "a").await?;
    let mut b = Holder::acquire_after_expiry(&cx, &cb, &key, "b")
        .await
        .map_err(|failure| match failure {
            // Say what the watch saw and what a was granted: a refusal
            // here names a holder the watch had seen go.
            Failure::Fail(why) => Failure::Fail(format!(
                "{why}; a was granted token {:?}; the watch saw {}",
                a.lease.token(),
                watcher
                    .seen
                    .iter()
                    .map(|(event, at)| format!(
                        "{} at +{:?}",
                        show(event),
                        at.duration_since(opened)
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
            other => other,
        })?;
    a.release().await?;
    let probe = Holder::try_acquire(&cx, &cc, &key, "c").await?;
    let holder = probe.as_ref().err().map(|i| i.identity.clone());
    cx.check(Property::Contract, holder == Some(cx.identity("b")), || {
        format!("after a's stale release the key is held by {holder:?}, not b")
    })?;
    b.renew().await.ctx("b renews after a's stale release")?;
    b.release().await
}
