//! Proof that the suite can fail: the memory backend with one bug planted
//! at a time must fail the case that checks for it, on the property the
//! case is about, and a backend that declares `fencing: false` gets its
//! breaches recorded instead.

#[path = "mutant.rs"]
mod mutant;

use mutant::{Bug, MutantFactory};
use tenure_conformance::factory::Gap;
use tenure_conformance::suite;
use tenure_conformance::{CaseReport, Outcome, Property};

#[track_caller]
pub(crate) fn failed_on(report: &CaseReport, property: Property) {
    assert!(
        matches!(report.outcome, Outcome::Fail(_)),
        "the planted bug went unnoticed: {report:#?}"
    );
    assert!(
        report
            .violations
            .iter()
            .any(|v| v.property == property && v.promised),
        "expected a {property} violation: {report:#?}"
    );
}

pub async fn stuck_tokens_fail_tokens_strictly_increase_and_let_stale_writes_in() {
    failed_on(
        &suite::tokens_strictly_increase(MutantFactory::planted(Bug::TokenStuck)).await,
        Property::Fencing,
    );
    let crash =
        suite::crashed_leader_taken_over_after_ttl(MutantFactory::planted(Bug::TokenStuck)).await;
    failed_on(&crash, Property::Fencing);
    assert_eq!(crash.figures.stale_writes_accepted, Some(1), "{crash:#?}");
}

pub async fn late_deadline_is_an_overlap_in_the_partition_case() {
    let f = MutantFactory::planted(Bug::DeadlineTooLate);
    failed_on(
        &suite::partitioned_leader_steps_down_before_anyone_else_leads(f).await,
        Property::Exclusive,
    );
    failed_on(
        &suite::acquire_uncontended(MutantFactory::planted(Bug::DeadlineTooLate)).await,
        Property::Contract,
    );
}

pub async fn unenforced_minimum_ttl_fails_the_input_case() {
    let f = MutantFactory::planted(Bug::MinTtlNotEnforced);
    failed_on(
        &suite::ttl_below_backend_minimum_is_invalid_argument(f).await,
        Property::Contract,
    );
}

pub async fn release_by_name_fails_stale_release() {
    let f = MutantFactory::planted(Bug::ReleaseByName);
    failed_on(
        &suite::stale_release_leaves_new_holder_in_place(f).await,
        Property::Contract,
    );
}

pub async fn renewing_a_lost_lease_fails_renew_after_expiry() {
    let f = MutantFactory::planted(Bug::RenewNeverLost);
    failed_on(
        &suite::renew_after_expiry_is_lease_lost(f).await,
        Property::Contract,
    );
}

pub async fn watch_without_current_state_fails_watch_starts_with_current_state() {
    let f = MutantFactory::planted(Bug::WatchSkipsCurrent);
    failed_on(
        &suite::watch_starts_with_current_state(f).await,
        Property::Contract,
    );
}

pub async fn polling_wait_fails_the_herd_case() {
    let f = MutantFactory::planted(Bug::WaitByPolling);
    failed_on(
        &suite::herd_writes_per_leadership_change(f).await,
        Property::HerdFree,
    );
}

pub async fn waiters_told_every_change_fail_the_herd_case_on_requests() {
    let f = MutantFactory::planted(Bug::WaitersToldEveryChange);
    let report = suite::herd_writes_per_leadership_change(f).await;
    failed_on(&report, Property::HerdRequests);
    let figures = &report.figures;
    assert!(
        figures.writes_per_change.is_some_and(|w| w <= 3.0),
        "the writes stay herd-free: {figures:?}"
    );
    assert!(
        figures.requests_per_change.is_some_and(|r| r > 10.0),
        "the requests are not: {figures:?}"
    );
}

pub async fn a_wait_lost_on_compaction_fails_the_compaction_case() {
    let f = MutantFactory::planted(Bug::WaitLostOnCompaction);
    failed_on(
        &suite::standby_waits_through_history_compaction(f).await,
        Property::Contract,
    );
}

