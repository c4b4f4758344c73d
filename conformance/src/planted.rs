//! Bugs planted over any backend: a [`PlantedFactory`] wraps a real
//! deployment's factory and every client it makes with one [`Planted`] bug
//! that a client library could have whatever its servers, so that the
//! cases written for those bugs are shown to catch them on etcd and
//! ZooKeeper too, not only on the memory backend (whose own mutants plant
//! bugs in the server as well).
//!
//! [`Target::with_planted_bugs`](crate::Target::with_planted_bugs) runs each
//! bug's case on a target's deployment as a trial of its own, which passes
//! when the case fails as it must.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use futures::future::BoxFuture;
use futures::stream::{BoxStream, StreamExt};
use tenure_core::{
    AcquireMode, Acquisition, Candidacy, Capabilities, ElectionKey, LeaderEvent, Lease,
    LeaseBackend, Result,
};
use tokio::time::Instant;

use crate::factory::{BackendFactory, Client, Gap, ServerFaults, Timing, TtlStart};
use crate::report::{CaseReport, Outcome, Property};
use crate::suite;
use crate::trials::TargetTrial;

/// A client-side bug, planted over any backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Planted {
    /// Grants and renewals count their deadline from the answer's arrival.
    DeadlineFromAnswer,
    /// A grant or renewal is followed by a read (a watch opened and its
    /// first event taken), and the deadline counts from that read's send,
    /// as a client whose grant takes several requests does when it stamps a
    /// later one than the request that started the TTL on the server
    /// (etcd's LeaseGrant before its Txn; ZooKeeper's create before its
    /// getChildren; a Kubernetes get before its replace).
    DeadlineFromLastRequest,
    /// Release frees the key whoever holds it: every lease of the key that
    /// a client of this factory was granted is released with it.
    ReleaseByName,
    /// The holder counts its deadline from twice the TTL the servers apply
    /// (as if they expired its lease at half the TTL it believes).
    DeadlineTooLate,
}

impl Planted {
    fn tag(self) -> &'static str {
        match self {
            Planted::DeadlineFromAnswer => "deadline-from-answer",
            Planted::DeadlineFromLastRequest => "deadline-from-last-request",
            Planted::ReleaseByName => "release-by-name",
            Planted::DeadlineTooLate => "deadline-too-late",
        }
    }
}

/// Every lease a client of one [`PlantedFactory`] was granted, by key, with
/// the client that holds it ([`Planted::ReleaseByName`]).
type Granted = Mutex<HashMap<String, Vec<(Arc<dyn LeaseBackend>, Lease)>>>;

/// A deployment's factory whose clients carry one [`Planted`] bug.
pub struct PlantedFactory {
    inner: Arc<dyn BackendFactory>,
    bug: Planted,
    name: String,
    granted: Arc<Granted>,
}

impl PlantedFactory {
    /// `inner`'s clients with `bug`; reports are named `<inner>+<bug>`.
    pub fn over(inner: Arc<dyn BackendFactory>, bug: Planted) -> Arc<dyn BackendFactory> {
        let name = format!("{}+{}", inner.name(), bug.tag());
        Arc::new(PlantedFactory {
            inner,
            bug,
            name,
            granted: Arc::default(),
        })
    }
}

#[async_trait]
impl BackendFactory for PlantedFactory {
    fn name(&self) -> &str {
        &self.name
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    async fn client(&self) -> Result<Client> {
        let client = self.inner.client().await?;
        Ok(Client {
            backend: Arc::new(PlantedBackend {
                inner: client.backend,
                bug: self.bug,
                granted: self.granted.clone(),
            }),
            link: client.link,
        })
    }
    fn timing(&self) -> Timing {
        self.inner.timing()
    }
    async fn server_writes(&self) -> Option<Result<u64>> {
        self.inner.server_writes().await
    }
    async fn server_requests(&self) -> Option<Result<u64>> {
        self.inner.server_requests().await
    }
    async fn waiting(&self, key: &ElectionKey) -> Option<Result<usize>> {
        self.inner.waiting(key).await
    }
    async fn key_exists(&self, key: &ElectionKey) -> Option<Result<bool>> {
        self.inner.key_exists(key).await
    }
    fn servers(&self) -> Option<&dyn ServerFaults> {
        self.inner.servers()
    }
    async fn server_version(&self) -> Option<String> {
        self.inner.server_version().await
    }
    fn gaps(&self) -> Vec<Gap> {
        self.inner.gaps()
    }
    fn grant_outlives_lost_answer(&self) -> Option<&'static str> {
        self.inner.grant_outlives_lost_answer()
    }
    fn reconnect_backoff(&self) -> Option<(std::time::Duration, &'static str)> {
        self.inner.reconnect_backoff()
    }
    fn ttl_starts_with(&self) -> TtlStart {
        self.inner.ttl_starts_with()
    }
}

