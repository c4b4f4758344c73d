//! The conformance suite on the in-process memory backend: one test per
//! case, faults through the memory backend's knobs and its simulated
//! 3-node cluster, candidate processes through its TCP front. Report:
//! `target/conformance/memory.md`.

use std::sync::Arc;
use std::time::Duration;

use tenure_conformance::planted::Planted;
use tenure_conformance::trials::Trial;
use tenure_conformance::{
    async_trial, suite, BackendFactory, MemoryFactory, Outcome, Property, Target,
};
use tenure_core::{Capabilities, KeyRule, MemoryBackend};

fn main() -> std::process::ExitCode {
    let memory = Target::new("", || async {
        Arc::new(MemoryFactory::new().with_candidate(env!("CARGO_BIN_EXE_tenure-candidate")))
            as Arc<dyn BackendFactory>
    })
    .with_core_cases()
    .with_planted_bugs(Planted::ALL)
    // The default memory backend stores every valid key; the strict one
    // below refuses keys off its rule.
    .expect_skips(&["key_breaking_backend_rule_is_invalid_argument"])
    // Nor has it a maximum TTL; the mutants' control declares one.
    .expect_skips(&["ttl_above_backend_maximum_is_invalid_argument"]);
    let tests = tests().into_iter().chain(elector_mutants::trials());
    tenure_conformance::run_targets_with(vec![memory], tests.collect())
}

/// This binary's own tests, beside the suite's cases: the strict memory
/// backend, `run_all`, the candidate process, and every mutant.
fn tests() -> Vec<Trial> {
    macro_rules! trials {
        ($($test:ident),* ; mutants: $($mutant:ident),* $(,)?) => {
            vec![
                $(async_trial(stringify!($test), || Box::pin($test())),)*
                $(async_trial(concat!("mutants::", stringify!($mutant)), || Box::pin(mutants::$mutant())),)*
            ]
        };
    }
    trials!(
        strict_memory_backend_refuses_every_bad_input,
        run_all_reports_every_case_in_order,
        candidate_process_leads_loses_when_frozen_and_dies_by_sigkill,
        candidate_process_refuses_unknown_backend_url,
        a_deadline_from_a_later_request_is_caught_where_the_ttl_request_is_named,
        a_server_clock_1pct_fast_passes_every_case_within_the_drift_margin,
        a_server_clock_5pct_fast_breaks_exclusive_in_the_expiry_cases;
        mutants:
        stuck_tokens_fail_tokens_strictly_increase_and_let_stale_writes_in,
        late_deadline_is_an_overlap_in_the_partition_case,
        unenforced_minimum_ttl_fails_the_input_case,
        release_by_name_fails_stale_release,
        renewing_a_lost_lease_fails_renew_after_expiry,
        watch_without_current_state_fails_watch_starts_with_current_state,
        polling_wait_fails_the_herd_case,
        waiters_told_every_change_fail_the_herd_case_on_requests,
        a_wait_lost_on_compaction_fails_the_compaction_case,
        orphaned_waiter_fails_dropped_waiting_acquire,
        unfenced_backend_gets_breaches_recorded_not_failed,
        deadline_from_the_answer_fails_the_delayed_answers_case,
        tokens_reset_by_a_wipe_fail_token_increases_after_state_wiped,
        a_holder_deaf_to_deletion_fails_token_increases_after_state_wiped,
        a_waiter_that_trusts_its_watch_fails_standby_sees_failover_when_its_node_is_cut_off,
        an_observer_that_trusts_its_watch_fails_observer_sees_failover_when_its_node_is_cut_off,
        a_session_shrink_left_unheeded_fails_session_shrunk_on_reconnect_holder_stops_first,
        prefix_elections_fail_nested_keys_are_independent,
        a_grant_lost_in_flight_fails_dropped_acquire_leaves_nothing,
        a_release_that_returns_early_fails_shutdown_releases_before_returning,
        a_single_attempt_left_queued_fails_acquire_when_held_reports_holder,
        a_standby_polling_every_150ms_fails_release_lets_waiting_standby_lead_at_once,
        a_standby_polling_every_150ms_fails_resign_hands_over_at_once,
        a_standby_polling_every_150ms_fails_handover_p50_over_repeated_resignations,
        a_release_that_ignores_a_cancelled_renewal_fails_release_after_cancelled_renew,
        a_renewal_that_does_not_extend_fails_renew_extends,
        early_expiry_fails_expiry_after_ttl_not_before_and_is_an_overlap_after_a_crash,
        a_watch_that_skips_vacancies_fails_watch_reports_changes_in_order_and_vacancy,
        a_client_that_writes_on_connect_fails_the_input_cases_of_core,
        an_unenforced_key_rule_fails_key_breaking_backend_rule_is_invalid_argument,
        an_unenforced_key_limit_fails_key_over_backend_max_len_is_invalid_argument,
        an_unenforced_ttl_granularity_fails_ttl_off_granularity_is_invalid_argument,
        a_leader_trusting_unanswered_renewals_fails_servers_paused_longer_than_ttl,
        a_leader_trusting_unanswered_renewals_overlaps_when_its_node_is_paused,
        a_client_that_stays_on_a_frozen_node_fails_holders_server_node_paused_longer_than_ttl,
        a_declared_retry_of_frozen_nodes_does_not_excuse_a_client_that_stays_on_one,
        a_leader_trusting_unanswered_renewals_overlaps_when_the_servers_leader_is_paused,
        leases_lost_with_the_servers_leader_fail_server_node_killed,
        tokens_reset_by_a_restart_fail_cluster_restart_tokens_keep_increasing,
        an_abandoned_record_kept_alive_fails_servers_stopped_for_several_ttls,
        leases_lost_with_the_servers_leader_fail_servers_leader_stopped_then_holder_frozen,
        late_expiry_fails_servers_leader_stopped_then_holder_frozen,
        stuck_tokens_let_a_resumed_candidate_process_write,
        a_late_deadline_lets_a_frozen_candidate_process_overlap_its_successor,
        late_expiry_fails_killed_candidate_taken_over_within_ttl_plus_1s,
        a_declared_exclusive_gap_does_not_excuse_a_split_brain,
        a_check_then_set_acquire_fails_racing_single_attempts_grant_exactly_one,
        a_check_then_set_acquire_fails_racing_standbys_after_expiry_grant_one_at_a_time,
        a_release_that_takes_nested_keys_fails_nested_keys_are_independent,
        a_watch_that_takes_nested_keys_fails_nested_keys_are_independent,
        an_unenforced_max_ttl_fails_ttl_above_backend_maximum_is_invalid_argument,
        a_request_before_refusing_fails_the_input_cases_on_requests,
        a_transient_error_taken_for_a_lost_lease_fails_transient_errors_are_not_a_lost_lease,
        a_grant_kept_when_its_answer_is_lost_fails_dropped_answer_leaves_no_ghost_grant,
        a_grant_kept_until_its_ttl_is_excused_where_the_factory_declares_it,
    )
}

