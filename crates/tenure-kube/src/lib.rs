#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

// DESIGN. The Kubernetes Lease protocol as client-go's LeaseLock writes it,
// nothing else: the layers in tenure-core check input, trace, and run
// every operation on the heartbeat runtime.
//
// Waiting (issue 27): a waiter must not hear of every change, or a hundred
// of them turn each write into a hundred watch events and a hundred racing
// writes. So the Lease names the next two waiters in labels
// (`tenure.dev/next-<tag>`), each waiter watches it with a label selector on
// its own label (the API server sends it nothing while it is not named),
// and the rest wait in the annotations of a sibling Lease, `<key>-queue`
// (merge patches: joining never conflicts with renewals). The first named
// waiter takes a free Lease at once; the second one grace later, skipping
// a first that is gone; a waiter not named holds back until every named one
// had its turn, reads the Lease now and then, and names itself when fewer
// than two are named. Whoever takes the Lease over names the next waiters
// from the queue in the same write. Only liveness and cost depend on this:
// every take-over is still a compare-and-swap on what its writer judged
// free or expired by its own clock, and a holder's deadline still counts
// from its send; labels and annotations are never authority. client-go
// ignores them and keeps them when it writes.
//
//   lib.rs         KubeBackend: options, connect, the HeartbeatBackend impl
//   record.rs      client-go's field use, and what tells two terms apart
//   renew_time.rs  renewTime as a client-go peer sees it: to the second
//   fencing.rs     tokens from the resourceVersion a grant was written against
//   guard.rs       a granting write whose answer was never read, undone
//   observe.rs     expiry by the observer's own clock; watching a Lease
//                  (with a label selector, filtered as kube-apiserver does)
//   waiting.rs     a waiter's place in line: named, queued, withdrawn
//   nominees.rs    the labels naming the next waiters; who holds back how long
//   queue.rs       the queue Lease: joining, leaving, reading the line
//   own.rs         a holder watches its own Lease (deleted or taken: lost)
//   granted.rs     what a granted lease carries (KubeGrant)
//   error.rs       kube client errors as tenure's, retryable or not
//   url.rs         kube:// URLs

mod error;
mod fencing;
mod granted;
mod guard;
mod nominees;
mod observe;
mod own;
mod queue;
mod record;
mod renew_time;
mod url;
mod waiting;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::stream::BoxStream;
use k8s_openapi::api::coordination::v1::Lease as KubeLease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::PostParams;
use kube::{Api, Client};
use tenure_core::hosted::{bounded, watch_stream, Looks};
use tenure_core::on_heartbeat_runtime;
use tenure_core::{
    AcquireMode, Acquisition, Candidacy, Capabilities, ElectionKey, Error, FencingToken,
    HeartbeatBackend, KeyRule, LeaderEvent, LeaderInfo, Lease, LeaseHandle, LossReason, LossSignal,
    Result,
};
use tokio::sync::Mutex;
use tokio::time::Instant;

pub use k8s_openapi;
pub use kube;

pub use crate::fencing::{Fencing, TERM_ANNOTATION, TOKEN_ANNOTATION};

use crate::error::{refused, Refused, BACKEND};
use crate::granted::{KubeGrant, Ours};
use crate::guard::GrantGuard;
use crate::observe::Observations;
use crate::record::{Record, Term};
use crate::renew_time::NewestSecond;

/// The `User-Agent` of the watch a candidate waiting for a Lease keeps open
/// (and of its list after a 410 Gone): `tenure-kube/<version> (waiting;
/// <identity>)`, the identity left out where it cannot be a header's text
/// (it is not printable ASCII, or has a `)`). A holder's watch of its own
/// Lease says `holder` instead, an observer's `observer`, without identity.
/// An API server's audit log and metrics can tell them apart by it; the
/// Lease API test server counts them, so the conformance suite knows who
/// is waiting.
pub fn waiting_user_agent(identity: &tenure_core::CandidateId) -> String {
    let agent = observe::user_agent("waiting", Some(identity.as_str()));
    agent.to_str().unwrap_or_default().to_owned()
}

