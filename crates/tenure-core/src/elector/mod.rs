//! The Elector: campaign, hold, renew, step down, observe.

mod health;
mod identity;
mod observe;
mod planted;
mod renewal;
mod runtime;
mod term;

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::stream::{BoxStream, StreamExt};
use tokio::sync::{oneshot, watch};

use health::Reporter;
pub use health::{Health, Unhealthy};
pub use identity::default_identity;
#[cfg(feature = "__elector_mutants")]
#[doc(hidden)]
pub use planted::ElectorBug;
use planted::Planted;
pub use runtime::{heartbeat_runtime, RenewOn};
pub use term::{Leadership, Term};
use term::{Standing, Status, TermShared};

use crate::backoff::Backoff;
use crate::{
    default_drift_margin, AcquireMode, Acquisition, Candidacy, CandidateId, ElectionKey, Error,
    FencingToken, LeaderEvent, LeaderInfo, Lease, LeaseBackend, Result,
};

/// What an [`Elector`] is doing, as [`Elector::state`] tells it.
///
/// With the `serde` feature: `"follower"`, `{"leader":{"token":..}}` or `"stopped"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "snake_case")
)]
pub enum ElectorState {
    /// Not leading: campaigning, between terms, or not started.
    Follower,
    /// Leading a term, with its fencing token (`None` where the backend
    /// cannot fence). It turns back to `Follower` the moment the term ends
    /// (resigned, revoked, or its local deadline passed), before any
    /// release is sent.
    Leader {
        /// The term's fencing token.
        token: Option<FencingToken>,
    },
    /// [`shutdown`](Elector::shutdown) has returned: every term is over and
    /// released, and nothing campaigns any more.
    Stopped,
}

/// The default TTL.
pub const DEFAULT_TTL: Duration = Duration::from_secs(10);

/// Validated settings shared by an elector and its renewers.
#[derive(Debug)]
pub(crate) struct Settings {
    pub ttl: Duration,
    /// Set by the user; `None` renews three times in what the backend lets a
    /// lease live (see `renewal::interval`).
    pub renew_interval: Option<Duration>,
    pub renew_jitter: f64,
    /// Renew on the process-wide grid rather than with jitter: the backend
    /// batches renewals that arrive together (see
    /// [`Capabilities::renewals_batched`](crate::Capabilities::renewals_batched)).
    pub align_renewals: bool,
    pub retry_min: Duration,
    pub retry_max: Duration,
    pub renew_on: RenewOn,
    /// A bug planted for the conformance suite's tests (none otherwise).
    pub planted: Planted,
}

/// Builds an [`Elector`]; see [`Elector::builder`].
#[derive(Debug)]
#[must_use]
pub struct ElectorBuilder {
    backend: Arc<dyn LeaseBackend>,
    key: Option<String>,
    identity: Option<String>,
    ttl: Duration,
    renew_interval: Option<Duration>,
    renew_jitter: f64,
    drift_margin: Option<Duration>,
    retry: (Duration, Duration),
    renew_on: RenewOn,
    allow_unfenced: bool,
    planted: Planted,
}

