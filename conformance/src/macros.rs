//! `conformance_tests!`: one `#[tokio::test]` per case.

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
            cluster_restart_tokens_keep_increasing,
            paused_candidate_loses_and_its_write_is_refused,
            killed_candidate_taken_over_within_ttl_plus_1s,
        ] }
    };
}

/// Generates the tests (internal).
#[doc(hidden)]
#[macro_export]
macro_rules! __case_tests {
    ($factory:tt [ $($case:ident),* $(,)? ]) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let factory = $crate::__factory!(@group $factory);
                $crate::suite::run_one(factory, $crate::suite::$case).await;
            }
        )*
    };
}

/// Evaluates the factory expression, awaiting it if marked `async` (internal).
#[doc(hidden)]
#[macro_export]
macro_rules! __factory {
    (@group ($($factory:tt)*)) => {
        $crate::__factory!($($factory)*)
    };
    (async $factory:expr) => {
        $factory.await
    };
    ($factory:expr) => {
        $factory
    };
}

/// Generates one `#[tokio::test(flavor = "multi_thread")]` per case of the
/// suite, named after the case, each running it on a factory made by the
/// expression (evaluated once per test; write `async EXPR` to await it).
///
/// The calling crate needs `tokio` with the `macros` and `rt-multi-thread`
/// features. Each test records its case in `target/conformance/` and panics
/// if the backend broke a promise.
///
/// In `tests/memory.rs` (a whole test file):
///
/// ```no_run
/// tenure_conformance::conformance_tests!(tenure_conformance::MemoryFactory::new());
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! conformance_tests {
    ($($factory:tt)+) => {
        use $crate::__case_tests as __tenure_conformance_case_tests;
        $crate::__cases!(__tenure_conformance_case_tests ($($factory)+));
    };
}