/// Options for [`KubeBackend`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct KubeOptions {
    /// Deadline of each request (never of a watch), capped by the TTL; default 5 s.
    pub request_timeout: Duration,
    /// Which fencing token grants carry; default
    /// [`Fencing::ResourceVersion`] (Kubernetes 1.35 and later). Choose
    /// [`Fencing::LeaseTransitions`] on older clusters: its tokens do not
    /// survive the Lease being deleted.
    pub fencing: Fencing,
}

impl Default for KubeOptions {
    fn default() -> Self {
        KubeOptions {
            request_timeout: Duration::from_secs(5),
            fencing: Fencing::default(),
        }
    }
}

/// The old name of [`KubeBackend`], named like the other backends now.
#[deprecated(since = "0.1.0", note = "renamed to `KubeBackend`")]
pub type KubeLeaseBackend = KubeBackend;

/// Leader election on `coordination.k8s.io/v1` Leases, compatible with
/// client-go's LeaseLock. One Lease object per election, named by the key.
///
/// Fencing token: by default derived from the resourceVersion of the
/// granting write, which survives the Lease being deleted and created again
/// (Kubernetes 1.35 and later); `leaseTransitions` as an option for older
/// clusters ([`Fencing`]). Waiting candidates wait in line: the Lease
/// names the next two in labels, the others wait in the annotations of a
/// sibling Lease, `<key>-queue`, and hear nothing of the Lease until it
/// names them, so a leadership change costs a few requests, not a few per
/// waiter (the crate's README says how, and what a client-go peer sees).
#[derive(Clone)]
pub struct KubeBackend {
    /// Behind an `Arc`: tenure's layers take a copy of the backend for
    /// every operation.
    inner: Arc<Inner>,
}

/// What a [`KubeBackend`] and its copies share.
struct Inner {
    api: Api<KubeLease>,
    namespace: String,
    options: KubeOptions,
    observations: Arc<Observations>,
}

impl std::fmt::Debug for KubeBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeBackend")
            .field("namespace", &self.inner.namespace)
            .field("options", &self.inner.options)
            .finish_non_exhaustive()
    }
}

impl KubeBackend {
    /// Wraps a client; Leases live in `namespace`.
    ///
    /// # The client's runtime
    ///
    /// tenure runs every operation on its heartbeat runtime, so that an
    /// application runtime whose threads are all busy or blocked cannot stall
    /// renewals. That promise does NOT hold for a client built on the
    /// application's runtime: a `kube::Client` sends every request through a
    /// worker task (tower's buffer) spawned on the runtime it was built on,
    /// so a starved application runtime stalls renewals anyway, and the
    /// lease is lost. Use [`from_config`](Self::from_config) (or
    /// [`infer`](Self::infer), [`connect_url`](Self::connect_url)), which
    /// build the client on the heartbeat runtime; or build it there
    /// yourself:
    ///
    /// ```no_run
    /// # async fn demo(config: tenure_kube::kube::Config) -> Result<(), Box<dyn std::error::Error>> {
    /// use tenure_kube::{kube, KubeBackend, KubeOptions};
    /// let client = tenure_core::heartbeat_runtime()
    ///     .spawn(async move { kube::Client::try_from(config) })
    ///     .await??;
    /// let backend = KubeBackend::new(client, "default", KubeOptions::default());
    /// # Ok(()) }
    /// ```
    pub fn new(client: Client, namespace: impl Into<String>, options: KubeOptions) -> Self {
        let namespace = namespace.into();
        KubeBackend {
            inner: Arc::new(Inner {
                api: Api::namespaced(client, &namespace),
                namespace,
                options,
                observations: Default::default(),
            }),
        }
    }

    /// A client from a `kube::Config` (its default namespace), driven by
    /// tenure's heartbeat thread.
    pub async fn from_config(config: kube::Config, options: KubeOptions) -> Result<Self> {
        let namespace = config.default_namespace.clone();
        let client = on_heartbeat_runtime(BACKEND, async move {
            Client::try_from(config).map_err(error::map)
        })
        .await?;
        Ok(Self::new(client, namespace, options))
    }

