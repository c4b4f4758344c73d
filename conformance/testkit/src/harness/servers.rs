//! What runs in each node's container, and how to tell it is serving.

use super::error::Result;
use super::probe;
use super::stats::ServerStats;

/// The server a cluster runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Etcd,
    ZooKeeper,
    Redis,
}

/// One node's container command line.
#[derive(Debug, Clone)]
pub(crate) struct NodeSpec {
    pub env: Vec<String>,
    pub cmd: Vec<String>,
}

/// A ZooKeeper node's own settings (`NAME=value` lines of the image's
/// `zookeeper-server` variables), read at every start over the defaults in
/// [`Kind::spec`]; kept across kill and start with the node's data.
pub(crate) const ZK_NODE_ENV: &str = "/data/zk-node.env";

/// The name peers use for node `index` on the cluster network.
pub(crate) fn alias(index: usize) -> String {
    format!("n{}", index + 1)
}

impl Kind {
    /// The port clients use inside the container.
    pub fn client_port(self) -> u16 {
        match self {
            Kind::Etcd => 2379,
            Kind::ZooKeeper => 2181,
            Kind::Redis => 6379,
        }
    }

    /// Whether the nodes form one replicated cluster with a leader.
    pub fn has_leader(self) -> bool {
        matches!(self, Kind::Etcd | Kind::ZooKeeper)
    }

    /// The container command for node `index` of `nodes`, published on
    /// 127.0.0.1:`host_port`. Data lives in `/data` (in memory, see
    /// `docker::data_dir`, or an anonymous volume), so it survives kill and
    /// start (Redis keeps nothing: no RDB, no AOF).
    pub fn spec(self, index: usize, nodes: usize, host_port: u16, run: &str) -> NodeSpec {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        match self {
            Kind::Etcd => {
                let name = alias(index);
                let initial_cluster = (0..nodes)
                    .map(|i| format!("{0}=http://{0}:2380", alias(i)))
                    .collect::<Vec<_>>()
                    .join(",");
                let mut cmd = args(&[
                    "etcd",
                    "--data-dir=/data/etcd",
                    "--listen-client-urls=http://0.0.0.0:2379",
                    "--listen-peer-urls=http://0.0.0.0:2380",
                    "--initial-cluster-state=new",
                    // Fast failover for tests: a leader is suspected after 500 ms.
                    "--heartbeat-interval=50",
                    "--election-timeout=500",
                    // As etcd 3.5 and later do by default (3.4's default is
                    // off): a member that rejoins after being cut off from
                    // its peers does not depose the servers' leader with
                    // the terms it ran up alone.
                    "--pre-vote=true",
                    "--logger=zap",
                    "--log-outputs=stderr",
                ]);
                cmd.push(format!("--name={name}"));
                cmd.push(format!("--initial-advertise-peer-urls=http://{name}:2380"));
                // Clients, and the member list they may sync, use the published port.
                cmd.push(format!(
                    "--advertise-client-urls=http://127.0.0.1:{host_port}"
                ));
                cmd.push(format!("--initial-cluster={initial_cluster}"));
                cmd.push(format!("--initial-cluster-token={run}"));
                NodeSpec { env: vec![], cmd }
            }
            Kind::ZooKeeper => {
                let servers = if nodes > 1 {
                    (0..nodes)
                        .map(|i| format!("{}={}", i + 1, alias(i)))
                        .collect::<Vec<_>>()
                        .join(" ")
                } else {
                    String::new()
                };
                NodeSpec {
                    env: vec![
                        format!("ZK_MYID={}", index + 1),
                        format!("ZK_SERVERS={servers}"),
                        "ZK_DATA_DIR=/data/zk".to_string(),
                        // 200 ms ticks: sessions of 400 ms .. 20 s are allowed.
                        "ZK_TICK_TIME=200".to_string(),
                        "ZK_MIN_SESSION_TIMEOUT=400".to_string(),
                    ],
                    // The node's own settings, if it has any, over those
                    // above (see `Cluster::restart_zookeeper_node_with`).
                    cmd: args(&[
                        "sh",
                        "-c",
                        &format!(
                            "if [ -r {ZK_NODE_ENV} ]; then set -a; . {ZK_NODE_ENV}; set +a; fi; \
                             exec zookeeper-server"
                        ),
                    ]),
                }
            }
            Kind::Redis => NodeSpec {
                env: vec![],
                cmd: args(&[
                    "redis-server",
                    "--port",
                    "6379",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--protected-mode",
                    "no",
                ]),
            },
        }
    }

