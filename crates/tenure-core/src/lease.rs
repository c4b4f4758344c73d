//! A candidacy (what a candidate asks for) and a lease (what it was granted).

use std::any::Any;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::{CandidateId, ElectionKey, Error, FencingToken, LossReason, Result};

/// The default drift margin for a TTL: 2 % of it.
///
/// It covers clock *rate* differences between this process and the backend
/// (ppm in practice) with a wide berth; it does not need to cover network
/// delay, because `valid_until` is counted from when a request was sent.
pub fn default_drift_margin(ttl: Duration) -> Duration {
    ttl / 50
}

/// One candidate's request to lead an election: key, identity, TTL, drift margin.
///
/// It also carries where a backend tells of trouble it worked around
/// ([`warning`](Self::warning)): an [`Elector`](crate::Elector) counts
/// those in its [`Health`](crate::Health). Two candidacies are equal when
/// key, identity, TTL and margin are.
#[derive(Clone, Debug)]
pub struct Candidacy {
    key: ElectionKey,
    identity: CandidateId,
    ttl: Duration,
    drift_margin: Duration,
    warnings: Warnings,
}

impl PartialEq for Candidacy {
    fn eq(&self, other: &Self) -> bool {
        (&self.key, &self.identity, self.ttl, self.drift_margin)
            == (&other.key, &other.identity, other.ttl, other.drift_margin)
    }
}

impl Eq for Candidacy {}

/// Trouble a backend worked around on a candidacy's behalf: nothing failed,
/// but the election is less sound or slower than it should be until someone
/// looks (a Redis master that had lost the key, a watch the server keeps
/// refusing). The backend also logs it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Warning {
    /// What the backend was doing: `"renew"`, `"campaign"`, `"watch"`…
    pub operation: &'static str,
    /// What happened, for a person.
    pub message: String,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.operation, self.message)
    }
}

type WarningSink = Arc<dyn Fn(Warning) + Send + Sync>;

/// Where a candidacy's [`Warning`]s go; nowhere by default.
#[derive(Clone, Default)]
struct Warnings(Option<WarningSink>);

impl fmt::Debug for Warnings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() {
            "Warnings(..)"
        } else {
            "Warnings(none)"
        })
    }
}

impl Candidacy {
    /// A candidacy with the [default drift margin](default_drift_margin).
    pub fn new(key: ElectionKey, identity: CandidateId, ttl: Duration) -> Result<Self> {
        Self::with_drift_margin(key, identity, ttl, default_drift_margin(ttl))
    }

    /// A candidacy from text: `key` and `identity` checked as
    /// [`ElectionKey::new`] and [`CandidateId::new`] check them (an error
    /// names the field), then as [`new`](Self::new).
    ///
    /// ```
    /// # use std::time::Duration;
    /// use tenure::backend::Candidacy;
    /// let candidacy = Candidacy::parse("billing", "replica-a", Duration::from_secs(10))?;
    /// assert_eq!(candidacy.key().as_str(), "billing");
    /// assert!(Candidacy::parse("", "replica-a", Duration::from_secs(10)).is_err());
    /// # Ok::<(), tenure::Error>(())
    /// ```
    pub fn parse(key: &str, identity: &str, ttl: Duration) -> Result<Self> {
        Self::new(ElectionKey::new(key)?, CandidateId::new(identity)?, ttl)
    }

    /// A candidacy with an explicit drift margin, which must be smaller than the TTL.
    pub fn with_drift_margin(
        key: ElectionKey,
        identity: CandidateId,
        ttl: Duration,
        drift_margin: Duration,
    ) -> Result<Self> {
        if ttl.is_zero() {
            return Err(Error::invalid("ttl", "must be greater than zero"));
        }
        if drift_margin >= ttl {
            return Err(Error::invalid(
                "drift_margin",
                format!("{drift_margin:?} must be smaller than the ttl {ttl:?}"),
            ));
        }
        Ok(Candidacy {
            key,
            identity,
            ttl,
            drift_margin,
            warnings: Warnings::default(),
        })
    }

    /// The same candidacy, its [`warning`](Self::warning)s handed to
    /// `sink` (an [`Elector`](crate::Elector) sets its own, which counts them
    /// in its health).
    pub fn with_warnings(mut self, sink: impl Fn(Warning) + Send + Sync + 'static) -> Self {
        self.warnings = Warnings(Some(Arc::new(sink)));
        self
    }

    /// For backends: tells whoever campaigns with this candidacy of trouble
    /// that was worked around (see [`Warning`]). Log it as well; this only
    /// counts it.
    pub fn warning(&self, operation: &'static str, message: impl fmt::Display) {
        if let Some(sink) = &self.warnings.0 {
            sink(Warning {
                operation,
                message: message.to_string(),
            });
        }
    }

