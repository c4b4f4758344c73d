//! Raw acquires the backends' own tests make alike: one that must be
//! granted, and a waiting one in the background.

use std::sync::Arc;

use tenure_core::{AcquireMode, Acquisition, Candidacy, Lease, LeaseBackend};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// A one-shot acquire of `candidacy` that must be granted: panics naming
/// who holds the key otherwise.
pub async fn granted<B: LeaseBackend + ?Sized>(backend: &B, candidacy: &Candidacy) -> Lease {
    match backend.acquire(candidacy, AcquireMode::Once).await.unwrap() {
        Acquisition::Granted(lease) => lease,
        Acquisition::Held(h) => panic!("{} is held by {h:?}", candidacy.key()),
    }
}

/// A waiting acquire in the background: its outcome, and when it came.
pub type Waiting = JoinHandle<(tenure_core::Result<Acquisition>, Instant)>;

/// `candidacy`'s waiting acquire on `backend`, in the background.
pub fn waiting<B: LeaseBackend + ?Sized + 'static>(
    backend: Arc<B>,
    candidacy: Candidacy,
) -> Waiting {
    tokio::spawn(async move {
        let outcome = backend.acquire(&candidacy, AcquireMode::Wait).await;
        (outcome, Instant::now())
    })
}
