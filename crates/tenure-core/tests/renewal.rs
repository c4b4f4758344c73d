//! The renewer: cadence, drift margin, and abdication at the local deadline.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{elector, key, settle};
use tenure_core::{Elector, LossReason, MemoryBackend, RenewOn};
use tokio::time::{advance, Instant};

const TTL: Duration = Duration::from_secs(3);

#[tokio::test(start_paused = true)]
async fn renews_every_third_of_the_ttl() {
    let server = MemoryBackend::new();
    let leadership = elector(&server, "a", TTL).campaign().await.unwrap();
    // Renewals at 1 s, 2 s, ..., 10 s (paused time auto-advances while idle).
    tokio::time::sleep(Duration::from_millis(10_500)).await;
    assert_eq!(server.stats().renewals, 10);
    assert!(leadership.is_valid());
}

#[tokio::test(start_paused = true)]
async fn jittered_renewals_stay_within_ten_percent() {
    let server = MemoryBackend::new();
    let elector = Elector::builder(Arc::new(server.clone()))
        .key(common::KEY)
        .identity("a")
        .ttl(TTL)
        .renew_on(RenewOn::CurrentRuntime)
        .build()
        .unwrap();
    let leadership = elector.campaign().await.unwrap();
    let mut last = Instant::now();
    let mut gaps = Vec::new();
    while gaps.len() < 30 {
        let before = server.stats().renewals;
        tokio::time::sleep(Duration::from_millis(10)).await;
        if server.stats().renewals > before {
            gaps.push(Instant::now() - last);
            last = Instant::now();
        }
    }
    for gap in &gaps {
        assert!(
            *gap >= Duration::from_millis(890) && *gap <= Duration::from_millis(1110),
            "{gaps:?}"
        );
    }
    assert!(
        gaps.iter().any(|g| *g != gaps[0]),
        "no jitter at all: {gaps:?}"
    );
    drop(leadership);
}

#[tokio::test(start_paused = true)]
async fn valid_until_is_send_time_plus_ttl_minus_drift_margin() {
    let server = MemoryBackend::new();
    let elector = Elector::builder(Arc::new(server.clone()))
        .key(common::KEY)
        .identity("a")
        .ttl(TTL)
        .drift_margin(Duration::from_millis(250))
        .renew_jitter(0.0)
        .renew_on(RenewOn::CurrentRuntime)
        .build()
        .unwrap();
    // A slow request: the deadline still counts from when it was sent.
    server.faults().delay_requests(Duration::from_millis(400));
    let sent = Instant::now();
    let leadership = elector.try_acquire().await.unwrap().expect("vacant");
    assert_eq!(
        leadership.valid_until(),
        sent + TTL - Duration::from_millis(250)
    );
    // The default margin is TTL/50.
    let other = MemoryBackend::new();
    let sent = Instant::now();
    let leadership = elector_for(&other).campaign().await.unwrap();
    assert_eq!(leadership.valid_until(), sent + TTL - TTL / 50);
}

fn elector_for(server: &MemoryBackend) -> Elector {
    elector(server, "b", TTL)
}

