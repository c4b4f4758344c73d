//! What a lease this backend granted carries ([`HeartbeatBackend::LeaseState`](tenure_core::HeartbeatBackend::LeaseState)).

use tokio::sync::Mutex;

use crate::keepalive::KeepAlive;
use crate::own;

/// What a tenure lease on etcd carries.
pub struct EtcdGrant {
    pub(crate) lease_id: i64,
    pub(crate) key: String,
    pub(crate) create_revision: i64,
    pub(crate) keep_alive: Mutex<KeepAlive>,
    /// Watches our key while the lease lives (stops with its last handle).
    pub(crate) _own_key: own::OwnKeyWatch,
}
