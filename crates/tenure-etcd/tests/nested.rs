//! Elections `a` and `a/b` are independent, though the prefix `a/` as a
//! range also holds `a/b`'s candidate keys `a/b/<lease id>`.

mod common;

use std::time::Duration;

use common::{candidacy, connect, etcd, hold, key_of};
use futures::StreamExt;
use tenure_core::{
    AcquireMode, Acquisition, Candidacy, CandidateId, ElectionKey, LeaderEvent, Lease, LeaseBackend,
};
use tenure_etcd::{EtcdBackend, EtcdOptions};

/// Holds `key` for a minute without renewing: long enough for the test.
async fn hold_long(backend: &EtcdBackend, key: &str, who: &str) -> Lease {
    let candidacy = Candidacy::new(
        ElectionKey::new(key).unwrap(),
        CandidateId::new(who).unwrap(),
        Duration::from_secs(60),
    )
    .unwrap();
    match backend
        .acquire(&candidacy, AcquireMode::Once)
        .await
        .unwrap()
    {
        Acquisition::Granted(lease) => lease,
        Acquisition::Held(h) => panic!("{key} is held by {h:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_nested_election_neither_holds_nor_is_held_by_its_parent() {
    let cluster = etcd().await;
    let backend = connect(&cluster, EtcdOptions::default()).await;

    let _inner = hold(&backend, "outer/b", "inner").await;
    let mut watch = backend
        .watch(&ElectionKey::new("outer").unwrap())
        .await
        .unwrap();
    let first = watch.next().await.expect("a first observation").unwrap();
    assert_eq!(
        first,
        LeaderEvent::Vacant,
        "`outer` looks held while only `outer/b` is"
    );
    let outer = backend
        .acquire(&candidacy("outer", "outer"), AcquireMode::Once)
        .await
        .unwrap();
    assert!(
        outer.granted().is_some(),
        "`outer` was refused while only `outer/b` is held"
    );
    let seen = tokio::time::timeout(Duration::from_secs(5), watch.next())
        .await
        .expect("the watch sees `outer` taken")
        .unwrap()
        .unwrap();
    assert_eq!(
        seen.leader().map(|l| l.identity.as_str()),
        Some("outer"),
        "{seen:?}"
    );

    // The other way round: a held parent leaves its child free.
    let _parent = hold(&backend, "parent", "parent").await;
    let child = backend
        .acquire(&candidacy("parent/b", "child"), AcquireMode::Once)
        .await
        .unwrap();
    assert!(child.granted().is_some(), "`parent/b` was refused");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_waiter_does_not_queue_behind_a_nested_elections_keys() {
    let cluster = etcd().await;
    let backend = connect(&cluster, EtcdOptions::default()).await;

    let first = hold_long(&backend, "queue", "first").await;
    // Several nested elections' keys between the leader's key and the waiter's.
    let mut nested = Vec::new();
    for i in 0..5 {
        nested.push(hold_long(&backend, &format!("queue/n{i}"), &format!("n{i}")).await);
    }
    let waiting = {
        let backend = backend.clone();
        tokio::spawn(async move {
            backend
                .acquire(&candidacy("queue", "second"), AcquireMode::Wait)
                .await
        })
    };
    key_of(&backend, "queue/", "second").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "`second` led while `first` held");

    backend.release(&first).await.unwrap();
    let granted = tokio::time::timeout(Duration::from_secs(2), waiting)
        .await
        .expect("`second` waits behind a nested election's key")
        .unwrap()
        .unwrap()
        .granted()
        .expect("`second` leads");
    assert!(granted.is_valid());

    // The leader is found past a page of nested keys.
    let mut watch = backend
        .watch(&ElectionKey::new("queue").unwrap())
        .await
        .unwrap();
    let seen = watch.next().await.unwrap().unwrap();
    assert_eq!(seen.leader().map(|l| l.identity.as_str()), Some("second"));
}
