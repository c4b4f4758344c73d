//! A real ZooKeeper in a container for tenure-zookeeper's own tests.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use tenure_conformance::harness::{Cluster, Topology};
use tenure_core::{Candidacy, CandidateId, ElectionKey};
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
    Candidacy::new(
        ElectionKey::new(key).unwrap(),
        CandidateId::new(identity).unwrap(),
        TTL,
    )
    .unwrap()
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