impl ElectorBuilder {
    /// The election key (required).
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }
    /// This candidate's identity, unique among the candidates of the key;
    /// default [`default_identity`] (`POD_NAME`, else host name and pid).
    pub fn identity(mut self, identity: impl Into<String>) -> Self {
        self.identity = Some(identity.into());
        self
    }
    /// The lease TTL; default 10 s. Failover after a crash takes about this long.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }
    /// How often to renew, counted from the send of the last successful
    /// renewal. Must leave room before the deadline.
    ///
    /// Default: TTL/3 less a third of the backend's expiry lead (zero on most
    /// backends; on ZooKeeper a sixth of the session timeout plus a tick, so
    /// about a fifth of the TTL there). Three renewals in what the backend
    /// lets a lease live leave room to ride out a server that stops
    /// answering: the client must notice and move to another before the
    /// lease's `valid_until`.
    pub fn renew_interval(mut self, interval: Duration) -> Self {
        self.renew_interval = Some(interval);
        self
    }
    /// Random spread of each renewal interval, as a fraction (default 0.1 =
    /// ±10 %). Not applied on a backend that batches renewals
    /// ([`Capabilities::renewals_batched`](crate::Capabilities::renewals_batched)):
    /// its terms renew together, on a grid of the process.
    pub fn renew_jitter(mut self, fraction: f64) -> Self {
        self.renew_jitter = fraction;
        self
    }
    /// How much earlier than the TTL to stop believing we lead; default TTL/50.
    pub fn drift_margin(mut self, margin: Duration) -> Self {
        self.drift_margin = Some(margin);
        self
    }
    /// Bounds of the jittered exponential back-off between failed attempts to
    /// acquire or observe; default 50 ms to 2 s.
    pub fn retry_backoff(mut self, min: Duration, max: Duration) -> Self {
        self.retry = (min, max);
        self
    }
    /// Where renewals run; default [`RenewOn::DedicatedThread`].
    pub fn renew_on(mut self, renew_on: RenewOn) -> Self {
        self.renew_on = renew_on;
        self
    }

    /// Accepts a backend that cannot issue fencing tokens
    /// (`capabilities().fencing == false`, such as Redlock).
    ///
    /// Without tokens nothing downstream can refuse a deposed leader's
    /// write: a leader paused past its deadline (GC, host suspend) or a
    /// lease lost on the servers behind its back (a Redis master restarted
    /// without persistence) lets two leaders write. That is fine where a
    /// duplicate run costs time or money, not correctness (a cache warm-up,
    /// a report mailed twice), and wrong for anything else. Without this
    /// call, [`build`](Self::build) refuses such a backend with
    /// [`Error::InvalidArgument`] naming `allow_unfenced`; with it, the
    /// Elector logs one WARN when it is built.
    pub fn allow_unfenced(mut self) -> Self {
        self.allow_unfenced = true;
        self
    }

    /// Plants `bug` in the elector being built: for the conformance
    /// suite's own tests, which prove its cases catch an Elector that
    /// breaks its promises. Test-only (feature `__elector_mutants`), not
    /// part of the API.
    #[cfg(feature = "__elector_mutants")]
    #[doc(hidden)]
    pub fn plant(mut self, bug: ElectorBug) -> Self {
        self.planted = Planted::new(bug);
        self
    }

    /// Checks every setting against the rules and the backend's capabilities.
    pub fn build(self) -> Result<Elector> {
        let key = ElectionKey::new(
            self.key
                .ok_or_else(|| Error::invalid("key", "is required"))?,
        )?;
        let identity = match self.identity {
            Some(identity) => CandidateId::new(identity)?,
            None => identity::default_identity()?,
        };
        let ttl = self.ttl;
        if ttl.is_zero() {
            return Err(Error::invalid("ttl", "must be greater than zero"));
        }
        let margin = self
            .drift_margin
            .unwrap_or_else(|| default_drift_margin(ttl));
        let candidacy = Candidacy::with_drift_margin(key, identity, ttl, margin)?;
        let capabilities = self.backend.capabilities();
        capabilities.check(&candidacy)?;
        if !capabilities.fencing {
            if !self.allow_unfenced {
                return Err(Error::invalid(
                    "allow_unfenced",
                    format!(
                        "the {} backend cannot issue fencing tokens, so a deposed leader's \
                         writes cannot be refused; call ElectorBuilder::allow_unfenced() if a \
                         duplicate run is acceptable for this job",
                        self.backend.name()
                    ),
                ));
            }
            tracing::warn!(
                backend = self.backend.name(),
                key = candidacy.key().as_str(),
                identity = candidacy.identity().as_str(),
                "leader election without fencing tokens: a paused or partitioned leader can \
                 overlap with the next one, and nothing can refuse its writes"
            );
        }
        let renew_interval = self.renew_interval;
        if let Some(renew_interval) = renew_interval.filter(|i| i.is_zero() || *i >= ttl - margin) {
            return Err(Error::invalid(
                "renew_interval",
                format!(
                    "{renew_interval:?} must be above zero and below the ttl minus the drift margin ({:?})",
                    ttl - margin
                ),
            ));
        }
        if !(0.0..1.0).contains(&self.renew_jitter) {
            return Err(Error::invalid(
                "renew_jitter",
                format!("{} must be in [0, 1)", self.renew_jitter),
            ));
        }
        let (retry_min, retry_max) = self.retry;
        if retry_min.is_zero() || retry_max < retry_min {
            return Err(Error::invalid(
                "retry_backoff",
                "min must be above zero and not above max",
            ));
        }
        let (shutdown, _) = watch::channel(false);
        let reporter = Arc::new(Reporter::new(&candidacy));
        let candidacy = {
            let reporter = Arc::downgrade(&reporter);
            candidacy.with_warnings(move |warning| {
                if let Some(reporter) = reporter.upgrade() {
                    reporter.warning(warning);
                }
            })
        };
        let align_renewals = self.backend.capabilities().renewals_batched;
        Ok(Elector {
            inner: Arc::new(Inner {
                backend: self.backend,
                reporter,
                candidacy,
                settings: Arc::new(Settings {
                    ttl,
                    renew_interval,
                    renew_jitter: self.renew_jitter,
                    align_renewals,
                    retry_min,
                    retry_max,
                    renew_on: self.renew_on,
                    planted: self.planted,
                }),
                shutdown,
                active: Arc::new(watch::Sender::new(0)),
                state: Arc::new(watch::Sender::new(ElectorState::Follower)),
                terms: Arc::new(AtomicU64::new(0)),
            }),
        })
    }
}