    /// The election key.
    pub fn key(&self) -> &ElectionKey {
        &self.key
    }
    /// The candidate's identity.
    pub fn identity(&self) -> &CandidateId {
        &self.identity
    }
    /// How long a grant or renewal lasts on the backend.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }
    /// How much earlier than the TTL the holder stops believing it leads.
    pub fn drift_margin(&self) -> Duration {
        self.drift_margin
    }

    /// The local deadline for a grant or renewal whose request was sent at `sent_at`.
    pub fn deadline_from(&self, sent_at: Instant) -> Instant {
        sent_at + (self.ttl - self.drift_margin)
    }
}

/// Backend-private state carried by a [`Lease`] (lease id, node path, resourceVersion…).
#[derive(Clone)]
pub struct LeaseHandle(Arc<dyn Any + Send + Sync>);

impl LeaseHandle {
    /// Wraps backend state.
    pub fn new<T: Any + Send + Sync>(state: T) -> Self {
        LeaseHandle(Arc::new(state))
    }

    /// The backend state, if it is a `T`.
    pub fn get<T: Any>(&self) -> Option<&T> {
        self.0.downcast_ref()
    }
}

impl fmt::Debug for LeaseHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("LeaseHandle(..)")
    }
}

/// A backend's early word that a lease is gone, before any renewal could
/// tell: its record was deleted out of band (`etcdctl del`, a deleted Lease
/// object or znode) or taken by another candidate.
///
/// A backend that watches its holders' own records makes one per grant,
/// [attaches](Lease::with_loss_signal) it to the lease and
/// [fires](Self::fire) it from its watch. From then on the lease is not
/// [valid](Lease::is_valid), and the Elector ends the term at once instead of
/// at its next renewal. Clones share one state; the first reason wins.
#[derive(Clone, Debug)]
pub struct LossSignal(Arc<watch::Sender<Option<LossReason>>>);

impl Default for LossSignal {
    fn default() -> Self {
        Self::new()
    }
}

impl LossSignal {
    /// A signal that has not fired.
    pub fn new() -> Self {
        LossSignal(Arc::new(watch::Sender::new(None)))
    }

    /// Says the lease is gone, for `reason`; whether this was the first word.
    pub fn fire(&self, reason: LossReason) -> bool {
        self.0.send_if_modified(|s| {
            let first = s.is_none();
            if first {
                *s = Some(reason);
            }
            first
        })
    }

    /// The reason, once fired.
    pub fn fired(&self) -> Option<LossReason> {
        *self.0.borrow()
    }

    /// Resolves once the signal fires.
    pub async fn wait(&self) -> LossReason {
        let mut rx = self.0.subscribe();
        let reason = rx.wait_for(Option::is_some).await.map(|r| *r);
        // The sender lives as long as `self`: `wait_for` cannot fail here.
        reason.ok().flatten().unwrap_or(LossReason::Deleted)
    }
}

/// A granted lease.
///
/// `valid_until` is a local monotonic deadline: the send time of the request
/// that granted or last renewed the lease, plus the TTL, minus the drift
/// margin. The backend's own expiry cannot start before that request reached
/// it, so the holder stops believing it leads before anyone else can be
/// granted the key.
///
/// Where a backend's expiry can start earlier than that, by a bounded time
/// (a ZooKeeper follower passes a session's activity on to the quorum leader,
/// which expires sessions, only every half tick), the backend says by how much
/// with [`with_expiry_lead`](Self::with_expiry_lead), and `valid_until` comes
/// that much sooner.
#[derive(Clone, Debug)]
pub struct Lease {
    candidacy: Candidacy,
    token: Option<FencingToken>,
    sent_at: Instant,
    expiry_lead: Duration,
    handle: LeaseHandle,
    loss: Option<LossSignal>,
}

impl Lease {
    /// A lease granted by a request sent at `sent_at`. Backends call this.
    pub fn new(
        candidacy: Candidacy,
        token: Option<FencingToken>,
        sent_at: Instant,
        handle: LeaseHandle,
    ) -> Self {
        Lease {
            candidacy,
            token,
            sent_at,
            expiry_lead: Duration::ZERO,
            handle,
            loss: None,
        }
    }

    /// This lease, ended early when `signal` fires (its backend watches the
    /// holder's own record). Renewals keep it. Backends call this.
    pub fn with_loss_signal(mut self, signal: LossSignal) -> Self {
        self.loss = Some(signal);
        self
    }

    /// This lease, for a backend whose own expiry may start up to `lead`
    /// before the granting (and every renewing) request was sent: the
    /// deadline is that much sooner. Renewals keep it. Backends call this.
    pub fn with_expiry_lead(mut self, lead: Duration) -> Self {
        self.expiry_lead = lead;
        self
    }

