//! etcd with authentication on: tokens that expire, and die on any
//! auth-store change. Every request of a candidate must survive both.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{candidacy, hold, TTL};
use tenure_core::{AcquireMode, LeaseBackend};
use tenure_etcd::EtcdBackend;
use tenure_testkit::harness::{Cluster, EtcdAuth, EtcdTokens};
use tokio::time::Instant;

async fn auth_etcd(tokens: EtcdTokens) -> Cluster {
    Cluster::start_etcd_with_auth(1, EtcdAuth::new(tokens))
        .await
        .expect("an auth-enabled etcd container")
}

/// A backend that logs in as root.
async fn connect_as_root(cluster: &Cluster) -> Arc<EtcdBackend> {
    let auth = cluster.etcd_auth().expect("auth is on");
    let url = format!(
        "etcd://root:{}@{}/",
        auth.root_password,
        cluster.endpoints().join(",")
    );
    Arc::new(
        EtcdBackend::connect_url(&url)
            .await
            .expect("connect as root"),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_standby_whose_token_lapsed_while_waiting_takes_over_at_once() {
    // Simple tokens are dropped after 3 s without use; a waiting standby
    // sends only keep-alives on an open stream, which do not use its token.
    let cluster = auth_etcd(EtcdTokens::Simple {
        ttl: Duration::from_secs(3),
    })
    .await;
    let (a, b) = (
        connect_as_root(&cluster).await,
        connect_as_root(&cluster).await,
    );
    let mut lease = hold(&a, "lapse", "a").await;
    let waiting = {
        let b = b.clone();
        tokio::spawn(async move { b.acquire(&candidacy("lapse", "b"), AcquireMode::Wait).await })
    };
    // b waits for 6 s (twice the token TTL) while a renews.
    let until = Instant::now() + Duration::from_secs(6);
    while Instant::now() < until {
        tokio::time::sleep(TTL / 3).await;
        lease = a.renew(&lease).await.expect("a renews");
    }
    assert!(
        !waiting.is_finished(),
        "b's wait ended: {:?}",
        waiting.await
    );
    let released = Instant::now();
    a.release(&lease).await.expect("a resigns");
    let outcome = tokio::time::timeout(Duration::from_secs(2), waiting)
        .await
        .expect("b's campaign ends")
        .unwrap();
    let took = released.elapsed();
    let granted = outcome.expect("b's campaign after its token lapsed");
    assert!(granted.granted().is_some(), "b leads");
    assert!(took < Duration::from_millis(500), "b took {took:?} to lead");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_leader_keeps_leading_across_jwt_expiry_and_an_auth_store_change() {
    // JWTs expire 5 s after issue whatever their use, and a `user add`
    // makes every token issued before it stale ("revision of auth store is old").
    let cluster = auth_etcd(EtcdTokens::Jwt {
        ttl: Duration::from_secs(5),
    })
    .await;
    let (a, b) = (
        connect_as_root(&cluster).await,
        connect_as_root(&cluster).await,
    );
    let mut lease = hold(&a, "jwt", "a").await;
    let waiting = {
        let b = b.clone();
        tokio::spawn(async move { b.acquire(&candidacy("jwt", "b"), AcquireMode::Wait).await })
    };
    let started = Instant::now();
    let mut user_added = false;
    while started.elapsed() < Duration::from_secs(15) {
        if !user_added && started.elapsed() > Duration::from_secs(7) {
            cluster
                .etcdctl(0, &["user", "add", "auditor:auditor-pw"])
                .await
                .expect("etcdctl user add");
            user_added = true;
        }
        tokio::time::sleep(TTL / 3).await;
        lease = a.renew(&lease).await.unwrap_or_else(|e| {
            panic!(
                "a's renewal {:?} in (user added: {user_added}): {e}",
                started.elapsed()
            )
        });
    }
    assert!(user_added);
    assert!(
        !waiting.is_finished(),
        "b's wait ended: {:?}",
        waiting.await
    );
    let released = Instant::now();
    a.release(&lease).await.expect("a resigns");
    let outcome = tokio::time::timeout(Duration::from_secs(2), waiting)
        .await
        .expect("b's campaign ends")
        .unwrap();
    let took = released.elapsed();
    assert!(
        outcome.expect("b's campaign").granted().is_some(),
        "b leads"
    );
    assert!(took < Duration::from_millis(500), "b took {took:?} to lead");
}
