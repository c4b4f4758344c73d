//! Checks and preconditions several cases make alike, each written once so
//! that a case reads as what it does and the wording of a failure is the
//! same wherever the same property broke.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::context::{Cx, Failure, Step};
use super::faults::millis;
use super::safety::Write;
use crate::factory::{Client, Link, ServerFaults};
use crate::report::Property;

/// The client's fault link, or a skip: the factory cannot `can` (for
/// example "delay") a client's link.
pub(crate) fn link_to(client: &Client, can: &str) -> Step<Arc<dyn Link>> {
    client
        .link
        .clone()
        .ok_or_else(|| Failure::Skip(format!("the factory cannot {can} a client's link")))
}

/// The server nodes, or a skip: the factory cannot `can` (for example
/// "pause") them, or the deployment has fewer than three, so that no
/// majority serves on while one of them is faulted.
pub(crate) fn three_or_more_nodes<'a>(cx: &'a Cx, can: &str) -> Step<&'a dyn ServerFaults> {
    let Some(servers) = cx.factory().servers() else {
        return Err(Failure::Skip(format!(
            "the factory cannot {can} server nodes"
        )));
    };
    if servers.nodes() < 3 {
        return Err(Failure::Skip(format!(
            "needs 3 or more server nodes; the deployment has {}",
            servers.nodes()
        )));
    }
    Ok(servers)
}

/// A write made under an ended term, after a newer term's, was refused:
/// `what` names it ("the crashed leader's late write").
pub(crate) fn refused(cx: &Cx, write: Write, what: &str) -> Step {
    cx.check(Property::Fencing, write == Write::Refused, || {
        format!("{what} was accepted")
    })
}

/// The next term began after the previous one's `valid_until`: `who` led
/// no earlier than `whose` (for example "the crashed a's") deadline.
pub(crate) fn after_deadline(
    cx: &Cx,
    deadline: Instant,
    start: Instant,
    who: &str,
    whose: &str,
) -> Step {
    cx.check(Property::Exclusive, deadline < start, || {
        format!(
            "{who} leads {:?} before {whose} valid_until",
            deadline - start
        )
    })
}

/// The leader was told its term ended (`lost()` fired at `lost_at`) no
/// later than a round trip after its `valid_until`.
pub(crate) fn told_by_deadline(cx: &Cx, lost_at: Instant, deadline: Instant) -> Step {
    let rt = cx.timing().round_trip;
    cx.check(Property::Timing, lost_at <= deadline + rt, || {
        format!("lost() fired {:?} after valid_until", lost_at - deadline)
    })
}

/// A call on a lease whose term is over answered `LeaseLost`: `what` names
/// the call ("renewing an expired lease").
pub(crate) fn lease_lost<T: Debug>(cx: &Cx, result: &tenure_core::Result<T>, what: &str) -> Step {
    cx.check(
        Property::Contract,
        result.as_ref().is_err_and(|e| e.is_lease_lost()),
        || format!("{what} gave {result:?}, not LeaseLost"),
    )
}

/// Every term's fencing token, in grant order, was greater than the one
/// before: `across` says over what ("across two wipes"). The tokens go to
/// the report's notes as well.
pub(crate) fn tokens_increase(cx: &Cx, across: &str) -> Step {
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
        format!("tokens in grant order{across}: {raw}")
    })?;
    cx.note(format!("tokens {raw}"));
    Ok(())
}

/// The standby led `failover` after the fault, within `bound`: the
/// failover time goes to the report's figures.
pub(crate) fn failover_within(cx: &Cx, failover: Duration, bound: Duration) -> Step {
    cx.figures(|f| f.failover_ms = Some(millis(failover)));
    cx.check(Property::Timing, failover <= bound, || {
        format!("failover took {failover:?}, bound {bound:?}")
    })
}
