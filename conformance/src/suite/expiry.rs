//! Contract point 5 judged against the servers' own expiry: a holder's
//! deadline, counted from its grant's (or last renewal's) send, ends before
//! the servers give the key to anyone else, even when the grant takes
//! several requests and their answers come back late.

use std::sync::Arc;
use std::time::Duration;

use tenure_core::{AcquireMode, Acquisition, ElectionKey, Lease};
use tokio::time::Instant;

use super::candidate::granted_on_vacant;
use super::checks::link_to;
use super::context::{Context, Cx, Failure, Step};
use crate::factory::{Client, Link, LinkFault};
use crate::report::Property;

/// Which of the holder's requests has its answers held back.
#[derive(Clone, Copy, Debug)]
enum Held {
    Grant,
    Renewal,
}

/// `b` takes `key` once the servers let `a`'s lease go, and returns its
/// lease with a lower bound on the instant the servers granted it: the last
/// instant b's link forwarded a request before the grant's answer came. Where
/// the servers decide expiry themselves, b asks again and again (each try a
/// fresh request, so the granting one was forwarded after the previous was
/// refused); where each observer judges it by its own clock, b waits in
/// line, and its last request is the write that takes the key.
async fn take_when_free(
    cx: &Cx,
    b: &Client,
    link: &Arc<dyn Link>,
    key: &ElectionKey,
    limit: Duration,
) -> Step<(Lease, Instant)> {
    let candidacy = cx.candidacy(key, "b");
    let pause =
        (cx.timing().round_trip / 20).clamp(Duration::from_millis(2), Duration::from_millis(20));
    let give_up = Instant::now() + limit;
    loop {
        let mode = if cx.caps().expiry_judged_by_observer {
            AcquireMode::Wait
        } else {
            AcquireMode::Once
        };
        let left = give_up.saturating_duration_since(Instant::now());
        let answer = cx
            .within(left, "b's grant", b.backend.acquire(&candidacy, mode))
            .await?
            .ctx("b acquires")?;
        match answer {
            Acquisition::Granted(lease) => {
                let forwarded = link.last_request_at().ok_or_else(|| {
                    Failure::Skip("the link does not tell when it forwarded a request".into())
                })?;
                return Ok((lease, forwarded));
            }
            Acquisition::Held(_) if mode == AcquireMode::Once => tokio::time::sleep(pause).await,
            Acquisition::Held(info) => {
                return Err(Failure::Fail(format!(
                    "a waiting acquire returned Held({info:?})"
                )))
            }
        }
    }
}

/// Two rounds, each on a fresh key. Holder a's grant (first round), then its
/// last renewal (second), is answered a quarter TTL late; then a is cut off
/// with b asking for the key. The servers start a's TTL at a request of
/// theirs, no sooner than a sent it; b's grant comes after that TTL ran out
/// on the servers, and after b's granting request left. So a's `valid_until`
/// must come before that request's forwarding. A client that counts from a
/// later request of a grant that takes several (etcd's LeaseGrant then Txn,
/// ZooKeeper's create then getChildren, Kubernetes' get then replace), or
/// from an answer, is that quarter TTL late, which a check bounded by the
/// last request the holder's link forwarded cannot see.
pub async fn deadline_ends_before_the_servers_expiry(cx: Cx) -> Step {
    let cb = cx.client().await?;
    let lb = link_to(&cb, "delay or cut off")?;
    let hold = cx.ttl() / 4;
    for round in [Held::Grant, Held::Renewal] {
        // A fresh client each round: a cut-off session may not come back.
        let ca = cx.client().await?;
        let la = link_to(&ca, "delay or cut off")?;
        let key = cx.new_key();
        let candidacy = cx.candidacy(&key, "a");
        let delayed = |on: bool| {
            let la = la.clone();
            async move {
                la.set(if on {
                    LinkFault::DelayAnswers(hold)
                } else {
                    LinkFault::Pass
                })
                .await
                .ctx("setting a's link")
            }
        };
        if let Held::Grant = round {
            delayed(true).await?;
        }
        let granted = ca.backend.acquire(&candidacy, AcquireMode::Once).await;
        if let Held::Grant = round {
            delayed(false).await?;
        }
        let returned = Instant::now();
        let mut lease = granted_on_vacant(granted.ctx("a acquires")?)?;
        let term = cx.safety().begin_lease(&lease, returned);
        if let Held::Renewal = round {
            delayed(true).await?;
            let renewed = ca.backend.renew(&lease).await;
            delayed(false).await?;
            lease = renewed.ctx("a renews with its answers held back")?;
            cx.safety().extend(term, lease.valid_until());
        }
        // a renews no more: its term ends at its deadline.
        la.set(LinkFault::Blackhole).await.ctx("cutting a off")?;
        let cut = Instant::now();
        let limit = lease.valid_until().saturating_duration_since(cut)
            + cx.ttl()
            + cx.caps().expiry_slack
            + cx.timing().round_trip * 4;
        let (b, granted_after) = take_when_free(&cx, &cb, &lb, &key, limit).await?;
        let b_term = cx.safety().begin_lease(&b, Instant::now());
        let what = match round {
            Held::Grant => "grant",
            Held::Renewal => "last renewal",
        };
        let late = lease.valid_until().saturating_duration_since(granted_after);
        cx.check(Property::Exclusive, late.is_zero(), || {
            format!(
                "a's deadline from its {what} (answered {hold:?} late) is {late:?} after the \
                 servers granted the key to b (lower bound: b's granting request forwarded): \
                 counted from a later request or an answer, not from the request that \
                 started the TTL"
            )
        })?;
        cx.safety().end(b_term, Instant::now());
        cb.backend.release(&b).await.ctx("b releases")?;
        la.set(LinkFault::Pass).await.ctx("healing a's link")?;
    }
    Ok(())
}
