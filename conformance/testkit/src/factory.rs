//! [`ClusterFactory`]: the suite's [`BackendFactory`] for a backend deployed
//! on servers of the harness (or anywhere a client reaches over TCP), written
//! once; a backend configures it with a [`Deployment`].
//!
//! What every deployment shares is here: a fault proxy in front of every
//! client ([`ProxyLink`], one proxy per server node, numbered as
//! `ServerFaults` numbers the nodes), the proxies kept for the factory's
//! life (a case may drop its `Client` and keep only the backend, inside an
//! Elector), the servers' version read once, the capabilities of the
//! backend's own inspector client, the candidate command, and the default
//! quiescing (until the servers' write counter settles). What differs, a
//! [`Deployment`] says: how to connect a client through the proxies, what
//! its candidate processes connect with, and what it can tell of its
//! servers (their counters, the election's entries, wiping and compacting).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tenure_conformance::{
    until_writes_settle, BackendFactory, CandidateCommand, Client, Link, ServerFaults, Timing,
};
use tenure_core::{Capabilities, ElectionKey, Error, LeaseBackend, Result};

use crate::harness::Cluster;
use crate::link::ProxyLink;
use crate::proxy::Tap;

/// Where a client's fault proxies forward to.
#[derive(Clone, Debug)]
pub enum Upstreams {
    /// One proxy per server node, in `ServerFaults` order, switched
    /// together (the link numbers the nodes: `Link::nodes_in_use`).
    Nodes(Vec<SocketAddr>),
    /// One proxy in front of a server that is no node of the cluster the
    /// `ServerFaults` act on (the Lease API test server over etcd).
    Server(SocketAddr),
    /// No proxy: the client connects as configured (it goes through an
    /// HTTP proxy already), and has no link.
    Direct,
}

impl Upstreams {
    /// One proxy per node of `cluster`.
    pub fn nodes_of(cluster: &Cluster) -> Upstreams {
        Upstreams::Nodes(cluster.nodes().iter().map(|n| n.addr()).collect())
    }
}

/// `addrs` as `host:port` endpoints.
pub fn endpoints(addrs: &[SocketAddr]) -> Vec<String> {
    addrs.iter().map(|a| a.to_string()).collect()
}

/// A backend's part of a [`ClusterFactory`]: how its clients connect, and
/// what it can tell of its servers. The optional methods are the
/// [`BackendFactory`] hooks of the same names (see there), `None` by
/// default.
#[async_trait]
pub trait Deployment: Send + Sync + Sized + 'static {
    /// Where a new client's proxies forward to.
    fn upstreams(&self) -> Upstreams;

    /// A new client of the backend that connects to `through` (the proxies'
    /// addresses, in the order of [`upstreams`](Self::upstreams); empty for
    /// [`Upstreams::Direct`]).
    async fn connect(&self, through: &[SocketAddr]) -> Result<Arc<dyn LeaseBackend>>;

    /// The URL a candidate process connects with.
    fn candidate_url(&self) -> String;

    /// What each client's proxies feed, to count the protocol's messages.
    fn tap(&self) -> Option<Arc<dyn Tap>> {
        None
    }

    /// The faults done to the servers.
    fn servers(&self) -> Option<&dyn ServerFaults> {
        None
    }

    /// The suite's timing; by default the one for the capabilities.
    fn timing(&self, capabilities: &Capabilities) -> Timing {
        Timing::for_capabilities(capabilities)
    }

    async fn server_writes(&self) -> Option<Result<u64>> {
        None
    }

    async fn server_requests(&self) -> Option<Result<u64>> {
        None
    }

    async fn server_logins(&self) -> Option<Result<u64>> {
        None
    }

    async fn waiting(&self, _key: &ElectionKey) -> Option<Result<usize>> {
        None
    }

    async fn key_exists(&self, _key: &ElectionKey) -> Option<Result<bool>> {
        None
    }

    async fn wipe_election(&self, _key: &ElectionKey) -> Option<Result<()>> {
        None
    }

    async fn compact_history(&self) -> Option<Result<()>> {
        None
    }

    fn retries_frozen_nodes(&self) -> Option<&'static str> {
        None
    }

    fn reconnect_backoff(&self) -> Option<(Duration, &'static str)> {
        None
    }

    /// Lets go of what earlier cases left running before a case that has
    /// the machine to itself; by default waits until the servers' write
    /// counter has not moved for a TTL plus the expiry slack (leases
    /// earlier cases left to expire: their expiries are writes), for at
    /// most four times that.
    async fn quiesce(&self, factory: &ClusterFactory<Self>) -> Result<()> {
        factory.writes_settled().await
    }
}