pub async fn orphaned_waiter_fails_dropped_waiting_acquire() {
    let f = MutantFactory::planted(Bug::WaitLeavesOrphan);
    failed_on(
        &suite::dropped_waiting_acquire_leaves_no_queue_entry(f).await,
        Property::Contract,
    );
}

pub async fn unfenced_backend_gets_breaches_recorded_not_failed() {
    for report in [
        suite::tokens_strictly_increase(MutantFactory::planted(Bug::NoFencing)).await,
        suite::crashed_leader_taken_over_after_ttl(MutantFactory::planted(Bug::NoFencing)).await,
        suite::partitioned_leader_steps_down_before_anyone_else_leads(MutantFactory::planted(
            Bug::NoFencing,
        ))
        .await,
    ] {
        assert_eq!(report.outcome, Outcome::Recorded, "{report:#?}");
        assert!(report.ok());
        assert!(
            report
                .violations
                .iter()
                .all(|v| v.property == Property::Fencing && !v.promised),
            "{report:#?}"
        );
    }
}

pub async fn deadline_from_the_answer_fails_the_delayed_answers_case() {
    let f = MutantFactory::planted(Bug::DeadlineFromAnswer);
    failed_on(
        &suite::deadline_counts_from_send_under_delayed_answers(f).await,
        Property::Contract,
    );
}

pub async fn tokens_reset_by_a_wipe_fail_token_increases_after_state_wiped() {
    let f = MutantFactory::planted(Bug::TokensResetOnWipe);
    failed_on(
        &suite::token_increases_after_state_wiped(f).await,
        Property::Fencing,
    );
}

pub async fn a_holder_deaf_to_deletion_fails_token_increases_after_state_wiped() {
    let f = MutantFactory::planted(Bug::DeafToDeletion);
    failed_on(
        &suite::token_increases_after_state_wiped(f).await,
        Property::Contract,
    );
}

pub async fn a_waiter_that_trusts_its_watch_fails_standby_sees_failover_when_its_node_is_cut_off() {
    let f = MutantFactory::planted(Bug::TrustsItsWatch);
    failed_on(
        &suite::standby_sees_failover_when_its_node_is_cut_off(f).await,
        Property::Timing,
    );
}

pub async fn an_observer_that_trusts_its_watch_fails_observer_sees_failover_when_its_node_is_cut_off(
) {
    let f = MutantFactory::planted(Bug::ObserverTrustsItsWatch);
    failed_on(
        &suite::observer_sees_failover_when_its_node_is_cut_off(f).await,
        Property::Timing,
    );
    // The standby's own wait doubts its watch: it still takes over in time.
    let f = MutantFactory::planted(Bug::ObserverTrustsItsWatch);
    let standby = suite::standby_sees_failover_when_its_node_is_cut_off(f).await;
    assert_eq!(standby.outcome, Outcome::Pass, "{standby:#?}");
}

pub async fn prefix_elections_fail_nested_keys_are_independent() {
    let f = MutantFactory::planted(Bug::NestedKeysShared);
    failed_on(
        &suite::nested_keys_are_independent(f).await,
        Property::Contract,
    );
}

pub async fn a_grant_lost_in_flight_fails_dropped_acquire_leaves_nothing() {
    let f = MutantFactory::planted(Bug::GrantLostInFlight);
    failed_on(
        &suite::dropped_acquire_leaves_nothing(f).await,
        Property::Contract,
    );
}

pub async fn a_release_that_returns_early_fails_shutdown_releases_before_returning() {
    let f = MutantFactory::planted(Bug::ReleaseFireAndForget);
    failed_on(
        &suite::shutdown_releases_before_returning(f).await,
        Property::Contract,
    );
}

pub async fn a_single_attempt_left_queued_fails_acquire_when_held_reports_holder() {
    let f = MutantFactory::planted(Bug::OnceJoinsQueue);
    failed_on(
        &suite::acquire_when_held_reports_holder(f).await,
        Property::Contract,
    );
}

