//! The in-memory backend: the whole contract in one process.

mod faults;
mod server;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::stream::BoxStream;
use tokio::time::Instant;

pub use faults::Faults;
pub use server::MemoryStats;
use server::{Grant, Server};

use crate::layers::{Checked, Traced};
use crate::{
    AcquireMode, Acquisition, Candidacy, Capabilities, ElectionKey, Error, LeaderEvent, LeaderInfo,
    Lease, LeaseBackend, LeaseHandle, Result,
};

/// An in-process lease server and one client of it.
///
/// The default backend, for tests and single-process use. It keeps the whole
/// contract: herd-free waiting queue, strictly increasing tokens, TTL expiry
/// on tokio time (so it runs under `tokio::time::pause()`), watch with
/// vacancy. [`MemoryBackend::client`] makes another client of the same server
/// with its own [`Faults`], so tests can fail, delay or cut off one candidate.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure_core::Result<()> {
/// use std::time::Duration;
/// use tenure_core::{AcquireMode, Candidacy, CandidateId, ElectionKey, LeaseBackend, MemoryBackend};
///
/// let server = MemoryBackend::new();
/// let (a, b) = (server.client(), server.client());
/// let key = ElectionKey::new("billing")?;
/// let ttl = Duration::from_secs(2);
/// let lease = a
///     .acquire(&Candidacy::new(key.clone(), CandidateId::new("a")?, ttl)?, AcquireMode::Once)
///     .await?
///     .granted()
///     .expect("vacant key is granted");
/// let held = b.acquire(&Candidacy::new(key, CandidateId::new("b")?, ttl)?, AcquireMode::Once).await?;
/// assert!(held.granted().is_none());
/// a.release(&lease).await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct MemoryBackend {
    server: Arc<Server>,
    faults: Arc<Faults>,
    /// This client's session on the server (see [`limit_session`](Self::limit_session)).
    session: u64,
}

impl Default for MemoryBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryBackend {
    /// A new server with one client.
    pub fn new() -> Self {
        Self::with_capabilities(Self::default_capabilities())
    }

    /// A new server that declares (and enforces) these capabilities, e.g. a
    /// TTL minimum, to test how code copes with a stricter backend.
    pub fn with_capabilities(capabilities: Capabilities) -> Self {
        let server = Arc::new(Server::new(capabilities));
        MemoryBackend {
            session: server.new_session(),
            server,
            faults: Arc::default(),
        }
    }

    /// What a default server declares: fencing, herd-free wait, 1 ms TTL granularity.
    pub fn default_capabilities() -> Capabilities {
        let mut caps = Capabilities::new(true, true);
        // `MemoryBackend::wipe` tells the holder at once.
        caps.holder_watches_own_record = true;
        caps
    }

    /// Another client of the same server, with its own faults.
    pub fn client(&self) -> MemoryBackend {
        MemoryBackend {
            server: self.server.clone(),
            faults: Arc::default(),
            session: self.server.new_session(),
        }
    }

    /// This client's fault knobs.
    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    /// Ends the current grant of `key` now, as if its TTL had run out.
    pub fn expire_now(&self, key: &ElectionKey) {
        self.server.expire_now(key);
    }

    /// The server node this client's session is on now keeps its leases at
    /// most `max` after it last heard of them, whatever their TTLs (`None`:
    /// their TTLs again), as a ZooKeeper server whose `maxSessionTimeout` is
    /// below the timeout a session asks for does to one that reconnects to
    /// it (servers that disagree, a rolling configuration change). The
    /// client learns of it as tenure-zookeeper learns the timeout its
    /// session is given at every reconnect: each lease it holds with a
    /// longer TTL ends at once ([`LossReason::Revoked`](crate::LossReason::Revoked)
    /// through its [`LossSignal`](crate::LossSignal); renewing it is
    /// `LeaseLost`), and so does one granted while the limit holds. The
    /// reconnect counts as activity: a lease the client goes on renewing
    /// regardless is kept `max` from each renewal. Asking again for the
    /// limit in force changes nothing.
    pub fn limit_session(&self, max: Option<Duration>) {
        self.server
            .limit_session(self.session, max, !self.faults.ignores_session_limits());
    }

    /// Deletes the election's state on the server out of band, as an
    /// operator deleting the record would: the holder is gone at once and
    /// told so (its lease's [`LossSignal`](crate::LossSignal) fires, as a
    /// backend that watches its holders' records does), the next waiter is
    /// granted. Tokens keep increasing.
    pub fn wipe(&self, key: &ElectionKey) {
        self.server.wipe(key);
    }