    /// A client from the kubeconfig (`KUBECONFIG`, `~/.kube/config`) or the in-cluster config.
    pub async fn infer(options: KubeOptions) -> Result<Self> {
        let config = kube::Config::infer()
            .await
            .map_err(|e| Error::backend(BACKEND, e))?;
        Self::from_config(config, options).await
    }

    /// A client from a URL: `kube://` (the default kubeconfig, else the
    /// in-cluster service account) or `kube:///path/to/kubeconfig` (an
    /// absolute path), each optionally with `?namespace=ns&context=name`
    /// (percent-encoded where needed) and `fencing=lease-transitions` for
    /// clusters before Kubernetes 1.35 ([`Fencing`]). A malformed URL, or a
    /// kubeconfig file that cannot be read or has no such context, is
    /// [`Error::InvalidArgument`] naming `url`; nothing is sent meanwhile.
    /// An unknown parameter, one given twice, a host or a user in the URL
    /// are refused: the API server's address, TLS (its CA, client
    /// certificates) and credentials (tokens, exec plugins) all come from
    /// the kubeconfig or the in-cluster service account.
    pub async fn connect_url(url: &str) -> Result<Self> {
        let target = url::parse(url)?;
        let options = KubeOptions {
            fencing: target.fencing.unwrap_or_default(),
            ..KubeOptions::default()
        };
        let config = url::config(url, target).await?;
        Self::from_config(config, options).await
    }

    /// The namespace its Leases live in.
    pub fn namespace(&self) -> &str {
        &self.inner.namespace
    }

    /// The Lease API of this backend's namespace.
    pub fn api(&self) -> &Api<KubeLease> {
        &self.inner.api
    }

    fn timeout(&self, ttl: Duration) -> Duration {
        self.inner.options.request_timeout.min(ttl)
    }

    async fn get(&self, name: &str, after: Duration) -> Result<Option<KubeLease>> {
        bounded("get lease", after, self.inner.api.get_opt(name))
            .await?
            .map_err(error::map)
    }