    /// Whether the node at `endpoint` serves clients: etcd's `/health` is
    /// true (it has a leader), ZooKeeper says `imok` and is in a quorum (or
    /// standalone), Redis answers `PING` with `PONG`.
    pub async fn serving(self, endpoint: &str) -> bool {
        match self {
            Kind::Etcd => probe::etcd_health(endpoint).await.unwrap_or(false),
            Kind::ZooKeeper => {
                matches!(
                    probe::zk_four_letter(endpoint, "ruok").await.as_deref(),
                    Ok("imok")
                ) && matches!(probe::zk_mode(endpoint).await, Ok(Some(_)))
            }
            Kind::Redis => matches!(
                probe::redis_command(endpoint, &[b"PING"]).await,
                Ok(probe::Resp::Simple(ref s)) if s == "PONG"
            ),
        }
    }

    /// The node's counters (see [`ServerStats`]).
    /// The server's name and version, as it reports them (`etcd 3.4.23`).
    pub async fn version(self, endpoint: &str) -> Result<String> {
        let found = match self {
            Kind::Etcd => {
                let metrics = probe::etcd_metrics(endpoint).await?;
                metrics
                    .lines()
                    .find_map(|l| l.strip_prefix("etcd_server_version{server_version=\""))
                    .and_then(|rest| rest.split('"').next())
                    .map(|v| format!("etcd {v}"))
            }
            Kind::ZooKeeper => {
                let srvr = probe::zk_four_letter(endpoint, "srvr").await?;
                srvr.lines()
                    .find_map(|l| l.strip_prefix("Zookeeper version: "))
                    .map(|v| format!("ZooKeeper {}", v.split([',', '-']).next().unwrap_or(v)))
            }
            Kind::Redis => match probe::redis_command(endpoint, &[b"INFO", b"server"]).await? {
                probe::Resp::Bulk(Some(text)) => String::from_utf8_lossy(&text)
                    .lines()
                    .find_map(|l| l.strip_prefix("redis_version:"))
                    .map(|v| format!("Redis {}", v.trim())),
                _ => None,
            },
        };
        found.ok_or_else(|| {
            super::HarnessError::Protocol(format!("{self:?} at {endpoint} did not say its version"))
        })
    }

    pub async fn stats(self, endpoint: &str) -> Result<ServerStats> {
        match self {
            Kind::Etcd => Ok(ServerStats::from_prometheus(
                &probe::etcd_metrics(endpoint).await?,
            )),
            Kind::ZooKeeper => {
                let mntr = probe::zk_four_letter(endpoint, "mntr").await?;
                let srvr = probe::zk_four_letter(endpoint, "srvr").await?;
                Ok(ServerStats::from_zookeeper(&mntr, &srvr))
            }
            Kind::Redis => {
                let mut info = String::new();
                for section in [&b"stats"[..], b"persistence", b"commandstats"] {
                    match probe::redis_command(endpoint, &[b"INFO", section]).await? {
                        probe::Resp::Bulk(Some(text)) => {
                            info.push_str(&String::from_utf8_lossy(&text));
                        }
                        other => {
                            return Err(super::HarnessError::Protocol(format!(
                                "INFO answered {other:?}"
                            )))
                        }
                    }
                }
                Ok(ServerStats::from_redis_info(&info))
            }
        }
    }
}
