//! Fencing tokens on Kubernetes: derived from the resourceVersion a grant
//! was written against (Kubernetes 1.35 and later, KEP-5504), or
//! leaseTransitions for older clusters.
//!
//! A take-over is a compare-and-swap on the observed resourceVersion `R`, so
//! every earlier write to the Lease, and with it every earlier grant, has a
//! resourceVersion of at most `R`, and the take-over's own is above `R`.
//! Its token is `R + 1`: above every earlier token, at most its own write's
//! resourceVersion, so also below every later token. The granting write
//! carries the token in an annotation, beside the term it belongs to
//! (holder, acquireTime, leaseTransitions), so that every observer reports
//! the holder's own token, although each renewal moves the resourceVersion.
//! A new Lease is created free and then taken over the same way: a create
//! has no resourceVersion to compare against.

use k8s_openapi::api::coordination::v1::Lease;
use tenure_core::{Error, FencingToken, Result};

use crate::error::BACKEND;
use crate::record::{Record, Term};

/// Which fencing token [`KubeBackend`](crate::KubeBackend) gives.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fencing {
    /// The default: one above the resourceVersion the granting write was
    /// compared against, carried in the Lease's `tenure.dev/fencing-token`
    /// annotation. Strictly greater than every token granted before for the
    /// Lease, even when it is deleted and created again, because
    /// resourceVersions of one resource type are comparable, monotonically
    /// increasing integers: a documented promise since Kubernetes 1.35
    /// (KEP-5504). A holder that does not write the annotation (client-go,
    /// or tenure with [`LeaseTransitions`](Self::LeaseTransitions)) is
    /// reported with no token.
    #[default]
    ResourceVersion,
    /// `spec.leaseTransitions`, bumped on every new grant, as client-go
    /// keeps it; for clusters before Kubernetes 1.35. It does NOT survive
    /// the Lease being deleted: a new Lease starts again at 0, below the
    /// tokens of holders before, whose writes a fence would then prefer
    /// (`Capabilities::tokens_survive_state_loss` is false). Taking over a
    /// Lease that a [`ResourceVersion`](Self::ResourceVersion) grant
    /// stamped, it lifts leaseTransitions above that token, so tokens of
    /// the two schemes on one Lease still only rise (a stamp above
    /// `i32::MAX` is refused, naming `fencing`).
    LeaseTransitions,
}

/// The annotation carrying the token of the term it was written in.
pub const TOKEN_ANNOTATION: &str = "tenure.dev/fencing-token";
/// The annotation naming that term: `<leaseTransitions>/<acquireTime>/<holder>`.
pub const TERM_ANNOTATION: &str = "tenure.dev/fencing-term";

/// The token of a take-over compared against `observed`'s resourceVersion.
pub(crate) fn next_token(observed: &Lease) -> Result<u64> {
    let rv = observed.metadata.resource_version.as_deref().unwrap_or("");
    rv.parse::<u64>()
        .ok()
        .and_then(|rv| rv.checked_add(1))
        .ok_or_else(|| {
            Error::backend(
                BACKEND,
                format!(
                    "resourceVersion {rv:?} is not an integer: this cluster predates \
                 Kubernetes 1.35 (KEP-5504); use Fencing::LeaseTransitions"
                ),
            )
        })
}

/// Stamps `lease`, about to be written, with `token` for the term it records.
pub(crate) fn stamp(lease: &mut Lease, token: u64) {
    let term = Term::of(lease).label();
    let annotations = lease
        .metadata
        .annotations
        .get_or_insert_with(Default::default);
    annotations.insert(TOKEN_ANNOTATION.to_owned(), token.to_string());
    annotations.insert(TERM_ANNOTATION.to_owned(), term);
}

/// A leaseTransitions-token take-over of `observed`, about to be written as
/// `lease` (its transitions bumped): two token schemes on one Lease must
/// share one scale, so its leaseTransitions, and with them its token, are
/// lifted above the token an earlier resourceVersion-token grant stamped on
/// the Lease (the annotation stays through later terms: client-go keeps
/// annotations). Without it, a holder with a token near the cluster's
/// resourceVersions (10^6 and more) would hand over to one near ten, whose
/// writes a `Fence` refuses. leaseTransitions is a 32-bit integer: a stamp
/// it cannot rise above is refused, naming the `fencing` option. (The
/// other way needs nothing: a take-over's resourceVersion is above the
/// number of writes to the Lease, so above its leaseTransitions.)
pub(crate) fn lift_transitions(lease: &mut Lease, observed: &Lease) -> Result<()> {
    let stamped = observed
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(TOKEN_ANNOTATION))
        .and_then(|t| t.parse::<u64>().ok());
    let Some(stamped) = stamped else {
        return Ok(());
    };
    let spec = lease.spec.get_or_insert_with(Default::default);
    let bumped = spec.lease_transitions.unwrap_or(0).max(0) as u64;
    if bumped > stamped {
        return Ok(());
    }
    let lifted = i32::try_from(stamped + 1).map_err(|_| {
        Error::invalid(
            "fencing",
            format!(
                "the Lease carries a resourceVersion token ({stamped}) that leaseTransitions \
                 (a 32-bit integer) cannot rise above: campaign on it with \
                 Fencing::ResourceVersion, not Fencing::LeaseTransitions"
            ),
        )
    })?;
    spec.lease_transitions = Some(lifted);
    Ok(())
}

/// The token of the term `lease` records, as every observer reads it.
pub(crate) fn token_of(lease: &Lease, fencing: Fencing) -> Option<FencingToken> {
    match fencing {
        Fencing::LeaseTransitions => Some(FencingToken::new(
            Record::of(lease).transitions.max(0) as u64
        )),
        Fencing::ResourceVersion => {
            let annotations = lease.metadata.annotations.as_ref()?;
            // A stamp left from an earlier term (a client-go holder took
            // over, keeping the annotations) is not this term's token.
            if annotations.get(TERM_ANNOTATION)? != &Term::of(lease).label() {
                return None;
            }
            let token = annotations.get(TOKEN_ANNOTATION)?.parse::<u64>().ok()?;
            Some(FencingToken::new(token))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::LeaseSpec;

    fn stamped(token: u64, transitions: i32) -> Lease {
        let mut lease = Lease {
            spec: Some(LeaseSpec {
                lease_transitions: Some(transitions),
                ..Default::default()
            }),
            ..Default::default()
        };
        stamp(&mut lease, token);
        lease
    }

    #[test]
    fn lease_transitions_rise_above_a_stamped_token_or_are_refused_naming_fencing() {
        let observed = stamped(1_000, 3);
        let mut taking = observed.clone();
        taking.spec.as_mut().unwrap().lease_transitions = Some(4);
        lift_transitions(&mut taking, &observed).unwrap();
        assert_eq!(taking.spec.unwrap().lease_transitions, Some(1_001));

        let mut low = stamped(2, 7);
        lift_transitions(&mut low, &stamped(2, 7)).unwrap();
        assert_eq!(low.spec.unwrap().lease_transitions, Some(7));

        let huge = stamped(i32::MAX as u64, 3);
        let refused = lift_transitions(&mut huge.clone(), &huge);
        assert!(
            matches!(
                refused,
                Err(Error::InvalidArgument {
                    field: "fencing",
                    ..
                })
            ),
            "{refused:?}"
        );
    }
}