/// The suite's [`BackendFactory`] over a [`Deployment`].
pub struct ClusterFactory<D> {
    name: &'static str,
    /// The backend's part.
    pub deployment: D,
    capabilities: Capabilities,
    version: Option<String>,
    candidate: PathBuf,
    /// Every client's proxies, kept for the factory's life.
    proxies: Mutex<Vec<Arc<ProxyLink>>>,
}

impl<D: Deployment> ClusterFactory<D> {
    /// A factory named `name` (the report's backend name) over
    /// `deployment`, whose clients promise `capabilities`; `version` is
    /// the servers' (shown in the report), `candidate` the binary the
    /// suite's process cases run.
    pub fn new(
        name: &'static str,
        deployment: D,
        capabilities: Capabilities,
        version: Option<String>,
        candidate: impl Into<PathBuf>,
    ) -> ClusterFactory<D> {
        ClusterFactory {
            name,
            deployment,
            capabilities,
            version,
            candidate: candidate.into(),
            proxies: Mutex::new(Vec::new()),
        }
    }

    /// Waits until the servers' write counter has not moved for a TTL plus
    /// the expiry slack, for at most four times that: the default
    /// [`Deployment::quiesce`].
    pub async fn writes_settled(&self) -> Result<()> {
        let quiet = self.timing().ttl + self.capabilities.expiry_slack;
        until_writes_settle(self, quiet, quiet * 4).await.map(drop)
    }

    /// Lets go of the proxies of clients that nobody but this factory
    /// holds any more (their backends are gone).
    pub fn forget_unused_proxies(&self) {
        self.proxies
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|link| Arc::strong_count(link) > 1);
    }
}

/// A harness error (docker, i/o, a server's own client) as the suite's
/// `Error::Backend` of the backend "harness".
pub fn harness_error(e: impl std::error::Error + Send + Sync + 'static) -> Error {
    Error::Backend {
        backend: "harness",
        source: Box::new(e),
    }
}

#[async_trait]
impl<D: Deployment> BackendFactory for ClusterFactory<D> {
    fn name(&self) -> &str {
        self.name
    }

    fn capabilities(&self) -> Capabilities {
        self.capabilities.clone()
    }

    async fn client(&self) -> Result<Client> {
        let tap = self.deployment.tap();
        let (link, through) = match self.deployment.upstreams() {
            Upstreams::Nodes(nodes) => {
                let (link, addrs) = ProxyLink::start_all_tapped(&nodes, tap).await?;
                link.numbers_nodes();
                (Some(link), addrs)
            }
            Upstreams::Server(server) => {
                let (link, addrs) = ProxyLink::start_all_tapped(&[server], tap).await?;
                (Some(link), addrs)
            }
            Upstreams::Direct => (None, Vec::new()),
        };
        let backend = self.deployment.connect(&through).await?;
        if let Some(link) = &link {
            self.proxies
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(link.clone());
        }
        Ok(Client {
            backend,
            link: link.map(|link| link as Arc<dyn Link>),
        })
    }

    fn timing(&self) -> Timing {
        self.deployment.timing(&self.capabilities)
    }

    async fn server_writes(&self) -> Option<Result<u64>> {
        self.deployment.server_writes().await
    }

    async fn server_requests(&self) -> Option<Result<u64>> {
        self.deployment.server_requests().await
    }

    async fn server_logins(&self) -> Option<Result<u64>> {
        self.deployment.server_logins().await
    }

    async fn waiting(&self, key: &ElectionKey) -> Option<Result<usize>> {
        self.deployment.waiting(key).await
    }

    fn retries_frozen_nodes(&self) -> Option<&'static str> {
        self.deployment.retries_frozen_nodes()
    }

    fn reconnect_backoff(&self) -> Option<(Duration, &'static str)> {
        self.deployment.reconnect_backoff()
    }

    async fn key_exists(&self, key: &ElectionKey) -> Option<Result<bool>> {
        self.deployment.key_exists(key).await
    }

    fn servers(&self) -> Option<&dyn ServerFaults> {
        self.deployment.servers()
    }

    fn candidate(&self) -> Option<CandidateCommand> {
        Some(CandidateCommand {
            program: self.candidate.clone(),
            url: self.deployment.candidate_url(),
        })
    }

    async fn server_version(&self) -> Option<String> {
        self.version.clone()
    }

    async fn wipe_election(&self, key: &ElectionKey) -> Option<Result<()>> {
        self.deployment.wipe_election(key).await
    }

    async fn compact_history(&self) -> Option<Result<()>> {
        self.deployment.compact_history().await
    }

    async fn quiesce(&self) -> Result<()> {
        self.deployment.quiesce(self).await
    }
}
