//! Backends whose operations run on the heartbeat runtime.
//!
//! A networked backend writes its operations as plain async functions
//! ([`HostedBackend`]) and gets [`LeaseBackend`] for free: each operation
//! is checked, runs on the [heartbeat runtime](crate::heartbeat_runtime)
//! next to the connection it uses, inside one span, and its result is handed
//! over to the caller in one place that never loses a grant: if the caller
//! has gone (its future was dropped) by the time a lease is granted, the
//! lease is released on the spot.

use std::any::Any;
use std::fmt::Debug;
use std::future::Future;
use std::sync::OnceLock;
use std::time::Duration;

use async_trait::async_trait;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use tokio::sync::{oneshot, watch};
use tracing::Instrument;

pub use crate::backoff::Backoff;
use crate::{
    heartbeat_runtime, AcquireMode, Acquisition, Candidacy, Capabilities, ElectionKey, Error,
    LeaderEvent, Lease, LeaseBackend, LeaseHandle, Result,
};

/// A backend written as plain async operations, run by tenure on the
/// heartbeat runtime. Implement this instead of [`LeaseBackend`] (which every
/// `HostedBackend` implements) when the backend owns network connections.
///
/// What the blanket [`LeaseBackend`] implementation does around each
/// operation, so that the backend does not have to:
///
/// - checks the candidacy ([`check`](Self::check)) or key
///   ([`check_key`](Self::check_key)) before anything is sent;
/// - runs the operation on the heartbeat runtime, so a starved application
///   runtime cannot stall it, in a span `tenure` with `op`, `backend`, `key`
///   and `identity` fields;
/// - hands the result over to the caller: if the caller dropped its future
///   before the operation finished, the operation is dropped on the heartbeat
///   runtime (its drop guards withdraw what it started); if the caller went
///   away after a lease was granted but before it took the grant, the lease is
///   released with [`release`](Self::release).
///
/// Drop guards that must still talk to the server (withdrawing a queued
/// candidacy) should use [`spawn_cleanup`], so that
/// [`LeaseBackend::close`] and `Elector::shutdown` wait for them.
#[async_trait]
pub trait HostedBackend: Clone + Send + Sync + Debug + 'static {
    /// A short name for logs and errors (`etcd`, `zookeeper`, ...).
    const NAME: &'static str;

    /// What a lease this backend granted carries in its [`LeaseHandle`]
    /// (its key, its session, its renewal state). [`renew`](Self::renew)
    /// and [`release`](Self::release) get it back, found here once: a
    /// lease that another backend granted is refused before they run.
    type LeaseState: Any + Send + Sync;

    /// What this backend promises; see [`LeaseBackend::capabilities`].
    fn promises(&self) -> Capabilities;

    /// Checks a candidacy before anything is sent; by default against
    /// [`promises`](Self::promises).
    fn check(&self, candidacy: &Candidacy) -> Result<()> {
        self.promises().check(candidacy)
    }

    /// Checks a key before a watch is set up; by default against
    /// [`promises`](Self::promises).
    fn check_key(&self, key: &ElectionKey) -> Result<()> {
        self.promises().check_key(key)
    }

    /// [`LeaseBackend::acquire`], on the heartbeat runtime, input checked.
    async fn acquire(&self, candidacy: Candidacy, mode: AcquireMode) -> Result<Acquisition>;

    /// [`LeaseBackend::renew`], on the heartbeat runtime, with the lease's
    /// state.
    async fn renew(&self, lease: Lease, state: &Self::LeaseState) -> Result<Lease>;

    /// [`LeaseBackend::release`], on the heartbeat runtime, with the lease's
    /// state; also called on a grant that could not be handed over.
    async fn release(&self, lease: Lease, state: &Self::LeaseState) -> Result<()>;

    /// [`LeaseBackend::watch`], set up on the heartbeat runtime, key checked.
    async fn watch(&self, key: ElectionKey) -> Result<BoxStream<'static, Result<LeaderEvent>>>;

    /// [`LeaseBackend::close`], on the heartbeat runtime, after every cleanup
    /// started with [`spawn_cleanup`] has finished; by default nothing more.
    async fn close(&self) -> Result<()> {
        Ok(())
    }
}

