//! Backends whose operations run on the heartbeat runtime.
//!
//! A networked backend writes its protocol as plain async functions
//! ([`HeartbeatBackend`]) and gets [`LeaseBackend`] for free, made of the
//! [layers](crate::layers): each operation is checked ([`Checked`]), traced
//! ([`Traced`]), run on the [heartbeat runtime](crate::heartbeat_runtime)
//! next to the connection it uses, and its result handed over to the caller
//! in one place that never loses a grant ([`OnHeartbeat`]). The lease state
//! the backend keeps in each [`LeaseHandle`] is found once, here.

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
pub use crate::layers::on_heartbeat_runtime;
use crate::layers::{Checked, OnHeartbeat, Traced};
use crate::{
    heartbeat_runtime, AcquireMode, Acquisition, Candidacy, Capabilities, ElectionKey, Error,
    LeaderEvent, Lease, LeaseBackend, LeaseHandle, Result,
};
pub use stream::{watch_stream, Looks};

/// A backend's protocol, written as plain async operations and run by
/// tenure on the heartbeat runtime. Implement this instead of
/// [`LeaseBackend`] (which every `HeartbeatBackend` implements) when the
/// backend owns network connections.
///
/// What the [`LeaseBackend`] implementation adds around each operation, so
/// that the backend does not have to (the [layers](crate::layers)
/// [`Checked`], [`Traced`] and [`OnHeartbeat`], in that order):
///
/// - checks the candidacy ([`check`](Self::check)) or key
///   ([`check_key`](Self::check_key)) before anything is sent;
/// - runs the operation in a span `tenure` with `op`, `backend`, `key` and
///   `identity` fields;
/// - runs it on the heartbeat runtime, so a starved application runtime
///   cannot stall it, and hands the result over to the caller: if the caller
///   dropped its future before the operation finished, the operation is
///   dropped on the heartbeat runtime (its drop guards withdraw what it
///   started); if the caller went away after a lease was granted but before
///   it took the grant, the lease is released with [`release`](Self::release);
/// - finds the lease's [`LeaseState`](Self::LeaseState) in its handle, and
///   refuses a lease another backend granted, before `renew` and `release`.
///
/// Drop guards that must still talk to the server (withdrawing a queued
/// candidacy) should use [`CleanupOnDrop`] or [`spawn_cleanup`], so that
/// [`LeaseBackend::close`] and `Elector::shutdown` wait for them.
///
/// The trait's methods share names with [`LeaseBackend`]'s; where both
/// traits are in scope, call them as `HeartbeatBackend::capabilities(&b)`.
#[async_trait]
pub trait HeartbeatBackend: Clone + Send + Sync + Debug + 'static {
    /// A short name for logs and errors (`etcd`, `zookeeper`, ...).
    const NAME: &'static str;

    /// What a lease this backend granted carries in its [`LeaseHandle`]
    /// (its key, its session, its renewal state). [`renew`](Self::renew)
    /// and [`release`](Self::release) get it back, found here once: a
    /// lease that another backend granted is refused before they run.
    type LeaseState: Any + Send + Sync;

    /// What this backend promises; see [`LeaseBackend::capabilities`].
    fn capabilities(&self) -> Capabilities;

    /// Checks a candidacy before anything is sent; by default against
    /// [`capabilities`](Self::capabilities).
    fn check(&self, candidacy: &Candidacy) -> Result<()> {
        HeartbeatBackend::capabilities(self).check(candidacy)
    }

    /// Checks a key before a watch is set up; by default against
    /// [`capabilities`](Self::capabilities).
    fn check_key(&self, key: &ElectionKey) -> Result<()> {
        HeartbeatBackend::capabilities(self).check_key(key)
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

/// A [`HeartbeatBackend`] with its layers, as one value per call.
type Layered<T> = Checked<Traced<OnHeartbeat<Protocol<T>>>>;

fn layered<T: HeartbeatBackend>(backend: &T) -> Layered<T> {
    Checked::new(Traced::new(OnHeartbeat::new(Protocol(backend.clone()))))
}

#[async_trait]
impl<T: HeartbeatBackend> LeaseBackend for T {
    fn name(&self) -> &'static str {
        T::NAME
    }

    fn capabilities(&self) -> Capabilities {
        HeartbeatBackend::capabilities(self)
    }

    fn check(&self, candidacy: &Candidacy) -> Result<()> {
        HeartbeatBackend::check(self, candidacy)
    }

    fn check_key(&self, key: &ElectionKey) -> Result<()> {
        HeartbeatBackend::check_key(self, key)
    }

    async fn acquire(&self, candidacy: &Candidacy, mode: AcquireMode) -> Result<Acquisition> {
        layered(self).acquire(candidacy, mode).await
    }

    async fn renew(&self, lease: &Lease) -> Result<Lease> {
        layered(self).renew(lease).await
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        layered(self).release(lease).await
    }

    async fn watch(&self, key: &ElectionKey) -> Result<BoxStream<'static, Result<LeaderEvent>>> {
        layered(self).watch(key).await
    }

    async fn close(&self) -> Result<()> {
        layered(self).close().await
    }
}

