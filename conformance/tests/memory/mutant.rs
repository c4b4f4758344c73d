//! The planted-bug memory backend: a [`Mutant`] wraps one client of a
//! [`MemoryFactory`]'s server with one [`Bug`]; a [`MutantFactory`] makes
//! such clients (candidate processes' too, through the factory's front).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures::stream::{BoxStream, StreamExt};
use tenure_conformance::factory::{
    BackendFactory, CandidateCommand, Client, Gap, Link, LinkFault, ServerFaults, Timing,
};
use tenure_conformance::MemoryFactory;
use tenure_core::{
    AcquireMode, Acquisition, Candidacy, CandidateId, Capabilities, ElectionKey, FencingToken,
    KeyRule, LeaderEvent, LeaderInfo, Lease, LeaseBackend, MemoryBackend, Result,
};
use tokio::time::Instant;

#[path = "silent_nodes.rs"]
mod silent_nodes;

use silent_nodes::{held_while_silent, Servers, Silent};

/// The planted bug.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bug {
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
    /// A single attempt on a held key joins the line and stays in it (a
    /// candidate record created and never deleted).
    OnceJoinsQueue,
    /// A waiting candidate polls the key every 150 ms instead of being told.
    PollsEvery150ms,
    /// A renewal cancelled after it reached the server leaves the lease at a
    /// version the client never saw, and release, comparing the version it
    /// knows, silently does nothing (kubernetes#131867).
    CancelledRenewKeepsKey,
    /// Renewals answer OK but never extend the lease on the server.
    RenewDoesNotExtend,
    /// The server expires a lease half a TTL after it was granted or renewed.
    EarlyExpiry,
    /// The server keeps a lease for two TTLs.
    ExpiryLate,
    /// A watch reports holders but never a vacancy after its first event.
    WatchSkipsVacancy,
    /// Making a client writes to the server (a registration record).
    WritesOnConnect,
    /// Declares DNS-1123 keys but stores any key.
    KeyRuleNotEnforced,
    /// Declares a 63-byte key limit but stores longer keys.
    MaxKeyLenNotEnforced,
    /// Declares a 100 ms TTL granularity but takes any TTL.
    TtlGranularityNotEnforced,
    /// A renewal with no answer within 50 ms counts as done (a keep-alive
    /// whose answer the client does not wait for): the holder goes on past
    /// the deadline its last answered renewal gave it. Its clients stay on
    /// a frozen node (as [`Bug::StaysOnAFrozenNode`]), so that a pause of
    /// its node leaves its renewals unanswered.
    UnansweredRenewCounts,
    /// The client stays on a frozen server node (its calls hang until the
    /// node is back), as one given a single endpoint, or one whose every try
    /// waits out one fixed timeout on the same node, does: a holder loses
    /// its lease to a fault that a majority of the servers rode out.
    StaysOnAFrozenNode,
    /// Leases live on the servers' leader alone: a new leader starts without
    /// any (after a kill or a restart).
    LeasesLostOnFailover,
    /// The token counter lives in memory alone: a restart of the servers
    /// starts it again, and loses every lease.
    TokensResetOnRestart,
    /// A waiting candidate also watches the key, so every change is told to
    /// every waiter (writes stay O(1); notifications grow with the line).
    WaitersToldEveryChange,
    /// A waiting candidate takes the end of its watch, when the servers'
    /// history is compacted, for the end of its wait, and looks again only a
    /// TTL later.
    WaitLostOnCompaction,
    /// Declares that holders watch their own records
    /// (`holder_watches_own_record`), but a holder whose record is deleted
    /// out of band learns it only at its next renewal.
    DeafToDeletion,
    /// A waiting candidate trusts its watch: on a server node cut off from
    /// its peers (its watches silent), it never looks for itself, and hears
    /// of its grant only once the node is back.
    TrustsItsWatch,
    /// The client does not learn what its session is given when it
    /// reconnects: on a server node that keeps sessions for less than its
    /// leases' TTLs, its leases keep their old deadlines (no loss
    /// signalled) while the servers let them go sooner, as tenure-zookeeper
    /// did before it read the timeout of every reconnect.
    ShrunkSessionUnheeded,
    /// A watch trusts its stream: while its client's server node is cut
    /// off from its peers or frozen (its watches silent), it reports
    /// nothing, and only once the node is back the latest state.
    ObserverTrustsItsWatch,
    /// Acquire checks, then sets: it reads the key, and if it is vacant,
    /// a moment later writes it whoever took it meanwhile (the read and the
    /// write are two requests, no compare-and-swap); a waiting candidate
    /// does so each time its watch reports a vacancy. Racers both win.
    CheckThenSet,
    /// Release frees the key and every election nested under it (a range
    /// delete over the key as a prefix).
    ReleaseTakesNested,
    /// A watch of a key also reports the changes of the elections nested
    /// under it (`k/b`, `k.b`), as a watch over the key as a prefix does.
    WatchTakesNested,
    /// Declares a 1 s maximum TTL but takes any.
    MaxTtlNotEnforced,
    /// Declares a 1 s maximum TTL and a 63-byte key limit and refuses what
    /// breaks them, but only after a request to the server (a look it
    /// takes first); it writes nothing.
    RequestBeforeRefusing,
    /// A renewal that fails with a connection error (a reset, a call that
    /// failed at once) is reported as a lost lease, though the lease is
    /// alive on the server and its deadline ahead.
    TransientErrorIsLost,
    /// A grant whose answer was lost (or whose call was dropped before it
    /// came) is forgotten, not released: it holds the key, unrenewed, until
    /// its TTL runs out.
    GrantKeptWhenAnswerLost,
    /// A client keeps alive every record it was granted until a release of
    /// it lands, while it campaigns for that key again (as an etcd lease
    /// shared by a client's keys is kept alive by its next campaign): a
    /// term that ended while the servers were down leaves its record,
    /// revived by the servers' recovery, leading for good.
    AbandonedRecordKeptAlive,
}