#[async_trait]
impl<T: HostedBackend> LeaseBackend for T {
    fn name(&self) -> &'static str {
        T::NAME
    }

    fn capabilities(&self) -> Capabilities {
        self.promises()
    }

    async fn acquire(&self, candidacy: &Candidacy, mode: AcquireMode) -> Result<Acquisition> {
        HostedBackend::check(self, candidacy)?;
        let span = op_span(
            "acquire",
            T::NAME,
            candidacy.key(),
            candidacy.identity().as_str(),
        );
        let (this, candidacy) = (self.clone(), candidacy.clone());
        let releaser = self.clone();
        hand_over(
            T::NAME,
            async move { HostedBackend::acquire(&this, candidacy, mode).await }.instrument(span),
            move |undelivered: Result<Acquisition>| {
                Box::pin(async move {
                    if let Ok(Acquisition::Granted(lease)) = undelivered {
                        release_undelivered(&releaser, lease).await;
                    }
                }) as BoxFuture<'static, ()>
            },
        )
        .await
    }

    async fn renew(&self, lease: &Lease) -> Result<Lease> {
        let span = op_span("renew", T::NAME, lease.key(), lease.holder().as_str());
        let (this, lease) = (self.clone(), lease.clone());
        on_heartbeat_runtime(
            T::NAME,
            async move {
                let handle = lease.handle().clone();
                HostedBackend::renew(&this, lease, state_of::<T>(&handle)?).await
            }
            .instrument(span),
        )
        .await
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        let span = op_span("release", T::NAME, lease.key(), lease.holder().as_str());
        let (this, lease) = (self.clone(), lease.clone());
        on_heartbeat_runtime(
            T::NAME,
            async move {
                let handle = lease.handle().clone();
                HostedBackend::release(&this, lease, state_of::<T>(&handle)?).await
            }
            .instrument(span),
        )
        .await
    }

    async fn watch(&self, key: &ElectionKey) -> Result<BoxStream<'static, Result<LeaderEvent>>> {
        HostedBackend::check_key(self, key)?;
        let span = op_span("watch", T::NAME, key, "");
        let (this, key) = (self.clone(), key.clone());
        on_heartbeat_runtime(
            T::NAME,
            async move { HostedBackend::watch(&this, key).await }.instrument(span),
        )
        .await
    }

    async fn close(&self) -> Result<()> {
        cleanups_finished().await;
        let this = self.clone();
        on_heartbeat_runtime(T::NAME, async move { HostedBackend::close(&this).await }).await
    }
}

/// The state of a lease `T` granted, or an error naming the lease as not
/// one of `T`'s.
fn state_of<T: HostedBackend>(handle: &LeaseHandle) -> Result<&T::LeaseState> {
    handle.get::<T::LeaseState>().ok_or_else(|| {
        Error::invalid(
            "lease",
            format!("was not granted by the {} backend", T::NAME),
        )
    })
}

