//! Operations run on the heartbeat runtime, their results handed over.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use tokio::sync::oneshot;
use tracing::Instrument;

use super::trace::op_span;
use super::Layer;
use crate::hosted::{cleanups_finished, spawn_cleanup, Backoff, CleanupGuard};
use crate::{
    heartbeat_runtime, AcquireMode, Acquisition, Candidacy, ElectionKey, Error, LeaderEvent, Lease,
    LeaseBackend, Result,
};

/// Runs each operation of the inner backend on the
/// [heartbeat runtime](crate::heartbeat_runtime), next to the connections
/// it uses, so a starved application runtime cannot stall a renewal, and
/// hands the result over to the caller in one place that never loses a
/// grant:
///
/// - if the caller drops its future before the operation finished, the
///   operation is dropped on the heartbeat runtime (its drop guards withdraw
///   what it started, counted by [`cleanups_finished`]);
/// - if the caller went away after a lease was granted but before it took
///   the grant, the lease is released (retried for one TTL while the errors
///   are transient), so a standby does not wait out a TTL nobody holds.
///
/// The operation runs in the caller's current span. [`close`] waits for
/// every cleanup of the process before it closes the inner backend.
///
/// [`close`]: LeaseBackend::close
#[derive(Debug)]
pub struct OnHeartbeat<B> {
    inner: Arc<B>,
}

impl<B> Clone for OnHeartbeat<B> {
    fn clone(&self) -> Self {
        OnHeartbeat {
            inner: self.inner.clone(),
        }
    }
}

impl<B: LeaseBackend> OnHeartbeat<B> {
    /// Runs `inner`'s operations on the heartbeat runtime.
    pub fn new(inner: B) -> Self {
        OnHeartbeat {
            inner: Arc::new(inner),
        }
    }

    /// The backend whose operations are run.
    pub fn inner(&self) -> &B {
        &self.inner
    }
}

layer_of!(
    /// Makes [`OnHeartbeat`] backends.
    HeartbeatLayer => OnHeartbeat
);

#[async_trait]
impl<B: LeaseBackend> LeaseBackend for OnHeartbeat<B> {
    pass_through_to_inner!();

    async fn acquire(&self, candidacy: &Candidacy, mode: AcquireMode) -> Result<Acquisition> {
        let span = tracing::Span::current();
        let (inner, candidacy) = (self.inner.clone(), candidacy.clone());
        let releaser = self.inner.clone();
        let acquire_span = span.clone();
        hand_over(
            self.inner.name(),
            async move { inner.acquire(&candidacy, mode).await }.instrument(span),
            move |undelivered: Result<Acquisition>| {
                Box::pin(async move {
                    if let Ok(Acquisition::Granted(lease)) = undelivered {
                        // A release of its own, as the Elector's would be,
                        // linked to the acquire whose grant it gives back.
                        let span = op_span(
                            "release",
                            releaser.name(),
                            lease.key(),
                            lease.holder().as_str(),
                        );
                        span.follows_from(&acquire_span);
                        release_undelivered(&*releaser, lease)
                            .instrument(span)
                            .await;
                    }
                }) as BoxFuture<'static, ()>
            },
        )
        .await
    }

    async fn renew(&self, lease: &Lease) -> Result<Lease> {
        let (inner, lease) = (self.inner.clone(), lease.clone());
        on_heartbeat_runtime(
            self.inner.name(),
            async move { inner.renew(&lease).await }.in_current_span(),
        )
        .await
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        let (inner, lease) = (self.inner.clone(), lease.clone());
        on_heartbeat_runtime(
            self.inner.name(),
            async move { inner.release(&lease).await }.in_current_span(),
        )
        .await
    }

    async fn watch(&self, key: &ElectionKey) -> Result<BoxStream<'static, Result<LeaderEvent>>> {
        let (inner, key) = (self.inner.clone(), key.clone());
        on_heartbeat_runtime(
            self.inner.name(),
            async move { inner.watch(&key).await }.in_current_span(),
        )
        .await
    }

    async fn close(&self) -> Result<()> {
        cleanups_finished().await;
        let inner = self.inner.clone();
        on_heartbeat_runtime(self.inner.name(), async move { inner.close().await }).await
    }
}

