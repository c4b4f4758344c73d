//! A real etcd in a container for tenure-etcd's own tests.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use tenure_conformance::harness::{Cluster, Topology};
use tenure_core::{Candidacy, CandidateId, ElectionKey};
use tenure_etcd::{EtcdBackend, EtcdOptions};

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

pub fn candidacy(key: &str, identity: &str) -> Candidacy {
    Candidacy::new(
        ElectionKey::new(key).unwrap(),
        CandidateId::new(identity).unwrap(),
        TTL,
    )
    .unwrap()
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
