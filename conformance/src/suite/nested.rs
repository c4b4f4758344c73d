//! Contract point 12: an election is one key, not a prefix: `k` and `k/b`
//! are independent elections.

use tenure_core::{ElectionKey, LeaderEvent};

use super::candidate::Holder;
use super::context::{Cx, Failure, Step};
use super::watcher::{elected, vacant, Watcher};
use crate::factory::Client;
use crate::report::Property;

/// A key nested under `parent`: `parent/b`, or `parent.b` where the backend's
/// key rule has no `/` (a Kubernetes Lease name).
fn nested(cx: &Cx, parent: &ElectionKey) -> Step<ElectionKey> {
    for candidate in [format!("{parent}/b"), format!("{parent}.b")] {
        if let Ok(key) = ElectionKey::new(candidate) {
            if cx.caps().check_key(&key).is_ok() {
                return Ok(key);
            }
        }
    }
    Err(Failure::Skip(
        "the backend's key rule allows no key nested under another".into(),
    ))
}

/// With `outer` held by `holder`, `inner` is vacant: a new watch of it
/// starts Vacant, and both a single and a waiting attempt are granted at once.
async fn independent(
    cx: &Cx,
    clients: (&Client, &Client, &Client),
    (outer, inner): (&ElectionKey, &ElectionKey),
    (holder, other): (&str, &str),
) -> Step {
    let (ca, cb, cc) = clients;
    let round_trip = cx.timing().round_trip;
    let held = Holder::acquire(cx, ca, outer, holder).await?;
    let mut watcher = Watcher::open(cc, inner).await?;
    watcher
        .next_is(cx, round_trip, vacant, || {
            format!("with {outer} held, a new watch of {inner} began with")
        })
        .await?;
    let once = Holder::try_acquire(cx, cb, inner, other).await?;
    let b = match once {
        Ok(b) => b,
        Err(info) => {
            cx.check(Property::Contract, false, || {
                format!(
                    "with {outer} held, {inner} is reported held by {}",
                    info.identity
                )
            })?;
            unreachable!("a failed check ends the case")
        }
    };
    watcher
        .until(
            cx,
            round_trip,
            "the inner key's election",
            elected(cx, other),
            vacant,
        )
        .await?;
    b.release().await?;
    // Waiting on it does not queue behind the other election either.
    let waiting = Holder::acquire_waiting(cx, cb, inner, other);
    let what = format!("a waiting acquire of {inner} with {outer} held");
    let b = cx.within(round_trip, what, waiting).await??;
    b.release().await?;
    held.release().await
}

/// With both held, releasing `parent` leaves `child` as it was: a look at
/// it is told `Held` by its holder (and token), the holder's lease is still
/// valid with the same deadline and renews with the same token. And
/// `parent`'s watch carries nothing of the child's changes: after the
/// parent's vacancy, the child is released and taken again, then the
/// parent is taken and released, and the parent's watch reports exactly
/// those two changes, in order.
async fn parent_release_leaves_child_alone(
    cx: &Cx,
    clients: (&Client, &Client, &Client),
    (parent, child): (&ElectionKey, &ElectionKey),
) -> Step {
    let (ca, cb, cc) = clients;
    let round_trip = cx.timing().round_trip;
    let mut kept = Holder::acquire(cx, ca, child, "e").await?;
    let outer = Holder::acquire(cx, cb, parent, "f").await?;
    let mut watcher = Watcher::open(cc, parent).await?;
    let no_other = |_: &LeaderEvent| false;
    watcher
        .until(
            cx,
            round_trip,
            "the parent's holder",
            elected(cx, "f"),
            no_other,
        )
        .await?;
    let (token, valid_until) = (kept.lease.token(), kept.lease.valid_until());
    outer.release().await?;
    watcher
        .until(cx, round_trip, "the parent's vacancy", vacant, no_other)
        .await?;
    let loss = kept.lease.signalled_loss();
    cx.check(
        Property::Contract,
        loss.is_none() && kept.lease.valid_until() == valid_until,
        || format!("releasing {parent} ended the lease on {child}: loss {loss:?}"),
    )?;
    match Holder::try_acquire(cx, cc, child, "g").await? {
        Ok(taken) => {
            let taken_by = taken.identity().to_owned();
            taken.release().await?;
            cx.check(Property::Contract, false, || {
                format!("releasing {parent} freed {child}: {taken_by} was granted it")
            })?;
        }
        Err(info) => {
            let same_token = !cx.caps().fencing || info.token == token;
            cx.check(
                Property::Contract,
                info.identity == cx.identity("e") && same_token,
                || {
                    format!(
                        "after releasing {parent}, {child} is reported held by {} with token {:?} (was {} with {token:?})",
                        info.identity,
                        info.token,
                        kept.identity()
                    )
                },
            )?;
        }
    }
    let renewed = kept.renew().await;
    cx.check(Property::Contract, renewed.is_ok(), || {
        format!("after releasing {parent}, renewing {child} failed: {renewed:?}")
    })?;
    cx.check(Property::Contract, kept.lease.token() == token, || {
        format!(
            "after releasing {parent}, {child}'s renewal changed its token from {token:?} to {:?}",
            kept.lease.token()
        )
    })?;
    // The child changes twice (vacant, then held by g), then the parent
    // twice: the parent's watch reports the parent's two changes, in
    // order, and nothing of the child's.
    kept.release().await?;
    let taken = Holder::acquire(cx, ca, child, "g").await?;
    let next = Holder::acquire(cx, cb, parent, "h").await?;
    watcher
        .next_is(cx, round_trip, elected(cx, "h"), || {
            format!("{child} was released and taken by g, then {parent} taken by h: {parent}'s watch reported first")
        })
        .await?;
    next.release().await?;
    watcher
        .next_is(cx, round_trip, vacant, || {
            format!(
                "{parent} was released by h while g holds {child}: {parent}'s watch reported next"
            )
        })
        .await?;
    taken.release().await
}

/// Hold `k/b`: `k` is granted and its watch starts Vacant; hold `k`: `k/b`
/// is granted too. Hold both: releasing `k` leaves `k/b` held, renewable
/// with its token, and `k`'s watch reports none of `k/b`'s changes.
pub async fn nested_keys_are_independent(cx: Cx) -> Step {
    let (ca, cb, cc) = (cx.client().await?, cx.client().await?, cx.client().await?);
    let parent = cx.new_key();
    let child = nested(&cx, &parent)?;
    independent(&cx, (&ca, &cb, &cc), (&child, &parent), ("a", "b")).await?;
    let parent = cx.new_key();
    let child = nested(&cx, &parent)?;
    independent(&cx, (&ca, &cb, &cc), (&parent, &child), ("c", "d")).await?;
    let parent = cx.new_key();
    let child = nested(&cx, &parent)?;
    parent_release_leaves_child_alone(&cx, (&ca, &cb, &cc), (&parent, &child)).await
}
