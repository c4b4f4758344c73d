//! Elections `a` and `a/b` are independent, though the prefix `a/` as a
//! range also holds `a/b`'s candidate keys `a/b/<lease id>`.

mod common;

use std::time::Duration;

use common::{
    candidacy, candidacy_with_ttl, client, etcd, hold, hold_with, key_of, next_event,
    wait_for_grant,
};
use tenure_core::{ElectionKey, LeaderEvent, Lease, LeaseBackend};
use tenure_etcd::EtcdBackend;

/// Holds `key` for a minute without renewing: long enough for the test.
async fn hold_long(backend: &EtcdBackend, key: &str, who: &str) -> Lease {
    hold_with(
        backend,
        &candidacy_with_ttl(key, who, Duration::from_secs(60)),
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_nested_election_neither_holds_nor_is_held_by_its_parent() {
    let cluster = etcd().await;
    let backend = client(&cluster).await;

    let _inner = hold(&backend, "outer/b", "inner").await;
    let mut watch = backend
        .watch(&ElectionKey::new("outer").unwrap())
        .await
        .unwrap();
    let first = next_event(&mut watch).await;
    assert_eq!(
        first,
        LeaderEvent::Vacant,
        "`outer` looks held while only `outer/b` is"
    );
    // Granted, though `outer/b` is held.
    let _outer = hold(&backend, "outer", "outer").await;
    let seen = next_event(&mut watch).await;
    assert_eq!(
        seen.leader().map(|l| l.identity.as_str()),
        Some("outer"),
        "{seen:?}"
    );

    // The other way round: a held parent leaves its child free.
    let _parent = hold(&backend, "parent", "parent").await;
    hold(&backend, "parent/b", "child").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_waiter_does_not_queue_behind_a_nested_elections_keys() {
    let cluster = etcd().await;
    let backend = client(&cluster).await;

    let first = hold_long(&backend, "queue", "first").await;
    // Several nested elections' keys between the leader's key and the waiter's.
    let mut nested = Vec::new();
    for i in 0..5 {
        nested.push(hold_long(&backend, &format!("queue/n{i}"), &format!("n{i}")).await);
    }
    let waiting = wait_for_grant(&backend, candidacy("queue", "second"));
    key_of(&backend, "queue/", "second").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "`second` led while `first` held");

    backend.release(&first).await.unwrap();
    let (outcome, _) = tokio::time::timeout(Duration::from_secs(2), waiting)
        .await
        .expect("`second` waits behind a nested election's key")
        .unwrap();
    let granted = outcome.unwrap().granted().expect("`second` leads");
    assert!(granted.is_valid());

    // The leader is found past a page of nested keys.
    let mut watch = backend
        .watch(&ElectionKey::new("queue").unwrap())
        .await
        .unwrap();
    let seen = next_event(&mut watch).await;
    assert_eq!(seen.leader().map(|l| l.identity.as_str()), Some("second"));
}