/// Releases a lease whose grant nobody took, logging what happened.
///
/// Transient failures are retried with back-off for one TTL, by when the
/// backend has expired the lease by itself (as the Elector's own release
/// does): one lost request must not leave a standby waiting out the TTL.
async fn release_undelivered<B: LeaseBackend>(backend: &B, lease: Lease) {
    let give_up = tokio::time::Instant::now() + lease.ttl();
    let mut backoff = Backoff::new(Duration::from_millis(10), lease.ttl() / 4);
    let mut attempts = 1u32;
    loop {
        match backend.release(&lease).await {
            Ok(()) => {
                tracing::debug!(attempts, "released a grant whose campaign was dropped");
                return;
            }
            Err(error) if error.is_retryable() => {
                let delay = backoff.next_delay();
                if tokio::time::Instant::now() + delay >= give_up {
                    tracing::warn!(%error, attempts, "could not release a grant whose campaign was dropped; it will expire");
                    return;
                }
                tracing::debug!(%error, attempts, retry_in = ?delay, "releasing a grant whose campaign was dropped failed; retrying");
                tokio::time::sleep(delay).await;
                attempts += 1;
            }
            Err(error) => {
                tracing::warn!(%error, "could not release a grant whose campaign was dropped; it will expire");
                return;
            }
        }
    }
}

/// Runs `work` on the heartbeat runtime and waits for its result.
///
/// Dropping the returned future drops `work` on the heartbeat runtime (running
/// its drop guards); a panic in `work` is resumed here. For a result that must
/// not be lost if the caller goes away, [`OnHeartbeat`] hands it over with a
/// release instead.
pub async fn on_heartbeat_runtime<T, F>(backend: &'static str, work: F) -> Result<T>
where
    T: Send + 'static,
    F: Future<Output = Result<T>> + Send + 'static,
{
    hand_over(backend, work, |_| Box::pin(async {})).await
}

/// Runs `work` on the heartbeat runtime and hands its result to the caller;
/// a result the caller can no longer take goes to `undelivered`, as a cleanup.
async fn hand_over<T, F, U>(backend: &'static str, work: F, undelivered: U) -> Result<T>
where
    T: Send + 'static,
    F: Future<Output = Result<T>> + Send + 'static,
    U: FnOnce(Result<T>) -> BoxFuture<'static, ()> + Send + 'static,
{
    let (result_tx, result_rx) = oneshot::channel::<Parcel<Result<T>>>();
    let (cancel_tx, cancel_rx) = oneshot::channel::<CleanupGuard>();
    let task = heartbeat_runtime().spawn(async move {
        tokio::select! {
            biased;
            result = work => {
                // If the caller is gone, or goes before it opens the parcel,
                // the parcel's drop hands the result to `undelivered`.
                let parcel = Parcel { value: Some(result), undelivered: Some(Box::new(undelivered)) };
                let _ = result_tx.send(parcel);
            }
            cancelled = cancel_rx => {
                // The caller dropped its future first: `work` is dropped here
                // (its guards start their cleanups) before the guard that
                // kept `cleanups_finished` waiting goes.
                drop(cancelled);
            }
        }
    });
    let canceller = Canceller(Some(cancel_tx));
    let outcome = result_rx.await;
    drop(canceller.disarm());
    match outcome {
        Ok(parcel) => parcel.open(),
        Err(_) => match task.await {
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => Err(Error::backend(backend, e)),
            Ok(()) => Err(Error::backend(
                backend,
                "the operation ended without a result",
            )),
        },
    }
}

/// Cancels the operation when the caller's future is dropped before its result came.
struct Canceller(Option<oneshot::Sender<CleanupGuard>>);

impl Canceller {
    fn disarm(mut self) -> Option<oneshot::Sender<CleanupGuard>> {
        self.0.take()
    }
}

impl Drop for Canceller {
    fn drop(&mut self) {
        if let Some(tx) = self.0.take() {
            // Counted from now until the operation is dropped on its runtime.
            let _ = tx.send(CleanupGuard::new());
        }
    }
}

type Undelivered<T> = Box<dyn FnOnce(T) -> BoxFuture<'static, ()> + Send>;

/// A result on its way to the caller; dropped unopened, it goes to its
/// `undelivered` cleanup instead of being lost.
struct Parcel<T: Send + 'static> {
    value: Option<T>,
    undelivered: Option<Undelivered<T>>,
}

impl<T: Send + 'static> Parcel<T> {
    fn open(mut self) -> T {
        self.undelivered = None;
        self.value.take().expect("a parcel is opened once")
    }
}

impl<T: Send + 'static> Drop for Parcel<T> {
    fn drop(&mut self) {
        if let (Some(value), Some(undelivered)) = (self.value.take(), self.undelivered.take()) {
            spawn_cleanup(undelivered(value));
        }
    }
}
