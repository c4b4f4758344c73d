//! The servers one backend runs against, started for the bench, and the
//! clients, URLs and counters the measures need.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tenure::etcd::{EtcdBackend, EtcdOptions};
use tenure::kube::{KubeBackend, KubeOptions};
use tenure::redis::RedisBackend;
use tenure::zookeeper::{ZooKeeperBackend, ZooKeeperOptions};
use tenure::{LeaseBackend, MemoryBackend};
use tenure_lease_server::{kube_config_for, KubeconfigFile, LeaseServer};
use tenure_testkit::harness::{Cluster, Topology};
use tenure_testkit::taps::ZooKeeperMessages;
use tenure_testkit::ProxyLink;

/// The error type of the bench: a message that says what failed.
pub use crate::error::{ctx, BenchResult};

/// ZooKeeper's session timeout is the TTL of every lease on the session.
pub const ZK_TICK: Duration = Duration::from_millis(200);

/// Which servers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Server {
    /// The in-process memory backend (no server).
    Memory,
    /// An etcd cluster of n members.
    Etcd(usize),
    /// A ZooKeeper ensemble of n servers.
    ZooKeeper(usize),
    /// The Lease API test server over an etcd cluster of n members.
    Kube(usize),
    /// n independent Redis masters (Redlock).
    Redis(usize),
}

impl Server {
    /// `etcd 3-node`, `memory`, ...
    pub fn label(self) -> String {
        match self {
            Server::Memory => "memory".into(),
            Server::Etcd(n) => format!("etcd {n}-node"),
            Server::ZooKeeper(n) => format!("ZooKeeper {n}-node"),
            Server::Kube(n) => format!("Kubernetes (Lease test server, etcd {n}-node)"),
            Server::Redis(n) => format!("Redis {n}-master"),
        }
    }
}

/// Servers that are running, removed when dropped.
pub struct Deployment {
    /// What runs.
    pub server: Server,
    cluster: Option<Cluster>,
    lease_server: Option<LeaseServer>,
    kubeconfig: Option<KubeconfigFile>,
    memory: Option<Arc<dyn LeaseBackend>>,
    messages: ZooKeeperMessages,
    links: Mutex<Vec<Arc<ProxyLink>>>,
    /// The server version, as the servers report it.
    pub version: String,
}

impl Deployment {
    /// Starts `server` and returns once it serves.
    pub async fn start(server: Server) -> BenchResult<Deployment> {
        let topology = match server {
            Server::Memory => None,
            Server::Etcd(n) | Server::Kube(n) => Some(Topology::Etcd { nodes: n }),
            Server::ZooKeeper(n) => Some(Topology::ZooKeeper { nodes: n }),
            Server::Redis(n) => Some(Topology::Redis { masters: n }),
        };
        let cluster = match topology {
            Some(t) => Some(ctx("starting the servers", Cluster::start(t).await)?),
            None => None,
        };
        let mut version = match &cluster {
            Some(c) => c
                .server_version()
                .await
                .unwrap_or_else(|e| format!("unknown ({e})")),
            None => "in-process".into(),
        };
        let (mut lease_server, mut kubeconfig) = (None, None);
        if let (Server::Kube(_), Some(c)) = (server, &cluster) {
            let s = ctx(
                "starting the Lease API test server",
                LeaseServer::start(&c.endpoints()).await,
            )?;
            kubeconfig = Some(ctx(
                "writing a kubeconfig",
                KubeconfigFile::write(s.addr()),
            )?);
            lease_server = Some(s);
            version = format!("Lease API test server over {version}");
        }
        let memory: Option<Arc<dyn LeaseBackend>> = (server == Server::Memory)
            .then(|| Arc::new(MemoryBackend::new()) as Arc<dyn LeaseBackend>);
        Ok(Deployment {
            server,
            cluster,
            lease_server,
            kubeconfig,
            memory,
            messages: ZooKeeperMessages::new(),
            links: Mutex::new(Vec::new()),
            version,
        })
    }

    /// The server endpoints (`127.0.0.1:port`), empty for memory and for
    /// Kubernetes (whose clients reach the Lease server, see [`Self::kube_config`]).
    pub fn endpoints(&self) -> Vec<String> {
        self.cluster
            .as_ref()
            .map(|c| c.endpoints())
            .unwrap_or_default()
    }

    /// The kube client config for the Lease API test server.
    pub async fn kube_config(&self) -> BenchResult<tenure::kube::kube::Config> {
        let server = self
            .lease_server
            .as_ref()
            .ok_or("no Lease API test server")?;
        ctx("kube config", kube_config_for(server.addr()).await)
    }

    /// A new client (its own connection or session); memory: the one in-process server.
    pub async fn client(&self, ttl: Duration) -> BenchResult<Arc<dyn LeaseBackend>> {
        self.client_with(ttl, None).await
    }

