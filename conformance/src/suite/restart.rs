//! The whole cluster restarted under a holder: tokens keep increasing
//! where the backend persists them.

use tenure_core::FencingToken;
use tokio::time::Instant;

use super::candidate::Holder;
use super::checks::refused;
use super::context::{Cx, Failure, Step};
use super::faults::{applied, millis};
use crate::report::Property;

fn shown(token: Option<FencingToken>) -> String {
    token.map_or("none".into(), |t| t.to_string())
}

/// `a` holds the key with token t1 when every server node is killed and
/// started again; once they serve, a new client's grant (after a's lease
/// ran out) carries a token above t1, and a's write is refused.
pub async fn cluster_restart_tokens_keep_increasing(cx: Cx) -> Step {
    let Some(servers) = cx.factory().servers() else {
        return Err(Failure::Skip(
            "the factory cannot restart the servers".into(),
        ));
    };
    let ca = cx.client().await?;
    let key = cx.new_key();
    let a = Holder::acquire(&cx, &ca, &key, "a").await?;
    a.write();
    let restarting = Instant::now();
    applied(servers.restart_all().await, "restarting every server node")?;
    let served = Instant::now();
    // A client made now, which campaigns again after a retryable error
    // as an Elector does (a member that serves may not have a leader
    // yet): this case is about what the servers kept, not about
    // reconnecting.
    let cb = cx.client().await?;
    let (ttl, rt) = (cx.ttl(), cx.timing().round_trip);
    let limit = ttl * 2 + cx.caps().expiry_slack + rt * 4;
    let b = cx
        .within(
            limit,
            "b's grant after the restart",
            Holder::acquire_waiting_retrying(&cx, &cb, &key, "b"),
        )
        .await??;
    b.write();
    let b_start = cx.safety().get(b.term).start;
    let (t1, t2) = (a.lease.token(), b.lease.token());
    cx.note(format!(
        "restart took {:.0} ms; b granted {:.0} ms after the servers served; \
         tokens {} before, {} after",
        millis(served - restarting),
        millis(b_start - served),
        shown(t1),
        shown(t2)
    ));
    cx.check(
        Property::Fencing,
        matches!((t1, t2), (Some(x), Some(y)) if x < y),
        || {
            format!(
                "token {} after the restart is not above {} before it",
                shown(t2),
                shown(t1)
            )
        },
    )?;
    let stale = a.write();
    refused(&cx, stale, "the pre-restart holder's write")?;
    drop(a);
    b.release().await
}
