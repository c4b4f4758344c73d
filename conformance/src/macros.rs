//! The list of cases, in one place: the suite's case table and the
//! functions that run each case are generated from it.

/// Every case, in report order: the module that holds its body, its name,
/// what else may run beside it ([`Meta`](crate::suite::Meta)'s
/// constructors), the contract points it checks, and `core` where it checks
/// `tenure-core` alone. Handed to `$each` (internal).
#[doc(hidden)]
#[macro_export]
macro_rules! __cases {
    ($each:ident) => {
        $each! {
            acquire::acquire_uncontended: shared "2, 3, 5",
            acquire::acquire_when_held_reports_holder: shared "2",
            release::release_lets_waiting_standby_lead_at_once: machine "3, 8",
            release::release_after_cancelled_renew_frees_at_once: shared "8",
            release::stale_release_leaves_new_holder_in_place: shared "8",
            deadline::deadline_counts_from_send_under_delayed_answers: shared "5",
            expiry::deadline_ends_before_the_servers_expiry: shared "5",
            renew::renew_extends: shared "5, 7",
            renew::renew_after_expiry_is_lease_lost: shared "7",
            renew::expiry_after_ttl_not_before: shared "6",
            tokens::tokens_strictly_increase: shared "9",
            tokens::token_increases_after_state_wiped: shared "9",
            nested::nested_keys_are_independent: shared "12",
            watch::watch_starts_with_current_state: shared "10",
            watch::watch_reports_changes_in_order_and_vacancy: shared "10",
            history::standby_waits_through_history_compaction: backend "3, 10",
            acquire::dropped_waiting_acquire_leaves_no_queue_entry: shared "4",
            dropped::dropped_acquire_leaves_nothing: shared "4",
            shutdown::shutdown_releases_before_returning: shared "8, 11",
            herd::herd_writes_per_leadership_change: machine "3",
            input::empty_key_is_invalid_argument: backend "1" core,
            input::key_breaking_backend_rule_is_invalid_argument: backend "1",
            input::key_over_backend_max_len_is_invalid_argument: backend "1",
            input::ttl_zero_is_invalid_argument: backend "1" core,
            input::ttl_below_backend_minimum_is_invalid_argument: backend "1",
            input::ttl_off_granularity_is_invalid_argument: backend "1",
            input::empty_identity_is_invalid_argument: backend "1" core,
            input::elector_rejects_renew_interval_not_below_ttl: backend "1" core,
            elector::resign_hands_over_at_once: machine "3, 8",
            handover::handover_p50_over_repeated_resignations: machine "3, 8",
            elector::crashed_leader_taken_over_after_ttl: shared "6, 9",
            elector::partitioned_leader_steps_down_before_anyone_else_leads: shared "5, 6, 8",
            servers::servers_paused_longer_than_ttl_leader_steps_down: backend "5, 6",
            outage::servers_stopped_for_several_ttls_then_a_candidate_leads: backend "6",
            process::servers_leader_stopped_then_holder_frozen_a_candidate_leads: backend "6",
            nodes::server_node_killed_leader_survives_or_fails_over: backend "5, 6, 8",
            paused::holders_server_node_paused_longer_than_ttl: backend "5, 6, 8",
            paused::servers_leader_paused_longer_than_ttl: backend "5, 6, 8",
            cutoff::standby_sees_failover_when_its_node_is_cut_off: backend "6, 8",
            observer::observer_sees_failover_when_its_node_is_cut_off: backend "10",
            shrunk::session_shrunk_on_reconnect_holder_stops_first: backend "5, 6, 8",
            restart::cluster_restart_tokens_keep_increasing: backend "9",
            process::paused_candidate_loses_and_its_write_is_refused: shared "6, 9",
            process::killed_candidate_taken_over_within_ttl_plus_1s: shared "6, 9",
            contention::racing_single_attempts_grant_exactly_one: shared "2, 6, 9",
            contention::racing_standbys_after_expiry_grant_one_at_a_time: shared "3, 6, 9",
            input::ttl_above_backend_maximum_is_invalid_argument: backend "1",
            transient::transient_errors_are_not_a_lost_lease: shared "5, 7",
            transient::dropped_answer_leaves_no_ghost_grant: machine "2, 4",
        }
    };
}
