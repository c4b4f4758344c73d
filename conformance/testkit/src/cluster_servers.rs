//! [`ClusterServers`]: the suite's [`ServerFaults`] over a harness [`Cluster`].

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tenure_core::{Error, Result};

use crate::harness::{Cluster, HarnessError, Topology, ZooKeeperNodeSettings};
use tenure_conformance::ServerFaults;

/// Every server fault of the suite, done to the containers of one harness
/// [`Cluster`]. Node `i` is `cluster.nodes()[i]`.
#[derive(Clone, Debug)]
pub struct ClusterServers {
    cluster: Arc<Cluster>,
}

/// How long the servers' leader must stay the same for
/// [`ServerFaults::settle`]: two of the harness etcd's election timeouts
/// (500 ms), and several of ZooKeeper's ticks (200 ms).
const SETTLED_FOR: Duration = Duration::from_secs(1);

/// The harness ZooKeeper's `minSessionTimeout` (`harness::servers`): a
/// node given a lower `maxSessionTimeout` gets that as its minimum too.
const ZK_MIN_SESSION_TIMEOUT: Duration = Duration::from_millis(400);

impl ClusterServers {
    /// Faults `cluster`'s nodes.
    pub fn new(cluster: Arc<Cluster>) -> ClusterServers {
        ClusterServers { cluster }
    }

    /// The cluster.
    pub fn cluster(&self) -> &Arc<Cluster> {
        &self.cluster
    }
}

/// A harness error as tenure's: `Unavailable` where trying again may help
/// (docker, sockets, HTTP, timeouts), `Backend` otherwise.
pub fn harness_error(e: HarnessError) -> Error {
    let retryable = matches!(
        e,
        HarnessError::Docker(_)
            | HarnessError::Io(_)
            | HarnessError::Http(_)
            | HarnessError::Timeout { .. }
    );
    Error::from_client("harness", retryable, e)
}

#[async_trait]
impl ServerFaults for ClusterServers {
    fn nodes(&self) -> usize {
        self.cluster.nodes().len()
    }

    async fn pause(&self, node: usize) -> Result<()> {
        self.cluster.pause(node).await.map_err(harness_error)
    }

    async fn unpause(&self, node: usize) -> Result<()> {
        self.cluster.unpause(node).await.map_err(harness_error)
    }

    async fn kill(&self, node: usize) -> Result<()> {
        self.cluster.kill(node).await.map_err(harness_error)
    }

    async fn start(&self, node: usize) -> Result<()> {
        self.cluster.start_node(node).await.map_err(harness_error)
    }

    async fn restart_all(&self) -> Result<()> {
        self.cluster.restart_all().await.map_err(harness_error)
    }

    async fn isolate(&self, node: usize) -> Result<()> {
        self.cluster.partition(node).await.map_err(harness_error)
    }

    async fn rejoin(&self, node: usize) -> Result<()> {
        self.cluster.heal(node).await.map_err(harness_error)
    }

    /// A ZooKeeper node restarted with `maxSessionTimeout` = `max` (and a
    /// `minSessionTimeout` no higher), or with the harness's defaults again
    /// (`Cluster::restart_zookeeper_node_with`); other servers have no such
    /// setting.
    async fn limit_sessions(&self, node: usize, max: Option<Duration>) -> Result<()> {
        if !matches!(self.cluster.topology(), Topology::ZooKeeper { .. }) {
            return Err(Error::Unsupported {
                backend: "harness",
                operation: "giving the sessions on one server node a shorter timeout than \
                            they ask for (a ZooKeeper server's maxSessionTimeout; a lease's \
                            TTL is the client's own here)",
            });
        }
        let settings = match max {
            None => ZooKeeperNodeSettings::default(),
            Some(max) => ZooKeeperNodeSettings {
                min_session_timeout: (max < ZK_MIN_SESSION_TIMEOUT).then_some(max),
                ..ZooKeeperNodeSettings::max_session_timeout(max)
            },
        };
        self.cluster
            .restart_zookeeper_node_with(node, settings)
            .await
            .map_err(harness_error)
    }

    async fn settle(&self) -> Result<()> {
        self.cluster
            .settle(SETTLED_FOR)
            .await
            .map_err(harness_error)
    }

    async fn leader(&self) -> Result<Option<usize>> {
        if let Topology::Redis { .. } = self.cluster.topology() {
            return Err(Error::Unsupported {
                backend: "harness",
                operation: "naming the leader of independent Redis masters",
            });
        }
        self.cluster.leader_index().await.map_err(harness_error)
    }
}
