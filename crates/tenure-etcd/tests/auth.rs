//! etcd with authentication on: tokens that expire, and die on any
//! auth-store change. Every request of a candidate must survive both.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{a_holds_b_waits, Waiting, TTL};
use tenure_core::{Lease, LeaseBackend};
use tenure_etcd::EtcdBackend;
use tenure_testkit::harness::{Cluster, EtcdAuth, EtcdTokens};
use tokio::time::Instant;

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

/// An etcd issuing `tokens`, a leader (`a`, holding `key`) and a standby
/// waiting behind it, each logged in as root.
async fn leader_and_standby(
    tokens: EtcdTokens,
    key: &str,
) -> (Cluster, Arc<EtcdBackend>, Lease, Waiting) {
    let cluster = Cluster::start_etcd_with_auth(1, EtcdAuth::new(tokens))
        .await
        .expect("an auth-enabled etcd container");
    let (a, b) = (
        connect_as_root(&cluster).await,
        connect_as_root(&cluster).await,
    );
    let (lease, waiting) = a_holds_b_waits(&a, &b, key).await;
    (cluster, a, lease, waiting)
}

/// The leader resigns while the standby still waits: the standby, whose
/// every token came and went during the wait, must lead within 500 ms.
async fn standby_leads_at_once(a: &EtcdBackend, lease: &Lease, waiting: Waiting) {
    assert!(
        !waiting.is_finished(),
        "b's wait ended: {:?}",
        waiting.await
    );
    let released = Instant::now();
    a.release(lease).await.expect("a resigns");
    let (outcome, _) = tokio::time::timeout(Duration::from_secs(2), waiting)
        .await
        .expect("b's campaign ends")
        .unwrap();
    let took = released.elapsed();
    let granted = outcome.expect("b's campaign after its tokens lapsed");
    assert!(granted.granted().is_some(), "b leads");
    assert!(took < Duration::from_millis(500), "b took {took:?} to lead");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_standby_whose_token_lapsed_while_waiting_takes_over_at_once() {
    // Simple tokens are dropped after 3 s without use; a waiting standby
    // sends only keep-alives on an open stream, which do not use its token.
    let tokens = EtcdTokens::Simple {
        ttl: Duration::from_secs(3),
    };
    let (_cluster, a, mut lease, waiting) = leader_and_standby(tokens, "lapse").await;
    // b waits for 6 s (twice the token TTL) while a renews.
    let until = Instant::now() + Duration::from_secs(6);
    while Instant::now() < until {
        tokio::time::sleep(TTL / 3).await;
        lease = a.renew(&lease).await.expect("a renews");
    }
    standby_leads_at_once(&a, &lease, waiting).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_leader_keeps_leading_across_jwt_expiry_and_an_auth_store_change() {
    // JWTs expire 5 s after issue whatever their use, and a `user add`
    // makes every token issued before it stale ("revision of auth store is old").
    let tokens = EtcdTokens::Jwt {
        ttl: Duration::from_secs(5),
    };
    let (cluster, a, mut lease, waiting) = leader_and_standby(tokens, "jwt").await;
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
    standby_leads_at_once(&a, &lease, waiting).await;
}
