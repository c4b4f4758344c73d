//! A real ZooKeeper in a container for tenure-zookeeper's own tests.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use tenure_core::{AcquireMode, Acquisition, Candidacy, Lease, LeaseBackend};
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
    match backend.acquire(candidacy, AcquireMode::Once).await.unwrap() {
        Acquisition::Granted(lease) => lease,
        Acquisition::Held(h) => panic!("{} is held by {h:?}", candidacy.key()),
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
    tenure_testkit::harness::wait_for(
        format!("{n} children of {path}"),
        Duration::from_secs(10),
        || async move { (children(client, path).await.len() == n).then_some(()) },
    )
    .await
    .unwrap();
}