/// The input cases that need a stricter backend than the default memory
/// one (a key rule, a TTL minimum and granularity, a short key limit) run
/// against a memory server that declares and enforces such limits.
async fn strict_memory_backend_refuses_every_bad_input() {
    let mut caps = Capabilities::new(true, true);
    caps.key_rule = KeyRule::Dns1123Subdomain;
    caps.min_ttl = Duration::from_millis(100);
    caps.ttl_granularity = Duration::from_millis(100);
    caps.max_key_len = 63;
    let factory = || {
        Arc::new(MemoryFactory::with_capabilities(caps.clone()))
            as Arc<dyn tenure_conformance::BackendFactory>
    };
    for report in [
        suite::key_breaking_backend_rule_is_invalid_argument(factory()).await,
        suite::key_over_backend_max_len_is_invalid_argument(factory()).await,
        suite::ttl_below_backend_minimum_is_invalid_argument(factory()).await,
        suite::ttl_off_granularity_is_invalid_argument(factory()).await,
        suite::acquire_uncontended(factory()).await,
    ] {
        assert_eq!(report.outcome, Outcome::Pass, "{report:#?}");
    }
}

/// `run_all` runs every case in order, records each, and writes the merged
/// report with one row per case.
async fn run_all_reports_every_case_in_order() {
    let name = "memory-run-all";
    let reports = tenure_conformance::run_all(Arc::new(MemoryFactory::new().named(name))).await;
    let names: Vec<&str> = reports.iter().map(|r| r.case.as_str()).collect();
    let expected: Vec<&str> = tenure_conformance::CASES.iter().map(|c| c.name).collect();
    assert_eq!(names, expected);
    for report in &reports {
        report.assert_ok();
    }
    let md = tenure_conformance::report::conformance_dir().join(format!("{name}.md"));
    let table = std::fs::read_to_string(&md).expect("the merged report");
    for case in expected {
        assert!(
            table.contains(&format!("| {case} |")),
            "{case} missing from {}",
            md.display()
        );
    }
}