#[derive(Debug)]
struct Inner {
    backend: Arc<dyn LeaseBackend>,
    candidacy: Candidacy,
    /// Health and metrics ([`Elector::health`]).
    reporter: Arc<Reporter>,
    settings: Arc<Settings>,
    shutdown: watch::Sender<bool>,
    /// Campaigns under way and renewers still running (they release).
    active: Arc<watch::Sender<usize>>,
    /// What the elector is doing ([`Elector::state`]).
    state: Arc<watch::Sender<ElectorState>>,
    /// Terms begun so far: the number of the one `state` shows as leading.
    terms: Arc<AtomicU64>,
}

/// Resolves once the shutdown flag is set; never if the elector is dropped
/// without a shutdown (its leaderships live on).
pub(crate) async fn shut_down(flag: &mut watch::Receiver<bool>) {
    if flag.wait_for(|s| *s).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Counts one campaign or renewer of an elector while it lives.
pub(crate) struct Active(Arc<watch::Sender<usize>>);

impl Active {
    fn new(count: &Arc<watch::Sender<usize>>) -> Self {
        count.send_modify(|n| *n += 1);
        Active(count.clone())
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n -= 1);
    }
}

/// Campaigns for one election key on one backend, as one candidate.
///
/// Cheap to clone; clones share the shutdown switch.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure_core::Result<()> {
/// use std::sync::Arc;
/// use std::time::Duration;
/// use tenure_core::{Elector, MemoryBackend};
///
/// let elector = Elector::builder(Arc::new(MemoryBackend::new()))
///     .key("billing")
///     .identity("replica-1")
///     .ttl(Duration::from_secs(2))
///     .build()?;
/// let leadership = elector.campaign().await?;
/// assert!(leadership.is_valid());
/// let token = leadership.token(); // pass it with every write
/// leadership.resign().await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Elector {
    inner: Arc<Inner>,
}

impl Elector {
    /// Starts building an elector on `backend`.
    pub fn builder(backend: Arc<dyn LeaseBackend>) -> ElectorBuilder {
        ElectorBuilder {
            backend,
            key: None,
            identity: None,
            ttl: DEFAULT_TTL,
            renew_interval: None,
            renew_jitter: 0.1,
            drift_margin: None,
            retry: (Duration::from_millis(50), Duration::from_secs(2)),
            renew_on: RenewOn::default(),
            allow_unfenced: false,
            planted: Planted::default(),
        }
    }