    /// One attempt, or (`Wait`) a wait in line (waiting.rs) until the
    /// Lease is free or expired and this candidate's turn has come; every
    /// grant a compare-and-swap on what it judged free.
    async fn acquire_inner(&self, candidacy: &Candidacy, mode: AcquireMode) -> Result<Acquisition> {
        let name = candidacy.key().as_str();
        let me = candidacy.identity().as_str();
        let after = self.timeout(candidacy.ttl());
        let pp = PostParams::default();
        // The Lease as the last watch event (or our own create) showed it,
        // if that is all we need.
        let mut delivered: Option<Option<KubeLease>> = None;
        let mut waiter = (mode == AcquireMode::Wait)
            .then(|| waiting::Waiter::new(self.inner.api.clone(), candidacy, after));
        let mut watch = observe::LeaseWatch::new(
            self.inner.api.clone(),
            name,
            observe::user_agent("waiting", Some(me)),
        )
        .telling(candidacy);
        if let Some(waiter) = &waiter {
            // Told of the Lease's changes only while it names us.
            watch = watch.selecting(waiter.label());
        }
        // Whether the watch tells of every change.
        let mut whole = waiter.is_none();
        // A waiting candidate waits through an apiserver's transient errors
        // (a 500 while its etcd restarts, a 429, a broken connection),
        // reading again with back-off: waiting is its job.
        let mut retry = tenure_core::hosted::Backoff::new(
            Duration::from_millis(50),
            (candidacy.ttl() / 4).max(Duration::from_millis(50)),
        );
        loop {
            let observed = match delivered.take() {
                Some(observed) => observed,
                None => match self.get(name, after).await {
                    Ok(observed) => {
                        retry.reset();
                        observed
                    }
                    Err(e) if mode == AcquireMode::Wait && e.is_retryable() => {
                        let pause = retry.next_delay();
                        tracing::debug!(lease = name, error = %e, retry_in = ?pause, "reading the Lease failed while waiting; reading again");
                        tokio::time::sleep(pause).await;
                        continue;
                    }
                    Err(e) => return Err(e),
                },
            };
            let Some(observed) = observed else {
                if self.inner.options.fencing == Fencing::ResourceVersion {
                    // Created free, then taken over like any free Lease:
                    // the take-over's compare-and-swap gives the token.
                    let lease = record::vacant(name);
                    match bounded("create lease", after, self.inner.api.create(&pp, &lease)).await?
                    {
                        Ok(created) => delivered = Some(Some(created)),
                        Err(e) => match refused(e) {
                            Refused::Conflict | Refused::NotFound => {}
                            Refused::Other(e) => return Err(e),
                        },
                    }
                    continue;
                }
                let sent_at = Instant::now();
                let lease = record::new_lease(name, me, candidacy.ttl());
                let guard = GrantGuard::arm(&self.inner.api, name, &lease, after);
                let answer =
                    bounded("create lease", after, self.inner.api.create(&pp, &lease)).await?;
                match answered(guard, answer) {
                    Ok(written) => {
                        if let Some(waiter) = waiter.take() {
                            waiter.granted(Vec::new());
                        }
                        return Ok(self.granted(candidacy, written, None, sent_at));
                    }
                    Err(e) => match refused(e) {
                        Refused::Conflict | Refused::NotFound => continue,
                        Refused::Other(e) => return Err(e),
                    },
                }
            };
            let rec = Record::of(&observed);
            let since = self.inner.observations.seen(name, &rec.resource_version);
            let expires = since + rec.duration;
            if rec.holder.is_empty() || Instant::now() >= expires {
                // Free since we first saw it so, or expired by our clock;
                // a waiter lets those before it in line go first.
                let free_from = if rec.holder.is_empty() {
                    since
                } else {
                    expires
                };
                let hold_back = waiter.as_ref().map(|w| w.hold_back(&observed));
                let due = free_from + hold_back.unwrap_or_default();
                if let Some(waiter) = waiter.as_ref().filter(|_| Instant::now() < due) {
                    watch.knowing(waiter.position(&observed).is_some());
                    if let observe::Change::Seen(now) =
                        watch.changed(&rec.resource_version, Some(due)).await
                    {
                        delivered = Some(now.map(|lease| *lease));
                    }
                    continue;
                }
                let mut lease = record::granted(&observed, me, candidacy.ttl());
                let skipped = match waiter.as_mut() {
                    Some(waiter) => waiter.hand_on(&mut lease, &observed).await,
                    None => Vec::new(),
                };
                let token = match self.inner.options.fencing {
                    Fencing::ResourceVersion => {
                        let token = fencing::next_token(&observed)?;
                        fencing::stamp(&mut lease, token);
                        Some(token)
                    }
                    Fencing::LeaseTransitions => {
                        fencing::lift_transitions(&mut lease, &observed)?;
                        None
                    }
                };
                let sent_at = Instant::now();
                let guard = GrantGuard::arm(&self.inner.api, name, &lease, after);
                let answer = bounded(
                    "take lease",
                    after,
                    self.inner.api.replace(name, &pp, &lease),
                )
                .await?;
                match answered(guard, answer) {
                    Ok(written) => {
                        if let Some(waiter) = waiter.take() {
                            waiter.granted(skipped);
                        }
                        return Ok(self.granted(candidacy, written, token, sent_at));
                    }
                    Err(e) => match refused(e) {
                        Refused::Conflict
                            if (whole || named_in(&waiter, &observed))
                                && watch.follows(&rec.resource_version) =>
                        {
                            // Another write came first; it is the next event on
                            // the watch we took this state from (which tells
                            // us of every change while the Lease names us):
                            // no read needed.
                            let until = Instant::now() + after;
                            watch.knowing(named_in(&waiter, &observed));
                            if let observe::Change::Seen(now) =
                                watch.changed(&rec.resource_version, Some(until)).await
                            {
                                delivered = Some(now.map(|lease| *lease));
                            }
                            continue;
                        }
                        Refused::Conflict | Refused::NotFound => continue,
                        Refused::Other(e) => return Err(e),
                    },
                }
            }
            let holder = LeaderInfo {
                identity: tenure_core::CandidateId::new(&rec.holder)?,
                token: fencing::token_of(&observed, self.inner.options.fencing),
            };
            let Some(waiter) = waiter.as_mut() else {
                return Ok(Acquisition::Held(holder));
            };
            match waiter.settle_in(&observed, &mut watch).await {
                waiting::Step::LookAgain => continue,
                // Waits from the look: the watch tells of our own write next.
                waiting::Step::Named | waiting::Step::Wait => {}
            }
            if waiter.hears_all() && !whole {
                // It cannot join the queue: it watches the whole Lease.
                whole = true;
                watch = observe::LeaseWatch::new(
                    self.inner.api.clone(),
                    name,
                    observe::user_agent("waiting", Some(me)),
                )
                .telling(candidacy);
            }
            let until = waiter.until(&observed, expires);
            watch.knowing(waiter.position(&observed).is_some());
            if let observe::Change::Seen(now) =
                watch.changed(&rec.resource_version, Some(until)).await
            {
                delivered = Some(now.map(|lease| *lease));
            }
        }
    }