pub async fn a_standby_polling_every_150ms_fails_release_lets_waiting_standby_lead_at_once() {
    let f = MutantFactory::planted(Bug::PollsEvery150ms);
    failed_on(
        &suite::release_lets_waiting_standby_lead_at_once(f).await,
        Property::Timing,
    );
}

pub async fn a_standby_polling_every_150ms_fails_resign_hands_over_at_once() {
    let f = MutantFactory::planted(Bug::PollsEvery150ms);
    failed_on(&suite::resign_hands_over_at_once(f).await, Property::Timing);
}

pub async fn a_standby_polling_every_150ms_fails_handover_p50_over_repeated_resignations() {
    let f = MutantFactory::planted(Bug::PollsEvery150ms);
    failed_on(
        &suite::handover_p50_over_repeated_resignations(f).await,
        Property::Timing,
    );
}

pub async fn a_release_that_ignores_a_cancelled_renewal_fails_release_after_cancelled_renew() {
    let f = MutantFactory::planted(Bug::CancelledRenewKeepsKey);
    failed_on(
        &suite::release_after_cancelled_renew_frees_at_once(f).await,
        Property::Contract,
    );
}

pub async fn a_renewal_that_does_not_extend_fails_renew_extends() {
    let f = MutantFactory::planted(Bug::RenewDoesNotExtend);
    failed_on(&suite::renew_extends(f).await, Property::Contract);
}

pub async fn early_expiry_fails_expiry_after_ttl_not_before_and_is_an_overlap_after_a_crash() {
    let f = MutantFactory::planted(Bug::EarlyExpiry);
    failed_on(
        &suite::expiry_after_ttl_not_before(f).await,
        Property::Contract,
    );
    let f = MutantFactory::planted(Bug::EarlyExpiry);
    failed_on(
        &suite::crashed_leader_taken_over_after_ttl(f).await,
        Property::Exclusive,
    );
}

pub async fn a_watch_that_skips_vacancies_fails_watch_reports_changes_in_order_and_vacancy() {
    let f = MutantFactory::planted(Bug::WatchSkipsVacancy);
    failed_on(
        &suite::watch_reports_changes_in_order_and_vacancy(f).await,
        Property::Contract,
    );
}

pub async fn a_client_that_writes_on_connect_fails_the_input_cases_of_core() {
    let f = || MutantFactory::planted(Bug::WritesOnConnect);
    for report in [
        suite::empty_key_is_invalid_argument(f()).await,
        suite::ttl_zero_is_invalid_argument(f()).await,
        suite::empty_identity_is_invalid_argument(f()).await,
        suite::elector_rejects_renew_interval_not_below_ttl(f()).await,
    ] {
        failed_on(&report, Property::Contract);
    }
}

pub async fn an_unenforced_key_rule_fails_key_breaking_backend_rule_is_invalid_argument() {
    let f = MutantFactory::planted(Bug::KeyRuleNotEnforced);
    failed_on(
        &suite::key_breaking_backend_rule_is_invalid_argument(f).await,
        Property::Contract,
    );
}

pub async fn an_unenforced_key_limit_fails_key_over_backend_max_len_is_invalid_argument() {
    let f = MutantFactory::planted(Bug::MaxKeyLenNotEnforced);
    failed_on(
        &suite::key_over_backend_max_len_is_invalid_argument(f).await,
        Property::Contract,
    );
}

pub async fn an_unenforced_ttl_granularity_fails_ttl_off_granularity_is_invalid_argument() {
    let f = MutantFactory::planted(Bug::TtlGranularityNotEnforced);
    failed_on(
        &suite::ttl_off_granularity_is_invalid_argument(f).await,
        Property::Contract,
    );
}

pub async fn a_leader_trusting_unanswered_renewals_fails_servers_paused_longer_than_ttl() {
    let f = MutantFactory::planted(Bug::UnansweredRenewCounts);
    failed_on(
        &suite::servers_paused_longer_than_ttl_leader_steps_down(f).await,
        Property::Contract,
    );
}

