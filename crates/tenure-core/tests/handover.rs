//! Stepping down: resign, drop, loss during `run`, shutdown.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{elector, key, settle};
use tenure_core::{Error, LossReason, MemoryBackend};
use tokio::time::Instant;

const TTL: Duration = Duration::from_secs(2);

#[tokio::test(start_paused = true)]
async fn resign_hands_over_to_the_standby_in_the_same_instant() {
    let server = MemoryBackend::new();
    let a = elector(&server.client(), "a", TTL);
    let b = elector(&server.client(), "b", TTL);
    let leader = a.campaign().await.unwrap();
    let a_term = leader.term();
    let standby = tokio::spawn(async move { b.campaign().await.map(|l| (Instant::now(), l)) });
    settle().await;
    assert_eq!(server.queue_len(&key()), 1);

    let resigned_at = Instant::now();
    leader.resign().await.unwrap();
    let (led_at, b_leads) = standby.await.unwrap().unwrap();
    assert_eq!(
        led_at, resigned_at,
        "the standby must lead without any time passing"
    );
    assert!(b_leads.token() > a_term.token());
    assert!(!a_term.is_valid());
    assert_eq!(a_term.ended(), Some(LossReason::Resigned));
}

#[tokio::test(start_paused = true)]
async fn dropping_leadership_releases_the_lease() {
    let server = MemoryBackend::new();
    let a = elector(&server.client(), "a", TTL);
    let leader = a.campaign().await.unwrap();
    let term = leader.term();
    let dropped_at = Instant::now();
    drop(leader);
    assert!(!term.is_valid(), "a dropped leadership is over at once");
    settle().await;
    assert!(server.holder(&key()).is_none());
    assert_eq!(server.stats().releases, 1);
    assert_eq!(Instant::now(), dropped_at);
}

#[tokio::test(start_paused = true)]
async fn crashed_leader_is_replaced_after_the_ttl_and_not_before() {
    let server = MemoryBackend::new();
    let a_client = server.client();
    let a = elector(&a_client, "a", TTL);
    let b = elector(&server.client(), "b", TTL);
    let leader = a.campaign().await.unwrap();
    let granted = Instant::now();
    // Crash: the link dies, nothing more reaches the server.
    a_client.faults().cut_off();
    let (b_at, b_leads) =
        tokio::spawn(async move { b.campaign().await.map(|l| (Instant::now(), l)) })
            .await
            .unwrap()
            .unwrap();
    // No renewal reached the server after the grant, so it expires the lease
    // at exactly grant + TTL, and hands it to b in that instant.
    assert_eq!(b_at - granted, TTL);
    // a gave up at its own deadline, before b was granted.
    assert!(!leader.is_valid());
    assert!(leader.valid_until() < b_at);
    assert!(b_leads.token() > leader.token());
}

#[tokio::test(start_paused = true)]
async fn run_cancels_the_work_when_leadership_is_lost_and_campaigns_again() {
    let server = MemoryBackend::new();
    let a = elector(&server.client(), "a", TTL);
    let started = Arc::new(AtomicUsize::new(0));
    let cancelled = Arc::new(AtomicUsize::new(0));
    struct Cancelled(Arc<AtomicUsize>);
    impl Drop for Cancelled {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    let runner = {
        let (a, started, cancelled) = (a.clone(), started.clone(), cancelled.clone());
        tokio::spawn(async move {
            a.run(move |leadership| {
                started.fetch_add(1, Ordering::SeqCst);
                let guard = Cancelled(cancelled.clone());
                async move {
                    let _guard = guard;
                    let _keep = leadership;
                    std::future::pending::<()>().await
                }
            })
            .await
        })
    };
    settle().await;
    assert_eq!(started.load(Ordering::SeqCst), 1);
    server.expire_now(&key());
    // The next renewal (1/3 TTL later) learns the lease is gone.
    tokio::time::sleep(TTL / 3 + Duration::from_millis(1)).await;
    assert_eq!(
        cancelled.load(Ordering::SeqCst),
        1,
        "work must be cancelled on loss"
    );
    assert_eq!(started.load(Ordering::SeqCst), 2, "run campaigns again");
    a.shutdown().await;
    runner.await.unwrap().unwrap();
    assert_eq!(cancelled.load(Ordering::SeqCst), 2);
    settle().await;
    assert!(server.holder(&key()).is_none(), "shutdown steps down");
}

#[tokio::test(start_paused = true)]
async fn shutdown_ends_a_pending_campaign_and_withdraws_it() {
    let server = MemoryBackend::new();
    let _leader = elector(&server.client(), "a", TTL)
        .campaign()
        .await
        .unwrap();
    let b = elector(&server.client(), "b", TTL);
    let pending = tokio::spawn({
        let b = b.clone();
        async move { b.campaign().await }
    });
    settle().await;
    assert_eq!(server.queue_len(&key()), 1);
    b.shutdown().await;
    assert!(matches!(pending.await.unwrap(), Err(Error::Shutdown)));
    assert_eq!(server.queue_len(&key()), 0);
}

#[tokio::test(start_paused = true)]
async fn resign_retries_a_failing_release_so_the_standby_need_not_wait_for_expiry() {
    let server = MemoryBackend::new();
    let a_client = server.client();
    let a = elector(&a_client, "a", TTL);
    let b = elector(&server.client(), "b", TTL);
    let leader = a.campaign().await.unwrap();
    let standby = tokio::spawn(async move { b.campaign().await.map(|l| (Instant::now(), l)) });
    settle().await;
    // The link fails for 100 ms, then comes back.
    a_client.faults().fail_calls(true);
    let healer = {
        let a_client = a_client.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            a_client.faults().fail_calls(false);
        })
    };
    let resigned_at = Instant::now();
    leader
        .resign()
        .await
        .expect("the release succeeds once the link is back");
    let (led_at, _b) = standby.await.unwrap().unwrap();
    healer.await.unwrap();
    // Release retries back off with full jitter (caps 10, 20, 40 .. ms, at
    // most TTL/4): the retry after the link is back comes within TTL/4,
    // long before the lease would expire.
    assert!(led_at - resigned_at < TTL / 4, "{:?}", led_at - resigned_at);
    assert!(led_at - resigned_at >= Duration::from_millis(100));
}
