//! Faults of the servers themselves.

use tokio::time::{sleep_until, Instant};

use super::candidate::{elector, Running, Standby};
use super::checks::{after_deadline, refused};
use super::context::{Context, Cx, Failure, Step};
use crate::report::Property;

/// With every server node paused for longer than the TTL, the leader steps
/// down at its `valid_until`; once the servers resume and have a leader of
/// their own again, a standby leads within [`Cx::failover_bound`](super::Cx::failover_bound),
/// never before the old leader's `valid_until`, and the old leader's write
/// is refused. Beside it, on a second key, a leader's work runs in
/// `Elector::run`: `run` cancels it by the term's `valid_until` (plus a
/// round trip) and before that key's standby is granted.
pub async fn servers_paused_longer_than_ttl_leader_steps_down(cx: Cx) -> Step {
    let Some(servers) = cx.factory().servers() else {
        return Err(Failure::Skip("the factory cannot pause the servers".into()));
    };
    let (ca, cb) = (cx.client().await?, cx.client().await?);
    let key = cx.new_key();
    let rt = cx.timing().round_trip;
    let (a, standby) = super::candidate::leader_and_standby(&cx, [&ca, &cb], &key).await?;
    // Beside it, on a key of its own, a leader whose work runs in `run`.
    let (cc, cd) = (cx.client().await?, cx.client().await?);
    let key2 = cx.new_key();
    let r = elector(&cx, &cc, &key2, "r")?;
    let running = Running::start(&cx, &r);
    // Setting up, not what the case checks: r's first campaign on a fresh
    // client may take longer than a round trip on a loaded machine (a
    // ZooKeeper 3-node ensemble once took over 250 ms in CI).
    let (_, r_term) = running.leads(&cx, cx.ttl()).await?;
    let r_standby = Standby::start(&cx, elector(&cx, &cd, &key2, "s")?);
    cx.until_waiting(&key2, 1).await?;
    let paused = Instant::now();
    for node in 0..servers.nodes() {
        servers
            .pause(node)
            .await
            .ctx(format_args!("pausing node {node}"))?;
    }
    super::elector::steps_down(&cx, &a, cx.ttl() + rt, "with every server node paused").await?;
    let deadline = a.term.valid_until();
    // r's run cancels its work once r's term ends; then r stops, so that
    // its run does not campaign again, ahead of s, once the servers resume.
    running.until_cancelled(&cx, &r_term, rt).await?;
    let r_stopped = {
        let r = r.clone();
        tokio::spawn(async move { r.shutdown().await })
    };
    sleep_until(paused + cx.ttl() + rt).await; // the fault lasts longer than the TTL
    for node in 0..servers.nodes() {
        servers
            .unpause(node)
            .await
            .ctx(format_args!("resuming node {node}"))?;
    }
    let resumed = Instant::now();
    // A whole paused ensemble may have to elect its own leader again
    // before it serves (ZooKeeper does): count from when it has one.
    let recovered = loop {
        match servers.leader().await {
            Ok(Some(_)) | Err(_) => break Instant::now(),
            Ok(None) if resumed.elapsed() > super::RECOVERY => {
                return Err(Failure::Fail(format!(
                    "the servers had no leader {:?} after resuming",
                    super::RECOVERY
                )))
            }
            Ok(None) => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
        }
    };
    if recovered - resumed > rt {
        cx.note(format!(
            "the servers took {} ms to elect a leader after resuming",
            (recovered - resumed).as_millis()
        ));
    }
    let bound = cx.failover_bound();
    let mut b = standby.fails_over(&cx, recovered, bound).await?;
    let b_start = cx.safety().get(b.id).start;
    cx.figures(|f| f.failover_ms = Some((b_start - paused).as_secs_f64() * 1000.0));
    after_deadline(&cx, deadline, b_start, "b", "a's")?;
    cx.check(
        Property::Timing,
        b_start.saturating_duration_since(recovered) <= bound,
        || {
            format!(
                "b led {:?} after the servers had a leader again, bound {bound:?}",
                b_start.saturating_duration_since(recovered)
            )
        },
    )?;
    b.write();
    let stale = a.write();
    refused(&cx, stale, "the old leader's write")?;
    // `run` cancelled r's work by its term's deadline, before s's grant.
    let mut s = r_standby.fails_over(&cx, recovered, bound).await?;
    running.cancelled_in_time(&cx, &r_term, s.id, rt)?;
    r_stopped
        .await
        .map_err(|e| Failure::Fail(format!("r's shutdown: {e}")))?;
    s.resign().await?;
    b.resign().await
}