/// How long a [`Bug::PollsEvery150ms`] candidate sleeps between attempts.
const POLL: Duration = Duration::from_millis(150);

/// How long a [`Bug::UnansweredRenewCounts`] renewal waits for its answer.
const UNANSWERED: Duration = Duration::from_millis(50);

/// What the clients of one mutant server share.
#[derive(Debug, Default)]
pub struct Shared {
    /// Grants made before the last wipe (`TokensResetOnWipe`, `TokensResetOnRestart`).
    wiped_at: AtomicU64,
    /// Held keys and their holders (`NestedKeysShared`).
    held: Mutex<HashMap<String, LeaderInfo>>,
    /// Candidates polling each key (`PollsEvery150ms`), or watching it for a
    /// vacancy (`CheckThenSet`).
    polling: Mutex<HashMap<String, usize>>,
    /// The send time of the last renewal of each grant that reached the
    /// server, the lease's "version" (`CancelledRenewKeepsKey`).
    versions: Mutex<HashMap<u64, Instant>>,
    /// Told when the servers' history is compacted (`WaitLostOnCompaction`).
    compacted: tokio::sync::watch::Sender<u64>,
    /// How many waiters heard of a compaction (`WaitLostOnCompaction`).
    heard_compaction: AtomicU64,
    /// The server nodes that keep their clients' watches silent now
    /// (`ObserverTrustsItsWatch`).
    silent: Arc<tokio::sync::watch::Sender<Silent>>,
    /// Grants not released yet, as the server knows them (`AbandonedRecordKeptAlive`).
    kept: Mutex<Vec<Lease>>,
}

/// One client of the mutant server.
#[derive(Debug, Clone)]
pub struct Mutant {
    inner: MemoryBackend,
    bug: Bug,
    attempts: Arc<AtomicU64>,
    shared: Arc<Shared>,
    /// How long answers are held back (`GrantLostInFlight`; set by its link).
    answer_delay: Arc<Mutex<Duration>>,
    /// The client's link, which knows its server node (`ObserverTrustsItsWatch`).
    link: Option<ClientLink>,
}

/// A client's link, kept by the mutant.
#[derive(Clone)]
struct ClientLink(Arc<dyn Link>);

impl std::fmt::Debug for ClientLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClientLink")
    }
}

/// Counts a poller of `key` while it sleeps between attempts.
struct Polling<'a> {
    shared: &'a Shared,
    key: String,
    counted: bool,
}

