//! Turning a URL into a backend inside a candidate process.
//!
//! `memory:` is a private in-process server (one candidate only: useful to
//! test the driver); `memory+tcp://ADDR` is a client of the test process's
//! server through its [front](super::front). A backend crate adds its scheme by building its own
//! candidate binary around [`super::candidate::main_with`] with a connector
//! that knows its URLs, until the facade's `connect(url)` serves them all.

use std::sync::Arc;

use futures::future::BoxFuture;
use tenure_core::{Error, LeaseBackend, MemoryBackend, Result};

use super::remote::RemoteClient;

/// Makes a backend client from a URL.
pub type Connector = fn(String) -> BoxFuture<'static, Result<Arc<dyn LeaseBackend>>>;

/// The schemes this crate knows: `memory:`, `memory+tcp://`, and with the
/// `harness` feature `etcd://`, `zk://`, `kube://` and `redis://` (see each backend's
/// `connect_url`).
pub fn connect(url: String) -> BoxFuture<'static, Result<Arc<dyn LeaseBackend>>> {
    Box::pin(async move {
        match url.split(':').next() {
            Some("memory") => Ok(Arc::new(MemoryBackend::new()) as Arc<dyn LeaseBackend>),
            Some("memory+tcp") => {
                Ok(Arc::new(RemoteClient::connect_url(&url).await?) as Arc<dyn LeaseBackend>)
            }
            #[cfg(feature = "harness")]
            Some("etcd") => Ok(Arc::new(tenure_etcd::EtcdBackend::connect_url(&url).await?)
                as Arc<dyn LeaseBackend>),
            #[cfg(feature = "harness")]
            Some("zk") => Ok(
                Arc::new(tenure_zookeeper::ZooKeeperBackend::connect_url(&url).await?)
                    as Arc<dyn LeaseBackend>,
            ),
            #[cfg(feature = "harness")]
            Some("kube") => Ok(Arc::new(tenure_kube::KubeBackend::connect_url(&url).await?)
                as Arc<dyn LeaseBackend>),
            #[cfg(feature = "harness")]
            Some("redis") => Ok(
                Arc::new(tenure_redis::RedisBackend::connect_url(&url).await?)
                    as Arc<dyn LeaseBackend>,
            ),
            _ => Err(Error::invalid(
                "url",
                format!("{url:?}: no backend for this scheme in tenure-candidate"),
            )),
        }
    })
}