/// The protocol alone, as a [`LeaseBackend`]: the lease's state found in
/// its handle, nothing else.
#[derive(Clone, Debug)]
struct Protocol<T>(T);

#[async_trait]
impl<T: HeartbeatBackend> LeaseBackend for Protocol<T> {
    fn name(&self) -> &'static str {
        T::NAME
    }

    fn capabilities(&self) -> Capabilities {
        HeartbeatBackend::capabilities(&self.0)
    }

    fn check(&self, candidacy: &Candidacy) -> Result<()> {
        HeartbeatBackend::check(&self.0, candidacy)
    }

    fn check_key(&self, key: &ElectionKey) -> Result<()> {
        HeartbeatBackend::check_key(&self.0, key)
    }

    async fn acquire(&self, candidacy: &Candidacy, mode: AcquireMode) -> Result<Acquisition> {
        HeartbeatBackend::acquire(&self.0, candidacy.clone(), mode).await
    }

    async fn renew(&self, lease: &Lease) -> Result<Lease> {
        HeartbeatBackend::renew(&self.0, lease.clone(), state_of::<T>(lease.handle())?).await
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        HeartbeatBackend::release(&self.0, lease.clone(), state_of::<T>(lease.handle())?).await
    }

    async fn watch(&self, key: &ElectionKey) -> Result<BoxStream<'static, Result<LeaderEvent>>> {
        HeartbeatBackend::watch(&self.0, key.clone()).await
    }

    async fn close(&self) -> Result<()> {
        HeartbeatBackend::close(&self.0).await
    }
}

/// The state of a lease `T` granted, or an error naming the lease as not
/// one of `T`'s.
fn state_of<T: HeartbeatBackend>(handle: &LeaseHandle) -> Result<&T::LeaseState> {
    handle.get::<T::LeaseState>().ok_or_else(|| {
        Error::invalid(
            "lease",
            format!("was not granted by the {} backend", T::NAME),
        )
    })
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

/// How many cleanups are under way in this process.
fn cleanups() -> &'static watch::Sender<usize> {
    static COUNT: OnceLock<watch::Sender<usize>> = OnceLock::new();
    COUNT.get_or_init(|| watch::Sender::new(0))
}

/// Keeps [`cleanups_finished`] waiting while it lives.
pub(crate) struct CleanupGuard(());

impl CleanupGuard {
    pub(crate) fn new() -> Self {
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
/// [`OnHeartbeat`] operation) is under way in this process.
pub async fn cleanups_finished() {
    let mut rx = cleanups().subscribe();
    let _ = rx.wait_for(|n| *n == 0).await;
}

mod stream;

#[cfg(test)]
mod tests;
