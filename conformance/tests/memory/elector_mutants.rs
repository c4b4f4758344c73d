//! Proof that the suite judges the Elector itself, not only the backend
//! under it: the memory backend as it is, with one bug planted in the
//! Elector at a time (tenure-core's test-only `__elector_mutants`
//! feature), must fail the case written for that bug, on the property
//! the case is about.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tenure_conformance::trials::Trial;
use tenure_conformance::{async_trial, suite, BackendFactory, MemoryFactory};
use tenure_conformance::{CaseReport, Property};
use tenure_core::ElectorBug;

/// This file's tests, as trials named `elector_mutants::…`.
pub fn trials() -> Vec<Trial> {
    macro_rules! trials {
        ($($test:ident),* $(,)?) => {
            vec![$(async_trial(concat!("elector_mutants::", stringify!($test)), || Box::pin($test())),)*]
        };
    }
    trials!(
        a_release_before_the_term_ends_fails_resign_hands_over_at_once,
        a_release_before_the_term_ends_fails_shutdown_releases_before_returning,
        a_lost_that_resolves_late_fails_resign_hands_over_at_once,
        a_shutdown_that_returns_before_the_release_fails_shutdown_releases_before_returning,
        a_renewal_counted_from_its_answer_fails_deadline_counts_from_send,
        work_left_running_after_loss_fails_partitioned_leader_steps_down,
    )
}

/// Runs `case` on a fresh memory backend with `bug` planted in every
/// Elector the case builds, and prints how it ended.
async fn planted<F, Fut>(bug: ElectorBug, case: F) -> CaseReport
where
    F: FnOnce(Arc<dyn BackendFactory>) -> Fut,
    Fut: Future<Output = CaseReport>,
{
    let factory = Arc::new(MemoryFactory::new()) as Arc<dyn BackendFactory>;
    let report = suite::with_elector_hook(Arc::new(move |b| b.plant(bug)), case(factory)).await;
    println!("{bug:?} planted, {}: {:?}", report.case, report.outcome);
    report
}

use crate::mutants::failed_on;

/// The resigning Elector sends the release and ends its term only once
/// the release is answered: the standby, granted while the answer is on
/// its way, finds the resigned term still valid.
async fn a_release_before_the_term_ends_fails_resign_hands_over_at_once() {
    let report = planted(
        ElectorBug::ReleaseBeforeEnd,
        suite::resign_hands_over_at_once,
    )
    .await;
    failed_on(&report, Property::Exclusive);
}

/// The same bug at shutdown.
async fn a_release_before_the_term_ends_fails_shutdown_releases_before_returning() {
    let report = planted(
        ElectorBug::ReleaseBeforeEnd,
        suite::shutdown_releases_before_returning,
    )
    .await;
    failed_on(&report, Property::Exclusive);
}

/// The term ends on time, but `lost()` says so 100 ms (half the memory
/// backend's round trip) late: the standby leads before the resigned
/// leader learns it no longer does.
async fn a_lost_that_resolves_late_fails_resign_hands_over_at_once() {
    let report = planted(
        ElectorBug::LostLate(Duration::from_millis(100)),
        suite::resign_hands_over_at_once,
    )
    .await;
    failed_on(&report, Property::Exclusive);
}

/// `shutdown()` returns before the release settled: the process exits
/// with its lease held and the standby waits it out.
async fn a_shutdown_that_returns_before_the_release_fails_shutdown_releases_before_returning() {
    let report = planted(
        ElectorBug::ShutdownEarly,
        suite::shutdown_releases_before_returning,
    )
    .await;
    failed_on(&report, Property::Contract);
}

/// The Elector's renewal takes its deadline from the answer's arrival: with
/// answers held back a quarter TTL, the deadline is that much late.
async fn a_renewal_counted_from_its_answer_fails_deadline_counts_from_send() {
    let report = planted(
        ElectorBug::RenewFromAnswer,
        suite::deadline_counts_from_send_under_delayed_answers,
    )
    .await;
    failed_on(&report, Property::Contract);
}

/// `run` leaves the leader's work running once its term is lost: cut off,
/// the leader's work still runs when the standby is granted.
async fn work_left_running_after_loss_fails_partitioned_leader_steps_down() {
    let report = planted(
        ElectorBug::RunNotCancelled,
        suite::partitioned_leader_steps_down_before_anyone_else_leads,
    )
    .await;
    failed_on(&report, Property::Exclusive);
}
