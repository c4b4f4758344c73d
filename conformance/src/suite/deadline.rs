//! Contract point 5, with answers that come back late: the deadline counts
//! from when the request left, never from when its answer arrived.

use tenure_core::{AcquireMode, Lease};
use tokio::time::Instant;

use super::candidate::granted_on_vacant;
use super::candidate::{elector, Leader};
use super::checks::link_to;
use super::context::{Context, Cx, Failure, Step};
use crate::factory::{Link, LinkFault, TtlStart};
use crate::report::Property;

/// The instant the link forwarded the request of a call begun at `began`
/// that starts the TTL, as the factory names it
/// ([`BackendFactory::ttl_starts_with`]): the first request forwarded since,
/// or the last one; `None` where the link does not tell.
fn ttl_request(cx: &Cx, link: &dyn Link, began: Instant) -> Option<(Instant, &'static str)> {
    match cx.factory().ttl_starts_with() {
        TtlStart::FirstRequest(_) => match link.requests_since(began) {
            Some(sent) => sent.first().map(|&t| (t, "first")),
            None => link.last_request_at().map(|t| (t, "last")),
        },
        TtlStart::LastRequest => link.last_request_at().map(|t| (t, "last")),
    }
}

/// Checks that `lease`'s deadline is no later than one TTL (less the drift
/// margin and expiry lead) after `forwarded`, the instant the link
/// forwarded the request of the call that started the TTL (`which` of the
/// call's requests).
fn counted_from_send(
    cx: &Cx,
    what: &str,
    lease: &Lease,
    (forwarded, which): (Instant, &str),
) -> Step {
    let full = lease.ttl() - lease.candidacy().drift_margin();
    let bound = forwarded + full.saturating_sub(lease.expiry_lead());
    cx.check(Property::Contract, lease.valid_until() <= bound, || {
        format!(
            "the {what}'s deadline is {:?} later than its {which} request's forwarding + TTL \
             - drift margin - expiry lead: counted from a later instant than the send of the \
             request that started the TTL",
            lease.valid_until() - bound
        )
    })
}

/// The fault proxy holds back the answers to a grant, then (second round)
/// to a renewal, for an eighth of the TTL each; the lease's `valid_until`
/// must be at most the instant the proxy forwarded the call's request that
/// started the TTL (its first or its last, as the factory names it) plus
/// TTL less the drift margin (and expiry lead). A backend stamping
/// `sent_at` when the answer arrived is that eighth late, and the check
/// has no slack. A third round holds back the answer to an Elector's own
/// renewal: the term's `valid_until` must keep the same bound (an Elector
/// that counts a renewal from its answer is an eighth late).
///
/// An eighth, not more: zookeeper-client gives a connection up when
/// nothing came back for its connection timeout (a third of the session
/// timeout, as tenure-zookeeper sets it), and pings an eighth of the
/// session timeout after its last send, checked every 24th of it. Under a quarter-TTL
/// hold a ping's answer came back within some 20 ms of that limit, so on
/// a loaded machine the client dropped the connection and the held
/// renewal failed ("nothing after 1s"); a Redis client's request timeout
/// (a third of the TTL) was as close.
pub async fn deadline_counts_from_send_under_delayed_answers(cx: Cx) -> Step {
    let client = cx.client().await?;
    let link = link_to(&client, "delay")?;
    let hold = cx.ttl() / 8;
    let key = cx.new_key();
    let candidacy = cx.candidacy(&key, "a");

    link.set(LinkFault::DelayAnswers(hold))
        .await
        .ctx("holding a's answers")?;
    // A factory that names a grant's first request names the mode of
    // the grant (an etcd single attempt reads the key before its
    // LeaseGrant); on a vacant key either mode is granted at once.
    let mode = match cx.factory().ttl_starts_with() {
        TtlStart::FirstRequest(mode) => mode,
        TtlStart::LastRequest => AcquireMode::Once,
    };
    let began = Instant::now();
    let granted = client.backend.acquire(&candidacy, mode).await;
    let returned = Instant::now();
    let forwarded = ttl_request(&cx, link.as_ref(), began);
    link.set(LinkFault::Pass).await.ctx("restoring a's link")?;
    let lease = granted_on_vacant(granted.ctx("a acquires with its answers held back")?)?;
    let term = cx.safety().begin_lease(&lease, returned);
    let Some(forwarded) = forwarded else {
        cx.safety().end(term, Instant::now());
        let _ = client.backend.release(&lease).await;
        return Err(Failure::Skip(
            "the link does not tell when it forwarded a request".into(),
        ));
    };
    counted_from_send(&cx, "grant", &lease, forwarded)?;

    // A fresh renewal first: the grant took several delayed round trips.
    let lease = client.backend.renew(&lease).await.ctx("a renews")?;
    cx.safety().extend(term, lease.valid_until());
    link.set(LinkFault::DelayAnswers(hold))
        .await
        .ctx("holding a's answers")?;
    let began = Instant::now();
    let renewed = client.backend.renew(&lease).await;
    let forwarded = ttl_request(&cx, link.as_ref(), began);
    link.set(LinkFault::Pass).await.ctx("restoring a's link")?;
    let renewed = renewed.ctx("a renews with its answers held back")?;
    cx.safety().extend(term, renewed.valid_until());
    let forwarded =
        forwarded.ok_or_else(|| Failure::Fail("the link lost its forwarding time".into()))?;
    counted_from_send(&cx, "renewal", &renewed, forwarded)?;
    cx.safety().end(term, Instant::now());
    client.backend.release(&renewed).await.ctx("a releases")?;

    // Third round: the Elector's own renewal, on a key of its own.
    let key = cx.new_key();
    let b = elector(&cx, &client, &key, "b")?;
    let mut leader = Leader::campaign(&cx, &b, cx.set_up_limit()).await?;
    let granted_until = leader.term.valid_until();
    link.set(LinkFault::DelayAnswers(hold))
        .await
        .ctx("holding b's answers")?;
    // b renews a third of a TTL after its grant; its answer comes an
    // eighth of a TTL later.
    let moved = cx
        .within(cx.ttl(), "b's renewal with its answers held back", async {
            while leader.term.valid_until() <= granted_until {
                tokio::time::sleep(std::time::Duration::from_millis(2)).await;
            }
        })
        .await;
    let forwarded = link.last_request_at();
    link.set(LinkFault::Pass).await.ctx("restoring b's link")?;
    moved?;
    let forwarded =
        forwarded.ok_or_else(|| Failure::Fail("the link lost its forwarding time".into()))?;
    let candidacy = b.candidacy();
    let bound = forwarded + (candidacy.ttl() - candidacy.drift_margin());
    let valid_until = leader.term.valid_until();
    cx.check(Property::Contract, valid_until <= bound, || {
        format!(
            "the elector's renewed deadline is {:?} later than its last request's \
             forwarding + TTL - drift margin: counted from the answer, not from the send",
            valid_until - bound
        )
    })?;
    leader.resign().await
}
