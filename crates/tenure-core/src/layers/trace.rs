//! One span per operation.

use async_trait::async_trait;
use futures::stream::BoxStream;
use tracing::Instrument;

use super::Layer;
use crate::{
    AcquireMode, Acquisition, Candidacy, ElectionKey, LeaderEvent, Lease, LeaseBackend, Result,
};

/// Runs each operation of the inner backend in a `tenure` span with `op`,
/// `backend`, `key` and `identity` fields, so every event a backend logs
/// says which operation, key and candidate it belongs to.
#[derive(Clone, Debug)]
pub struct Traced<B> {
    inner: B,
}

impl<B: LeaseBackend> Traced<B> {
    /// Traces `inner`'s operations.
    pub fn new(inner: B) -> Self {
        Traced { inner }
    }

    /// The traced backend.
    pub fn inner(&self) -> &B {
        &self.inner
    }
}

layer_of!(
    /// Makes [`Traced`] backends.
    TraceLayer => Traced
);

#[async_trait]
impl<B: LeaseBackend> LeaseBackend for Traced<B> {
    pass_through_to_inner!();

    async fn acquire(&self, candidacy: &Candidacy, mode: AcquireMode) -> Result<Acquisition> {
        let span = op_span(
            "acquire",
            self.inner.name(),
            candidacy.key(),
            candidacy.identity().as_str(),
        );
        self.inner.acquire(candidacy, mode).instrument(span).await
    }

    async fn renew(&self, lease: &Lease) -> Result<Lease> {
        let span = op_span(
            "renew",
            self.inner.name(),
            lease.key(),
            lease.holder().as_str(),
        );
        self.inner.renew(lease).instrument(span).await
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        let span = op_span(
            "release",
            self.inner.name(),
            lease.key(),
            lease.holder().as_str(),
        );
        self.inner.release(lease).instrument(span).await
    }

    async fn watch(&self, key: &ElectionKey) -> Result<BoxStream<'static, Result<LeaderEvent>>> {
        let span = op_span("watch", self.inner.name(), key, "");
        self.inner.watch(key).instrument(span).await
    }

    async fn close(&self) -> Result<()> {
        self.inner.close().await
    }
}

/// The span of one backend operation.
pub(super) fn op_span(
    op: &'static str,
    backend: &'static str,
    key: &ElectionKey,
    identity: &str,
) -> tracing::Span {
    tracing::debug_span!("tenure", op, backend, key = key.as_str(), identity)
}
