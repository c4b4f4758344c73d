//! [`ClusterServers`]: the suite's [`ServerFaults`] over a harness [`Cluster`].

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tenure_core::{Error, Result};

use crate::factory::ServerFaults;
use crate::harness::{Cluster, HarnessError, Topology};

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
    let source = Box::new(e);
    if retryable {
        Error::Unavailable {
            backend: "harness",
            source,
        }
    } else {
        Error::Backend {
            backend: "harness",
            source,
        }
    }
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
