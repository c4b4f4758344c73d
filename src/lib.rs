#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

pub use tenure_core::*;

/// The etcd backend (feature `etcd`).
#[cfg(feature = "etcd")]
pub use tenure_etcd as etcd;

/// The ZooKeeper backend (feature `zookeeper`).
#[cfg(feature = "zookeeper")]
pub use tenure_zookeeper as zookeeper;

/// The Kubernetes Lease backend (feature `kube`).
#[cfg(feature = "kube")]
pub use tenure_kube as kube;

/// The Redis backend (feature `redis`): Redlock, which cannot fence.
#[cfg(feature = "redis")]
pub use tenure_redis as redis;

mod connect;
pub use connect::connect;