#[path = "memory/mutants.rs"]
mod mutants;

/// The process driver against a real `tenure-candidate` process (its own
/// memory server): it leads, a SIGSTOP longer than the TTL costs it the
/// lease, it says so once resumed, and SIGKILL ends it.
async fn candidate_process_leads_loses_when_frozen_and_dies_by_sigkill() {
    use std::os::unix::process::ExitStatusExt;
    use tenure_conformance::process::{CandidateProcess, Command, Message};

    let program = std::path::Path::new(env!("CARGO_BIN_EXE_tenure-candidate"));
    let (ttl, step) = (Duration::from_millis(600), Duration::from_secs(2));
    let mut p = CandidateProcess::spawn(program, "memory:", "k", "p1", ttl, step * 5)
        .await
        .expect("spawn");
    p.request(Command::Campaign, step)
        .await
        .expect("reply")
        .expect("campaigning");
    let (elected, _) = p.next_event(step).await.expect("elected");
    assert!(
        matches!(elected, Message::Elected { token: Some(1), .. }),
        "{elected:?}"
    );
    let status = p
        .request(Command::Status, step)
        .await
        .expect("reply")
        .expect("status");
    assert!(
        status.leader && status.valid && status.token == Some(1),
        "{status:?}"
    );

    p.pause().expect("SIGSTOP");
    let frozen = p.request(Command::Status, Duration::from_millis(200)).await;
    assert!(
        frozen
            .as_ref()
            .is_err_and(|e| e.kind() == std::io::ErrorKind::TimedOut),
        "{frozen:?}"
    );
    tokio::time::sleep(ttl).await; // the fault: frozen for longer than the TTL
    p.resume().expect("SIGCONT");
    let (lost, _) = p.next_event(step).await.expect("lost");
    assert!(
        matches!(&lost, Message::Lost { reason, .. } if reason == "Expired" || reason == "Revoked"),
        "{lost:?}"
    );
    let status = p
        .request(Command::Write, step)
        .await
        .expect("reply")
        .expect("write");
    assert!(
        !status.valid && !status.leader && status.token == Some(1),
        "a zombie keeps its old token: {status:?}"
    );

    let exit = p.kill().await.expect("SIGKILL");
    assert_eq!(exit.signal(), Some(libc_sigkill()), "{exit:?}");
}

/// An unknown URL scheme makes the candidate exit with status 2 before it is ready.
async fn candidate_process_refuses_unknown_backend_url() {
    use tenure_conformance::process::CandidateProcess;
    let program = std::path::Path::new(env!("CARGO_BIN_EXE_tenure-candidate"));
    let spawned = CandidateProcess::spawn(
        program,
        "nosuch://x",
        "k",
        "p1",
        Duration::from_secs(1),
        Duration::from_secs(5),
    )
    .await;
    assert!(spawned.is_err(), "a candidate without a backend got ready");
}

fn libc_sigkill() -> i32 {
    9
}

/// The bug that `deadline_ends_before_the_servers_expiry` was written for
/// (the `planted::deadline_from_last_request` trial shows it catches it)
/// passes the older delayed-answers case where that case can only bound the
/// deadline by the last request the holder's link forwarded; where the
/// factory names the request that starts the TTL (the link keeping each
/// request's forwarding time), the same case catches it.
async fn a_deadline_from_a_later_request_is_caught_where_the_ttl_request_is_named() {
    use tenure_conformance::planted::{Planted, PlantedFactory};
    use tenure_conformance::TtlStart;
    let unnamed = PlantedFactory::over(
        Arc::new(MemoryFactory::new().naming_ttl_start(TtlStart::LastRequest)),
        Planted::DeadlineFromLastRequest,
    );
    let report = suite::deadline_counts_from_send_under_delayed_answers(unnamed).await;
    assert_eq!(report.outcome, Outcome::Pass, "{report:#?}");
    let named = PlantedFactory::over(
        Arc::new(MemoryFactory::new()),
        Planted::DeadlineFromLastRequest,
    );
    let report = suite::deadline_counts_from_send_under_delayed_answers(named).await;
    assert!(
        matches!(report.outcome, Outcome::Fail(_))
            && report
                .violations
                .iter()
                .any(|v| v.property == tenure_conformance::Property::Contract && v.promised),
        "naming the first request did not catch a deadline counted from a later one: {report:#?}"
    );
    println!("caught as it must be: {:?}", report.outcome);
}

