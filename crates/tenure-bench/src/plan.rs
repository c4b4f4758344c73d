//! How much the bench measures: the full run or `--quick`.

use std::time::Duration;

use crate::deploy::Server;

/// Samples, trials and servers for one run.
#[derive(Clone, Debug)]
pub struct Plan {
    /// `--quick`.
    pub quick: bool,
    /// The deployments, in order.
    pub servers: Vec<Server>,
    /// Acquire and renew samples.
    pub latency_samples: usize,
    /// Hand-over trials.
    pub handover_trials: usize,
    /// Crash-failover trials (at [`TTL`]).
    pub failover_trials: usize,
    /// etcdctl's crash-failover trials (60 s TTL each).
    pub etcdctl_failover_trials: usize,
    /// Waiting candidates in the herd measures.
    pub herds: Vec<usize>,
    /// Keys in the scale measure.
    pub scale_keys: usize,
    /// Its window.
    pub scale_window: Duration,
}

/// TTL of latency, hand-over and failover measures.
pub const TTL: Duration = Duration::from_secs(2);
/// TTL of the herd (long: the holder is not renewed while the herd queues).
pub const HERD_TTL: Duration = Duration::from_secs(30);
/// TTL of the scale measure: tenure's default.
pub const SCALE_TTL: Duration = tenure::DEFAULT_TTL;

impl Plan {
    /// The full run, or the quick one.
    pub fn new(quick: bool) -> Plan {
        if quick {
            Plan {
                quick,
                servers: vec![
                    Server::Memory,
                    Server::Etcd(1),
                    Server::ZooKeeper(1),
                    Server::Kube(1),
                    Server::Redis(1),
                ],
                latency_samples: 50,
                handover_trials: 10,
                failover_trials: 3,
                etcdctl_failover_trials: 0,
                herds: vec![10, 100],
                scale_keys: 100,
                scale_window: Duration::from_secs(10),
            }
        } else {
            Plan {
                quick,
                servers: vec![
                    Server::Memory,
                    Server::Etcd(1),
                    Server::Etcd(3),
                    Server::ZooKeeper(1),
                    Server::ZooKeeper(3),
                    Server::Kube(1),
                    Server::Kube(3),
                    Server::Redis(1),
                    Server::Redis(3),
                ],
                latency_samples: 200,
                handover_trials: 50,
                failover_trials: 10,
                etcdctl_failover_trials: 1,
                herds: vec![10, 100],
                scale_keys: 1000,
                scale_window: Duration::from_secs(60),
            }
        }
    }

    /// Keeps only the servers whose kind is named in `only` (`memory`,
    /// `etcd`, `zk`, `kube`, `redis`).
    pub fn only(&mut self, only: &[String]) {
        self.servers.retain(|s| {
            let kind = match s {
                Server::Memory => "memory",
                Server::Etcd(_) => "etcd",
                Server::ZooKeeper(_) => "zk",
                Server::Kube(_) => "kube",
                Server::Redis(_) => "redis",
            };
            only.iter().any(|o| o == kind)
        });
    }
}
