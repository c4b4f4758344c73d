//! A real etcd in a container for tenure-etcd's own tests.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use futures::stream::BoxStream;
use futures::StreamExt;
use tenure_core::{Candidacy, LeaderEvent, Lease};
use tenure_etcd::{EtcdBackend, EtcdOptions};
use tenure_testkit::harness::{Cluster, Topology};
use tenure_testkit::ProxyLink;

pub const TTL: Duration = Duration::from_secs(2);

pub async fn etcd() -> Cluster {
    Cluster::start(Topology::Etcd { nodes: 1 })
        .await
        .expect("etcd container")
}

pub async fn connect(cluster: &Cluster, options: EtcdOptions) -> Arc<EtcdBackend> {
    Arc::new(
        EtcdBackend::connect(&cluster.endpoints(), options)
            .await
            .expect("connect"),
    )
}

/// A client of `cluster` with the default options.
pub async fn client(cluster: &Cluster) -> Arc<EtcdBackend> {
    connect(cluster, EtcdOptions::default()).await
}

/// A client whose every byte goes through a fault proxy (`link`).
pub async fn connect_proxied(
    cluster: &Cluster,
    options: EtcdOptions,
) -> (Arc<EtcdBackend>, Arc<ProxyLink>) {
    let nodes: Vec<_> = cluster.nodes().iter().map(|n| n.addr()).collect();
    let (link, addrs) = ProxyLink::start_all(&nodes).await.expect("proxy");
    let endpoints: Vec<String> = addrs.iter().map(|a| a.to_string()).collect();
    let backend = EtcdBackend::connect(&endpoints, options)
        .await
        .expect("connect through the proxy");
    (Arc::new(backend), link)
}

/// A one-shot acquire that must be granted.
pub async fn hold(backend: &EtcdBackend, key: &str, who: &str) -> Lease {
    hold_with(backend, &candidacy(key, who)).await
}

/// A one-shot acquire of `candidacy` (a TTL of its own) that must be granted.
pub async fn hold_with(backend: &EtcdBackend, candidacy: &Candidacy) -> Lease {
    tenure_testkit::acquire::granted(backend, candidacy).await
}

pub use tenure_testkit::acquire::Waiting;

/// `candidacy`'s waiting acquire, in the background.
pub fn wait_for_grant(backend: &Arc<EtcdBackend>, candidacy: Candidacy) -> Waiting {
    tenure_testkit::acquire::waiting(backend.clone(), candidacy)
}

/// `a` holds `key` (as "a"), and `b` waits for it (as "b") in the background.
pub async fn a_holds_b_waits(a: &EtcdBackend, b: &Arc<EtcdBackend>, key: &str) -> (Lease, Waiting) {
    let lease = hold(a, key, "a").await;
    (lease, wait_for_grant(b, candidacy(key, "b")))
}

/// The next event of a watch, within 5 s.
pub async fn next_event(
    watch: &mut BoxStream<'static, tenure_core::Result<LeaderEvent>>,
) -> LeaderEvent {
    tokio::time::timeout(Duration::from_secs(5), watch.next())
        .await
        .expect("an event within 5 s")
        .expect("an open watch")
        .unwrap()
}

/// The key of `who`'s candidacy under `prefix`, once it exists.
pub async fn key_of(backend: &EtcdBackend, prefix: &str, who: &str) -> String {
    tenure_testkit::harness::wait_for(
        format!("{who}'s key under {prefix}"),
        Duration::from_secs(5),
        || async {
            keys(backend, prefix)
                .await
                .into_iter()
                .find(|(_, value, _)| value == who)
                .map(|(key, _, _)| key)
        },
    )
    .await
    .unwrap()
}

pub fn candidacy(key: &str, identity: &str) -> Candidacy {
    candidacy_with_ttl(key, identity, TTL)
}

pub fn candidacy_with_ttl(key: &str, identity: &str, ttl: Duration) -> Candidacy {
    Candidacy::parse(key, identity, ttl).unwrap()
}

/// Every key of an election with its value, via a plain client.
pub async fn keys(backend: &EtcdBackend, prefix: &str) -> Vec<(String, String, i64)> {
    let options = tenure_etcd::etcd_client::GetOptions::new().with_prefix();
    let answer = backend
        .client()
        .kv_client()
        .get(prefix, Some(options))
        .await
        .unwrap();
    answer
        .kvs()
        .iter()
        .map(|kv| {
            (
                String::from_utf8_lossy(kv.key()).into_owned(),
                String::from_utf8_lossy(kv.value()).into_owned(),
                kv.create_revision(),
            )
        })
        .collect()
}
