//! What a lease this backend granted carries ([`HeartbeatBackend::LeaseState`](tenure_core::HeartbeatBackend::LeaseState)).

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use k8s_openapi::api::coordination::v1::Lease as KubeLease;
use tokio::sync::Mutex;

use crate::own;
use crate::record::Term;
use crate::renew_time::NewestSecond;

/// What a tenure lease on Kubernetes carries: its term, the Lease as we
/// last wrote it, and the watch of it (own.rs).
pub struct KubeGrant {
    pub(crate) term: Term,
    /// Shared with the watch of our own Lease (own.rs), which brings it up
    /// to date when someone else writes the Lease within our term (a
    /// waiter naming itself next in line changes a label).
    pub(crate) last: Arc<Mutex<Ours>>,
    /// Set before our release: its write is no news for the watch.
    pub(crate) releasing: Arc<AtomicBool>,
    pub(crate) _own: own::OwnLeaseWatch,
}

/// The Lease as we last wrote (or, after a conflict, read) it, and the
/// newest renewTime the term has sent (renew_time.rs).
pub(crate) struct Ours {
    pub(crate) lease: KubeLease,
    pub(crate) newest: NewestSecond,
}