    /// A new client whose ZooKeeper traffic is counted (herd); the same as
    /// [`Self::client`] for the other backends.
    pub async fn counted_client(&self, ttl: Duration) -> BenchResult<Arc<dyn LeaseBackend>> {
        if !matches!(self.server, Server::ZooKeeper(_)) {
            return self.client(ttl).await;
        }
        let cluster = self.cluster.as_ref().ok_or("no cluster")?;
        let nodes: Vec<_> = cluster.nodes().iter().map(|n| n.addr()).collect();
        let tap = Arc::new(self.messages.clone());
        let (link, addrs) = ctx(
            "tapped proxies",
            ProxyLink::start_all_tapped(&nodes, Some(tap)).await,
        )?;
        self.links.lock().unwrap().push(link);
        let endpoints: Vec<String> = addrs.iter().map(|a| a.to_string()).collect();
        self.client_with(ttl, Some(endpoints)).await
    }

    async fn client_with(
        &self,
        ttl: Duration,
        endpoints: Option<Vec<String>>,
    ) -> BenchResult<Arc<dyn LeaseBackend>> {
        let endpoints = endpoints.unwrap_or_else(|| self.endpoints());
        Ok(match self.server {
            Server::Memory => self.memory.clone().ok_or("no memory backend")?,
            Server::Etcd(_) => Arc::new(ctx(
                "etcd client",
                EtcdBackend::connect(&endpoints, EtcdOptions::default()).await,
            )?),
            Server::ZooKeeper(_) => {
                let options = ZooKeeperOptions::default()
                    .with_session_timeout(ttl)
                    .with_tick_time(ZK_TICK);
                Arc::new(ctx(
                    "ZooKeeper client",
                    ZooKeeperBackend::connect(&endpoints.join(","), options).await,
                )?)
            }
            Server::Kube(_) => Arc::new(ctx(
                "kube client",
                KubeBackend::from_config(self.kube_config().await?, KubeOptions::default()).await,
            )?),
            Server::Redis(_) => Arc::new(ctx(
                "Redis client",
                RedisBackend::builder(&endpoints)
                    .allow_unfenced()
                    .connect()
                    .await,
            )?),
        })
    }

    /// The URL a candidate process connects with (`None` for memory, which
    /// lives in one process); ZooKeeper's carries the session timeout `ttl`.
    pub fn url(&self, ttl: Duration) -> Option<String> {
        let hosts = self.endpoints().join(",");
        match self.server {
            Server::Memory => None,
            Server::Etcd(_) => Some(format!("etcd://{hosts}")),
            Server::ZooKeeper(_) => Some(format!(
                "zk://{hosts}?session_timeout={}ms&tick_time={}ms",
                ttl.as_millis(),
                ZK_TICK.as_millis()
            )),
            Server::Kube(_) => self.kubeconfig.as_ref().map(|k| k.url()),
            Server::Redis(_) => Some(format!("redis://{hosts}?allow_unfenced=true")),
        }
    }

    /// Server writes so far: etcd Raft proposals committed (leader), the
    /// ZooKeeper zxid counter (leader), Lease API server writes to etcd,
    /// Redis data-set changes summed over the masters; `None` for memory.
    pub async fn writes(&self) -> BenchResult<Option<u64>> {
        Ok(match self.server {
            Server::Memory => None,
            Server::Etcd(_) => Some(
                self.leader_stat("etcd_server_proposals_committed_total")
                    .await?,
            ),
            Server::ZooKeeper(_) => Some(self.leader_stat("zxid").await? & 0xffff_ffff),
            Server::Kube(_) => self.lease_server.as_ref().map(|s| s.writes()),
            Server::Redis(_) => Some(self.total_stat("rdb_changes_since_last_save").await?),
        })
    }

    /// Server requests so far: etcd gRPC messages received plus watch
    /// events sent (keep-alives left out), summed over members; ZooKeeper
    /// requests and watch notifications counted at the counted clients'
    /// proxies (pings left out); HTTP requests and watch events the Lease
    /// API server served; Redis commands processed over the masters.
    pub async fn requests(&self) -> BenchResult<Option<u64>> {
        Ok(match self.server {
            Server::Memory => None,
            Server::Etcd(_) => {
                let c = self.cluster.as_ref().ok_or("no cluster")?;
                Some(ctx("etcd stats", c.stats_total().await)?.etcd_requests())
            }
            Server::ZooKeeper(_) => Some(self.messages.served()),
            Server::Kube(_) => self.lease_server.as_ref().map(|s| s.served()),
            Server::Redis(_) => Some(self.total_stat("total_commands_processed").await?),
        })
    }

    async fn leader_stat(&self, name: &str) -> BenchResult<u64> {
        let c = self.cluster.as_ref().ok_or("no cluster")?;
        Ok(ctx("server stats", c.leader_stats().await)?.get(name))
    }

    async fn total_stat(&self, name: &str) -> BenchResult<u64> {
        let c = self.cluster.as_ref().ok_or("no cluster")?;
        Ok(ctx("server stats", c.stats_total().await)?.get(name))
    }
}