pub async fn a_client_that_stays_on_a_frozen_node_fails_holders_server_node_paused_longer_than_ttl()
{
    let f = MutantFactory::planted(Bug::StaysOnAFrozenNode);
    failed_on(
        &suite::holders_server_node_paused_longer_than_ttl(f).await,
        Property::Contract,
    );
}

/// A factory may say its client goes back to frozen nodes (ZooKeeper's
/// does), but that excuses a step-down only where the link shows the client
/// did: one that cannot count its connections, staying on the frozen node,
/// still fails.
pub async fn a_declared_retry_of_frozen_nodes_does_not_excuse_a_client_that_stays_on_one() {
    let f = MutantFactory::new(Bug::StaysOnAFrozenNode)
        .retrying_frozen_nodes("the mutant says it may go back to a frozen node");
    let report = suite::holders_server_node_paused_longer_than_ttl(std::sync::Arc::new(f)).await;
    failed_on(&report, Property::Contract);
}

pub async fn a_leader_trusting_unanswered_renewals_overlaps_when_its_node_is_paused() {
    let f = MutantFactory::planted(Bug::UnansweredRenewCounts);
    failed_on(
        &suite::holders_server_node_paused_longer_than_ttl(f).await,
        Property::Exclusive,
    );
}

/// The overlap needs a's lease to run out on the servers during the pause,
/// and a standby to be granted before a's believed deadline: that depends
/// on where a's last answered renewal falls before the pause. Measured
/// here, the first run to show it was the 1st, 1st, 3rd, 6th, 6th and 7th
/// on an idle machine; beside the other test lanes the 1st, 2nd, 3rd, 4th,
/// 6th, 7th and 13th, and once none of 25. So a run shows it about one time
/// in eight under load (each takes about a second). Up to 100 runs, the
/// first that fails counts: a miss by chance at one in eight is below one
/// in 100,000 (7/8 to the 100th is 1.6e-6); a client without the bug takes
/// all 100 and fails the test.
pub async fn a_leader_trusting_unanswered_renewals_overlaps_when_the_servers_leader_is_paused() {
    let mut reports = Vec::new();
    for _ in 0..100 {
        let f = MutantFactory::planted(Bug::UnansweredRenewCounts);
        let report = suite::servers_leader_paused_longer_than_ttl(f).await;
        if matches!(report.outcome, Outcome::Fail(_)) {
            println!("caught in run {}", reports.len() + 1);
            return failed_on(&report, Property::Exclusive);
        }
        reports.push(report);
    }
    panic!(
        "the planted bug went unnoticed in {} runs; the last three: {:#?}",
        reports.len(),
        &reports[reports.len().saturating_sub(3)..]
    );
}

pub async fn leases_lost_with_the_servers_leader_fail_server_node_killed() {
    let f = MutantFactory::planted(Bug::LeasesLostOnFailover);
    failed_on(
        &suite::server_node_killed_leader_survives_or_fails_over(f).await,
        Property::Exclusive,
    );
}

pub async fn an_abandoned_record_kept_alive_fails_servers_stopped_for_several_ttls() {
    let f = MutantFactory::planted(Bug::AbandonedRecordKeptAlive);
    failed_on(
        &suite::servers_stopped_for_several_ttls_then_a_candidate_leads(f).await,
        Property::Timing,
    );
}

pub async fn leases_lost_with_the_servers_leader_fail_servers_leader_stopped_then_holder_frozen() {
    let f = MutantFactory::planted(Bug::LeasesLostOnFailover);
    failed_on(
        &suite::servers_leader_stopped_then_holder_frozen_a_candidate_leads(f).await,
        Property::Exclusive,
    );
}

pub async fn late_expiry_fails_servers_leader_stopped_then_holder_frozen() {
    let f = MutantFactory::planted(Bug::ExpiryLate);
    failed_on(
        &suite::servers_leader_stopped_then_holder_frozen_a_candidate_leads(f).await,
        Property::Timing,
    );
}