#[tokio::test(start_paused = true)]
async fn renewal_moves_the_deadline_from_its_own_send_time() {
    let server = MemoryBackend::new();
    let leadership = elector(&server, "a", TTL).campaign().await.unwrap();
    let first = leadership.valid_until();
    server.faults().delay_responses(Duration::from_millis(300));
    // First renewal is sent at 1 s and answered at 1.3 s.
    tokio::time::sleep(Duration::from_millis(1_400)).await;
    assert_eq!(leadership.valid_until(), first + Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn abdicates_exactly_at_valid_until_when_renewals_fail() {
    let server = MemoryBackend::new();
    let leadership = elector(&server, "a", TTL).campaign().await.unwrap();
    let deadline = leadership.valid_until();
    server.faults().fail_calls(true);
    let reason = leadership.lost().await;
    assert_eq!(reason, LossReason::Expired);
    assert_eq!(
        Instant::now(),
        deadline,
        "lost() must fire at valid_until, not later"
    );
    assert!(!leadership.is_valid());
    // The server still holds the lease: we gave up before it could be granted elsewhere.
    assert!(server.holder(&key()).is_some());
    assert_eq!(server.stats().renewals, 0);
}

#[tokio::test(start_paused = true)]
async fn stays_lost_even_if_a_late_renewal_succeeds() {
    let server = MemoryBackend::new();
    let leadership = elector(&server, "a", TTL).campaign().await.unwrap();
    let term = leadership.term();
    let deadline = leadership.valid_until();
    // Renewal hangs in a blackholed link...
    server.faults().cut_off();
    assert_eq!(term.lost().await, LossReason::Expired);
    assert_eq!(Instant::now(), deadline);
    // ...and the link comes back before the server expired the lease.
    server.faults().heal();
    settle().await;
    assert!(!term.is_valid());
    assert_eq!(term.ended(), Some(LossReason::Expired));
    // The renewer frees the key it no longer believes it holds.
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert!(server.holder(&key()).is_none());
}

#[tokio::test(start_paused = true)]
async fn lease_lost_from_the_backend_ends_the_term_as_revoked() {
    let server = MemoryBackend::new();
    let leadership = elector(&server, "a", TTL).campaign().await.unwrap();
    server.expire_now(&key());
    let started = Instant::now();
    assert_eq!(leadership.lost().await, LossReason::Revoked);
    // Noticed at the next renewal, 1 s after the grant.
    assert_eq!(Instant::now() - started, Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn a_record_deleted_out_of_band_ends_the_term_at_once_not_at_the_next_renewal() {
    let server = MemoryBackend::new();
    let leadership = elector(&server, "a", TTL).campaign().await.unwrap();
    let started = Instant::now();
    server.wipe(&key()); // the holder's record deleted, as `etcdctl del` would
    assert_eq!(leadership.lost().await, LossReason::Deleted);
    // The clock is paused: no renewal (due 1 s after the grant) has run.
    assert_eq!(Instant::now() - started, Duration::ZERO);
    assert_eq!(server.stats().renewals, 0);
    assert!(!leadership.is_valid());
    assert!(
        leadership.cancellation_token().is_cancelled(),
        "the leader's work is told at once"
    );
}

#[tokio::test(start_paused = true)]
async fn a_lease_whose_record_is_wiped_is_not_valid_at_once() {
    use tenure_core::{AcquireMode, LeaseBackend};
    let server = MemoryBackend::new();
    let lease = server
        .acquire(&common::candidacy("a", TTL), AcquireMode::Once)
        .await
        .unwrap()
        .granted()
        .unwrap();
    assert!(lease.is_valid());
    server.wipe(&key());
    assert!(!lease.is_valid());
    assert_eq!(lease.signalled_loss(), Some(LossReason::Deleted));
}

#[tokio::test(start_paused = true)]
async fn a_renewal_after_another_candidate_took_the_key_ends_the_term_as_taken_over() {
    let server = MemoryBackend::new();
    let leadership = elector(&server, "a", TTL).campaign().await.unwrap();
    server.expire_now(&key());
    let b = elector(&server, "b", TTL).campaign().await.unwrap();
    assert_eq!(leadership.lost().await, LossReason::TakenOver);
    assert!(b.is_valid());
}

#[tokio::test(start_paused = true)]
async fn shutdown_ends_the_term_as_shutdown_not_resigned() {
    let server = MemoryBackend::new();
    let a = elector(&server, "a", TTL);
    let leadership = a.campaign().await.unwrap();
    a.shutdown().await;
    assert_eq!(leadership.ended(), Some(LossReason::Shutdown));
    assert_eq!(
        a.health().last_loss.map(|(reason, _)| reason),
        Some(LossReason::Shutdown)
    );
}

#[tokio::test(start_paused = true)]
async fn transient_renewal_failures_are_retried_and_leadership_survives() {
    let server = MemoryBackend::new();
    let leadership = elector(&server, "a", TTL).campaign().await.unwrap();
    server.faults().fail_calls(true);
    advance(Duration::from_millis(1_500)).await;
    settle().await;
    assert!(leadership.is_valid());
    server.faults().fail_calls(false);
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(leadership.is_valid());
    assert!(server.stats().renewals >= 5);
}
