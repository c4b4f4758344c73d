//! Proof that the suite can fail: the memory backend with one bug planted
//! at a time must fail the case that checks for it, and a backend that
//! declares `fencing: false` gets its breaches recorded instead.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures::stream::{BoxStream, StreamExt};
use tenure_conformance::factory::{BackendFactory, Client, Link, LinkFault, Timing};
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
    /// Deadlines count from when the answer arrived.
    DeadlineFromAnswer,
    /// Tokens restart after the election's server state is wiped.
    TokensResetOnWipe,
    /// A key's election also sees the elections nested under it (a prefix range).
    NestedKeysShared,
    /// A grant whose answer is still on its way is lost if the caller goes.
    GrantLostInFlight,
    /// Release returns at once and frees the key a little later.
    ReleaseFireAndForget,
}

/// What the clients of one mutant server share.
#[derive(Debug, Default)]
struct Shared {
    /// Grants made before the last wipe (`TokensResetOnWipe`).
    wiped_at: AtomicU64,
    /// Held keys and their holders (`NestedKeysShared`).
    held: Mutex<HashMap<String, LeaderInfo>>,
}

#[derive(Debug)]
struct Mutant {
    inner: MemoryBackend,
    bug: Bug,
    attempts: Arc<AtomicU64>,
    shared: Arc<Shared>,
    /// How long answers are held back (`GrantLostInFlight`; set by its link).
    answer_delay: Arc<Mutex<Duration>>,
}

impl Mutant {
    fn token(&self, token: Option<FencingToken>) -> Option<FencingToken> {
        let wiped_at = self.shared.wiped_at.load(Ordering::SeqCst);
        match token {
            Some(t) if self.bug == Bug::TokensResetOnWipe && t.get() > wiped_at && wiped_at > 0 => {
                Some(FencingToken::new(t.get() - wiped_at))
            }
            other => other,
        }
    }

    /// The holder of an election nested under `key`, if any (`NestedKeysShared`).
    fn nested_holder(&self, key: &ElectionKey) -> Option<LeaderInfo> {
        if self.bug != Bug::NestedKeysShared {
            return None;
        }
        let held = self.shared.held.lock().unwrap();
        held.iter()
            .find(|(k, _)| {
                k.strip_prefix(key.as_str())
                    .is_some_and(|rest| rest.starts_with('/') || rest.starts_with('.'))
            })
            .map(|(_, info)| info.clone())
    }

    fn lease(&self, lease: Lease) -> Lease {
        let c = lease.candidacy().clone();
        let lease = Lease::new(
            c.clone(),
            self.token(lease.token()),
            lease.sent_at(),
            lease.handle().clone(),
        );
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
            (Bug::TokensResetOnWipe, LeaderEvent::Elected(info)) => {
                LeaderEvent::Elected(LeaderInfo {
                    token: self.token(info.token),
                    ..info
                })
            }
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

impl Mutant {
    fn clone_mutant(&self) -> Mutant {
        Mutant {
            inner: self.inner.clone(),
            bug: self.bug,
            attempts: self.attempts.clone(),
            shared: self.shared.clone(),
            answer_delay: self.answer_delay.clone(),
        }
    }
}

/// The link of a `GrantLostInFlight` client: held answers are the mutant's
/// own delay; everything else goes to the memory client's faults.
struct MutantLink {
    memory: Arc<dyn Link>,
    answer_delay: Arc<Mutex<Duration>>,
}

#[async_trait]
impl Link for MutantLink {
    async fn set(&self, fault: LinkFault) -> Result<()> {
        match fault {
            LinkFault::DelayAnswers(d) => {
                *self.answer_delay.lock().unwrap() = d;
                self.memory.set(LinkFault::Pass).await
            }
            other => {
                *self.answer_delay.lock().unwrap() = Duration::ZERO;
                self.memory.set(other).await
            }
        }
    }

    fn last_request_at(&self) -> Option<tokio::time::Instant> {
        self.memory.last_request_at()
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
        if let Some(holder) = self.nested_holder(candidacy.key()) {
            if mode == AcquireMode::Once {
                return Ok(Acquisition::Held(holder));
            }
            while self.nested_holder(candidacy.key()).is_some() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
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
        let granted = match (self.bug, granted) {
            (Bug::DeadlineFromAnswer, Acquisition::Granted(lease)) => {
                let answered = tokio::time::Instant::now();
                Acquisition::Granted(Lease::new(
                    lease.candidacy().clone(),
                    lease.token(),
                    answered,
                    lease.handle().clone(),
                ))
            }
            (_, granted) => granted,
        };
        if let (Bug::NestedKeysShared, Acquisition::Granted(lease)) = (self.bug, &granted) {
            self.shared.held.lock().unwrap().insert(
                lease.key().as_str().to_owned(),
                LeaderInfo {
                    identity: lease.holder().clone(),
                    token: lease.token(),
                },
            );
        }
        if self.bug == Bug::GrantLostInFlight {
            // The answer travels back; dropped meanwhile, the grant is lost.
            let delay = *self.answer_delay.lock().unwrap();
            tokio::time::sleep(delay).await;
        }
        Ok(self.acquisition(granted))
    }

    async fn renew(&self, lease: &Lease) -> Result<Lease> {
        match self.inner.renew(lease).await {
            Err(e) if e.is_lease_lost() && self.bug == Bug::RenewNeverLost => {
                Ok(lease.renewed(tokio::time::Instant::now(), lease.handle().clone()))
            }
            Ok(renewed) if self.bug == Bug::DeadlineFromAnswer => {
                Ok(renewed.renewed(tokio::time::Instant::now(), renewed.handle().clone()))
            }
            other => other,
        }
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        self.shared
            .held
            .lock()
            .unwrap()
            .remove(lease.key().as_str());
        match self.bug {
            Bug::ReleaseByName => {
                self.inner.expire_now(lease.key());
                Ok(())
            }
            Bug::ReleaseFireAndForget => {
                let (inner, lease) = (self.inner.clone(), lease.clone());
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    let _ = inner.release(&lease).await;
                });
                Ok(())
            }
            _ => self.inner.release(lease).await,
        }
    }

    async fn watch(&self, key: &ElectionKey) -> Result<BoxStream<'static, Result<LeaderEvent>>> {
        let events = self.inner.watch(key).await?;
        let skip = usize::from(self.bug == Bug::WatchSkipsCurrent);
        let mutant = self.clone_mutant();
        let nested = self
            .nested_holder(key)
            .map(|info| Ok(LeaderEvent::Elected(info)));
        Ok(futures::stream::iter(nested)
            .chain(events.skip(skip).map(move |e| e.map(|e| mutant.event(e))))
            .boxed())
    }
}