    /// The candidacy this elector campaigns with.
    pub fn candidacy(&self) -> &Candidacy {
        &self.inner.candidacy
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<dyn LeaseBackend> {
        &self.inner.backend
    }

    /// Waits until we lead. Retryable backend errors are retried with jittered
    /// back-off; other errors, and shutdown ([`Error::Shutdown`]), end it.
    /// Dropping the future withdraws the candidacy; dropping the returned
    /// [`Leadership`] releases the lease, so bind it
    /// (`let leadership = elector.campaign().await?;`).
    #[must_use = "dropping the Leadership releases the lease at once; bind it: `let leadership = elector.campaign().await?;`"]
    pub async fn campaign(&self) -> Result<Leadership> {
        // Declared first, so dropped last: after the attempt in flight.
        let _active = Active::new(&self.inner.active);
        let mut backoff = self.backoff();
        let mut shutdown = self.inner.shutdown.subscribe();
        loop {
            if *shutdown.borrow_and_update() {
                return Err(Error::Shutdown);
            }
            let attempt = self
                .inner
                .backend
                .acquire(&self.inner.candidacy, AcquireMode::Wait);
            let outcome = crate::simulation::select! {
                outcome = attempt => outcome,
                _ = shutdown.wait_for(|s| *s) => return Err(Error::Shutdown),
            };
            match outcome {
                Ok(Acquisition::Granted(lease)) => match self.lead(lease).await {
                    Some(leadership) => return Ok(leadership),
                    None => continue,
                },
                Ok(Acquisition::Held(holder)) => {
                    tracing::debug!(key = %self.inner.candidacy.key(), holder = %holder.identity, "waiting acquire returned while held; retrying");
                }
                Err(error) if error.is_retryable() => {
                    let error = Arc::new(error);
                    self.inner.reporter.error("acquire", error.clone());
                    tracing::warn!(key = %self.inner.candidacy.key(), identity = %self.inner.candidacy.identity(), %error, "campaign attempt failed; retrying");
                }
                Err(error) => {
                    self.inner
                        .reporter
                        .error("acquire", Arc::new(error.duplicate()));
                    return Err(error);
                }
            }
            tokio::time::sleep(backoff.next_delay()).await;
        }
    }

    /// One attempt: leadership if the key is free now, `None` if someone holds it.
    /// Dropping the returned [`Leadership`] releases the lease at once.
    #[must_use = "dropping the Leadership releases the lease at once; bind it: `if let Some(leadership) = elector.try_acquire().await? { .. }`"]
    pub async fn try_acquire(&self) -> Result<Option<Leadership>> {
        let _active = Active::new(&self.inner.active);
        if *self.inner.shutdown.borrow() {
            return Err(Error::Shutdown);
        }
        match self
            .inner
            .backend
            .acquire(&self.inner.candidacy, AcquireMode::Once)
            .await?
        {
            Acquisition::Granted(lease) => Ok(self.lead(lease).await),
            Acquisition::Held(_) => Ok(None),
        }
    }

    /// Campaigns, runs `work` with the leadership until it returns or the
    /// leadership is lost (then `work` is dropped, i.e. cancelled), steps down,
    /// and campaigns again, until [`shutdown`](Self::shutdown).
    ///
    /// Each term's lease is released before the next campaign starts, and
    /// before `run` returns; at shutdown, `work` is dropped before the
    /// lease is released. [`shutdown`](Self::shutdown) waits for `run`
    /// to return (so do not await `shutdown` inside `work`: `work` is
    /// cancelled by it).
    ///
    /// `work` should pass `leadership.token()` with every write and may hand
    /// [`Leadership::term`] to the tasks it starts.
    pub async fn run<F, Fut>(&self, mut work: F) -> Result<()>
    where
        F: FnMut(Leadership) -> Fut,
        Fut: Future<Output = ()>,
    {
        // `shutdown` waits for this to return.
        let _active = Active::new(&self.inner.active);
        let mut shutdown = self.inner.shutdown.subscribe();
        loop {
            let leadership = match self.campaign().await {
                Ok(leadership) => leadership,
                Err(Error::Shutdown) => return Ok(()),
                Err(error) => return Err(error),
            };
            let term = leadership.term();
            term.shared.in_run.store(true, Ordering::SeqCst);
            let stop = {
                let work = work(leadership);
                tokio::pin!(work);
                // `None`: the work returned; `Some(stop)`: the term was
                // lost, or the elector shut down (`stop`).
                let ended = crate::simulation::select! {
                    _ = &mut work => None,
                    reason = term.lost() => {
                        tracing::info!(key = %term.key(), identity = %term.identity(), %reason, "leadership ended; cancelling the leader's work");
                        Some(false)
                    }
                    _ = shut_down(&mut shutdown) => Some(true),
                };
                let planted = self.inner.settings.planted;
                match ended {
                    None => false,
                    Some(true) => true,
                    // The planted bug: the work goes on after the loss.
                    Some(false) if planted.is(planted::ElectorBug::RunNotCancelled) => {
                        crate::simulation::select! {
                            _ = &mut work => false,
                            _ = shut_down(&mut shutdown) => true,
                        }
                    }
                    Some(false) => match planted.work_dropped_late() {
                        // The planted bug: the work goes on a while.
                        Some(late) => crate::simulation::select! {
                            _ = &mut work => false,
                            _ = tokio::time::sleep(late) => false,
                            _ = shut_down(&mut shutdown) => true,
                        },
                        None => false,
                    },
                }
            };
            // The work is dropped: at shutdown, the renewer may now release.
            term.shared.work_dropped.cancel();
            // The work (and with it the Leadership) is dropped: the renewer
            // releases the lease; wait until it has.
            term.settled().await;
            if stop {
                return Ok(());
            }
        }
    }

    /// Who leads, as a stream: the current state first, then each change.
    /// Errors are retried with back-off behind the scenes; the stream ends at
    /// shutdown.
    pub fn observe(&self) -> BoxStream<'static, LeaderEvent> {
        observe::observe(
            self.inner.backend.clone(),
            self.inner.candidacy.key().clone(),
            self.backoff(),
            self.inner.shutdown.subscribe(),
        )
    }

