//! Contract point 4, with the grant already on its way: a campaign dropped
//! while its answers are in flight leaves nothing behind.

use std::time::Duration;

use tokio::time::Instant;

use super::candidate::{elector, Leader, Standby};
use super::checks::link_to;
use super::context::{Context, Cx, Failure, Step};
use crate::factory::LinkFault;
use crate::report::Property;

/// How many drop points the case tries, each later than the one before.
const DROP_POINTS: u32 = 8;

/// A's campaign on a vacant key runs with its answers held back, and is
/// dropped at a later point each round (half a hold, one and a half, ...),
/// until one round finishes before its drop: so some drops come while a
/// request that grants (a create, a CAS write) has reached the server and
/// its answer has not come back. After each drop the held answers are
/// delivered; then a standby must lead within one round trip, and A's same
/// Elector, campaigning again, must lead within one round trip too (not
/// wait behind its own ghost).
pub async fn dropped_acquire_leaves_nothing(cx: Cx) -> Step {
    let (ca, cb) = (cx.client().await?, cx.client().await?);
    let link = link_to(&ca, "delay")?;
    let round_trip = cx.timing().round_trip;
    let hold = round_trip / 4;
    let key = cx.new_key();
    let a = elector(&cx, &ca, &key, "a")?;
    let b = elector(&cx, &cb, &key, "b")?;
    let mut dropped = 0;
    for point in 0..DROP_POINTS {
        let drop_after = hold / 2 + hold * point;
        link.set(LinkFault::DelayAnswers(hold))
            .await
            .ctx("holding a's answers")?;
        let attempt = tokio::time::timeout(drop_after, a.campaign()).await;
        let delivered = Instant::now();
        link.set(LinkFault::Pass)
            .await
            .ctx("delivering a's answers")?;
        if let Ok(finished) = attempt {
            // This round's campaign finished before its drop point.
            let mut leader = Leader::new(&cx, finished.ctx("a campaigns")?);
            leader.resign().await?;
            break;
        }
        dropped += 1;
        // Whatever was held is delivered now: wait until it has landed
        // (at most one hold, as long as a link that cannot tell waits).
        cx.until_link_quiet(link.as_ref(), delivered, hold + Duration::from_millis(5))
            .await;
        let started = Instant::now();
        let mut standby = match Standby::start(&cx, b.clone()).leads(&cx, round_trip).await {
            Err(Failure::Fail(why)) => {
                cx.check(Property::Contract, false, || {
                    format!(
                        "after a campaign dropped {drop_after:?} in: {why} (a ghost of the \
                         dropped grant holds the key)"
                    )
                })?;
                unreachable!("a failed check ends the case")
            }
            other => other?,
        };
        cx.figures(|f| {
            let ms = started.elapsed().as_secs_f64() * 1000.0;
            f.handover_ms = Some(f.handover_ms.map_or(ms, |m: f64| m.max(ms)));
        });
        standby.resign().await?;
        let again = tokio::time::timeout(round_trip, a.campaign()).await;
        let mut leader = match again {
            Ok(leadership) => Leader::new(&cx, leadership.ctx("a campaigns again")?),
            Err(_) => {
                cx.check(Property::Contract, false, || {
                    format!(
                        "a's elector, campaigning again after a campaign dropped \
                         {drop_after:?} in, did not lead within {round_trip:?}: it waits \
                         behind its own ghost"
                    )
                })?;
                unreachable!("a failed check ends the case")
            }
        };
        leader.resign().await?;
    }
    cx.check(Property::Contract, dropped > 0, || {
        format!(
            "every campaign finished within half a hold ({:?}): nothing was dropped in flight",
            hold / 2
        )
    })?;
    cx.note(format!(
        "{dropped} campaigns dropped in flight, every {hold:?} later"
    ));
    Ok(())
}
