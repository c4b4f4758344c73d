//! `Elector::observe`: who leads, as a stream that survives backend errors.

mod common;

use std::time::Duration;

use common::{elector, settle};
use futures::StreamExt;
use tenure_core::{LeaderEvent, MemoryBackend};

const TTL: Duration = Duration::from_secs(2);

fn leader(event: &LeaderEvent) -> Option<&str> {
    event.leader().map(|l| l.identity.as_str())
}

#[tokio::test(start_paused = true)]
async fn observe_reports_each_new_leader_and_vacancy() {
    let server = MemoryBackend::new();
    let watcher = elector(&server.client(), "watcher", TTL);
    let mut seen = watcher.observe();
    assert_eq!(seen.next().await.as_ref().and_then(leader), None);
    let a = elector(&server.client(), "a", TTL)
        .campaign()
        .await
        .unwrap();
    assert_eq!(seen.next().await.as_ref().and_then(leader), Some("a"));
    a.resign().await.unwrap();
    assert_eq!(seen.next().await, Some(LeaderEvent::Vacant));
    let _b = elector(&server.client(), "b", TTL)
        .campaign()
        .await
        .unwrap();
    assert_eq!(seen.next().await.as_ref().and_then(leader), Some("b"));
}

#[tokio::test(start_paused = true)]
async fn observe_rewatches_after_errors_and_ends_at_shutdown() {
    let server = MemoryBackend::new();
    let watcher_client = server.client();
    let watcher = elector(&watcher_client, "watcher", TTL);
    watcher_client.faults().fail_calls(true);
    let mut seen = watcher.observe();
    let _a = elector(&server.client(), "a", TTL)
        .campaign()
        .await
        .unwrap();
    // The first watch attempts fail; once the link works the current leader is reported.
    let next = tokio::spawn(async move {
        let event = seen.next().await;
        (event, seen)
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !next.is_finished(),
        "nothing can be observed while every call fails"
    );
    watcher_client.faults().fail_calls(false);
    let (event, mut seen) = next.await.unwrap();
    assert_eq!(event.as_ref().and_then(leader), Some("a"));
    watcher.shutdown().await;
    settle().await;
    assert_eq!(seen.next().await, None);
}

#[tokio::test(start_paused = true)]
async fn observe_outlives_the_elector_it_came_from() {
    let server = MemoryBackend::new();
    let mut seen = elector(&server.client(), "watcher", TTL).observe();
    assert_eq!(seen.next().await, Some(LeaderEvent::Vacant));
    let _a = elector(&server.client(), "a", TTL)
        .campaign()
        .await
        .unwrap();
    assert_eq!(seen.next().await.as_ref().and_then(leader), Some("a"));
}