/// The one case that compares the server's expiry with the client's clock
/// directly, with no margin: "no vacancy before TTL after the grant was
/// sent" (contract point 6). A server clock 1 % fast breaks it by design
/// (the key falls vacant at 99 % of the TTL); it is what the drift margin
/// is there for.
const JUDGES_THE_SERVER_CLOCK: &str = "expiry_after_ttl_not_before";

/// The Elector's default drift margin is 2 % of the TTL
/// (`tenure_core::default_drift_margin`), and every case's Electors and
/// candidacies use it: with the server's clock 1 % fast (its leases expire
/// at 99 % of the TTL by the candidates' clock, after their `valid_until`
/// at 98 %), every case passes, all at once on one fast server. The one
/// case that judges the server's expiry against the TTL itself,
/// [`JUDGES_THE_SERVER_CLOCK`], may only fail that check. The timed
/// hand-over and herd cases run too, last, as they do in the suite.
async fn a_server_clock_1pct_fast_passes_every_case_within_the_drift_margin() {
    let factory: Arc<dyn BackendFactory> = Arc::new(
        MemoryFactory::new()
            .with_candidate(env!("CARGO_BIN_EXE_tenure-candidate"))
            .with_server_clock_rate(1.01)
            .named("memory-server-clock-1pct-fast"),
    );
    // As in the suite's own run: the cases that count server writes (bad
    // input) first, before other cases leave renewers and expiries behind;
    // the timed ones last, once the others are done; the rest at once.
    let cases = tenure_conformance::CASES;
    let counting =
        |name: &str| name.ends_with("_is_invalid_argument") || name.starts_with("elector_rejects");
    let mut reports = Vec::new();
    for case in cases.iter().filter(|c| counting(c.name)) {
        reports.push((case.run)(factory.clone()).await);
    }
    let at_once = cases
        .iter()
        .filter(|c| !counting(c.name) && !c.timed_alone)
        .map(|case| (case.run)(factory.clone()));
    reports.extend(futures::future::join_all(at_once).await);
    for case in cases.iter().filter(|c| c.timed_alone) {
        reports.push((case.run)(factory.clone()).await);
    }
    assert_eq!(reports.len(), cases.len());
    for report in reports {
        if report.case == JUDGES_THE_SERVER_CLOCK {
            println!(
                "server clock 1 % fast: {}: {:?}",
                report.case, report.outcome
            );
        }
        match &report.outcome {
            Outcome::Skipped(_)
                if report.case == "key_breaking_backend_rule_is_invalid_argument" => {}
            Outcome::Fail(failure) if report.case == JUDGES_THE_SERVER_CLOCK => assert!(
                report
                    .violations
                    .iter()
                    .all(|v| v.property == Property::Contract)
                    && failure.contains("before the TTL"),
                "{report:#?}"
            ),
            _ => report.assert_ok(),
        }
    }
}

/// With the server's clock 5 % fast, beyond the 2 % drift margin, a lease
/// expires on the server (at 95 % of the TTL) before its holder's
/// `valid_until` (98 %): a standby waiting in line is granted while the
/// crashed or cut-off holder still believes it leads, and both cases that
/// exercise expiry fail on exclusivity. A TTL of 1.5 s (a minimum the
/// server declares) makes the overlap some 40 ms, well above the
/// scheduling noise of a busy machine.
async fn a_server_clock_5pct_fast_breaks_exclusive_in_the_expiry_cases() {
    let mut caps = MemoryBackend::default_capabilities();
    caps.min_ttl = Duration::from_millis(1500);
    let fast = || -> Arc<dyn BackendFactory> {
        Arc::new(
            MemoryFactory::with_capabilities(caps.clone())
                .with_server_clock_rate(1.05)
                .named("memory-server-clock-5pct-fast"),
        )
    };
    for report in [
        suite::crashed_leader_taken_over_after_ttl(fast()).await,
        suite::partitioned_leader_steps_down_before_anyone_else_leads(fast()).await,
    ] {
        println!(
            "server clock 5 % fast: {}: {:?}",
            report.case, report.outcome
        );
        assert!(
            matches!(report.outcome, Outcome::Fail(_))
                && report
                    .violations
                    .iter()
                    .any(|v| v.property == Property::Exclusive && v.promised),
            "a server clock 5 % fast went unnoticed: {report:#?}"
        );
    }
}

#[path = "memory/elector_mutants.rs"]
mod elector_mutants;