    /// Every holder's TTL starts over from now, as a deployment's does when
    /// it recovers its durable state after a restart or elects a new leader
    /// of its own (etcd's lessor refreshes every lease on a new raft leader;
    /// ZooKeeper restarts every session's timeout): nobody loses a lease for
    /// the servers' downtime. Holders, waiting queues and tokens are kept.
    pub fn refresh_all(&self) {
        self.server.refresh_all();
    }

    /// Every key loses its holder at once, as on a server that keeps its
    /// leases in memory alone and lost them; waiting candidates are granted
    /// in turn. Tokens keep increasing.
    pub fn wipe_all(&self) {
        self.server.wipe_all();
    }

    /// From now on the server's clock runs `rate` times as fast as the
    /// clients' (1.01: 1 % fast): a lease granted or renewed for a TTL is
    /// kept that long by the server's clock, so `ttl / rate` by the
    /// clients'. A fast server clock expires leases early in the client's
    /// time; the [drift margin](crate::default_drift_margin) (2 % of the
    /// TTL by default) is what keeps a holder's `valid_until` ahead of such
    /// an expiry, as long as the rate is within it. For tests of clock
    /// rates; every client of the server sees the same clock.
    ///
    /// # Panics
    ///
    /// If `rate` is not a positive finite number.
    pub fn set_server_clock_rate(&self, rate: f64) {
        self.server.set_clock_rate(rate);
    }

    /// Calls `hook` at the instant the server grants any key, with the
    /// key, the holder and the token, under the server's lock (so `hook`
    /// must not call the server): a deterministic simulation's judge checks
    /// every other term of the key there (test-only, feature
    /// `__simulation`, not part of the API).
    #[cfg(feature = "__simulation")]
    #[doc(hidden)]
    pub fn on_grant(
        &self,
        hook: impl Fn(&ElectionKey, &crate::CandidateId, crate::FencingToken) + Send + Sync + 'static,
    ) {
        self.server.on_grant(Arc::new(hook));
    }

    /// From now on the server's clock runs `rate` times as fast as this
    /// client's clock, for this client's leases: each member of a
    /// simulation has a clock of its own (test-only, feature
    /// `__simulation`, not part of the API; see
    /// [`set_server_clock_rate`](Self::set_server_clock_rate)).
    ///
    /// # Panics
    ///
    /// If `rate` is not a positive finite number.
    #[cfg(feature = "__simulation")]
    #[doc(hidden)]
    pub fn set_client_clock_rate(&self, rate: f64) {
        self.server.set_session_clock_rate(self.session, rate);
    }

    /// This client's clock just lost `lost`, as a host suspended for that
    /// long finds when it wakes (`CLOCK_MONOTONIC` stops during a suspend)
    /// while the server's clock ran on: each lease it holds ends `lost`
    /// sooner in its time, now at the latest, and the next waiter may be
    /// granted at once, while the client still counts on its old deadline.
    /// Tenure does not promise safety across a suspend (test-only, feature
    /// `__simulation`, not part of the API).
    #[cfg(feature = "__simulation")]
    #[doc(hidden)]
    pub fn client_clock_lost(&self, lost: Duration) {
        self.server.session_clock_lost(self.session, lost);
    }

    /// Who holds `key` on the server now.
    pub fn holder(&self, key: &ElectionKey) -> Option<LeaderInfo> {
        self.server.holder(key)
    }

    /// How many candidates wait for `key`.
    pub fn queue_len(&self, key: &ElectionKey) -> usize {
        self.server.queue_len(key)
    }

    /// The server's counters (writes, wake-ups, ...).
    pub fn stats(&self) -> MemoryStats {
        self.server.stats()
    }

    /// Whether the server has any state at all for `key`.
    pub fn knows(&self, key: &ElectionKey) -> bool {
        self.server.knows(key)
    }
}

/// Releases a grant whose answer is still on its way back, if the caller
/// goes away meanwhile: nobody would ever renew or release it.
struct ReleaseUndelivered<'a> {
    server: &'a Server,
    key: &'a ElectionKey,
    grant: Option<u64>,
    /// The client's bug: it forgets the grant instead.
    keep: bool,
}

