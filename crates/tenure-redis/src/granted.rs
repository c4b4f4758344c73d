//! What a lease this backend granted carries ([`HeartbeatBackend::LeaseState`](tenure_core::HeartbeatBackend::LeaseState)).

use std::sync::Arc;

/// What a Redlock lease carries: the key as stored and our random value.
#[derive(Clone, Debug)]
pub struct RedisGrant {
    pub(crate) key: String,
    pub(crate) value: String,
    /// Set when a release begins: from then on no master is taken back
    /// for this lease (a repair still in flight could otherwise re-create
    /// a key the release just deleted).
    pub(crate) released: Arc<std::sync::atomic::AtomicBool>,
    /// The number of the latest renewal sent, shared by every renewal of
    /// this lease: a repair of an earlier one is not sent (sent after a
    /// later renewal's extension, it would run after it).
    pub(crate) renewals: Arc<std::sync::atomic::AtomicU64>,
}
