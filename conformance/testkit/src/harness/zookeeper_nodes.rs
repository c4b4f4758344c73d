//! ZooKeeper servers that disagree: one node of an ensemble started with
//! settings of its own (a lower `maxSessionTimeout`, another `tickTime`), or
//! restarted with them, as in a rolling configuration change.
//!
//! A node's own settings live in a file in its data directory
//! (`/data/zk-node.env`), which its container reads on every start over the
//! harness's defaults; a node without the file runs as every other does.

use std::time::Duration;

use super::cluster::{Cluster, Topology};
use super::error::{HarnessError, Result};
use super::probe;
use super::servers::ZK_NODE_ENV;

/// Settings of one ZooKeeper server where it differs from the harness's
/// (`tickTime` 200 ms, `minSessionTimeout` 400 ms, `maxSessionTimeout`
/// 20 s); `None` keeps the harness's value. Whole milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ZooKeeperNodeSettings {
    /// `tickTime`.
    pub tick_time: Option<Duration>,
    /// `minSessionTimeout`.
    pub min_session_timeout: Option<Duration>,
    /// `maxSessionTimeout`: a session asking for more is given this.
    pub max_session_timeout: Option<Duration>,
}

impl ZooKeeperNodeSettings {
    /// Only `maxSessionTimeout` differs.
    pub fn max_session_timeout(max: Duration) -> Self {
        ZooKeeperNodeSettings {
            max_session_timeout: Some(max),
            ..Default::default()
        }
    }

    /// `(zoo.cfg key, environment variable, value in ms)` of each setting given.
    fn given(&self) -> Vec<(&'static str, &'static str, u128)> {
        [
            ("tickTime", "ZK_TICK_TIME", self.tick_time),
            (
                "minSessionTimeout",
                "ZK_MIN_SESSION_TIMEOUT",
                self.min_session_timeout,
            ),
            (
                "maxSessionTimeout",
                "ZK_MAX_SESSION_TIMEOUT",
                self.max_session_timeout,
            ),
        ]
        .into_iter()
        .filter_map(|(key, var, value)| value.map(|v| (key, var, v.as_millis())))
        .collect()
    }
}

impl Cluster {
    /// Starts a ZooKeeper ensemble of `nodes` servers in which each node
    /// listed in `own` runs with its own settings: the ensemble starts as
    /// [`Cluster::start`] starts it, then each listed node is restarted with
    /// its settings ([`restart_zookeeper_node_with`](Self::restart_zookeeper_node_with)),
    /// and it returns once every node serves and they have a leader.
    pub async fn start_zookeeper_with(
        nodes: usize,
        own: &[(usize, ZooKeeperNodeSettings)],
    ) -> Result<Cluster> {
        let cluster = Cluster::start(Topology::ZooKeeper { nodes }).await?;
        for (index, settings) in own {
            cluster
                .restart_zookeeper_node_with(*index, *settings)
                .await?;
        }
        cluster.settle(Duration::ZERO).await?;
        Ok(cluster)
    }

    /// Restarts ZooKeeper node `index` (which must be running) with
    /// `settings` over the harness's defaults, from now on (a default
    /// `settings` restores the defaults), and returns once it serves with
    /// them (its `conf` says so). Its data, and so the ensemble's state and
    /// every session, survive; its clients' connections drop.
    pub async fn restart_zookeeper_node_with(
        &self,
        index: usize,
        settings: ZooKeeperNodeSettings,
    ) -> Result<()> {
        if !matches!(self.topology(), Topology::ZooKeeper { .. }) {
            return Err(HarnessError::Invalid(format!(
                "{:?}: per-node settings are for ZooKeeper",
                self.topology()
            )));
        }
        let given = settings.given();
        let lines: Vec<String> = given
            .iter()
            .map(|(_, var, ms)| format!("{var}={ms}"))
            .collect();
        // The file holds exactly the given settings (none: no file).
        let script = format!(
            "rm -f {ZK_NODE_ENV}; if [ $# -gt 0 ]; then printf '%s\\n' \"$@\" > {ZK_NODE_ENV}; fi"
        );
        let mut cmd = vec!["sh".to_string(), "-c".to_string(), script, "sh".to_string()];
        cmd.extend(lines);
        super::docker::exec(self.node(index)?.container(), cmd, &[]).await?;
        self.restart(index).await?;
        let endpoint = self.node(index)?.endpoint();
        let conf = probe::zk_four_letter(&endpoint, "conf").await?;
        for (key, _, ms) in &given {
            let found = conf
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{key}=")))
                .map(str::trim);
            if found != Some(ms.to_string().as_str()) {
                return Err(HarnessError::Protocol(format!(
                    "node {index} restarted with {key}={found:?}, not {ms}: {conf}"
                )));
            }
        }
        tracing::info!(
            node = index,
            ?settings,
            "ZooKeeper node restarted with its own settings"
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_given_settings_are_written() {
        assert!(ZooKeeperNodeSettings::default().given().is_empty());
        let settings = ZooKeeperNodeSettings {
            tick_time: Some(Duration::from_millis(100)),
            ..ZooKeeperNodeSettings::max_session_timeout(Duration::from_millis(600))
        };
        assert_eq!(
            settings.given(),
            [
                ("tickTime", "ZK_TICK_TIME", 100),
                ("maxSessionTimeout", "ZK_MAX_SESSION_TIMEOUT", 600)
            ]
        );
    }
}
