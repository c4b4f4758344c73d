//! The peers: what people would otherwise pick, on the same servers.

pub mod curator;
pub mod etcd_election;
pub mod etcdctl;
pub mod kube_coordinate;
pub mod kube_lease_manager;
pub mod kube_settings;
pub mod rslock;
pub mod unavailable;