    /// A grant: `token` is the one the granting write carries, if any (else
    /// leaseTransitions as written).
    fn granted(
        &self,
        candidacy: &Candidacy,
        written: KubeLease,
        token: Option<u64>,
        sent_at: Instant,
    ) -> Acquisition {
        let rec = Record::of(&written);
        self.inner
            .observations
            .seen(candidacy.key().as_str(), &rec.resource_version);
        let token = token.unwrap_or(rec.transitions.max(0) as u64);
        let (signal, releasing) = (LossSignal::new(), Arc::new(AtomicBool::new(false)));
        // A server that stored a shorter duration than we sent grants less:
        // count no further (None: it grants no time at all).
        let counted = record::counted_from(sent_at, candidacy.ttl(), &written);
        if counted.is_none() {
            signal.fire(LossReason::Revoked);
        }
        let last = Arc::new(Mutex::new(Ours {
            newest: NewestSecond::granted(&written, sent_at),
            lease: record::trimmed(written.clone()),
        }));
        let own = own::watch(
            self.inner.api.clone(),
            &written,
            own::Told {
                releasing: releasing.clone(),
                signal: signal.clone(),
                last: Arc::downgrade(&last),
            },
            self.timeout(candidacy.ttl()),
        );
        let held = KubeGrant {
            term: Term::of(&written),
            last,
            releasing,
            _own: own,
        };
        Acquisition::Granted(
            Lease::new(
                candidacy.clone(),
                Some(FencingToken::new(token)),
                counted.unwrap_or(sent_at),
                LeaseHandle::new(held),
            )
            .with_loss_signal(signal),
        )
    }

    /// Writes `change(last, renewTime)` against the last resourceVersion we
    /// know; on a conflict, re-reads and retries while the Lease is still
    /// ours (same term: holder, acquireTime, transitions), so a renewal
    /// cancelled midway cannot make a release fail (kubernetes#131867).
    /// `Ok(Ok(from))`: written, and a deadline counts from `from`, the send
    /// of the term's first write in the second of its renewTime
    /// (renew_time.rs), or earlier if the server stored a shorter
    /// leaseDurationSeconds than the TTL ([`record::counted_from`]). `Ok(Err(_))`: the Lease is no longer ours (another
    /// holder or term, deleted, or released by us already).
    async fn write_ours(
        &self,
        lease: &Lease,
        held: &KubeGrant,
        operation: &'static str,
        change: &(dyn Fn(&KubeLease, MicroTime, Duration) -> KubeLease + Sync),
    ) -> Result<std::result::Result<Instant, LossReason>> {
        let name = lease.key().as_str();
        let after = self.timeout(lease.ttl());
        let mut last = held.last.lock().await;
        if Record::of(&last.lease).holder != lease.holder().as_str() {
            // Released already: nothing of ours is left to write.
            return Ok(Err(LossReason::Resigned));
        }
        for _ in 0..3 {
            let renew_time = last.newest.next();
            let next = change(&last.lease, renew_time.clone(), lease.ttl());
            // Counted before the write is sent: a renewal cancelled on its
            // way may still land.
            let from = last.newest.sent(&renew_time, Instant::now());
            match bounded(
                operation,
                after,
                self.inner.api.replace(name, &PostParams::default(), &next),
            )
            .await?
            {
                Ok(written) => {
                    last.newest.answered();
                    let from = record::counted_from(from, lease.ttl(), &written);
                    last.lease = record::trimmed(written);
                    // None: what the server stored grants no time at all.
                    return Ok(from.ok_or(LossReason::Revoked));
                }
                Err(e) => match refused(e) {
                    Refused::NotFound => return Ok(Err(LossReason::Deleted)),
                    Refused::Other(e) => return Err(e),
                    Refused::Conflict => {
                        let Some(now) = self.get(name, after).await? else {
                            return Ok(Err(LossReason::Deleted));
                        };
                        if Term::of(&now) != held.term {
                            return Ok(Err(LossReason::TakenOver));
                        }
                        last.lease = record::trimmed(now);
                    }
                },
            }
        }
        Err(Error::unavailable(
            BACKEND,
            "the Lease kept changing under us",
        ))
    }

