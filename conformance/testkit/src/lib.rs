//! Real servers for testing tenure backends, and the faults done to them.
//!
//! - [`harness`]: etcd, ZooKeeper and Redis in containers started from an
//!   image built locally from Debian packages (`conformance/image/build.sh`),
//!   on docker networks of their own, reached only through ports published
//!   on `127.0.0.1`; node faults (kill, pause, partition, restart) and
//!   probes of each server's own protocol.
//! - [`proxy`]: a TCP fault proxy per client (cut off, delay, blackhole,
//!   hold answers), and [`link::ProxyLink`], the conformance suite's `Link`
//!   over those proxies.
//! - [`cluster_servers::ClusterServers`]: the suite's `ServerFaults` over a
//!   harness cluster.
//! - [`factory::ClusterFactory`]: the suite's `BackendFactory` for any
//!   backend on such servers, configured with a [`factory::Deployment`].
//! - [`taps`]: counters of a protocol's messages at the proxies.
//! - [`acquire`]: a raw acquire that must be granted, and a waiting one in
//!   the background, as the backends' own tests make them.
//! - [`THREE_NODE_CASES`]: the suite's cases a deployment on one node skips.
//!
//! It depends on no backend crate and no backend client: a backend's tests
//! build it, and nothing of the other backends.

// DESIGN. Containers, proxies and taps: what a backend's tests need of the
// outside world, and nothing of any backend's protocol beyond probes.
//   harness/           containers (cluster.rs, docker.rs, image.rs), the
//                      servers' settings (servers.rs), probes, auth, stats
//   proxy.rs           the TCP fault proxy
//   link.rs            ProxyLink: the suite's Link over proxies
//   cluster_servers.rs ClusterServers: the suite's ServerFaults over a Cluster
//   factory.rs         ClusterFactory: the suite's BackendFactory, written
//                      once, configured per backend with a Deployment
//   taps.rs            protocol message counters at the proxies
//   measure.rs         timings over many trials (loss told, percentiles)
//   acquire.rs         raw acquires the backends' tests share

pub mod acquire;
pub mod cluster_servers;
pub mod factory;
pub mod harness;
pub mod link;
pub mod measure;
pub mod proxy;
pub mod taps;

pub use cluster_servers::ClusterServers;
pub use factory::{endpoints, harness_error, ClusterFactory, Deployment, Upstreams};
pub use link::ProxyLink;

/// Logs to stderr as `TENURE_LOG` says (an `EnvFilter`, such as
/// `tenure_etcd=debug`; with `--nocapture` in a test), if it is set; for a
/// test binary's `main`.
pub fn log_from_env() {
    if let Ok(filter) = tracing_subscriber::EnvFilter::try_from_env("TENURE_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .try_init();
    }
}

/// The suite's cases that need three or more server nodes (one killed,
/// paused or cut off while a quorum serves): what a deployment on one node
/// skips.
pub const THREE_NODE_CASES: &[&str] = &[
    "server_node_killed_leader_survives_or_fails_over",
    "holders_server_node_paused_longer_than_ttl",
    "servers_leader_paused_longer_than_ttl",
    "standby_sees_failover_when_its_node_is_cut_off",
    "observer_sees_failover_when_its_node_is_cut_off",
];
