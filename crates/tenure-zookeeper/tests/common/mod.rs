//! A real ZooKeeper in a container for tenure-zookeeper's own tests.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use tenure_core::{Candidacy, Lease};
use tenure_testkit::harness::{Cluster, Topology};
use tenure_zookeeper::zookeeper_client::Client;
use tenure_zookeeper::{ZooKeeperBackend, ZooKeeperOptions};

/// The session timeout, and so the TTL (the harness runs a 200 ms tickTime).
pub const TTL: Duration = Duration::from_secs(1);

/// The harness's servers' tickTime.
pub const TICK: Duration = Duration::from_millis(200);

pub async fn zookeeper() -> Cluster {
    Cluster::start(Topology::ZooKeeper { nodes: 1 })
        .await
        .expect("ZooKeeper container")
}

/// A 1-node ZooKeeper and two backends of it, each a session of its own.
pub async fn two_sessions() -> (Cluster, Arc<ZooKeeperBackend>, Arc<ZooKeeperBackend>) {
    let cluster = zookeeper().await;
    let (a, b) = (connect(&cluster).await, connect(&cluster).await);
    (cluster, a, b)
}

/// A 3-node ensemble, once it has a leader, and which node that is.
pub async fn ensemble() -> (Cluster, usize) {
    let cluster = Cluster::start(Topology::ZooKeeper { nodes: 3 })
        .await
        .expect("ZooKeeper ensemble");
    let leader = cluster
        .await_leader(Duration::from_secs(30), |_| true)
        .await
        .unwrap();
    (cluster, leader)
}

pub fn options() -> ZooKeeperOptions {
    ZooKeeperOptions::default()
        .with_session_timeout(TTL)
        .with_tick_time(TICK)
}

pub async fn connect(cluster: &Cluster) -> Arc<ZooKeeperBackend> {
    connect_to(&cluster.endpoints().join(",")).await
}

pub async fn connect_to(connect_string: &str) -> Arc<ZooKeeperBackend> {
    Arc::new(
        ZooKeeperBackend::connect(connect_string, options())
            .await
            .expect("connect"),
    )
}

pub fn candidacy(key: &str, identity: &str) -> Candidacy {
    Candidacy::parse(key, identity, TTL).unwrap()
}

/// A plain client of its own session, for looking and meddling.
pub async fn plain(cluster: &Cluster) -> Client {
    Client::connector()
        .with_session_timeout(Duration::from_secs(5))
        .connect(&cluster.endpoints().join(","))
        .await
        .expect("plain client")
}

/// The children of an election node, sorted by name.
pub async fn children(client: &Client, path: &str) -> Vec<String> {
    let mut c = client.list_children(path).await.unwrap_or_default();
    c.sort();
    c
}

/// A candidacy with its own TTL (which must be its backend's session timeout).
pub fn candidacy_with_ttl(key: &str, identity: &str, ttl: Duration) -> Candidacy {
    Candidacy::parse(key, identity, ttl).unwrap()
}

/// Takes the lease at once, or panics naming who holds it.
pub async fn hold(backend: &ZooKeeperBackend, candidacy: &Candidacy) -> Lease {
    tenure_testkit::acquire::granted(backend, candidacy).await
}

pub use tenure_testkit::acquire::Waiting;

/// Starts the waiting acquire of `candidacy`.
pub fn wait_for_grant(backend: &Arc<ZooKeeperBackend>, candidacy: Candidacy) -> Waiting {
    tenure_testkit::acquire::waiting(backend.clone(), candidacy)
}

/// Waits at most `within` for a waiting acquire to end, which must be with
/// a retryable error (`whose` names the candidacy).
pub async fn ends_retryably(waiting: Waiting, within: Duration, whose: &str) {
    let (outcome, _) = tokio::time::timeout(within, waiting)
        .await
        .unwrap_or_else(|_| panic!("{whose} still waits after {within:?}"))
        .unwrap();
    match outcome {
        Err(e) => assert!(e.is_retryable(), "{e}"),
        Ok(acquisition) => panic!("{whose} got {acquisition:?}"),
    }
}

/// The children of an election node owned by `session`.
pub async fn owned_by(client: &Client, path: &str, session: i64) -> Vec<String> {
    let mut owned = Vec::new();
    for name in children(client, path).await {
        if let Ok((_, stat)) = client.get_data(&format!("{path}/{name}")).await {
            if stat.ephemeral_owner == session {
                owned.push(name);
            }
        }
    }
    owned
}

/// Waits until the election node has `n` children.
pub async fn until_children(client: &Client, path: &str, n: usize) {
    until_children_within(client, path, n, Duration::from_secs(10)).await;
}

/// Waits at most `within` until the election node has `n` children.
pub async fn until_children_within(client: &Client, path: &str, n: usize, within: Duration) {
    tenure_testkit::harness::wait_for(format!("{n} children of {path}"), within, || async move {
        (children(client, path).await.len() == n).then_some(())
    })
    .await
    .unwrap();
}
