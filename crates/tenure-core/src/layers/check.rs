//! Input checked before the backend sees it.

use async_trait::async_trait;
use futures::stream::BoxStream;

use super::Layer;
use crate::{
    AcquireMode, Acquisition, Candidacy, ElectionKey, LeaderEvent, Lease, LeaseBackend, Result,
};

/// Refuses a candidacy or key that breaks the inner backend's rules
/// ([`LeaseBackend::check`], [`LeaseBackend::check_key`]) with
/// [`Error::InvalidArgument`](crate::Error::InvalidArgument) naming the
/// field, before anything is sent: [contract](LeaseBackend#contract) point 1.
#[derive(Clone, Debug)]
pub struct Checked<B> {
    inner: B,
}

impl<B: LeaseBackend> Checked<B> {
    /// Checks what reaches `inner`.
    pub fn new(inner: B) -> Self {
        Checked { inner }
    }

    /// The backend behind the checks.
    pub fn inner(&self) -> &B {
        &self.inner
    }
}

layer_of!(
    /// Makes [`Checked`] backends.
    CheckLayer => Checked
);

#[async_trait]
impl<B: LeaseBackend> LeaseBackend for Checked<B> {
    pass_through_to_inner!();

    async fn acquire(&self, candidacy: &Candidacy, mode: AcquireMode) -> Result<Acquisition> {
        self.inner.check(candidacy)?;
        self.inner.acquire(candidacy, mode).await
    }

    async fn renew(&self, lease: &Lease) -> Result<Lease> {
        self.inner.renew(lease).await
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        self.inner.release(lease).await
    }

    async fn watch(&self, key: &ElectionKey) -> Result<BoxStream<'static, Result<LeaderEvent>>> {
        self.inner.check_key(key)?;
        self.inner.watch(key).await
    }

    async fn close(&self) -> Result<()> {
        self.inner.close().await
    }
}