    /// Stops campaigning and steps down, and returns once that is done:
    /// pending `campaign`s fail with [`Error::Shutdown`] and withdraw, every
    /// [`Leadership`] of this elector ends and its lease is released (or,
    /// if the backend cannot be reached, given up after at most one TTL),
    /// `run` returns, `observe` streams end. If nothing else holds the
    /// backend (no clone of the `Arc` given to the builder, no other elector,
    /// no `observe` stream), it is [closed](LeaseBackend::close) too.
    ///
    /// A process that exits right after `shutdown().await` leaves nothing
    /// behind that a standby would have to wait out.
    pub async fn shutdown(&self) {
        self.inner.shutdown.send_replace(true);
        if self
            .inner
            .settings
            .planted
            .is(planted::ElectorBug::ShutdownEarly)
        {
            self.inner.state.send_replace(ElectorState::Stopped);
            return;
        }
        let mut active = self.inner.active.subscribe();
        let _ = active.wait_for(|n| *n == 0).await;
        crate::hosted::cleanups_finished().await;
        if Arc::strong_count(&self.inner.backend) == 1 {
            if let Err(error) = self.inner.backend.close().await {
                tracing::warn!(key = %self.inner.candidacy.key(), %error, "closing the backend failed");
            }
        }
        self.inner.state.send_replace(ElectorState::Stopped);
    }

    /// What the elector is doing, without polling: `Follower`, `Leader`
    /// with the term's token, or `Stopped`; `changed().await` on the
    /// receiver waits for the next change. A leader's work should still
    /// check [`Term::is_valid`] right before each action: a state change
    /// is seen when it is delivered, the deadline is exact.
    pub fn state(&self) -> watch::Receiver<ElectorState> {
        self.inner.state.subscribe()
    }

    /// Who leads the key now, as the backend sees it: one look (a watch's
    /// first event), `None` while it is vacant.
    pub async fn leader(&self) -> Result<Option<LeaderInfo>> {
        let mut events = self.inner.backend.watch(self.inner.candidacy.key()).await?;
        match events.next().await {
            Some(Ok(LeaderEvent::Elected(info))) => Ok(Some(info)),
            Some(Ok(LeaderEvent::Vacant)) => Ok(None),
            Some(Err(error)) => Err(error),
            None => Err(Error::unavailable(
                self.inner.backend.name(),
                "the watch ended before its first event",
            )),
        }
    }

