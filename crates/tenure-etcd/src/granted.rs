//! What a lease this backend granted carries ([`HeartbeatBackend::LeaseState`](tenure_core::HeartbeatBackend::LeaseState)).

use crate::own;

/// What a tenure lease on etcd carries.
pub struct EtcdGrant {
    /// Our key, its create revision, and its use of the client's shared
    /// lease (deleted and given up when the last handle goes).
    pub(crate) held: crate::Held,
    /// Watches our key while the lease lives (stops with its last handle).
    pub(crate) _own_key: own::OwnKeyWatch,
}
