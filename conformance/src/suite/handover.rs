//! Hand-over latency as a distribution, not one sample.

use std::time::Duration;

use tenure_core::{ElectionKey, Elector};
use tokio::time::Instant;

use super::candidate::{elector, Leader, Standby};
use super::context::{Cx, Step};
use crate::factory::Client;

/// How many graceful hand-overs the case times.
pub const HANDOVERS: usize = 40;

/// How many hand-overs go first, untimed, to warm the servers up.
///
/// A freshly started (or restarted) JVM runs ZooKeeper's request path
/// interpreted or barely compiled: on this harness's 3-node ensemble the
/// first 40 hand-overs take a median of about 6 ms, the next 40 about 4.3 ms
/// and later ones about 4 ms, and stalls of 10 to 120 ms (class loading,
/// compiling on two busy cores) show up through the first hundred. A
/// production ensemble has been running for weeks; the figure is meant to be
/// its, not the JIT's. (etcd and the Lease server are compiled ahead of
/// time; there the warm-up changes little.)
pub const WARMUP: usize = 200;

/// The warm-up ends after this long, however few hand-overs it made: where a
/// standby's queueing is only seen by waiting (the Kubernetes factory has no
/// count of waiters), a round takes half a second, and 200 of them would
/// cost minutes. ZooKeeper's and etcd's rounds take 40 to 90 ms.
pub const WARMUP_TIME: Duration = Duration::from_secs(10);

/// How long a standby has queued when its leader resigns.
pub const SETTLE: Duration = Duration::from_millis(10);

/// The hand-over cases' set-up: electors a and b for one new key, each on
/// a client of its own, with the round trip measured on b's.
pub(super) async fn two_electors(cx: &Cx) -> Step<([Client; 2], ElectionKey, [Elector; 2])> {
    let (ca, cb) = (cx.client().await?, cx.client().await?);
    let key = cx.new_key();
    cx.measure_round_trip(&cb).await?;
    let electors = [elector(cx, &ca, &key, "a")?, elector(cx, &cb, &key, "b")?];
    Ok(([ca, cb], key, electors))
}

/// Two candidates hand the lease back and forth [`WARMUP`] times untimed
/// (or for `WARMUP_TIME`, 10 s, if that ends first), then [`HANDOVERS`] times
/// timed, by resigning; each timed hand-over is measured from the resign
/// call to the standby's grant. The report's hand-over figure is the median;
/// the note has p90 and the maximum. The median must be within
/// [`Timing::at_once`](crate::Timing::at_once) and every hand-over within
/// [`Timing::at_once_max`](crate::Timing::at_once_max).
///
/// Each leader resigns `SETTLE` (10 ms) after its standby queued (or one round trip,
/// if shorter): a standby in production has waited long before a hand-over,
/// and its set-up after queueing (a ZooKeeper candidate's look and watches,
/// a few round trips) is no part of the hand-over. The hand-over right after
/// queueing is what `resign_hands_over_at_once` checks.
pub async fn handover_p50_over_repeated_resignations(cx: Cx) -> Step {
    let (_, key, electors) = two_electors(&cx).await?;
    let rt = cx.timing().round_trip;
    let mut leader = Leader::campaign(&cx, &electors[0], cx.set_up_limit()).await?;
    let mut samples = Vec::with_capacity(HANDOVERS);
    let warm_until = Instant::now() + WARMUP_TIME;
    let mut warmed = 0;
    for round in 0.. {
        if samples.len() == HANDOVERS {
            break;
        }
        let timed = warmed == WARMUP || Instant::now() >= warm_until;
        leader.write();
        let standby = Standby::start(&cx, electors[(round + 1) % 2].clone());
        cx.until_waiting(&key, 1).await?;
        tokio::time::sleep(SETTLE.min(rt)).await;
        let resigned = Instant::now();
        leader.resign().await?;
        let next = standby.leads(&cx, cx.ttl()).await?;
        if timed {
            samples.push(cx.safety().get(next.id).start - resigned);
        } else {
            warmed += 1;
        }
        leader = next;
    }
    leader.resign().await?;
    cx.note(format!("timed after {warmed} untimed hand-overs"));
    cx.at_once(&samples, "hand-over after resign")
}
