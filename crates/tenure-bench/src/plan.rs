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
    /// Hand-over trials of the peers whose standby waits out the lease
    /// (kube-lease-manager, kube-coordinate): each takes up to two TTLs.
    pub lease_bound_handover_trials: usize,
    /// Their crash-failover trials (at [`TTL`]): each up to two TTLs
    /// after the kill.
    pub lease_bound_failover_trials: usize,
    /// Leadership changes counted per herd of those peers (tenure's: 5),
    /// each up to two TTLs.
    pub lease_bound_herd_changes: usize,
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
    /// The full run, or the quick one: 1-node servers only, fewer samples
    /// and trials, herds of 10 only, scale at 100 keys over a shorter window.
    pub fn new(quick: bool) -> Plan {
        let sizes: &[usize] = if quick { &[1] } else { &[1, 3] };
        let kinds: [fn(usize) -> Server; 4] =
            [Server::Etcd, Server::ZooKeeper, Server::Kube, Server::Redis];
        let mut servers = vec![Server::Memory];
        for kind in kinds {
            servers.extend(sizes.iter().map(|&n| kind(n)));
        }
        Plan {
            quick,
            servers,
            latency_samples: if quick { 50 } else { 200 },
            handover_trials: if quick { 10 } else { 50 },
            lease_bound_handover_trials: if quick { 2 } else { 20 },
            lease_bound_failover_trials: if quick { 1 } else { 10 },
            lease_bound_herd_changes: if quick { 1 } else { 5 },
            failover_trials: if quick { 2 } else { 10 },
            etcdctl_failover_trials: if quick { 0 } else { 1 },
            herds: if quick { vec![10] } else { vec![10, 100] },
            scale_keys: if quick { 100 } else { 1000 },
            scale_window: Duration::from_secs(if quick { 10 } else { 60 }),
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
