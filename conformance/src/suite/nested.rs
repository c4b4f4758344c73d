//! Contract point 12: an election is one key, not a prefix: `k` and `k/b`
//! are independent elections.

use std::sync::Arc;

use tenure_core::ElectionKey;

use super::candidate::Holder;
use super::context::{Cx, Failure, Step};
use super::runner::{run_case, Meta, Quiet};
use super::watcher::{elected, show, vacant, Watcher};
use crate::factory::{BackendFactory, Client};
use crate::report::{CaseReport, Property};

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
    let (first, _) = watcher.next(cx, round_trip).await?;
    cx.check(Property::Contract, vacant(&first), || {
        format!(
            "with {outer} held, a new watch of {inner} began with {}",
            show(&first)
        )
    })?;
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

/// Hold `k/b`: `k` is granted and its watch starts Vacant; hold `k`: `k/b`
/// is granted too.
pub async fn nested_keys_are_independent(factory: Arc<dyn BackendFactory>) -> CaseReport {
    let meta = Meta {
        name: "nested_keys_are_independent",
        contract: "12",
        quiet: Quiet::Shared,
    };
    run_case(factory, meta, |cx| async move {
        let (ca, cb, cc) = (cx.client().await?, cx.client().await?, cx.client().await?);
        let parent = cx.new_key();
        let child = nested(&cx, &parent)?;
        independent(&cx, (&ca, &cb, &cc), (&child, &parent), ("a", "b")).await?;
        let parent = cx.new_key();
        let child = nested(&cx, &parent)?;
        independent(&cx, (&ca, &cb, &cc), (&parent, &child), ("c", "d")).await
    })
    .await
}