struct MutantFactory {
    server: MemoryBackend,
    bug: Bug,
    attempts: Arc<AtomicU64>,
    shared: Arc<Shared>,
    name: String,
}

impl MutantFactory {
    fn planted(bug: Bug) -> Arc<dyn BackendFactory> {
        Arc::new(MutantFactory {
            server: MemoryBackend::new(),
            bug,
            attempts: Arc::default(),
            shared: Arc::default(),
            name: format!("mutant-{bug:?}"),
        })
    }

    fn mutant(&self, inner: MemoryBackend) -> Mutant {
        Mutant {
            inner,
            bug: self.bug,
            attempts: self.attempts.clone(),
            shared: self.shared.clone(),
            answer_delay: Arc::default(),
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
        let mutant = self.mutant(inner.clone());
        let memory = memory_link(&inner);
        let link: Arc<dyn Link> = match self.bug {
            Bug::GrantLostInFlight => Arc::new(MutantLink {
                memory,
                answer_delay: mutant.answer_delay.clone(),
            }),
            _ => memory,
        };
        Ok(Client {
            backend: Arc::new(mutant),
            link: Some(link),
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
    async fn wipe_election(&self, key: &ElectionKey) -> Option<Result<()>> {
        self.server.wipe(key);
        self.shared
            .wiped_at
            .store(self.server.stats().grants, Ordering::SeqCst);
        Some(Ok(()))
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadline_from_the_answer_fails_the_delayed_answers_case() {
    let f = MutantFactory::planted(Bug::DeadlineFromAnswer);
    failed_on(
        &suite::deadline_counts_from_send_under_delayed_answers(f).await,
        Property::Contract,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_reset_by_a_wipe_fail_token_increases_after_state_wiped() {
    let f = MutantFactory::planted(Bug::TokensResetOnWipe);
    failed_on(
        &suite::token_increases_after_state_wiped(f).await,
        Property::Fencing,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefix_elections_fail_nested_keys_are_independent() {
    let f = MutantFactory::planted(Bug::NestedKeysShared);
    failed_on(
        &suite::nested_keys_are_independent(f).await,
        Property::Contract,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_lost_in_flight_fails_dropped_acquire_leaves_nothing() {
    let f = MutantFactory::planted(Bug::GrantLostInFlight);
    failed_on(
        &suite::dropped_acquire_leaves_nothing(f).await,
        Property::Contract,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_that_returns_early_fails_shutdown_releases_before_returning() {
    let f = MutantFactory::planted(Bug::ReleaseFireAndForget);
    failed_on(
        &suite::shutdown_releases_before_returning(f).await,
        Property::Contract,
    );
}
