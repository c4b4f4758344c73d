//! The list of cases, in one place: the suite's case table is generated from it.

/// The list of cases, handed to `$each` (internal).
#[doc(hidden)]
#[macro_export]
macro_rules! __cases {
    ($each:ident $args:tt) => {
        $each! { $args [
            acquire_uncontended,
            acquire_when_held_reports_holder,
            release_lets_waiting_standby_lead_at_once,
            release_after_cancelled_renew_frees_at_once,
            stale_release_leaves_new_holder_in_place,
            deadline_counts_from_send_under_delayed_answers,
            deadline_ends_before_the_servers_expiry,
            renew_extends,
            renew_after_expiry_is_lease_lost,
            expiry_after_ttl_not_before,
            tokens_strictly_increase,
            token_increases_after_state_wiped,
            nested_keys_are_independent,
            watch_starts_with_current_state,
            watch_reports_changes_in_order_and_vacancy,
            standby_waits_through_history_compaction,
            dropped_waiting_acquire_leaves_no_queue_entry,
            dropped_acquire_leaves_nothing,
            shutdown_releases_before_returning,
            herd_writes_per_leadership_change,
            empty_key_is_invalid_argument,
            key_breaking_backend_rule_is_invalid_argument,
            key_over_backend_max_len_is_invalid_argument,
            ttl_zero_is_invalid_argument,
            ttl_below_backend_minimum_is_invalid_argument,
            ttl_off_granularity_is_invalid_argument,
            empty_identity_is_invalid_argument,
            elector_rejects_renew_interval_not_below_ttl,
            resign_hands_over_at_once,
            handover_p50_over_repeated_resignations,
            crashed_leader_taken_over_after_ttl,
            partitioned_leader_steps_down_before_anyone_else_leads,
            servers_paused_longer_than_ttl_leader_steps_down,
            server_node_killed_leader_survives_or_fails_over,
            holders_server_node_paused_longer_than_ttl,
            servers_leader_paused_longer_than_ttl,
            standby_sees_failover_when_its_node_is_cut_off,
            observer_sees_failover_when_its_node_is_cut_off,
            session_shrunk_on_reconnect_holder_stops_first,
            cluster_restart_tokens_keep_increasing,
            paused_candidate_loses_and_its_write_is_refused,
            killed_candidate_taken_over_within_ttl_plus_1s,
            racing_single_attempts_grant_exactly_one,
            racing_standbys_after_expiry_grant_one_at_a_time,
            ttl_above_backend_maximum_is_invalid_argument,
            transient_errors_are_not_a_lost_lease,
            dropped_answer_leaves_no_ghost_grant,
        ] }
    };
}
