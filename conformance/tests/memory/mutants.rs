//! Proof that the suite can fail: the memory backend with one bug planted
//! at a time must fail the case that checks for it, and a backend that
//! declares `fencing: false` gets its breaches recorded instead.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::stream::{BoxStream, StreamExt};
use tenure_conformance::factory::{BackendFactory, Client, Timing};
use tenure_conformance::memory::memory_link;
use tenure_conformance::suite;
use tenure_conformance::{CaseReport, MemoryFactory, Outcome, Property};
use tenure_core::{
    AcquireMode, Acquisition, Candidacy, Capabilities, ElectionKey, FencingToken, LeaderEvent,
    LeaderInfo, Lease, LeaseBackend, MemoryBackend, Result,
};

/// The planted bug.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Bug {
    /// Every grant gets token 1.
    TokenStuck,
    /// Deadlines count from half a TTL after the request was sent.
    DeadlineTooLate,
    /// Declares a 100 ms minimum TTL but accepts anything.
    MinTtlNotEnforced,
    /// Release frees the key whoever holds it.
    ReleaseByName,
    /// Renewing a lost lease "succeeds".
    RenewNeverLost,
    /// A new watch leaves out the current state.
    WatchSkipsCurrent,
    /// Waiting polls the key instead of queueing (every attempt a write).
    WaitByPolling,
    /// A dropped waiting acquire stays queued.
    WaitLeavesOrphan,
    /// Declares `fencing: false` and gives no tokens.
    NoFencing,
}

#[derive(Debug)]
struct Mutant {
    inner: MemoryBackend,
    bug: Bug,
    attempts: Arc<AtomicU64>,
}

impl Mutant {
    fn lease(&self, lease: Lease) -> Lease {
        let c = lease.candidacy().clone();
        match self.bug {
            Bug::TokenStuck => Lease::new(
                c,
                Some(FencingToken::new(1)),
                lease.sent_at(),
                lease.handle().clone(),
            ),
            Bug::DeadlineTooLate => Lease::new(
                c,
                lease.token(),
                lease.sent_at() + lease.ttl() / 2,
                lease.handle().clone(),
            ),
            Bug::NoFencing => Lease::new(c, None, lease.sent_at(), lease.handle().clone()),
            _ => lease,
        }
    }

    fn event(&self, event: LeaderEvent) -> LeaderEvent {
        match (self.bug, event) {
            (Bug::NoFencing, LeaderEvent::Elected(info)) => LeaderEvent::Elected(LeaderInfo {
                token: None,
                ..info
            }),
            (Bug::TokenStuck, LeaderEvent::Elected(info)) => LeaderEvent::Elected(LeaderInfo {
                token: Some(FencingToken::new(1)),
                ..info
            }),
            (_, event) => event,
        }
    }

    fn acquisition(&self, a: Acquisition) -> Acquisition {
        match a {
            Acquisition::Granted(lease) => Acquisition::Granted(self.lease(lease)),
            Acquisition::Held(info) => match self.event(LeaderEvent::Elected(info)) {
                LeaderEvent::Elected(info) => Acquisition::Held(info),
                LeaderEvent::Vacant => unreachable!("mapped an election"),
            },
        }
    }
}

#[async_trait]
impl LeaseBackend for Mutant {
    fn name(&self) -> &'static str {
        "mutant"
    }

    fn capabilities(&self) -> Capabilities {
        let mut caps = self.inner.capabilities();
        match self.bug {
            Bug::MinTtlNotEnforced => caps.min_ttl = Duration::from_millis(100),
            Bug::NoFencing => caps.fencing = false,
            _ => {}
        }
        caps
    }

    async fn acquire(&self, candidacy: &Candidacy, mode: AcquireMode) -> Result<Acquisition> {
        self.attempts.fetch_add(1, Ordering::Relaxed);
        let granted = match (self.bug, mode) {
            (Bug::WaitByPolling, AcquireMode::Wait) => loop {
                match self.inner.acquire(candidacy, AcquireMode::Once).await? {
                    Acquisition::Held(_) => {
                        self.attempts.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    granted => break granted,
                }
            },
            (Bug::WaitLeavesOrphan, AcquireMode::Wait) => {
                let (inner, candidacy) = (self.inner.clone(), candidacy.clone());
                let orphan =
                    tokio::spawn(async move { inner.acquire(&candidacy, AcquireMode::Wait).await });
                orphan.await.expect("the orphan runs to the end")?
            }
            _ => self.inner.acquire(candidacy, mode).await?,
        };
        Ok(self.acquisition(granted))
    }

    async fn renew(&self, lease: &Lease) -> Result<Lease> {
        match self.inner.renew(lease).await {
            Err(e) if e.is_lease_lost() && self.bug == Bug::RenewNeverLost => {
                Ok(lease.renewed(tokio::time::Instant::now(), lease.handle().clone()))
            }
            other => other,
        }
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        if self.bug == Bug::ReleaseByName {
            self.inner.expire_now(lease.key());
            return Ok(());
        }
        self.inner.release(lease).await
    }

    async fn watch(&self, key: &ElectionKey) -> Result<BoxStream<'static, Result<LeaderEvent>>> {
        let events = self.inner.watch(key).await?;
        let skip = usize::from(self.bug == Bug::WatchSkipsCurrent);
        let mutant = Mutant {
            inner: self.inner.clone(),
            bug: self.bug,
            attempts: self.attempts.clone(),
        };
        Ok(events
            .skip(skip)
            .map(move |e| e.map(|e| mutant.event(e)))
            .boxed())
    }
}