    /// This lease extended by a renewal whose request was sent at `sent_at`.
    /// A renewal never moves the deadline backwards.
    pub fn renewed(&self, sent_at: Instant, handle: LeaseHandle) -> Self {
        Lease {
            candidacy: self.candidacy.clone(),
            token: self.token,
            sent_at: sent_at.max(self.sent_at),
            expiry_lead: self.expiry_lead,
            handle,
            loss: self.loss.clone(),
        }
    }

    /// What was asked for.
    pub fn candidacy(&self) -> &Candidacy {
        &self.candidacy
    }
    /// The election key.
    pub fn key(&self) -> &ElectionKey {
        self.candidacy.key()
    }
    /// The holder (us).
    pub fn holder(&self) -> &CandidateId {
        self.candidacy.identity()
    }
    /// The fencing token, on backends that can fence.
    pub fn token(&self) -> Option<FencingToken> {
        self.token
    }
    /// The TTL.
    pub fn ttl(&self) -> Duration {
        self.candidacy.ttl()
    }
    /// When the request behind the current deadline was sent.
    pub fn sent_at(&self) -> Instant {
        self.sent_at
    }
    /// How long before [`sent_at`](Self::sent_at) the backend's own expiry
    /// may have started (zero on most backends).
    pub fn expiry_lead(&self) -> Duration {
        self.expiry_lead
    }
    /// Until when the holder may believe it leads.
    pub fn valid_until(&self) -> Instant {
        let full = self.candidacy.deadline_from(self.sent_at);
        full.checked_sub(self.expiry_lead)
            .unwrap_or(self.sent_at)
            .max(self.sent_at)
    }
    /// Whether the local deadline has not passed yet, and the backend has
    /// not said the lease is gone ([`LossSignal`]).
    pub fn is_valid(&self) -> bool {
        self.signalled_loss().is_none() && Instant::now() < self.valid_until()
    }
    /// The backend's [`LossSignal`] for this lease, if it watches the
    /// holder's record.
    pub fn loss_signal(&self) -> Option<&LossSignal> {
        self.loss.as_ref()
    }
    /// Why the backend said the lease is gone before its deadline, if it did.
    pub fn signalled_loss(&self) -> Option<LossReason> {
        self.loss.as_ref().and_then(LossSignal::fired)
    }
    /// Resolves when the backend says the lease is gone; never, on a lease
    /// without a [`LossSignal`].
    pub async fn loss_signalled(&self) -> LossReason {
        match &self.loss {
            Some(signal) => signal.wait().await,
            None => std::future::pending().await,
        }
    }
    /// Backend-private state.
    pub fn handle(&self) -> &LeaseHandle {
        &self.handle
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidacy(ttl_ms: u64, margin_ms: u64) -> Result<Candidacy> {
        Candidacy::with_drift_margin(
            ElectionKey::new("k").unwrap(),
            CandidateId::new("a").unwrap(),
            Duration::from_millis(ttl_ms),
            Duration::from_millis(margin_ms),
        )
    }

    #[test]
    fn drift_margin_must_be_below_ttl() {
        assert!(matches!(
            candidacy(100, 100),
            Err(Error::InvalidArgument {
                field: "drift_margin",
                ..
            })
        ));
        assert!(matches!(
            candidacy(0, 0),
            Err(Error::InvalidArgument { field: "ttl", .. })
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn valid_until_is_send_time_plus_ttl_minus_margin_and_never_moves_back() {
        let c = candidacy(1000, 30).unwrap();
        let t0 = Instant::now();
        let lease = Lease::new(c, None, t0, LeaseHandle::new(()));
        assert_eq!(lease.valid_until(), t0 + Duration::from_millis(970));
        let older = lease.renewed(t0 - Duration::from_millis(5), LeaseHandle::new(()));
        assert_eq!(older.valid_until(), lease.valid_until());
        let newer = lease.renewed(t0 + Duration::from_millis(300), LeaseHandle::new(()));
        assert_eq!(newer.valid_until(), t0 + Duration::from_millis(1270));
    }

    #[tokio::test(start_paused = true)]
    async fn an_expiry_lead_moves_the_deadline_sooner_and_renewals_keep_it() {
        let c = candidacy(1000, 30).unwrap();
        let t0 = Instant::now();
        let lease = Lease::new(c, None, t0, LeaseHandle::new(()))
            .with_expiry_lead(Duration::from_millis(200));
        assert_eq!(lease.sent_at(), t0);
        assert_eq!(lease.valid_until(), t0 + Duration::from_millis(770));
        let newer = lease.renewed(t0 + Duration::from_millis(300), LeaseHandle::new(()));
        assert_eq!(newer.expiry_lead(), Duration::from_millis(200));
        assert_eq!(newer.valid_until(), t0 + Duration::from_millis(1070));
        // A lead past the whole TTL leaves a lease that is valid for no time.
        let none = lease.clone().with_expiry_lead(Duration::from_secs(5));
        assert_eq!(none.valid_until(), t0);
        assert!(!none.is_valid());
    }
}