pub async fn tokens_reset_by_a_restart_fail_cluster_restart_tokens_keep_increasing() {
    let f = MutantFactory::planted(Bug::TokensResetOnRestart);
    failed_on(
        &suite::cluster_restart_tokens_keep_increasing(f).await,
        Property::Fencing,
    );
}

pub async fn stuck_tokens_let_a_resumed_candidate_process_write() {
    let f = MutantFactory::planted(Bug::TokenStuck);
    failed_on(
        &suite::paused_candidate_loses_and_its_write_is_refused(f).await,
        Property::Fencing,
    );
}

pub async fn a_late_deadline_lets_a_frozen_candidate_process_overlap_its_successor() {
    let f = MutantFactory::planted(Bug::DeadlineTooLate);
    failed_on(
        &suite::paused_candidate_loses_and_its_write_is_refused(f).await,
        Property::Exclusive,
    );
}

pub async fn late_expiry_fails_killed_candidate_taken_over_within_ttl_plus_1s() {
    let f = MutantFactory::planted(Bug::ExpiryLate);
    failed_on(
        &suite::killed_candidate_taken_over_within_ttl_plus_1s(f).await,
        Property::Timing,
    );
}

pub async fn a_declared_exclusive_gap_does_not_excuse_a_split_brain() {
    let f = MutantFactory::new(Bug::DeadlineTooLate).with_gaps(vec![Gap {
        property: Property::Exclusive,
        why: "the mutant says split brains are fine",
    }]);
    let report =
        suite::partitioned_leader_steps_down_before_anyone_else_leads(std::sync::Arc::new(f)).await;
    failed_on(&report, Property::Exclusive);
    assert!(
        report
            .violations
            .iter()
            .all(|v| v.property != Property::Exclusive || v.promised),
        "{report:#?}"
    );
}

pub async fn a_session_shrink_left_unheeded_fails_session_shrunk_on_reconnect_holder_stops_first() {
    let f = MutantFactory::planted(Bug::ShrunkSessionUnheeded);
    let report = suite::session_shrunk_on_reconnect_holder_stops_first(f).await;
    failed_on(&report, Property::Exclusive);
    // Every other way the holder's session ends is heard as before.
    let f = MutantFactory::planted(Bug::ShrunkSessionUnheeded);
    let partition = suite::partitioned_leader_steps_down_before_anyone_else_leads(f).await;
    assert_eq!(partition.outcome, Outcome::Pass, "{partition:#?}");
}

pub async fn a_check_then_set_acquire_fails_racing_single_attempts_grant_exactly_one() {
    let f = MutantFactory::planted(Bug::CheckThenSet);
    failed_on(
        &suite::racing_single_attempts_grant_exactly_one(f).await,
        Property::Exclusive,
    );
}

pub async fn a_check_then_set_acquire_fails_racing_standbys_after_expiry_grant_one_at_a_time() {
    let f = MutantFactory::planted(Bug::CheckThenSet);
    failed_on(
        &suite::racing_standbys_after_expiry_grant_one_at_a_time(f).await,
        Property::Exclusive,
    );
}

pub async fn a_release_that_takes_nested_keys_fails_nested_keys_are_independent() {
    let f = MutantFactory::planted(Bug::ReleaseTakesNested);
    let report = suite::nested_keys_are_independent(f).await;
    failed_on(&report, Property::Contract);
    assert!(
        matches!(&report.outcome, Outcome::Fail(why) if why.contains("releasing")),
        "failed on the release of the parent: {report:#?}"
    );
}

pub async fn a_watch_that_takes_nested_keys_fails_nested_keys_are_independent() {
    let f = MutantFactory::planted(Bug::WatchTakesNested);
    let report = suite::nested_keys_are_independent(f).await;
    failed_on(&report, Property::Contract);
    assert!(
        matches!(&report.outcome, Outcome::Fail(why) if why.contains("watch reported")),
        "failed on the parent's watch: {report:#?}"
    );
}