struct MutantFactory {
    server: MemoryBackend,
    bug: Bug,
    attempts: Arc<AtomicU64>,
    name: String,
}

impl MutantFactory {
    fn planted(bug: Bug) -> Arc<dyn BackendFactory> {
        Arc::new(MutantFactory {
            server: MemoryBackend::new(),
            bug,
            attempts: Arc::default(),
            name: format!("mutant-{bug:?}"),
        })
    }

    fn mutant(&self, inner: MemoryBackend) -> Mutant {
        Mutant {
            inner,
            bug: self.bug,
            attempts: self.attempts.clone(),
        }
    }
}

#[async_trait]
impl BackendFactory for MutantFactory {
    fn name(&self) -> &str {
        &self.name
    }
    fn capabilities(&self) -> Capabilities {
        self.mutant(self.server.clone()).capabilities()
    }
    async fn client(&self) -> Result<Client> {
        let inner = self.server.client();
        let link = Some(memory_link(&inner));
        Ok(Client {
            backend: Arc::new(self.mutant(inner)),
            link,
        })
    }
    fn timing(&self) -> Timing {
        MemoryFactory::new().timing()
    }
    async fn server_writes(&self) -> Option<Result<u64>> {
        Some(Ok(match self.bug {
            Bug::WaitByPolling => self.attempts.load(Ordering::Relaxed),
            _ => self.server.stats().writes(),
        }))
    }
    async fn waiting(&self, key: &ElectionKey) -> Option<Result<usize>> {
        (self.bug != Bug::WaitByPolling).then(|| Ok(self.server.queue_len(key)))
    }
    async fn key_exists(&self, key: &ElectionKey) -> Option<Result<bool>> {
        Some(Ok(self.server.knows(key)))
    }
}

#[track_caller]
fn failed_on(report: &CaseReport, property: Property) {
    assert!(
        matches!(report.outcome, Outcome::Fail(_)),
        "the planted bug went unnoticed: {report:#?}"
    );
    assert!(
        report
            .violations
            .iter()
            .any(|v| v.property == property && v.promised),
        "expected a {property} violation: {report:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stuck_tokens_fail_tokens_strictly_increase_and_let_stale_writes_in() {
    failed_on(
        &suite::tokens_strictly_increase(MutantFactory::planted(Bug::TokenStuck)).await,
        Property::Fencing,
    );
    let crash =
        suite::crashed_leader_taken_over_after_ttl(MutantFactory::planted(Bug::TokenStuck)).await;
    failed_on(&crash, Property::Fencing);
    assert_eq!(crash.figures.stale_writes_accepted, Some(1), "{crash:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_deadline_is_an_overlap_in_the_partition_case() {
    let f = MutantFactory::planted(Bug::DeadlineTooLate);
    failed_on(
        &suite::partitioned_leader_steps_down_before_anyone_else_leads(f).await,
        Property::Exclusive,
    );
    failed_on(
        &suite::acquire_uncontended(MutantFactory::planted(Bug::DeadlineTooLate)).await,
        Property::Contract,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unenforced_minimum_ttl_fails_the_input_case() {
    let f = MutantFactory::planted(Bug::MinTtlNotEnforced);
    failed_on(
        &suite::ttl_below_backend_minimum_is_invalid_argument(f).await,
        Property::Contract,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_by_name_fails_stale_release() {
    let f = MutantFactory::planted(Bug::ReleaseByName);
    failed_on(
        &suite::stale_release_leaves_new_holder_in_place(f).await,
        Property::Contract,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewing_a_lost_lease_fails_renew_after_expiry() {
    let f = MutantFactory::planted(Bug::RenewNeverLost);
    failed_on(
        &suite::renew_after_expiry_is_lease_lost(f).await,
        Property::Contract,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_without_current_state_fails_watch_starts_with_current_state() {
    let report =
        suite::watch_starts_with_current_state(MutantFactory::planted(Bug::WatchSkipsCurrent))
            .await;
    assert!(
        matches!(&report.outcome, Outcome::Fail(why) if why.contains("watch event")),
        "{report:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polling_wait_fails_the_herd_case() {
    let f = MutantFactory::planted(Bug::WaitByPolling);
    failed_on(
        &suite::herd_writes_per_leadership_change(f).await,
        Property::HerdFree,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphaned_waiter_fails_dropped_waiting_acquire() {
    let f = MutantFactory::planted(Bug::WaitLeavesOrphan);
    failed_on(
        &suite::dropped_waiting_acquire_leaves_no_queue_entry(f).await,
        Property::Contract,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unfenced_backend_gets_breaches_recorded_not_failed() {
    for report in [
        suite::tokens_strictly_increase(MutantFactory::planted(Bug::NoFencing)).await,
        suite::crashed_leader_taken_over_after_ttl(MutantFactory::planted(Bug::NoFencing)).await,
        suite::partitioned_leader_steps_down_before_anyone_else_leads(MutantFactory::planted(
            Bug::NoFencing,
        ))
        .await,
    ] {
        assert_eq!(report.outcome, Outcome::Recorded, "{report:#?}");
        assert!(report.ok());
        assert!(
            report
                .violations
                .iter()
                .all(|v| v.property == Property::Fencing && !v.promised),
            "{report:#?}"
        );
    }
}