    /// Whether it leads, the last backend error and its age, the time since
    /// the last successful renewal, and the last loss; the same figures go
    /// to the [`metrics`] facade (see [`Health`]).
    /// [`Health::check`] turns them into a liveness verdict.
    pub fn health(&self) -> Health {
        let is_leader = matches!(*self.inner.state.borrow(), ElectorState::Leader { .. });
        self.inner.reporter.health(is_leader)
    }

    /// Whether [`shutdown`](Self::shutdown) was called.
    pub fn is_shut_down(&self) -> bool {
        *self.inner.shutdown.borrow()
    }

    fn backoff(&self) -> Backoff {
        let backoff = Backoff::new(self.inner.settings.retry_min, self.inner.settings.retry_max);
        match self
            .inner
            .settings
            .planted
            .is(planted::ElectorBug::BackoffWithoutJitter)
        {
            true => backoff.without_jitter(), // the planted bug
            false => backoff,
        }
    }

    /// Turns a granted lease into a Leadership with its renewer, unless the
    /// grant arrived too late to be used.
    async fn lead(&self, lease: Lease) -> Option<Leadership> {
        let settings = &self.inner.settings;
        if !lease.is_valid() {
            tracing::debug!(key = %lease.key(), "grant arrived after its deadline; releasing it");
            let _ = renewal::release(&*self.inner.backend, &lease, settings).await;
            return None;
        }
        // The term's number and the state change together, under the
        // state's lock, so the end of an older term never hides a newer one.
        // The term shows as a follower again when it ends (TermShared::end),
        // before any release is sent, or at its deadline.
        let mut term_no = None;
        self.inner.state.send_if_modified(|state| {
            if *state == ElectorState::Stopped {
                return false;
            }
            term_no = Some(self.inner.terms.fetch_add(1, Ordering::SeqCst) + 1);
            *state = ElectorState::Leader {
                token: lease.token(),
            };
            true
        });
        let shared = Arc::new(TermShared {
            key: lease.key().clone(),
            identity: lease.holder().clone(),
            token: lease.token(),
            status: watch::Sender::new(Status {
                valid_until: settings.planted.deadline(lease.valid_until()),
                ended: None,
                settled: false,
            }),
            cancel: tokio_util::sync::CancellationToken::new(),
            planted: settings.planted,
            in_run: false.into(),
            work_dropped: tokio_util::sync::CancellationToken::new(),
            standing: term_no.map(|no| Standing {
                state: self.inner.state.clone(),
                terms: self.inner.terms.clone(),
                no,
            }),
        });
        tracing::info!(
            key = %lease.key(),
            identity = %lease.holder(),
            token = lease.token().map(|t| t.get()),
            "acquired leadership"
        );
        let (step_down, step_down_rx) = oneshot::channel();
        let active = Active::new(&self.inner.active);
        self.inner.reporter.term_began(lease.sent_at());
        let span = tracing::info_span!(
            "tenure.term",
            key = %lease.key(),
            identity = %lease.holder(),
            token = lease.token().map(|t| t.get()),
        );
        let renewer = tracing::Instrument::instrument(
            renewal::renew_until_lost(
                self.inner.backend.clone(),
                lease,
                settings.clone(),
                shared.clone(),
                step_down_rx,
                self.inner.shutdown.subscribe(),
                self.inner.reporter.clone(),
            ),
            span,
        );
        let settled = shared.clone();
        let (term, reporter) = (
            Term {
                shared: shared.clone(),
            },
            self.inner.reporter.clone(),
        );
        // At the deadline the term is over even before the renewer says so.
        let ended = async move {
            let reason = term.lost().await;
            term.shared.cancel.cancel();
            let current = match &term.shared.standing {
                Some(standing) => {
                    standing.leave();
                    standing.current()
                }
                None => false,
            };
            reporter.term_ended(reason, current);
        };
        settings.renew_on.spawn(async move {
            tokio::join!(renewer, ended);
            settled.status.send_modify(|s| s.settled = true);
            drop(active);
        });
        Some(Leadership {
            term: Term { shared },
            step_down: Some(step_down),
        })
    }
}
