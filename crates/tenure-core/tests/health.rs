//! `Health::check`: the liveness verdict, on a paused clock.

mod common;

use std::time::Duration;

use common::elector;
use tenure_core::{Error, LossReason, MemoryBackend};
use tokio::time::{sleep, Instant};

const TTL: Duration = Duration::from_secs(3);
/// Below the TTL: flags a leader whose renewals fail before it abdicates.
const BOUND: Duration = Duration::from_millis(1_500);

#[tokio::test(start_paused = true)]
async fn a_follower_is_healthy() {
    let server = MemoryBackend::new();
    let a = elector(&server, "a", TTL);
    let b = elector(&server, "b", TTL);
    let leadership = a.campaign().await.unwrap();
    let campaign = tokio::spawn(async move {
        let _leadership = b.campaign().await;
    });
    // Long after any renewal of b's (it has none): b is still healthy.
    sleep(TTL * 2).await;
    let health = elector(&server, "c", TTL).health();
    assert!(!health.is_leader);
    assert_eq!(health.check(Duration::ZERO), Ok(()));
    drop(leadership);
    campaign.abort();
}

#[tokio::test(start_paused = true)]
async fn a_leader_with_fresh_renewals_is_healthy() {
    let server = MemoryBackend::new();
    let a = elector(&server, "a", TTL);
    let leadership = a.campaign().await.unwrap();
    for _ in 0..10 {
        sleep(Duration::from_millis(700)).await;
        let health = a.health();
        assert!(health.is_leader);
        assert_eq!(health.check(BOUND), Ok(()), "{health:?}");
    }
    assert!(leadership.is_valid());
}

#[tokio::test(start_paused = true)]
async fn a_leader_whose_renewals_fail_is_unhealthy_once_the_bound_passes() {
    let server = MemoryBackend::new();
    let a = elector(&server, "a", TTL);
    let leadership = a.campaign().await.unwrap();
    let granted = Instant::now();
    server.faults().fail_calls(true);

    tokio::time::sleep_until(granted + BOUND - Duration::from_millis(100)).await;
    let health = a.health();
    assert!(health.is_leader);
    assert_eq!(health.check(BOUND), Ok(()), "not yet past the bound");
    let (error, _) = health.last_error.expect("the failed renewal");
    assert!(matches!(*error, Error::Unavailable { .. }), "{error:?}");

    tokio::time::sleep_until(granted + BOUND + Duration::from_millis(100)).await;
    let unhealthy = a.health().check(BOUND).unwrap_err();
    assert_eq!(unhealthy.max_renewal_age, BOUND);
    assert_eq!(
        unhealthy.since_last_renewal,
        Some(BOUND + Duration::from_millis(100))
    );
    let text = unhealthy.to_string();
    assert!(text.contains("1.6s") && text.contains("1.5s"), "{text}");

    // At its deadline the term ends by itself: a follower again, healthy.
    assert_eq!(leadership.lost().await, LossReason::Expired);
    tokio::task::yield_now().await;
    let health = a.health();
    assert!(!health.is_leader);
    assert_eq!(health.check(BOUND), Ok(()));
}
