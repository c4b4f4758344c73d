//! The lessons etcd's own users paid for, each as a test against a real etcd.

mod common;

use std::time::Duration;

use common::{candidacy, connect, connect_proxied, etcd, hold, key_of, keys, TTL};
use tenure_conformance::{Link, LinkFault};
use tenure_core::{AcquireMode, Acquisition, Error, LeaseBackend};
use tenure_etcd::EtcdOptions;
use tokio::time::Instant;

#[tokio::test(flavor = "multi_thread")]
async fn key_layout_and_token_match_concurrency_election() {
    let cluster = etcd().await;
    let a = connect(&cluster, EtcdOptions::default()).await;
    let lease = hold(&a, "layout", "replica-a").await;
    let found = keys(&a, "layout/").await;
    assert_eq!(found.len(), 1);
    let (key, value, create_revision) = &found[0];
    // `<election>/<lease id in hex>`, value = identity, token = create revision.
    let suffix = key.strip_prefix("layout/").expect("prefix");
    assert!(i64::from_str_radix(suffix, 16).is_ok(), "{key}");
    assert_eq!(value, "replica-a");
    assert_eq!(
        lease.token().map(|t| t.get() as i64),
        Some(*create_revision)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_waiting_campaign_keeps_its_lease_alive_for_longer_than_the_ttl() {
    let cluster = etcd().await;
    let (a, b) = (
        connect(&cluster, EtcdOptions::default()).await,
        connect(&cluster, EtcdOptions::default()).await,
    );
    let lease = hold(&a, "patience", "a").await;
    let waiting = {
        let b = b.clone();
        tokio::spawn(async move {
            b.acquire(&candidacy("patience", "b"), AcquireMode::Wait)
                .await
        })
    };
    // Hold for three TTLs, renewing; b's candidate key must survive the wait.
    let mut lease = lease;
    for _ in 0..9 {
        tokio::time::sleep(TTL / 3).await;
        lease = a.renew(&lease).await.unwrap();
    }
    assert_eq!(
        keys(&a, "patience/").await.len(),
        2,
        "b's key expired while it waited"
    );
    let released = Instant::now();
    a.release(&lease).await.unwrap();
    let granted = waiting.await.unwrap().unwrap().granted().expect("b leads");
    assert!(granted.is_valid());
    assert!(released.elapsed() < Duration::from_secs(1));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_campaign_whose_key_vanished_while_waiting_does_not_claim_leadership() {
    let cluster = etcd().await;
    let (a, b) = (
        connect(&cluster, EtcdOptions::default()).await,
        connect(&cluster, EtcdOptions::default()).await,
    );
    let lease = hold(&a, "vanish", "a").await;
    let waiting = {
        let b = b.clone();
        tokio::spawn(async move {
            b.acquire(&candidacy("vanish", "b"), AcquireMode::Wait)
                .await
        })
    };
    let b_key = loop {
        if let Some((k, _, _)) = keys(&a, "vanish/")
            .await
            .into_iter()
            .find(|(_, v, _)| v == "b")
        {
            break k;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // Someone deletes b's candidate key by hand (or its lease expired during an outage).
    a.client().kv_client().delete(b_key, None).await.unwrap();
    a.release(&lease).await.unwrap();
    let outcome = waiting.await.unwrap();
    assert!(
        matches!(outcome, Err(ref e) if e.is_retryable()),
        "must not lead on a vanished key: {:?}",
        outcome.map(|a| a.granted().is_some())
    );
    assert!(keys(&a, "vanish/").await.is_empty(), "nothing left behind");
}

#[tokio::test(flavor = "multi_thread")]
async fn release_never_deletes_a_key_it_did_not_create() {
    let cluster = etcd().await;
    let a = connect(&cluster, EtcdOptions::default()).await;
    let lease = hold(&a, "guarded", "a").await;
    let (key, _, _) = keys(&a, "guarded/").await.remove(0);
    // The key is deleted and recreated by someone else under the same name.
    a.client()
        .kv_client()
        .delete(key.clone(), None)
        .await
        .unwrap();
    a.client()
        .kv_client()
        .put(key.clone(), "someone-else", None)
        .await
        .unwrap();
    // Renewing notices the key is no longer ours, though our lease lives.
    assert!(matches!(
        a.renew(&lease).await,
        Err(Error::LeaseLost { .. })
    ));
    a.release(&lease).await.unwrap();
    let left = keys(&a, "guarded/").await;
    assert_eq!(left.len(), 1, "release deleted by name: {left:?}");
    assert_eq!(left[0].1, "someone-else");
    // After release, renewal is refused as well.
    assert!(matches!(
        a.renew(&lease).await,
        Err(Error::LeaseLost { .. })
    ));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_waiting_campaign_outlives_the_request_timeout() {
    let cluster = etcd().await;
    let short = EtcdOptions::default().with_request_timeout(Duration::from_millis(300));
    let (a, b) = (
        connect(&cluster, EtcdOptions::default()).await,
        connect(&cluster, short).await,
    );
    let lease = hold(&a, "slow", "a").await;
    let waiting = {
        let b = b.clone();
        tokio::spawn(async move { b.acquire(&candidacy("slow", "b"), AcquireMode::Wait).await })
    };
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!waiting.is_finished(), "the wait ended early");
    let lease = a.renew(&lease).await.unwrap();
    a.release(&lease).await.unwrap();
    assert!(waiting.await.unwrap().unwrap().granted().is_some());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dropped_campaign_leaves_no_key_behind() {
    let cluster = etcd().await;
    let (a, b) = (
        connect(&cluster, EtcdOptions::default()).await,
        connect(&cluster, EtcdOptions::default()).await,
    );
    let lease = hold(&a, "dropped", "a").await;
    let b_wants = candidacy("dropped", "b");
    let attempt = b.acquire(&b_wants, AcquireMode::Wait);
    assert!(tokio::time::timeout(Duration::from_millis(300), attempt)
        .await
        .is_err());
    tenure_conformance::harness::wait_for("b's key withdrawn", Duration::from_secs(2), || {
        let a = a.clone();
        async move { (keys(&a, "dropped/").await.len() == 1).then_some(()) }
    })
    .await
    .unwrap();
    a.release(&lease).await.unwrap();
    assert!(keys(&a, "dropped/").await.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_ttl_below_the_servers_minimum_is_refused_and_leaves_nothing() {
    let cluster = etcd().await;
    let a = connect(&cluster, EtcdOptions::default()).await;
    // The harness runs etcd with a 50 ms heartbeat and a 500 ms election
    // timeout, so its minimum lease TTL is 1 s: 1 s works. Sub-second TTLs
    // are refused before any request by the 1 s granularity.
    let c = tenure_core::Candidacy::new(
        tenure_core::ElectionKey::new("tiny").unwrap(),
        tenure_core::CandidateId::new("a").unwrap(),
        Duration::from_millis(500),
    )
    .unwrap();
    assert!(matches!(
        a.acquire(&c, AcquireMode::Once).await,
        Err(Error::InvalidArgument { field: "ttl", .. })
    ));
    assert!(keys(&a, "tiny/").await.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_waiter_whose_key_went_after_its_predecessor_does_not_claim_from_history() {
    // A leads, B waits on A, C waits on B. A's key goes, then B's (by hand,
    // `etcdctl lease revoke`, or etcd#15247's stalled leader), before B has
    // heard of A's going: B's answers are slow. Read as of A's deletion, B's
    // key was there and first in line; it is not there now, and C leads.
    let cluster = etcd().await;
    let (a, c) = (
        connect(&cluster, EtcdOptions::default()).await,
        connect(&cluster, EtcdOptions::default()).await,
    );
    let (b, b_link) = connect_proxied(&cluster, EtcdOptions::default()).await;
    let lease_a = hold(&a, "history", "a").await;
    let b_waits = {
        let b = b.clone();
        tokio::spawn(async move {
            let outcome = b
                .acquire(&candidacy("history", "b"), AcquireMode::Wait)
                .await;
            (Instant::now(), outcome)
        })
    };
    let b_key = key_of(&a, "history/", "b").await;
    let c_waits = {
        let c = c.clone();
        tokio::spawn(async move {
            let outcome = c
                .acquire(&candidacy("history", "c"), AcquireMode::Wait)
                .await;
            (Instant::now(), outcome)
        })
    };
    key_of(&a, "history/", "c").await;
    // Let both watches settle on their predecessors.
    tokio::time::sleep(Duration::from_millis(300)).await;

    b_link
        .set(LinkFault::Delay(Duration::from_millis(600)))
        .await
        .unwrap();
    a.release(&lease_a).await.unwrap();
    a.client().kv_client().delete(b_key, None).await.unwrap();
    let deleted_at = Instant::now();

    let (c_led_at, c_outcome) = c_waits.await.unwrap();
    let c_lease = c_outcome
        .expect("c's campaign")
        .granted()
        .expect("c leads once a and b are gone");
    // c renews, as its Elector would.
    let (c_valid_until, c_valid_rx) = tokio::sync::watch::channel(c_lease.valid_until());
    let c_renews = {
        let c = c.clone();
        tokio::spawn(async move {
            let mut lease = c_lease;
            loop {
                tokio::time::sleep(TTL / 3).await;
                lease = c.renew(&lease).await.expect("c renews");
                c_valid_until.send_replace(lease.valid_until());
            }
        })
    };
    let (b_ended_at, b_outcome) = b_waits.await.unwrap();
    c_renews.abort();
    match b_outcome {
        Ok(Acquisition::Granted(b_lease)) => {
            let since = |t: Instant| t.saturating_duration_since(deleted_at);
            let c_until = *c_valid_rx.borrow();
            panic!(
                "two leaders: b was granted on a key that was gone, while c led \
                 (times from b's key's deletion: b granted at {:?}, valid until {:?}; \
                 c granted at {:?}, valid until at least {:?})",
                since(b_ended_at),
                since(b_lease.valid_until()),
                since(c_led_at),
                since(c_until),
            )
        }
        Ok(Acquisition::Held(holder)) => panic!("a waiting campaign reported {holder:?}"),
        Err(error) => assert!(error.is_retryable(), "{error}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_renewal_never_takes_an_abandoned_renewals_answer_as_its_own() {
    let cluster = etcd().await;
    let (a, link) = connect_proxied(&cluster, EtcdOptions::default()).await;
    let lease = hold(&a, "abandoned", "a").await;
    // The first renewal opens the keep-alive stream.
    let lease = a.renew(&lease).await.unwrap();

    let round_trip = Duration::from_millis(800);
    link.set(LinkFault::Delay(round_trip)).await.unwrap();
    // A renewal given up after its keep-alive went out (its caller timed out
    // or was dropped): the answer still comes, later.
    let abandoned = tokio::time::timeout(round_trip / 4, a.renew(&lease)).await;
    assert!(abandoned.is_err(), "the renewal beat the delay");
    tokio::time::sleep(round_trip * 3 / 2).await;

    // The next renewal: one keep-alive round trip, then one read of our key.
    let started = Instant::now();
    let renewed = a.renew(&lease).await.expect("the lease lives");
    let took = started.elapsed();
    assert!(
        took >= round_trip * 2,
        "the renewal took {took:?}, less than its own keep-alive and key check \
         ({:?}): it took the abandoned renewal's answer as its own",
        round_trip * 2
    );
    assert!(renewed.is_valid());
}