/// The memory backend declaring a maximum TTL (and enforcing it, as every
/// backend's checks do) passes; the mutant declaring one and taking longer
/// TTLs fails.
pub async fn an_unenforced_max_ttl_fails_ttl_above_backend_maximum_is_invalid_argument() {
    let mut caps = tenure_core::MemoryBackend::default_capabilities();
    caps.max_ttl = Some(std::time::Duration::from_secs(1));
    let control = std::sync::Arc::new(tenure_conformance::MemoryFactory::with_capabilities(caps));
    let report = suite::ttl_above_backend_maximum_is_invalid_argument(control).await;
    assert_eq!(report.outcome, Outcome::Pass, "{report:#?}");
    let f = MutantFactory::planted(Bug::MaxTtlNotEnforced);
    failed_on(
        &suite::ttl_above_backend_maximum_is_invalid_argument(f).await,
        Property::Contract,
    );
}

pub async fn a_transient_error_taken_for_a_lost_lease_fails_transient_errors_are_not_a_lost_lease()
{
    let f = MutantFactory::planted(Bug::TransientErrorIsLost);
    let report = suite::transient_errors_are_not_a_lost_lease(f).await;
    println!("{}: {:?}", report.case, report.outcome);
    failed_on(&report, Property::Contract);
}

/// A client that refuses bad input, writing nothing, but only after a
/// request to the servers fails the input cases on the request count.
pub async fn a_request_before_refusing_fails_the_input_cases_on_requests() {
    let f = || MutantFactory::planted(Bug::RequestBeforeRefusing);
    for report in [
        suite::ttl_above_backend_maximum_is_invalid_argument(f()).await,
        suite::key_over_backend_max_len_is_invalid_argument(f()).await,
    ] {
        failed_on(&report, Property::Contract);
        assert!(
            matches!(&report.outcome, Outcome::Fail(why) if why.contains("requests for refused input")),
            "failed on the request count: {report:#?}"
        );
    }
}

pub async fn a_grant_kept_when_its_answer_is_lost_fails_dropped_answer_leaves_no_ghost_grant() {
    let f = MutantFactory::planted(Bug::GrantKeptWhenAnswerLost);
    let report = suite::dropped_answer_leaves_no_ghost_grant(f).await;
    println!("{}: {:?}", report.case, report.outcome);
    failed_on(&report, Property::Contract);
}

/// A factory that says a grant whose answer was lost outlives it until its
/// TTL runs out (`grant_outlives_lost_answer`), around another.
struct GrantsOutliveLostAnswers(std::sync::Arc<dyn tenure_conformance::BackendFactory>);

#[tenure_conformance::async_trait]
impl tenure_conformance::BackendFactory for GrantsOutliveLostAnswers {
    fn name(&self) -> &str {
        self.0.name()
    }
    fn capabilities(&self) -> tenure_core::Capabilities {
        self.0.capabilities()
    }
    async fn client(&self) -> tenure_core::Result<tenure_conformance::Client> {
        self.0.client().await
    }
    fn timing(&self) -> tenure_conformance::factory::Timing {
        self.0.timing()
    }
    async fn waiting(&self, key: &tenure_core::ElectionKey) -> Option<tenure_core::Result<usize>> {
        self.0.waiting(key).await
    }
    fn grant_outlives_lost_answer(&self) -> Option<&'static str> {
        Some("the planted bug keeps it until its TTL")
    }
}

/// Where the factory declares that a grant outlives its lost answer, the
/// same bug is excused: the standby leads once the ghost's TTL ran out.
pub async fn a_grant_kept_until_its_ttl_is_excused_where_the_factory_declares_it() {
    let f = MutantFactory::planted(Bug::GrantKeptWhenAnswerLost);
    let report = suite::dropped_answer_leaves_no_ghost_grant(std::sync::Arc::new(
        GrantsOutliveLostAnswers(f),
    ))
    .await;
    report.assert_ok();
    assert!(
        report.notes.iter().any(|n| n.contains("outlives")),
        "{report:#?}"
    );
}
