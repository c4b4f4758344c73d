//! The conformance suite on the Kubernetes Lease backend, against the Lease
//! API test server over a 1-node and a 3-node etcd; each client reaches the
//! test server through its own fault proxy. Reports:
//! `target/conformance/kube-1node.md` and `target/conformance/kube-3node.md`.

use std::sync::Arc;

use async_trait::async_trait;
use tenure_conformance::harness::{Cluster, Topology};
use tenure_conformance::lease_server::{kube_config_for, LeaseServer};
use tenure_conformance::{BackendFactory, Client, ClusterServers, ProxyLink, ServerFaults};
use tenure_core::{Capabilities, ElectionKey, Error, LeaseBackend, Result};
use tenure_kube::{KubeLeaseBackend, KubeOptions};

struct KubeFactory {
    name: &'static str,
    _cluster: Arc<Cluster>,
    servers: ClusterServers,
    server: LeaseServer,
    /// A client without a proxy, for looking at the server.
    inspector: KubeLeaseBackend,
    proxies: std::sync::Mutex<Vec<Arc<ProxyLink>>>,
}

fn harness(e: impl std::error::Error + Send + Sync + 'static) -> Error {
    Error::Backend {
        backend: "harness",
        source: Box::new(e),
    }
}

impl KubeFactory {
    async fn start(nodes: usize, name: &'static str) -> Arc<dyn BackendFactory> {
        let cluster = Cluster::start(Topology::Etcd { nodes })
            .await
            .expect("etcd cluster");
        let server = LeaseServer::start(&cluster.endpoints())
            .await
            .expect("lease server");
        let config = server.kube_config().await.expect("kubeconfig");
        let inspector = KubeLeaseBackend::from_config(config, KubeOptions::default())
            .await
            .expect("inspector client");
        let cluster = Arc::new(cluster);
        Arc::new(KubeFactory {
            name,
            servers: ClusterServers::new(cluster.clone()),
            _cluster: cluster,
            server,
            inspector,
            proxies: Default::default(),
        })
    }
}

#[async_trait]
impl BackendFactory for KubeFactory {
    fn name(&self) -> &str {
        self.name
    }

    fn capabilities(&self) -> Capabilities {
        self.inspector.capabilities()
    }

    async fn client(&self) -> Result<Client> {
        let (link, addr) = ProxyLink::start(self.server.addr()).await?;
        let config = kube_config_for(addr).await.map_err(harness)?;
        let backend = KubeLeaseBackend::from_config(config, KubeOptions::default()).await?;
        self.proxies.lock().unwrap().push(link.clone());
        Ok(Client {
            backend: Arc::new(backend),
            link: Some(link),
        })
    }

    async fn server_writes(&self) -> Option<Result<u64>> {
        Some(Ok(self.server.writes()))
    }

    async fn key_exists(&self, key: &ElectionKey) -> Option<Result<bool>> {
        Some(
            self.inspector
                .api()
                .get_opt(key.as_str())
                .await
                .map(|l| l.is_some())
                .map_err(harness),
        )
    }

    fn servers(&self) -> Option<&dyn ServerFaults> {
        Some(&self.servers)
    }
}

mod single {
    tenure_conformance::conformance_tests!(async super::KubeFactory::start(1, "kube-1node"));
}

mod three {
    tenure_conformance::conformance_tests!(async super::KubeFactory::start(3, "kube-3node"));
}