impl Polling<'_> {
    fn count(&mut self) {
        if !self.counted {
            self.counted = true;
            *self
                .shared
                .polling
                .lock()
                .unwrap()
                .entry(self.key.clone())
                .or_default() += 1;
        }
    }
}

impl Drop for Polling<'_> {
    fn drop(&mut self) {
        if self.counted {
            if let Some(n) = self.shared.polling.lock().unwrap().get_mut(&self.key) {
                *n -= 1;
            }
        }
    }
}

/// Records a renewal that reached the server even if its caller went away
/// before the answer (`CancelledRenewKeepsKey`).
struct RenewalInFlight<'a> {
    mutant: &'a Mutant,
    grant: u64,
    started: Instant,
}

impl Drop for RenewalInFlight<'_> {
    fn drop(&mut self) {
        let reached = self.mutant.inner.faults().last_request_at();
        if reached.is_some_and(|at| at >= self.started) {
            self.mutant.set_version(self.grant, self.started);
        }
    }
}

fn grant_id(lease: &Lease) -> u64 {
    lease.handle().get::<u64>().copied().unwrap_or_default()
}

impl Mutant {
    /// Renews, every quarter of the TTL, each record of `candidacy`'s key
    /// and identity granted before and not released (`AbandonedRecordKeptAlive`),
    /// forgetting those the server no longer has; never ends.
    async fn keep_alive_abandoned(&self, candidacy: &Candidacy) {
        loop {
            let kept: Vec<Lease> = self
                .shared
                .kept
                .lock()
                .unwrap()
                .iter()
                .filter(|l| l.key() == candidacy.key() && l.holder() == candidacy.identity())
                .cloned()
                .collect();
            for lease in kept {
                if let Err(e) = self.inner.renew(&lease).await {
                    if e.is_lease_lost() {
                        let grant = grant_id(&lease);
                        self.shared
                            .kept
                            .lock()
                            .unwrap()
                            .retain(|kept| grant_id(kept) != grant);
                    }
                }
            }
            tokio::time::sleep(candidacy.ttl() / 4).await;
        }
    }

