//! The conformance suite on etcd, in containers: a 1-node and a 3-node
//! cluster, each client behind its own fault proxy. Reports:
//! `target/conformance/etcd-1node.md` and `target/conformance/etcd-3node.md`.

use std::sync::Arc;

use async_trait::async_trait;
use tenure_conformance::harness::{Cluster, Topology};
use tenure_conformance::{
    until_writes_settle, BackendFactory, CandidateCommand, Client, ClusterServers, ProxyLink,
    ServerFaults, Target,
};
use tenure_core::{Capabilities, ElectionKey, Error, LeaseBackend, Result};
use tenure_etcd::{EtcdBackend, EtcdOptions};

struct EtcdFactory {
    name: &'static str,
    cluster: Arc<Cluster>,
    servers: ClusterServers,
    /// A client without proxies, for looking at the server.
    inspector: EtcdBackend,
    /// Every client's proxies, kept for the factory's life: a case may drop
    /// its `Client` and keep only the backend (inside an Elector).
    proxies: std::sync::Mutex<Vec<Arc<ProxyLink>>>,
    /// The servers' version, read once at start.
    version: Option<String>,
}

fn harness(e: impl std::error::Error + Send + Sync + 'static) -> Error {
    Error::Backend {
        backend: "harness",
        source: Box::new(e),
    }
}

impl EtcdFactory {
    async fn start(nodes: usize, name: &'static str) -> Arc<dyn BackendFactory> {
        let cluster = Cluster::start(Topology::Etcd { nodes })
            .await
            .expect("etcd cluster");
        let inspector = EtcdBackend::connect(&cluster.endpoints(), EtcdOptions::default())
            .await
            .expect("inspector client");
        let version = cluster.server_version().await.ok();
        let cluster = Arc::new(cluster);
        Arc::new(EtcdFactory {
            name,
            servers: ClusterServers::new(cluster.clone()),
            cluster,
            inspector,
            proxies: Default::default(),
            version,
        })
    }

    async fn count_keys(&self, key: &ElectionKey) -> Result<usize> {
        let options = tenure_etcd::etcd_client::GetOptions::new()
            .with_prefix()
            .with_count_only();
        let answer = self
            .inspector
            .client()
            .kv_client()
            .get(format!("{}/", key.as_str()), Some(options))
            .await
            .map_err(harness)?;
        Ok(answer.count() as usize)
    }
}

#[async_trait]
impl BackendFactory for EtcdFactory {
    fn name(&self) -> &str {
        self.name
    }

    fn capabilities(&self) -> Capabilities {
        self.inspector.capabilities()
    }

    async fn client(&self) -> Result<Client> {
        let nodes: Vec<_> = self.cluster.nodes().iter().map(|n| n.addr()).collect();
        let (link, addrs) = ProxyLink::start_all(&nodes).await?;
        link.numbers_nodes();
        let endpoints: Vec<String> = addrs.iter().map(|a| a.to_string()).collect();
        let backend = EtcdBackend::connect(&endpoints, EtcdOptions::default()).await?;
        self.proxies.lock().unwrap().push(link.clone());
        Ok(Client {
            backend: Arc::new(backend),
            link: Some(link),
        })
    }

    async fn server_writes(&self) -> Option<Result<u64>> {
        // Raft proposals committed: puts, deletes, txns, lease grants and
        // revokes (keep-alives are not proposals). Every node commits all.
        Some(
            self.cluster
                .leader_stats()
                .await
                .map(|s| s.get("etcd_server_proposals_committed_total"))
                .map_err(harness),
        )
    }

    async fn server_requests(&self) -> Option<Result<u64>> {
        // Every node's gRPC counters: each counts what its own clients sent.
        Some(
            self.cluster
                .stats_total()
                .await
                .map(|s| s.etcd_requests())
                .map_err(harness),
        )
    }

    async fn waiting(&self, key: &ElectionKey) -> Option<Result<usize>> {
        // Every candidate key but the leader's.
        Some(self.count_keys(key).await.map(|n| n.saturating_sub(1)))
    }

    async fn key_exists(&self, key: &ElectionKey) -> Option<Result<bool>> {
        Some(self.count_keys(key).await.map(|n| n > 0))
    }

    async fn quiesce(&self) -> Result<()> {
        // Leases earlier cases left to expire: their revocations are writes.
        let quiet = self.timing().ttl + self.capabilities().expiry_slack;
        until_writes_settle(self, quiet, quiet * 4).await.map(drop)
    }

    async fn server_version(&self) -> Option<String> {
        self.version.clone()
    }

    async fn wipe_election(&self, key: &ElectionKey) -> Option<Result<()>> {
        let options = tenure_etcd::etcd_client::DeleteOptions::new().with_prefix();
        Some(
            self.inspector
                .client()
                .kv_client()
                .delete(format!("{}/", key.as_str()), Some(options))
                .await
                .map(drop)
                .map_err(harness),
        )
    }

    async fn compact_history(&self) -> Option<Result<()>> {
        Some(
            tenure_conformance::compact_etcd(self.inspector.client())
                .await
                .map(drop)
                .map_err(harness),
        )
    }

    fn servers(&self) -> Option<&dyn ServerFaults> {
        Some(&self.servers)
    }

    fn candidate(&self) -> Option<CandidateCommand> {
        Some(CandidateCommand {
            program: env!("CARGO_BIN_EXE_tenure-candidate").into(),
            url: format!("etcd://{}", self.cluster.endpoints().join(",")),
        })
    }
}

/// etcd stores any key: no key breaks a key rule.
const ANY_KEY: &str = "key_breaking_backend_rule_is_invalid_argument";

fn main() -> std::process::ExitCode {
    tenure_conformance::run_targets(vec![
        Target::new("single", || EtcdFactory::start(1, "etcd-1node")).expect_skips(&[
            ANY_KEY,
            "server_node_killed_leader_survives_or_fails_over",
            "holders_server_node_paused_longer_than_ttl",
            "servers_leader_paused_longer_than_ttl",
        ]),
        Target::new("three", || EtcdFactory::start(3, "etcd-3node")).expect_skips(&[ANY_KEY]),
    ])
}