    /// The line a release names reserves from (nominees.rs): read if the
    /// Lease names a full line, so that waiters may be queued behind it
    /// (else none); a read that fails or takes longer than a grace costs
    /// the reserves, not the release.
    async fn line_for_release(&self, lease: &Lease, held: &KubeGrant) -> Vec<queue::Entry> {
        let named = nominees::named(&held.last.lock().await.lease).len();
        if named < nominees::NOMINEES {
            return Vec::new();
        }
        let ttl = lease.ttl();
        let after = self.timeout(ttl).min(nominees::grace(ttl));
        let key = lease.key().as_str();
        match queue::read(&self.inner.api, key, ttl, after).await {
            Ok(line) => line,
            Err(error) => {
                tracing::debug!(lease = key, %error, "could not read the queue before releasing");
                Vec::new()
            }
        }
    }

    /// Waits until the wall clock has left the second of the term's newest
    /// renewTime once a write in it was answered, so that the renewal is
    /// one a client-go peer can tell from the write before it
    /// (renew_time.rs); after a write in it that failed, a retry goes at once. A wait that would outlast the
    /// lease (the wall clock went back) is refused as unavailable: the
    /// Elector tries again until the deadline.
    async fn next_second(&self, lease: &Lease, held: &KubeGrant) -> Result<()> {
        loop {
            let wait = held.last.lock().await.newest.wait();
            if wait.is_zero() {
                return Ok(());
            }
            if Instant::now() + wait >= lease.valid_until() {
                return Err(Error::unavailable(
                    BACKEND,
                    format!(
                        "the wall clock is {wait:?} behind the end of the second of the Lease's \
                         newest renewTime: a renewal before then is no change to a client-go \
                         peer, and the lease ends first"
                    ),
                ));
            }
            tracing::debug!(
                ?wait,
                "renewing in the next second of the wall clock: client-go sees renewTime to the second"
            );
            tokio::time::sleep(wait).await;
        }
    }
}

/// Looks at one Lease for a watch: a read, then the state each watch event
/// shows (or a read again, after an event that came without the Lease).
struct LeaseLooks {
    backend: KubeBackend,
    name: String,
    watch: observe::LeaseWatch,
    /// What the last look saw: the resourceVersion to watch from, and when
    /// its holder's lease runs out (a change by itself).
    seen: Option<(String, Option<Instant>)>,
}

#[async_trait]
impl Looks for LeaseLooks {
    async fn next(&mut self) -> Result<LeaderEvent> {
        // The Lease as the watch event showed it, if it came with one.
        let mut delivered: Option<Option<KubeLease>> = None;
        if let Some((rv, until)) = self.seen.take() {
            if let observe::Change::Seen(now) = self.watch.changed(&rv, until).await {
                delivered = Some(now.map(|lease| *lease));
            }
        }
        let backend = &self.backend;
        let observed = match delivered {
            Some(observed) => observed,
            None => {
                backend
                    .get(&self.name, backend.inner.options.request_timeout)
                    .await?
            }
        };
        let (event, rv, until) = match &observed {
            None => (LeaderEvent::Vacant, "0".to_owned(), None),
            Some(lease) => {
                let rec = Record::of(lease);
                let since = backend
                    .inner
                    .observations
                    .seen(&self.name, &rec.resource_version);
                let expires = since + rec.duration;
                let event = match tenure_core::CandidateId::new(&rec.holder) {
                    Ok(identity) if Instant::now() < expires => LeaderEvent::Elected(LeaderInfo {
                        identity,
                        token: fencing::token_of(lease, backend.inner.options.fencing),
                    }),
                    _ => LeaderEvent::Vacant,
                };
                let until = matches!(event, LeaderEvent::Elected(_)).then_some(expires);
                (event, rec.resource_version, until)
            }
        };
        self.seen = Some((rv, until));
        Ok(event)
    }
}