    fn token(&self, token: Option<FencingToken>) -> Option<FencingToken> {
        let wiped_at = self.shared.wiped_at.load(Ordering::SeqCst);
        let resets = matches!(self.bug, Bug::TokensResetOnWipe | Bug::TokensResetOnRestart);
        match token {
            Some(t) if resets && t.get() > wiped_at && wiped_at > 0 => {
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

    /// The TTL the server applies to a candidacy (`EarlyExpiry`, `ExpiryLate`).
    fn on_server(&self, candidacy: &Candidacy) -> Candidacy {
        let ttl = match self.bug {
            Bug::EarlyExpiry => candidacy.ttl() / 2,
            Bug::ExpiryLate => candidacy.ttl() * 2,
            _ => return candidacy.clone(),
        };
        Candidacy::new(candidacy.key().clone(), candidacy.identity().clone(), ttl)
            .expect("a valid TTL scaled is valid")
    }

    /// `lease` as the server knows it.
    fn server_lease(&self, lease: &Lease) -> Lease {
        Lease::new(
            self.on_server(lease.candidacy()),
            lease.token(),
            lease.sent_at(),
            lease.handle().clone(),
        )
    }

    fn set_version(&self, grant: u64, at: Instant) {
        let mut versions = self.shared.versions.lock().unwrap();
        let v = versions.entry(grant).or_insert(at);
        *v = (*v).max(at);
    }

    /// A lease the server granted for `c`, as the client sees it.
    fn lease(&self, c: &Candidacy, lease: Lease) -> Lease {
        let token = match self.bug {
            Bug::TokenStuck => Some(FencingToken::new(1)),
            Bug::NoFencing => None,
            _ => self.token(lease.token()),
        };
        let sent_at = match self.bug {
            Bug::DeadlineTooLate => lease.sent_at() + lease.ttl() / 2,
            _ => lease.sent_at(),
        };
        let seen = Lease::new(c.clone(), token, sent_at, lease.handle().clone());
        match lease.loss_signal() {
            Some(signal) if self.bug != Bug::DeafToDeletion => {
                seen.with_loss_signal(signal.clone())
            }
            _ => seen,
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
            (_, LeaderEvent::Elected(info)) => LeaderEvent::Elected(LeaderInfo {
                token: self.token(info.token),
                ..info
            }),
            (_, event) => event,
        }
    }

    fn acquisition(&self, c: &Candidacy, a: Acquisition) -> Acquisition {
        match a {
            Acquisition::Granted(lease) => Acquisition::Granted(self.lease(c, lease)),
            Acquisition::Held(info) => match self.event(LeaderEvent::Elected(info)) {
                LeaderEvent::Elected(info) => Acquisition::Held(info),
                LeaderEvent::Vacant => unreachable!("mapped an election"),
            },
        }
    }

    /// Polls every [`POLL`] until granted (`PollsEvery150ms`); counted as
    /// waiting from its first refusal on.
    async fn poll(&self, candidacy: &Candidacy) -> Result<Acquisition> {
        let mut polling = Polling {
            shared: &self.shared,
            key: candidacy.key().as_str().to_owned(),
            counted: false,
        };
        loop {
            match self.inner.acquire(candidacy, AcquireMode::Once).await? {
                Acquisition::Held(_) => {
                    polling.count();
                    tokio::time::sleep(POLL).await;
                }
                granted => return Ok(granted),
            }
        }
    }

    /// Leaves a waiting candidacy behind after a refused single attempt
    /// (`OnceJoinsQueue`); returns once it is queued.
    async fn join_queue(&self, candidacy: &Candidacy) {
        let before = self.inner.queue_len(candidacy.key());
        let (inner, orphan) = (self.inner.clone(), candidacy.clone());
        tokio::spawn(async move { inner.acquire(&orphan, AcquireMode::Wait).await });
        while self.inner.queue_len(candidacy.key()) == before {
            tokio::task::yield_now().await;
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
            Bug::KeyRuleNotEnforced => caps.key_rule = KeyRule::Dns1123Subdomain,
            Bug::MaxKeyLenNotEnforced => caps.max_key_len = 63,
            Bug::TtlGranularityNotEnforced => caps.ttl_granularity = Duration::from_millis(100),
            Bug::MaxTtlNotEnforced => caps.max_ttl = Some(MAX_TTL),
            Bug::RequestBeforeRefusing => {
                caps.max_ttl = Some(MAX_TTL);
                caps.max_key_len = 63;
            }
            _ => {}
        }
        caps
    }

    async fn acquire(&self, candidacy: &Candidacy, mode: AcquireMode) -> Result<Acquisition> {
        self.attempts.fetch_add(1, Ordering::Relaxed);
        if self.bug == Bug::RequestBeforeRefusing {
            drop(self.inner.watch(&lookup_key()).await?);
            self.capabilities().check(candidacy)?;
        }
        if self.bug == Bug::CheckThenSet {
            let granted = self.check_then_set(candidacy, mode).await?;
            return Ok(self.acquisition(candidacy, granted));
        }
        if let Some(holder) = self.nested_holder(candidacy.key()) {
            if mode == AcquireMode::Once {
                return Ok(Acquisition::Held(holder));
            }
            while self.nested_holder(candidacy.key()).is_some() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        let on_server = self.on_server(candidacy);
        let granted = match (self.bug, mode) {
            (Bug::WaitByPolling, AcquireMode::Wait) => loop {
                match self.inner.acquire(&on_server, AcquireMode::Once).await? {
                    Acquisition::Held(_) => {
                        self.attempts.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    granted => break granted,
                }
            },
            (Bug::PollsEvery150ms, AcquireMode::Wait) => self.poll(&on_server).await?,
            (Bug::WaitLostOnCompaction, AcquireMode::Wait) => loop {
                let mut compacted = self.shared.compacted.subscribe();
                tokio::select! {
                    granted = self.inner.acquire(&on_server, AcquireMode::Wait) => break granted?,
                    _ = compacted.changed() => {
                        self.shared.heard_compaction.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(on_server.ttl()).await
                    }
                }
            },
            (Bug::WaitersToldEveryChange, AcquireMode::Wait) => {
                let mut events = self.inner.watch(on_server.key()).await?;
                let told = async {
                    while events.next().await.is_some() {}
                    std::future::pending::<()>().await
                };
                tokio::select! {
                    granted = self.inner.acquire(&on_server, AcquireMode::Wait) => granted?,
                    () = told => unreachable!("told never ends"),
                }
            }
            (Bug::WaitLeavesOrphan, AcquireMode::Wait) => {
                let (inner, candidacy) = (self.inner.clone(), on_server.clone());
                let orphan =
                    tokio::spawn(async move { inner.acquire(&candidacy, AcquireMode::Wait).await });
                orphan.await.expect("the orphan runs to the end")?
            }
            (Bug::AbandonedRecordKeptAlive, _) => {
                let keeping = self.keep_alive_abandoned(&on_server);
                tokio::select! {
                    granted = self.inner.acquire(&on_server, mode) => granted?,
                    () = keeping => unreachable!("keeping never ends"),
                }
            }
            (Bug::OnceJoinsQueue, AcquireMode::Once) => {
                match self.inner.acquire(&on_server, AcquireMode::Once).await? {
                    Acquisition::Held(info) => {
                        self.join_queue(&on_server).await;
                        Acquisition::Held(info)
                    }
                    granted => granted,
                }
            }
            _ => self.inner.acquire(&on_server, mode).await?,
        };
        let granted = match (self.bug, granted) {
            (Bug::DeadlineFromAnswer, Acquisition::Granted(lease)) => {
                let answered = Instant::now();
                let late = Lease::new(
                    lease.candidacy().clone(),
                    lease.token(),
                    answered,
                    lease.handle().clone(),
                );
                Acquisition::Granted(match lease.loss_signal() {
                    Some(signal) => late.with_loss_signal(signal.clone()),
                    None => late,
                })
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
        if let (Bug::ReleaseTakesNested, Acquisition::Granted(lease)) = (self.bug, &granted) {
            self.shared.held.lock().unwrap().insert(
                lease.key().as_str().to_owned(),
                LeaderInfo {
                    identity: lease.holder().clone(),
                    token: lease.token(),
                },
            );
        }
        if let (Bug::AbandonedRecordKeptAlive, Acquisition::Granted(lease)) = (self.bug, &granted) {
            self.shared.kept.lock().unwrap().push(lease.clone());
        }
        if self.bug == Bug::GrantLostInFlight {
            // The answer travels back; dropped meanwhile, the grant is lost.
            let delay = *self.answer_delay.lock().unwrap();
            tokio::time::sleep(delay).await;
        }
        Ok(self.acquisition(candidacy, granted))
    }

    async fn renew(&self, lease: &Lease) -> Result<Lease> {
        let started = Instant::now();
        match self.bug {
            Bug::RenewDoesNotExtend => {
                return Ok(lease.renewed(started, lease.handle().clone()));
            }
            Bug::UnansweredRenewCounts => {
                return match tokio::time::timeout(UNANSWERED, self.inner.renew(lease)).await {
                    Ok(answered) => answered,
                    Err(_) => Ok(lease.renewed(started, lease.handle().clone())),
                };
            }
            _ => {}
        }
        let in_flight = (self.bug == Bug::CancelledRenewKeepsKey).then(|| RenewalInFlight {
            mutant: self,
            grant: grant_id(lease),
            started,
        });
        let renewed = self.inner.renew(&self.server_lease(lease)).await;
        if let Some(in_flight) = in_flight {
            std::mem::forget(in_flight);
            if let Ok(renewed) = &renewed {
                self.set_version(grant_id(lease), renewed.sent_at());
            }
        }
        match renewed {
            Err(e) if e.is_lease_lost() && self.bug == Bug::RenewNeverLost => {
                Ok(lease.renewed(Instant::now(), lease.handle().clone()))
            }
            Ok(renewed) if self.bug == Bug::DeadlineFromAnswer => {
                Ok(lease.renewed(Instant::now(), renewed.handle().clone()))
            }
            Ok(renewed) => Ok(lease.renewed(renewed.sent_at(), renewed.handle().clone())),
            Err(e) => Err(e),
        }
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        self.shared
            .held
            .lock()
            .unwrap()
            .remove(lease.key().as_str());
        if self.bug == Bug::ReleaseTakesNested {
            for nested in nested_under(&self.shared, lease.key()) {
                self.inner.expire_now(&nested);
            }
        }
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
            Bug::CancelledRenewKeepsKey => {
                let version = self
                    .shared
                    .versions
                    .lock()
                    .unwrap()
                    .get(&grant_id(lease))
                    .copied();
                if version.is_some_and(|v| v > lease.sent_at()) {
                    // The compare-and-swap on the version failed; the error
                    // is logged and swallowed, as client-go's was.
                    return Ok(());
                }
                self.inner.release(lease).await
            }
            Bug::AbandonedRecordKeptAlive => {
                self.inner.release(lease).await?;
                let grant = grant_id(lease);
                self.shared
                    .kept
                    .lock()
                    .unwrap()
                    .retain(|kept| grant_id(kept) != grant);
                Ok(())
            }
            _ => self.inner.release(lease).await,
        }
    }

    async fn watch(&self, key: &ElectionKey) -> Result<BoxStream<'static, Result<LeaderEvent>>> {
        if self.bug == Bug::RequestBeforeRefusing {
            drop(self.inner.watch(&lookup_key()).await?);
            self.capabilities().check_key(key)?;
        }
        let events = self.inner.watch(key).await?;
        let skip = usize::from(self.bug == Bug::WatchSkipsCurrent);
        let mutant = self.clone();
        let nested = self
            .nested_holder(key)
            .map(|info| Ok(LeaderEvent::Elected(info)));
        let events = events.skip(skip).map(move |e| e.map(|e| mutant.event(e)));
        let events = match self.bug {
            Bug::WatchSkipsVacancy => {
                let mut first = true;
                events
                    .filter(move |e| {
                        let keep =
                            std::mem::take(&mut first) || !matches!(e, Ok(LeaderEvent::Vacant));
                        futures::future::ready(keep)
                    })
                    .boxed()
            }
            _ => events.boxed(),
        };
        let events = match (&self.link, self.bug) {
            (Some(ClientLink(link)), Bug::ObserverTrustsItsWatch) => {
                held_while_silent(events, self.shared.silent.subscribe(), link.clone())
            }
            _ => events,
        };
        let events = match self.bug {
            Bug::WatchTakesNested => self.with_nested_events(key, events).await?,
            _ => events,
        };
        Ok(futures::stream::iter(nested).chain(events).boxed())
    }
}

/// The maximum TTL that [`Bug::MaxTtlNotEnforced`] and
/// [`Bug::RequestBeforeRefusing`] declare (above the memory factory's 600 ms).
const MAX_TTL: Duration = Duration::from_secs(1);

/// The key a [`Bug::RequestBeforeRefusing`] client looks at first.
fn lookup_key() -> ElectionKey {
    ElectionKey::new("mutant.lookups").expect("a valid key")
}

/// The held keys nested under `key` (`key/..`, `key.`..), as a range over
/// the key as a prefix finds them.
fn nested_under(shared: &Shared, key: &ElectionKey) -> Vec<ElectionKey> {
    shared
        .held
        .lock()
        .unwrap()
        .keys()
        .filter(|k| {
            k.strip_prefix(key.as_str())
                .is_some_and(|rest| rest.starts_with('/') || rest.starts_with('.'))
        })
        .filter_map(|k| ElectionKey::new(k.as_str()).ok())
        .collect()
}

impl Mutant {
    /// One check-then-set attempt, or (waiting) one per vacancy its watch
    /// reports until one is granted ([`Bug::CheckThenSet`]).
    async fn check_then_set(
        &self,
        candidacy: &Candidacy,
        mode: AcquireMode,
    ) -> Result<Acquisition> {
        let key = candidacy.key();
        let mut waiting = Polling {
            shared: &self.shared,
            key: key.as_str().to_owned(),
            counted: false,
        };
        let mut events = match mode {
            AcquireMode::Wait => Some(self.inner.watch(key).await?),
            AcquireMode::Once => None,
        };
        loop {
            // The read.
            match self.inner.holder(key) {
                Some(holder) => match events.as_mut() {
                    None => return Ok(Acquisition::Held(holder)),
                    Some(events) => {
                        // Wait for the watch to report a vacancy, then look again.
                        waiting.count();
                        while let Some(event) = events.next().await {
                            if matches!(event?, LeaderEvent::Vacant) {
                                break;
                            }
                        }
                        continue;
                    }
                },
                None => {
                    // A moment between the read and the write.
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    // The write, whoever took the key meanwhile.
                    self.inner.expire_now(key);
                    match self.inner.acquire(candidacy, AcquireMode::Once).await? {
                        granted @ Acquisition::Granted(_) => return Ok(granted),
                        Acquisition::Held(holder) if events.is_none() => {
                            return Ok(Acquisition::Held(holder))
                        }
                        Acquisition::Held(_) => continue,
                    }
                }
            }
        }
    }

    /// `events` of `key`, merged with the changes of the elections nested
    /// under it that [the suite's nested case](tenure_conformance::suite::nested_keys_are_independent)
    /// uses (`key/b`, `key.b`), their first events (their state when the
    /// watch began) left out ([`Bug::WatchTakesNested`]).
    async fn with_nested_events(
        &self,
        key: &ElectionKey,
        events: BoxStream<'static, Result<LeaderEvent>>,
    ) -> Result<BoxStream<'static, Result<LeaderEvent>>> {
        let mut merged = vec![events];
        for nested in [format!("{key}/b"), format!("{key}.b")] {
            if let Ok(nested) = ElectionKey::new(nested) {
                if self.inner.capabilities().check_key(&nested).is_ok() {
                    merged.push(self.inner.watch(&nested).await?.skip(1).boxed());
                }
            }
        }
        Ok(futures::stream::select_all(merged).boxed())
    }
}

/// What it takes to make a mutant client: shared by the factory and its
/// candidate processes' front.
#[derive(Clone)]
struct Parts {
    memory: MemoryFactory,
    bug: Bug,
    attempts: Arc<AtomicU64>,
    shared: Arc<Shared>,
}

impl Parts {
    fn mutant(&self, inner: MemoryBackend) -> Mutant {
        Mutant {
            inner,
            bug: self.bug,
            attempts: self.attempts.clone(),
            shared: self.shared.clone(),
            answer_delay: Arc::default(),
            link: None,
        }
    }
}

/// Clients of one mutant server.
pub struct MutantFactory {
    parts: Parts,
    servers: Servers,
    name: String,
    gaps: Vec<Gap>,
    retries_frozen_nodes: Option<&'static str>,
}

impl MutantFactory {
    /// A fresh server with `bug` planted in every client.
    pub fn planted(bug: Bug) -> Arc<dyn BackendFactory> {
        Arc::new(Self::new(bug))
    }

    /// The same, as the concrete factory.
    pub fn new(bug: Bug) -> MutantFactory {
        let shared = Arc::<Shared>::default();
        let memory = MemoryFactory::new().with_candidate(env!("CARGO_BIN_EXE_tenure-candidate"));
        let memory = match bug {
            Bug::LeasesLostOnFailover => memory.on_recovery(MemoryBackend::wipe_all),
            Bug::TokensResetOnRestart => {
                let shared = shared.clone();
                memory.on_recovery(move |server| {
                    shared
                        .wiped_at
                        .store(server.stats().grants, Ordering::SeqCst);
                    server.wipe_all();
                })
            }
            Bug::UnansweredRenewCounts | Bug::StaysOnAFrozenNode => {
                memory.clients_stay_on_frozen_nodes()
            }
            _ => memory,
        };
        MutantFactory {
            servers: Servers {
                memory: memory.clone(),
                silent: shared.silent.clone(),
            },
            parts: Parts {
                memory,
                bug,
                attempts: Arc::default(),
                shared,
            },
            name: format!("mutant-{bug:?}"),
            gaps: Vec::new(),
            retries_frozen_nodes: None,
        }
    }

    /// The same factory documenting `gaps`.
    pub fn with_gaps(mut self, gaps: Vec<Gap>) -> Self {
        self.gaps = gaps;
        self
    }

    /// The same factory saying its client may go back to a frozen node
    /// (as the ZooKeeper factory does), for `why`.
    pub fn retrying_frozen_nodes(mut self, why: &'static str) -> Self {
        self.retries_frozen_nodes = Some(why);
        self
    }

    fn server(&self) -> &MemoryBackend {
        self.parts.memory.server()
    }
}

/// The candidacy a [`Bug::WritesOnConnect`] client registers with.
fn registration() -> Candidacy {
    Candidacy::new(
        ElectionKey::new("mutant.registrations").expect("a valid key"),
        CandidateId::new("connect").expect("a valid identity"),
        Duration::from_secs(1),
    )
    .expect("a valid candidacy")
}

#[async_trait]
impl BackendFactory for MutantFactory {
    fn name(&self) -> &str {
        &self.name
    }
    fn capabilities(&self) -> Capabilities {
        self.parts.mutant(self.server().clone()).capabilities()
    }
    async fn client(&self) -> Result<Client> {
        let inner = self.parts.memory.memory_client();
        if self.parts.bug == Bug::TrustsItsWatch {
            inner.faults().trust_watches(true);
        }
        if self.parts.bug == Bug::ShrunkSessionUnheeded {
            inner.faults().ignore_session_limits(true);
        }
        if self.parts.bug == Bug::TransientErrorIsLost {
            inner.faults().report_transient_errors_as_lost(true);
        }
        if self.parts.bug == Bug::GrantKeptWhenAnswerLost {
            inner.faults().keep_undelivered_grants(true);
        }
        if self.parts.bug == Bug::WritesOnConnect {
            if let Acquisition::Granted(lease) =
                inner.acquire(&registration(), AcquireMode::Once).await?
            {
                inner.release(&lease).await?;
            }
        }
        let memory = self.parts.memory.link(&inner);
        let mut mutant = self.parts.mutant(inner.clone());
        mutant.link = Some(ClientLink(memory.clone()));
        let link: Arc<dyn Link> = match self.parts.bug {
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
        self.parts.memory.timing()
    }
    fn retries_frozen_nodes(&self) -> Option<&'static str> {
        self.retries_frozen_nodes
    }
    async fn server_writes(&self) -> Option<Result<u64>> {
        Some(Ok(match self.parts.bug {
            Bug::WaitByPolling => self.parts.attempts.load(Ordering::Relaxed),
            _ => self.server().stats().writes(),
        }))
    }
    async fn server_requests(&self) -> Option<Result<u64>> {
        Some(Ok(self.server().stats().served()))
    }
    async fn waiting(&self, key: &ElectionKey) -> Option<Result<usize>> {
        match self.parts.bug {
            Bug::WaitByPolling => None,
            Bug::PollsEvery150ms => {
                let polling = self.parts.shared.polling.lock().unwrap();
                Some(Ok(polling.get(key.as_str()).copied().unwrap_or_default()))
            }
            Bug::CheckThenSet => {
                let watching = self.parts.shared.polling.lock().unwrap();
                Some(Ok(watching.get(key.as_str()).copied().unwrap_or_default()))
            }
            _ => Some(Ok(self.server().queue_len(key))),
        }
    }
    async fn key_exists(&self, key: &ElectionKey) -> Option<Result<bool>> {
        Some(Ok(self.server().knows(key)))
    }
    async fn wipe_election(&self, key: &ElectionKey) -> Option<Result<()>> {
        self.server().wipe(key);
        self.parts
            .shared
            .wiped_at
            .store(self.server().stats().grants, Ordering::SeqCst);
        Some(Ok(()))
    }
    async fn compact_history(&self) -> Option<Result<()>> {
        // As a factory whose compaction ends watches must, return once the
        // waiters it ended have heard of it (at most a second).
        let shared = &self.parts.shared;
        let told = shared.compacted.receiver_count() as u64;
        let heard = shared.heard_compaction.load(Ordering::SeqCst);
        shared.compacted.send_modify(|n| *n += 1);
        let give_up = Instant::now() + Duration::from_secs(1);
        while shared.heard_compaction.load(Ordering::SeqCst) < heard + told
            && Instant::now() < give_up
        {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        self.parts.memory.compact_history().await
    }
    fn servers(&self) -> Option<&dyn ServerFaults> {
        Some(&self.servers)
    }
    fn candidate(&self) -> Option<CandidateCommand> {
        let parts = self.parts.clone();
        self.parts
            .memory
            .candidate_serving(move || Arc::new(parts.mutant(parts.memory.memory_client())))
    }
    fn gaps(&self) -> Vec<Gap> {
        self.gaps.clone()
    }
}
