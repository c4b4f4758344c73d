//! Contract point 9: every grant's token is greater than every earlier one.

use std::sync::Arc;

use super::candidate::Holder;
use super::context::{Failure, Step};
use super::runner::{run_case, Meta, Quiet};
use crate::factory::BackendFactory;
use crate::report::{CaseReport, Property};

/// Tokens strictly increase over grants by a single attempt, to the same
/// identity again, through the waiting line, and after an expiry.
pub async fn tokens_strictly_increase(factory: Arc<dyn BackendFactory>) -> CaseReport {
    let meta = Meta {
        name: "tokens_strictly_increase",
        contract: "9",
        quiet: Quiet::Shared,
    };
    run_case(factory, meta, |cx| async move {
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
        let tokens = cx.safety().tokens();
        let raw: Vec<String> = tokens
            .iter()
            .map(|t| t.map_or("none".into(), |t| t.to_string()))
            .collect();
        let raw = raw.join(", ");
        let increasing = tokens
            .windows(2)
            .all(|w| matches!((w[0], w[1]), (Some(x), Some(y)) if x < y));
        cx.check(Property::Fencing, increasing, || {
            format!("tokens in grant order: {raw}")
        })?;
        cx.note(format!("tokens {raw}"));
        Ok(())
    })
    .await
}