/// Whether `lease` names `waiter` next in line.
fn named_in(waiter: &Option<waiting::Waiter>, lease: &KubeLease) -> bool {
    waiter.as_ref().is_some_and(|w| w.position(lease).is_some())
}

/// The answer of a granting write, read: its guard stands down if the
/// answer says for certain what became of the write. A write that got no
/// answer (a deadline, a broken connection), or one that may follow a
/// committed write (a 5xx, a 504 from a load balancer), keeps the guard
/// armed, so it is dropped armed and releases the Lease if the write landed.
fn answered(
    guard: GrantGuard,
    answer: std::result::Result<KubeLease, kube::Error>,
) -> std::result::Result<KubeLease, kube::Error> {
    guard.answered(&answer);
    answer
}

#[async_trait]
impl HeartbeatBackend for KubeBackend {
    const NAME: &'static str = BACKEND;
    type LeaseState = KubeGrant;

    fn capabilities(&self) -> Capabilities {
        let mut caps = Capabilities::new(true, false);
        // A lease must outlive a whole second: client-go sees renewals to
        // the second only (renew_time.rs).
        caps.min_ttl = Duration::from_secs(2);
        caps.ttl_granularity = Duration::from_secs(1);
        caps.key_rule = KeyRule::Dns1123Subdomain;
        caps.max_key_len = 253;
        // Expiry as client-go judges it: by our own clock, from the last change we saw.
        caps.expiry_judged_by_observer = true;
        // leaseTransitions starts again at 0 in a Lease created anew.
        caps.tokens_survive_state_loss = self.inner.options.fencing == Fencing::ResourceVersion;
        // Each holder watches its own Lease (own.rs).
        caps.holder_watches_own_record = true;
        caps
    }

    async fn acquire(&self, candidacy: Candidacy, mode: AcquireMode) -> Result<Acquisition> {
        self.acquire_inner(&candidacy, mode).await
    }

    async fn renew(&self, lease: Lease, held: &KubeGrant) -> Result<Lease> {
        if !lease.is_valid() {
            // The lease ran out before it was renewed.
            return Err(Error::lease_lost(lease.key().as_str(), LossReason::Expired));
        }
        self.next_second(&lease, held).await?;
        match self
            .write_ours(&lease, held, "renew lease", &record::renewed)
            .await?
        {
            Ok(sent_at) => Ok(lease.renewed(sent_at, lease.handle().clone())),
            Err(reason) => Err(Error::lease_lost(lease.key().as_str(), reason)),
        }
    }

    async fn release(&self, lease: Lease, held: &KubeGrant) -> Result<()> {
        held.releasing.store(true, Ordering::SeqCst);
        let line = self.line_for_release(&lease, held).await;
        let holder = lease.holder().as_str();
        self.write_ours(&lease, held, "release lease", &|last, _, _| {
            let mut next = record::released(last);
            nominees::reserve(&mut next, &line, holder);
            next
        })
        .await
        .map(|_| ())
    }

    async fn watch(&self, key: ElectionKey) -> Result<BoxStream<'static, Result<LeaderEvent>>> {
        let name = key.as_str().to_owned();
        let watch = observe::LeaseWatch::new(
            self.inner.api.clone(),
            &name,
            observe::user_agent("observer", None),
        );
        watch_stream(LeaseLooks {
            backend: self.clone(),
            name,
            watch,
            seen: None,
        })
        .await
    }
}