/// One client of a [`PlantedFactory`].
struct PlantedBackend {
    inner: Arc<dyn LeaseBackend>,
    bug: Planted,
    granted: Arc<Granted>,
}

impl std::fmt::Debug for PlantedBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlantedBackend")
            .field("inner", &self.inner)
            .field("bug", &self.bug)
            .finish()
    }
}

/// `lease` as if its request had been sent at `sent_at` (its token, loss
/// signal and expiry lead kept).
fn stamped(lease: &Lease, sent_at: Instant) -> Lease {
    let seen = Lease::new(
        lease.candidacy().clone(),
        lease.token(),
        sent_at,
        lease.handle().clone(),
    )
    .with_expiry_lead(lease.expiry_lead());
    match lease.loss_signal() {
        Some(signal) => seen.with_loss_signal(signal.clone()),
        None => seen,
    }
}

/// `lease` with its candidacy's TTL replaced by `ttl` (its drift margin,
/// token, loss signal and expiry lead kept).
fn with_ttl(lease: &Lease, ttl: std::time::Duration) -> Result<Lease> {
    let c = lease.candidacy();
    let candidacy =
        Candidacy::with_drift_margin(c.key().clone(), c.identity().clone(), ttl, c.drift_margin())?;
    let seen = Lease::new(
        candidacy,
        lease.token(),
        lease.sent_at(),
        lease.handle().clone(),
    )
    .with_expiry_lead(lease.expiry_lead());
    Ok(match lease.loss_signal() {
        Some(signal) => seen.with_loss_signal(signal.clone()),
        None => seen,
    })
}

impl PlantedBackend {
    /// The lease as the servers granted it, for the inner client's calls.
    fn on_server(&self, lease: &Lease) -> Result<Lease> {
        match self.bug {
            Planted::DeadlineTooLate => with_ttl(lease, lease.ttl() / 2),
            _ => Ok(lease.clone()),
        }
    }

    /// A lease the inner client was granted or renewed, as the bug makes
    /// the holder see it.
    async fn seen(&self, lease: Lease) -> Result<Lease> {
        let lease = match self.bug {
            Planted::DeadlineFromAnswer => stamped(&lease, Instant::now()),
            Planted::DeadlineFromLastRequest => {
                let read = Instant::now();
                let mut events = self.inner.watch(lease.key()).await?;
                events.next().await.transpose()?;
                stamped(&lease, read)
            }
            Planted::DeadlineTooLate => with_ttl(&lease, lease.ttl() * 2)?,
            Planted::ReleaseByName => lease,
        };
        if self.bug == Planted::ReleaseByName {
            let mut granted = self.granted.lock().unwrap_or_else(|e| e.into_inner());
            let held = granted.entry(lease.key().as_str().to_owned()).or_default();
            held.retain(|(_, l)| !(l.holder() == lease.holder() && l.token() == lease.token()));
            held.push((self.inner.clone(), lease.clone()));
        }
        Ok(lease)
    }
}

#[async_trait]
impl LeaseBackend for PlantedBackend {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn check(&self, candidacy: &Candidacy) -> Result<()> {
        self.inner.check(candidacy)
    }

    fn check_key(&self, key: &ElectionKey) -> Result<()> {
        self.inner.check_key(key)
    }

    async fn acquire(&self, candidacy: &Candidacy, mode: AcquireMode) -> Result<Acquisition> {
        match self.inner.acquire(candidacy, mode).await? {
            Acquisition::Granted(lease) => Ok(Acquisition::Granted(self.seen(lease).await?)),
            held => Ok(held),
        }
    }

    async fn renew(&self, lease: &Lease) -> Result<Lease> {
        let renewed = self.inner.renew(&self.on_server(lease)?).await?;
        self.seen(renewed).await
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        let released = self.inner.release(&self.on_server(lease)?).await;
        if self.bug == Planted::ReleaseByName {
            let others = self
                .granted
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(lease.key().as_str())
                .unwrap_or_default();
            for (client, other) in others {
                let _ = client.release(&other).await;
            }
        }
        released
    }

    async fn watch(&self, key: &ElectionKey) -> Result<BoxStream<'static, Result<LeaderEvent>>> {
        self.inner.watch(key).await
    }

    async fn close(&self) -> Result<()> {
        self.inner.close().await
    }
}