impl Drop for ReleaseUndelivered<'_> {
    fn drop(&mut self) {
        if let Some(grant) = self.grant.take() {
            if !self.keep {
                self.server.release(self.key, grant);
            }
        }
    }
}

/// This client's operations, checked and traced by the same
/// [layers](crate::layers) as every networked backend's.
fn layered(client: &MemoryBackend) -> Checked<Traced<Bare>> {
    Checked::new(Traced::new(Bare(client.clone())))
}

#[async_trait]
impl LeaseBackend for MemoryBackend {
    fn name(&self) -> &'static str {
        NAME
    }

    fn capabilities(&self) -> Capabilities {
        self.server.capabilities().clone()
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
}

const NAME: &str = "memory";

/// One client's protocol with the server, unchecked and untraced.
#[derive(Debug)]
struct Bare(MemoryBackend);

#[async_trait]
impl LeaseBackend for Bare {
    fn name(&self) -> &'static str {
        NAME
    }

    fn capabilities(&self) -> Capabilities {
        self.0.server.capabilities().clone()
    }

    async fn acquire(&self, candidacy: &Candidacy, mode: AcquireMode) -> Result<Acquisition> {
        let this = &self.0;
        let sent_at = Instant::now();
        let connection = this.faults.request().await?;
        let outcome = match mode {
            AcquireMode::Once => match this.server.try_acquire(candidacy, this.session) {
                Ok(grant) => Ok(lease_from(candidacy, grant, sent_at)),
                Err(holder) => Err(holder),
            },
            AcquireMode::Wait => {
                // Granted on the server at `granted_at`; the waiter's lease
                // counts from then (one process, one clock).
                // A reset connection ends the wait (and withdraws it).
                let grant = this
                    .faults
                    .on(
                        connection,
                        this.server.acquire_waiting(candidacy, this.session),
                    )
                    .await?;
                let at = grant.granted_at;
                Ok(lease_from(candidacy, grant, at))
            }
        };
        let mut undelivered = ReleaseUndelivered {
            server: &this.server,
            key: candidacy.key(),
            grant: outcome.as_ref().ok().and_then(grant_of_ok),
            keep: this.faults.keeps_undelivered_grants(),
        };
        if mode == AcquireMode::Wait {
            this.faults.hear_grant(candidacy.ttl() / 8).await;
        }
        // An answer lost on the way fails the call, and `undelivered`
        // releases the grant the caller never saw.
        this.faults.response(connection).await?;
        undelivered.grant = None;
        Ok(match outcome {
            Ok(lease) => Acquisition::Granted(lease),
            Err(holder) => Acquisition::Held(holder),
        })
    }

    async fn renew(&self, lease: &Lease) -> Result<Lease> {
        let this = &self.0;
        let sent_at = Instant::now();
        let answered = async {
            let connection = this.faults.request().await?;
            let grant = grant_of(lease)?;
            let renewed = this.server.renew(lease.key(), grant, lease.ttl());
            this.faults.response(connection).await?;
            renewed
        };
        match answered.await {
            Err(e) if e.is_retryable() && this.faults.transient_is_lost() => Err(
                Error::lease_lost(lease.key().as_str(), crate::LossReason::Revoked),
            ),
            answered => {
                answered?;
                Ok(lease.renewed(sent_at, lease.handle().clone()))
            }
        }
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        let this = &self.0;
        let connection = this.faults.request().await?;
        this.server.release(lease.key(), grant_of(lease)?);
        this.faults.response(connection).await
    }

    async fn watch(&self, key: &ElectionKey) -> Result<BoxStream<'static, Result<LeaderEvent>>> {
        let this = &self.0;
        let connection = this.faults.request().await?;
        Ok(this
            .server
            .watch(key.clone(), this.faults.clone(), connection))
    }
}

fn lease_from(candidacy: &Candidacy, grant: Grant, sent_at: Instant) -> Lease {
    let token = Some(grant.token);
    Lease::new(
        candidacy.clone(),
        token,
        sent_at,
        LeaseHandle::new(grant.id),
    )
    .with_loss_signal(grant.loss)
}

fn grant_of_ok(lease: &Lease) -> Option<u64> {
    lease.handle().get::<u64>().copied()
}

fn grant_of(lease: &Lease) -> Result<u64> {
    lease
        .handle()
        .get::<u64>()
        .copied()
        .ok_or_else(|| Error::invalid("lease", "was not granted by the memory backend"))
}

#[cfg(test)]
mod tests;
