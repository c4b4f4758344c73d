//! The conformance suite on the in-process memory backend: one test per
//! case, faults through the memory backend's knobs and its simulated
//! 3-node cluster, candidate processes through its TCP front. Report:
//! `target/conformance/memory.md`.

use std::sync::Arc;
use std::time::Duration;

use tenure_conformance::{suite, MemoryFactory, Outcome};
use tenure_core::{Capabilities, KeyRule};

tenure_conformance::conformance_tests!(
    MemoryFactory::new().with_candidate(env!("CARGO_BIN_EXE_tenure-candidate"))
);

/// The input cases that need a stricter backend than the default memory
/// one (a key rule, a TTL minimum and granularity, a short key limit) run
/// against a memory server that declares and enforces such limits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
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
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
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
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
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
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
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
