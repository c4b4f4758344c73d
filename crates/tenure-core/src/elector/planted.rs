//! Bugs the conformance suite plants in one Elector, to prove that its
//! cases catch an Elector that breaks its promises (cargo feature
//! `__elector_mutants`: test-only, not part of the API). Without the
//! feature nothing can be planted, and with it nothing changes unless
//! [`ElectorBuilder::plant`](super::ElectorBuilder::plant) is called.

use std::time::Duration;

/// A bug planted in one Elector (test-only, not part of the API).
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(not(feature = "__elector_mutants"), allow(dead_code))]
pub enum ElectorBug {
    /// `resign`, dropping a `Leadership` and `shutdown` send the release
    /// first and end the term only once the release is answered.
    ReleaseBeforeEnd,
    /// `Term::lost` resolves this long after the term ended (and with it
    /// everything that waits on it: `run`'s cancellation, the term's
    /// cancellation token).
    LostLate(Duration),
    /// `run` leaves the leader's work running after the term is lost, until
    /// the work returns by itself or the elector shuts down.
    RunNotCancelled,
    /// `shutdown` returns once it has asked everything to stop, without
    /// waiting for the releases to settle.
    ShutdownEarly,
    /// A renewal's deadline counts from the arrival of its answer, not
    /// from when its request was sent.
    RenewFromAnswer,
    /// The term's deadline is counted this long past `sent + ttl -
    /// drift margin` (the grant's, then each renewal's).
    DeadlineLate(Duration),
    /// `run` drops the leader's work this long after the term is lost
    /// (unless the work returns first or the elector shuts down).
    WorkDroppedLate(Duration),
    /// The renewer accepts a renewal's answer that arrives up to this long
    /// after the term's deadline, and the term goes on from it.
    RenewalAcceptedLate(Duration),
    /// Retry back-off without its randomness: every candidate that failed
    /// at the same instant retries at the same instant (a herd).
    BackoffWithoutJitter,
}

/// The bug planted in an elector, if any.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Planted(Option<ElectorBug>);

impl Planted {
    #[cfg(feature = "__elector_mutants")]
    pub fn new(bug: ElectorBug) -> Self {
        Planted(Some(bug))
    }

    pub fn is(&self, bug: ElectorBug) -> bool {
        self.0 == Some(bug)
    }

    /// The term's deadline for a lease whose own is `valid_until`.
    pub fn deadline(&self, valid_until: tokio::time::Instant) -> tokio::time::Instant {
        match self.0 {
            Some(ElectorBug::DeadlineLate(by)) => valid_until + by,
            _ => valid_until,
        }
    }

    /// How long `run` keeps the work after the term is lost.
    pub fn work_dropped_late(&self) -> Option<Duration> {
        match self.0 {
            Some(ElectorBug::WorkDroppedLate(by)) => Some(by),
            _ => None,
        }
    }

    /// How long past the deadline the renewer still takes a renewal's answer.
    pub fn renewal_accepted_late(&self) -> Duration {
        match self.0 {
            Some(ElectorBug::RenewalAcceptedLate(by)) => by,
            _ => Duration::ZERO,
        }
    }

    /// How late `Term::lost` resolves.
    pub fn lost_late(&self) -> Option<Duration> {
        match self.0 {
            Some(ElectorBug::LostLate(by)) => Some(by),
            _ => None,
        }
    }
}
