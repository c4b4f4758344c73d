//! The servers forget their history while a standby waits: etcd compacts,
//! a Kubernetes watch is answered 410 Gone. Waiting and watching resume from
//! the current state, never from a revision that is gone.

use tokio::time::Instant;

use super::candidate::Holder;
use super::context::{Context, Cx, Failure, Step};
use super::watcher::{elected, vacant, Watcher};
use crate::report::Property;

/// Makes the servers forget their history (skipping the case where the
/// factory cannot).
async fn compact(cx: &super::context::Cx) -> Step {
    match cx.factory().compact_history().await {
        None => Err(Failure::Skip(
            "the servers keep no history a waiting client resumes from (or the factory cannot compact it)"
                .into(),
        )),
        Some(result) => {
            result.map_err(|e| Failure::Fail(format!("compacting the servers' history: {e}")))
        }
    }
}

/// While `a` holds the key, `b` waits for it and `c` watches it, the servers
/// forget their history ([`BackendFactory::compact_history`]: etcd compacts
/// at its current revision; the Lease test server also ends every open
/// watch with 410 Gone). `a` renews before, and one round trip after. When `a` then
/// releases, `b` is granted within one round trip, and `c`'s watch reports
/// `b`: neither was left waiting on a watch that the compaction ended.
pub async fn standby_waits_through_history_compaction(cx: Cx) -> Step {
    // Compaction, and the watches it ends, reach every case of the backend.
    let (ca, cb, cc) = (cx.client().await?, cx.client().await?, cx.client().await?);
    let key = cx.new_key();
    let rt = cx.timing().round_trip;
    let mut watcher = Watcher::open(&cc, &key).await?;
    let mut a = Holder::acquire(&cx, &ca, &key, "a").await?;
    watcher
        .until(&cx, rt * 2, "a's election", elected(&cx, "a"), vacant)
        .await?;
    let (task_cx, task_key) = (cx.clone(), key.clone());
    let waiting =
        tokio::spawn(async move { Holder::acquire_waiting(&task_cx, &cb, &task_key, "b").await });
    let abort = waiting.abort_handle();
    cx.until_waiting(&key, 1).await?;
    a.renew().await.ctx("a renews before the compaction")?;
    // It returns once the watches it ended were opened again.
    compact(&cx).await?;
    a.renew().await.ctx("a renews after the compaction")?;
    a.write();
    let released = Instant::now();
    a.release().await?;
    let joined = tokio::time::timeout(rt, waiting).await;
    abort.abort();
    let b = match joined {
        Ok(joined) => joined.map_err(|e| Failure::Fail(format!("b's task: {e}")))??,
        Err(_) => {
            cx.check(Property::Contract, false, || {
                format!(
                    "b was not granted within {rt:?} of a's release: its wait did not \
                     survive the compaction of the servers' history"
                )
            })?;
            unreachable!("a failed check ends the case")
        }
    };
    let handover = cx.safety().get(b.term).start - released;
    cx.figures(|f| f.handover_ms = Some(handover.as_secs_f64() * 1000.0));
    let seen = watcher
        .until(
            &cx,
            rt,
            "b's election, seen by a watch opened before the compaction",
            elected(&cx, "b"),
            |e| vacant(e) || elected(&cx, "a")(e),
        )
        .await;
    if let Err(Failure::Fail(why)) = &seen {
        cx.check(Property::Contract, false, || why.clone())?;
    }
    seen?;
    b.write();
    b.release().await
}