/// Whether `report` failed on `property` (a promised violation of it).
fn failed_on(report: &CaseReport, property: Property) -> std::result::Result<(), String> {
    let noticed = matches!(report.outcome, Outcome::Fail(_))
        && report
            .violations
            .iter()
            .any(|v| v.property == property && v.promised);
    if noticed {
        println!(
            "{} on {}: caught as it must be: {:?}",
            report.case, report.backend, report.outcome
        );
        Ok(())
    } else {
        Err(format!(
            "the planted bug went unnoticed (expected a {property} failure): {:?}: {:?}",
            report.outcome, report.violations
        ))
    }
}

/// A deadline counted from the answer fails at least one of the two
/// deadline cases: the one that judges it against the servers' own expiry
/// (on etcd, a lease's TTL runs from its LeaseGrant; its HTTP/2 client
/// acknowledges an answer's frames as they come, so the last request its
/// link forwarded is about when the answer arrived, which hides the bug
/// from the other), or else the one that bounds it by that last request.
fn deadline_from_answer(factory: Arc<dyn BackendFactory>) -> BoxFuture<'static, Result2> {
    Box::pin(async move {
        let f = PlantedFactory::over(factory, Planted::DeadlineFromAnswer);
        let judged = failed_on(
            &suite::deadline_ends_before_the_servers_expiry(f.clone()).await,
            Property::Exclusive,
        );
        if judged.is_ok() {
            return judged;
        }
        let bounded = failed_on(
            &suite::deadline_counts_from_send_under_delayed_answers(f).await,
            Property::Contract,
        );
        bounded.map_err(|e| format!("{} and {e}", judged.unwrap_err()))
    })
}

/// A deadline counted from a grant's later request fails the case that
/// judges it against the servers' own expiry, and, where the factory names
/// the request that starts the TTL ([`TtlStart::FirstRequest`]), the
/// delayed-answers case too. (Bounded by the last request the link
/// forwarded, that case cannot see it: the memory target's own tests show
/// that.)
fn deadline_from_last_request(factory: Arc<dyn BackendFactory>) -> BoxFuture<'static, Result2> {
    Box::pin(async move {
        let f = PlantedFactory::over(factory, Planted::DeadlineFromLastRequest);
        failed_on(
            &suite::deadline_ends_before_the_servers_expiry(f.clone()).await,
            Property::Exclusive,
        )?;
        match f.ttl_starts_with() {
            TtlStart::FirstRequest(_) => failed_on(
                &suite::deadline_counts_from_send_under_delayed_answers(f).await,
                Property::Contract,
            ),
            TtlStart::LastRequest => Ok(()),
        }
    })
}

/// Release by name fails the stale-release case.
fn release_by_name(factory: Arc<dyn BackendFactory>) -> BoxFuture<'static, Result2> {
    Box::pin(async move {
        let f = PlantedFactory::over(factory, Planted::ReleaseByName);
        failed_on(
            &suite::stale_release_leaves_new_holder_in_place(f).await,
            Property::Contract,
        )
    })
}

/// A holder that believes its lease twice as long as the servers keep it
/// overlaps its successor after a crash.
fn deadline_too_late(factory: Arc<dyn BackendFactory>) -> BoxFuture<'static, Result2> {
    Box::pin(async move {
        let f = PlantedFactory::over(factory, Planted::DeadlineTooLate);
        failed_on(
            &suite::crashed_leader_taken_over_after_ttl(f).await,
            Property::Exclusive,
        )
    })
}

type Result2 = std::result::Result<(), String>;

impl Planted {
    /// Every bug.
    pub const ALL: &'static [Planted] = &[
        Planted::DeadlineFromAnswer,
        Planted::DeadlineFromLastRequest,
        Planted::ReleaseByName,
        Planted::DeadlineTooLate,
    ];

    /// The trial of [`Target::with_planted_bugs`](crate::Target::with_planted_bugs)
    /// for this bug: its case, which must fail on it.
    pub(crate) fn trial(self) -> (&'static str, TargetTrial) {
        match self {
            Planted::DeadlineFromAnswer => ("planted::deadline_from_answer", deadline_from_answer),
            Planted::DeadlineFromLastRequest => (
                "planted::deadline_from_last_request",
                deadline_from_last_request,
            ),
            Planted::ReleaseByName => ("planted::release_by_name", release_by_name),
            Planted::DeadlineTooLate => ("planted::deadline_too_late", deadline_too_late),
        }
    }
}
