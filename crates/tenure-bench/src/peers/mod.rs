//! The peers: what people would otherwise pick, on the same servers.

pub mod curator;
pub mod etcd_election;
pub mod etcdctl;
pub mod rslock;
pub mod unavailable;
