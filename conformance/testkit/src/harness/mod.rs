//! The container harness: real etcd, ZooKeeper and Redis servers in docker,
//! with the faults the conformance suite injects.
//!
//! - [`Image::ensure`] finds `tenure-conformance/servers:<VERSION>` or builds
//!   it with `conformance/image/build.sh` (debootstrap + `docker import`; no
//!   registry needed).
//! - [`Cluster::start`] starts a [`Topology`] on fresh docker networks and
//!   returns once every node answers its own protocol. Clients reach nodes
//!   only through ports published on `127.0.0.1` ([`Cluster::endpoints`]).
//! - Node faults: [`Cluster::kill`], [`Cluster::start_node`],
//!   [`Cluster::restart`], [`Cluster::pause`], [`Cluster::partition`], and
//!   their inverses; [`Cluster::leader_index`] and [`Cluster::stats`] observe
//!   the servers.
//! - Everything the harness creates carries the label `tenure.conformance=1`
//!   plus the run and the owning process; a [`Cluster`] removes its containers
//!   and networks when dropped (also while a test panics, after printing the
//!   servers' logs), and [`sweep`] removes what dead processes left behind.
//!
//! Networks: each cluster gets one *client* network, which carries the
//! published ports, and one *internal* cluster network on which the nodes
//! find each other by name (`n1`, `n2`, ...). [`Cluster::partition`]
//! disconnects a node from the cluster network only: its peers can no longer
//! reach it nor it them, while its published port keeps working (the client
//! network holds the node's default route, so docker leaves the port mapping
//! and open client connections alone).

mod auth;
mod cluster;
mod docker;
mod error;
mod image;
mod ports;
pub mod probe;
mod servers;
mod stats;
mod wait;
mod zookeeper_nodes;

pub use auth::{EtcdAuth, EtcdTokens};
pub use cluster::{Cluster, Node, Topology, CLUSTER_READY_TIMEOUT, NODE_READY_TIMEOUT};
pub use docker::{leftovers, sweep, Leftovers, LABEL};
pub use error::{HarnessError, Result};
pub use image::Image;
pub use stats::ServerStats;
pub use wait::{wait_for, POLL_INTERVAL};
pub use zookeeper_nodes::ZooKeeperNodeSettings;