/// Releases a lease whose grant nobody took, logging what happened.
///
/// Transient failures are retried with back-off for one TTL, by when the
/// backend has expired the lease by itself (as the Elector's own release
/// does): one lost request must not leave a standby waiting out the TTL.
async fn release_undelivered<T: HostedBackend>(backend: &T, lease: Lease) {
    let span = op_span("release", T::NAME, lease.key(), lease.holder().as_str());
    async {
        let give_up = tokio::time::Instant::now() + lease.ttl();
        let mut backoff = Backoff::new(Duration::from_millis(10), lease.ttl() / 4);
        let mut attempts = 1u32;
        loop {
            let handle = lease.handle().clone();
            let released = match state_of::<T>(&handle) {
                Ok(state) => HostedBackend::release(backend, lease.clone(), state).await,
                Err(error) => Err(error),
            };
            match released {
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
    .instrument(span)
    .await
}

/// Runs one request with a deadline of its own: the request's own answer
/// (whatever the client library says), or [`Error::Timeout`] naming
/// `operation` once `after` has passed. For requests, never for watches or
/// waiting, which have no natural end.
pub async fn bounded<F: Future>(
    operation: &'static str,
    after: Duration,
    request: F,
) -> Result<F::Output> {
    tokio::time::timeout(after, request)
        .await
        .map_err(|_| Error::Timeout { operation, after })
}

/// The span of one backend operation.
pub(crate) fn op_span(
    op: &'static str,
    backend: &'static str,
    key: &ElectionKey,
    identity: &str,
) -> tracing::Span {
    tracing::debug_span!("tenure", op, backend, key = key.as_str(), identity)
}

/// Runs `work` on the heartbeat runtime and waits for its result.
///
/// Dropping the returned future drops `work` on the heartbeat runtime (running
/// its drop guards); a panic in `work` is resumed here. For a result that must
/// not be lost if the caller goes away, [`HostedBackend`] hands it over with a
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

/// How many cleanups are under way in this process.
fn cleanups() -> &'static watch::Sender<usize> {
    static COUNT: OnceLock<watch::Sender<usize>> = OnceLock::new();
    COUNT.get_or_init(|| watch::Sender::new(0))
}

/// Keeps [`cleanups_finished`] waiting while it lives.
struct CleanupGuard(());

impl CleanupGuard {
    fn new() -> Self {
        cleanups().send_modify(|n| *n += 1);
        CleanupGuard(())
    }
}

impl Drop for CleanupGuard {
    fn drop(&mut self) {
        cleanups().send_modify(|n| *n -= 1);
    }
}

/// Runs a cleanup (withdrawing a candidacy, releasing a grant nobody took)
/// on the heartbeat runtime, counted until it finishes, so that
/// [`LeaseBackend::close`] and `Elector::shutdown` wait for it. Backends call
/// this from drop guards instead of spawning.
pub fn spawn_cleanup<F>(cleanup: F)
where
    F: Future<Output = ()> + Send + 'static,
{
    let guard = CleanupGuard::new();
    heartbeat_runtime().spawn(async move {
        cleanup.await;
        drop(guard);
    });
}

/// Undoes what an operation started unless it is disarmed: dropped armed
/// (the operation failed, or its future was dropped midway), it runs its
/// cleanup on its state with [`spawn_cleanup`], in the span it was armed in.
///
/// Backends arm one before a write whose effect must not outlive a failed
/// or abandoned operation (a candidate's queued key, a granting write whose
/// answer was never read, a Redlock round's keys) and disarm it once the
/// outcome needs no undoing.
///
/// ```
/// use std::time::Duration;
/// use tenure_core::hosted::CleanupOnDrop;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let guard = CleanupOnDrop::arm("candidate-7".to_owned(), |name| {
///     Box::pin(async move { println!("withdrawing {name}") })
/// });
/// // The operation failed: withdraw now, waiting up to a second for it.
/// guard.clean_up_now(Duration::from_secs(1)).await;
/// # }
/// ```
pub struct CleanupOnDrop<T: Send + 'static> {
    armed: Option<T>,
    cleanup: fn(T) -> BoxFuture<'static, ()>,
    span: tracing::Span,
}

impl<T: Send + 'static> CleanupOnDrop<T> {
    /// Arms `cleanup` over `state`, in the current span.
    pub fn arm(state: T, cleanup: fn(T) -> BoxFuture<'static, ()>) -> Self {
        CleanupOnDrop {
            armed: Some(state),
            cleanup,
            span: tracing::Span::current(),
        }
    }

    /// The operation's outcome needs no undoing: the state is handed back
    /// and nothing runs.
    pub fn disarm(mut self) -> T {
        self.armed
            .take()
            .expect("armed until disarmed or cleaned up")
    }

    /// The state the cleanup will get, to record what the operation has
    /// done so far (a node's name once it is created).
    pub fn state_mut(&mut self) -> &mut T {
        self.armed
            .as_mut()
            .expect("armed until disarmed or cleaned up")
    }

    /// Runs the cleanup now and waits for it to finish, or for `within`,
    /// whichever comes first: a failed attempt leaves nothing behind that
    /// the next attempt would take for someone else's. The cleanup goes on
    /// (counted by [`cleanups_finished`]) if the wait ends first.
    pub async fn clean_up_now(mut self, within: Duration) {
        if let Some(state) = self.armed.take() {
            let (done, finished) = oneshot::channel();
            let cleanup = (self.cleanup)(state);
            spawn_cleanup(
                async move {
                    cleanup.await;
                    let _ = done.send(());
                }
                .instrument(self.span.clone()),
            );
            let _ = tokio::time::timeout(within, finished).await;
        }
    }
}

impl<T: Send + 'static> Drop for CleanupOnDrop<T> {
    fn drop(&mut self) {
        if let Some(state) = self.armed.take() {
            spawn_cleanup((self.cleanup)(state).instrument(self.span.clone()));
        }
    }
}

impl<T: Send + 'static> Debug for CleanupOnDrop<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CleanupOnDrop")
            .field("armed", &self.armed.is_some())
            .finish_non_exhaustive()
    }
}

/// Resolves when no cleanup started with [`spawn_cleanup`] (or by a dropped
/// [`HostedBackend`] operation) is under way in this process.
pub async fn cleanups_finished() {
    let mut rx = cleanups().subscribe();
    let _ = rx.wait_for(|n| *n == 0).await;
}

#[cfg(test)]
mod tests;
