//! What a case runs with: the factory, fresh keys and identities, the
//! safety recorder, the fenced store, and the checks it reports.

use std::fmt::Display;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tenure_core::{Candidacy, CandidateId, Capabilities, ElectionKey, ElectorBuilder};

use super::safety::{FencedStore, SafetyRecorder};
use crate::factory::{BackendFactory, Client, Link, Timing};
use crate::report::{Expect, Figures, Property, Violation};

/// Cases begun in this process, for their keys' tags.
static CASES_BEGUN: AtomicU64 = AtomicU64::new(0);

/// Why a case stopped early.
#[derive(Debug)]
pub enum Failure {
    /// A promised property did not hold, or a step failed.
    Fail(String),
    /// The case does not apply.
    Skip(String),
}

impl From<tenure_core::Error> for Failure {
    fn from(e: tenure_core::Error) -> Self {
        Failure::Fail(format!("unexpected error: {e}"))
    }
}

/// A case step's result.
pub type Step<T = ()> = Result<T, Failure>;

/// Adds what was being done to a backend error.
pub trait Context<T> {
    /// Wraps an error as a failure of `what`.
    fn ctx(self, what: impl Display) -> Step<T>;
}

impl<T> Context<T> for tenure_core::Result<T> {
    fn ctx(self, what: impl Display) -> Step<T> {
        self.map_err(|e| Failure::Fail(format!("{what}: {e}")))
    }
}

/// A change made to every Elector a case builds (see [`with_elector_hook`]).
#[doc(hidden)]
pub type ElectorHook = Arc<dyn Fn(ElectorBuilder) -> ElectorBuilder + Send + Sync>;

tokio::task_local! {
    static ELECTOR_HOOK: ElectorHook;
}

/// Runs `case` (a suite case's future) with `hook` applied to every
/// Elector its body builds through the suite's own builder, so that the
/// suite's tests can plant a bug in the Elector itself (test-only, not
/// part of the API).
#[doc(hidden)]
pub async fn with_elector_hook<F: Future>(hook: ElectorHook, case: F) -> F::Output {
    ELECTOR_HOOK.scope(hook, case).await
}

#[derive(Default)]
pub(crate) struct Log {
    pub passed: u32,
    pub violations: Vec<Violation>,
    pub figures: Figures,
    pub notes: Vec<String>,
}

pub(crate) struct Inner {
    pub factory: Arc<dyn BackendFactory>,
    pub case: &'static str,
    pub caps: Capabilities,
    pub timing: Timing,
    pub safety: SafetyRecorder,
    pub store: FencedStore,
    pub log: Mutex<Log>,
    /// The link of each client an elector of the case was built on, by
    /// the address of the client's backend.
    links: Mutex<Vec<(usize, Arc<dyn Link>)>>,
    /// Applied to every Elector the case builds ([`with_elector_hook`]).
    pub elector_hook: Option<ElectorHook>,
    /// The slowest round trip the case measured ([`Cx::measure_round_trip`]).
    measured: Mutex<Option<Duration>>,
    seq: AtomicU64,
    tag: String,
}

/// The context of one case; cheap to clone into the tasks it starts.
#[derive(Clone)]
pub struct Cx(pub(crate) Arc<Inner>);

impl Cx {
    /// The most of a backend's declared expiry slack a failover bound allows.
    pub const MAX_SLACK: Duration = Duration::from_secs(1);

    /// What a failover bound allows beyond the TTL and the expiry slack: the
    /// standby hearing of the expiry and taking the key.
    pub const FAILOVER_MARGIN: Duration = Duration::from_millis(250);

    /// How many hand-overs a case times to judge "at once" by their median.
    pub const AT_ONCE_SAMPLES: usize = 5;

    pub(crate) fn new(factory: Arc<dyn BackendFactory>, case: &'static str) -> Cx {
        let caps = factory.capabilities();
        let timing = factory.timing();
        let millis = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis();
        Cx(Arc::new(Inner {
            factory,
            case,
            caps,
            timing,
            safety: SafetyRecorder::default(),
            store: FencedStore::default(),
            log: Mutex::default(),
            links: Mutex::default(),
            elector_hook: ELECTOR_HOOK.try_with(Arc::clone).ok(),
            measured: Mutex::default(),
            seq: AtomicU64::new(0),
            // The process, the time and a count of the cases begun: keys stay
            // apart even for two runs of one case begun in the same millisecond.
            tag: format!(
                "{:x}{:x}{:x}",
                std::process::id(),
                millis % (1 << 40),
                CASES_BEGUN.fetch_add(1, Ordering::Relaxed)
            ),
        }))
    }

    pub(crate) fn log(&self) -> std::sync::MutexGuard<'_, Log> {
        self.0.log.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The factory under test.
    pub fn factory(&self) -> &dyn BackendFactory {
        &*self.0.factory
    }
    /// The backend's declared capabilities.
    pub fn caps(&self) -> &Capabilities {
        &self.0.caps
    }
    /// The case's timing.
    pub fn timing(&self) -> Timing {
        self.0.timing
    }
    /// The TTL of every candidacy.
    pub fn ttl(&self) -> Duration {
        self.0.timing.ttl
    }
    /// The safety recorder every candidate reports to.
    pub fn safety(&self) -> &SafetyRecorder {
        &self.0.safety
    }
    /// The fenced store every leader writes through.
    pub fn store(&self) -> &FencedStore {
        &self.0.store
    }

    fn backend_address(backend: &Arc<dyn tenure_core::LeaseBackend>) -> usize {
        Arc::as_ptr(backend) as *const () as usize
    }

    /// Remembers `client`'s link (if it has one), so that a grant to an
    /// elector built on it can be timed by what the link forwarded.
    pub(crate) fn remember_link(&self, client: &Client) {
        if let Some(link) = &client.link {
            let address = Self::backend_address(&client.backend);
            let mut links = self.0.links.lock().unwrap_or_else(|e| e.into_inner());
            if !links.iter().any(|(a, _)| *a == address) {
                links.push((address, link.clone()));
            }
        }
    }

    /// The link of the client whose backend is `backend`, if remembered.
    pub(crate) fn link_of(
        &self,
        backend: &Arc<dyn tenure_core::LeaseBackend>,
    ) -> Option<Arc<dyn Link>> {
        let address = Self::backend_address(backend);
        let links = self.0.links.lock().unwrap_or_else(|e| e.into_inner());
        links
            .iter()
            .find(|(a, _)| *a == address)
            .map(|(_, l)| l.clone())
    }

    fn next(&self) -> u64 {
        self.0.seq.fetch_add(1, Ordering::Relaxed)
    }

    /// A key no other case or run uses, valid under every key rule and
    /// within the backend's key length (the case's name is shortened to fit).
    pub fn new_key(&self) -> ElectionKey {
        let unique = format!("{}-{}", self.0.tag, self.next());
        let room = self
            .0
            .caps
            .max_key_len
            .saturating_sub(unique.len() + 4)
            .min(self.0.case.len());
        let case = self.0.case[..room].replace('_', "-");
        let key = match case.trim_end_matches('-') {
            "" => format!("tc.{unique}"),
            case => format!("tc.{case}.{unique}"),
        };
        ElectionKey::new(key).expect("generated keys are valid")
    }

    /// A candidate identity for this case.
    pub fn identity(&self, name: &str) -> CandidateId {
        CandidateId::new(format!("{}-{name}", self.0.case)).expect("generated identities are valid")
    }

    /// A candidacy for `name` on `key` with the case's TTL.
    pub fn candidacy(&self, key: &ElectionKey, name: &str) -> Candidacy {
        Candidacy::new(key.clone(), self.identity(name), self.ttl())
            .expect("the suite's TTL is valid")
    }

    /// A new independent client whose capabilities match the factory's.
    pub async fn client(&self) -> Step<Client> {
        let client = self.factory().client().await.ctx("making a client")?;
        let declared = client.backend.capabilities();
        self.check(Property::Contract, declared == self.0.caps, || {
            format!(
                "the client declares {declared:?}, the factory {:?}",
                self.0.caps
            )
        })?;
        Ok(client)
    }

    /// What the backend promises for `property`.
    ///
    /// A factory's [gaps](BackendFactory::gaps) cannot excuse
    /// [`Property::Exclusive`]: a split brain is always a failure.
    pub fn expect(&self, property: Property) -> Expect {
        if let Some(gap) = self
            .factory()
            .gaps()
            .into_iter()
            .find(|g| g.property == property && property != Property::Exclusive)
        {
            return Expect::NotPromised(gap.why.to_owned());
        }
        match property {
            Property::Fencing if !self.0.caps.fencing => {
                Expect::NotPromised("capabilities: fencing = false".into())
            }
            Property::HerdFree | Property::HerdRequests if !self.0.caps.herd_free_wait => {
                Expect::NotPromised("capabilities: herd_free_wait = false".into())
            }
            _ => Expect::Must,
        }
    }

    /// Records a check; a promised property that does not hold ends the case.
    pub fn check(&self, property: Property, ok: bool, detail: impl FnOnce() -> String) -> Step {
        if ok {
            self.log().passed += 1;
            return Ok(());
        }
        let detail = detail();
        let promised = self.expect(property) == Expect::Must;
        self.log().violations.push(Violation {
            property,
            promised,
            detail: detail.clone(),
        });
        if promised {
            Err(Failure::Fail(format!("{property}: {detail}")))
        } else {
            Ok(())
        }
    }

    /// The limit on a step that sets a case up rather than being what it
    /// checks (a fresh client's first campaign on a vacant key): the TTL
    /// and a round trip. Such a first call may also connect, which on a
    /// loaded machine can take longer than a round trip (a failure seen:
    /// "campaign: nothing after 250ms" on etcd-3node, before the case had
    /// faulted anything), and every bound the case checks starts after it.
    /// The speed of an acquire on a vacant key is `acquire_uncontended`'s
    /// to judge, within a round trip.
    pub fn set_up_limit(&self) -> Duration {
        self.ttl() + self.timing().round_trip
    }

    /// The bound on a failover after a crash or a cut: the TTL, plus the
    /// backend's declared expiry slack (at most [`Cx::MAX_SLACK`]), plus
    /// [`Cx::FAILOVER_MARGIN`] for the standby to hear of it and take the key.
    pub fn failover_bound(&self) -> Duration {
        self.ttl() + self.caps().expiry_slack.min(Self::MAX_SLACK) + Self::FAILOVER_MARGIN
    }

    /// Checks hand-over `samples` were "at once": the median within
    /// [`Timing::at_once`] and every one within [`Timing::at_once_max`]
    /// (or four round trips the case measured, if more).
    /// The report's hand-over figure is the median; the note has the rest.
    pub fn at_once(&self, samples: &[Duration], what: &str) -> Step {
        let mut sorted = samples.to_vec();
        sorted.sort();
        let (Some(&p50), Some(&max)) = (sorted.get(sorted.len() / 2), sorted.last()) else {
            return Err(Failure::Fail(format!("no {what} was timed")));
        };
        let p90 = sorted[sorted.len() * 9 / 10];
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        self.figures(|f| f.handover_ms = Some(ms(p50)));
        self.note(format!(
            "{what}, {} timed: p50 {:.1} ms, p90 {:.1} ms, max {:.1} ms",
            sorted.len(),
            ms(p50),
            ms(p90),
            ms(max)
        ));
        // The median is the promise; a single sample may take a few round
        // trips of the machine as it is now (a measured round trip, where
        // the case measured one).
        let bound = self.timing().at_once;
        let bound_max = self.allowing_for_load(self.timing().at_once_max, 4);
        self.check(Property::Timing, p50 <= bound, || {
            format!(
                "{what}: median {p50:?} of {}, above {bound:?}: not at once",
                sorted.len()
            )
        })?;
        self.check(Property::Timing, max <= bound_max, || {
            let slow: Vec<String> = samples
                .iter()
                .filter(|d| **d > bound_max)
                .map(|d| format!("{d:?}"))
                .collect();
            format!(
                "{what}: {} above {bound_max:?}: not at once",
                slow.join(", ")
            )
        })
    }

    /// Measures a round trip to the servers on `client` now: the median of
    /// three watches of a fresh key, each opened and its first event read.
    /// The case keeps the slowest it measured: the bounds that must hold on
    /// a busy machine ([`at_once`](Self::at_once)'s per-sample bound, and
    /// what [`allowing_for_load`](Self::allowing_for_load) gives) grow with
    /// it, so that they judge the backend against the machine it runs on
    /// now, not against an idle one.
    pub async fn measure_round_trip(&self, client: &Client) -> Step<Duration> {
        let mut samples = Vec::with_capacity(3);
        for _ in 0..3 {
            let key = self.new_key();
            let started = tokio::time::Instant::now();
            let mut events = client
                .backend
                .watch(&key)
                .await
                .ctx("opening a watch to time a round trip")?;
            use futures::StreamExt;
            events
                .next()
                .await
                .transpose()
                .ctx("reading a watch to time a round trip")?;
            samples.push(started.elapsed());
        }
        samples.sort();
        let median = samples[1];
        let mut measured = self.0.measured.lock().unwrap_or_else(|e| e.into_inner());
        *measured = Some(measured.map_or(median, |m| m.max(median)));
        Ok(median)
    }

    /// How long a request the link forwarded may still be on its way to
    /// the servers: half the slowest round trip the case measured
    /// ([`measure_round_trip`](Self::measure_round_trip)), zero where it
    /// measured none. A standby's last request, forwarded a moment before
    /// the holder stepped down and released, may be served after the
    /// release (a read that finds the key free): the overlap check allows
    /// for it ([`SafetyRecorder::overlaps`](super::SafetyRecorder::overlaps)).
    pub fn in_flight_allowance(&self) -> Duration {
        let measured = *self.0.measured.lock().unwrap_or_else(|e| e.into_inner());
        measured.map_or(Duration::ZERO, |rt| rt / 2)
    }

    /// `bound`, or `per_round_trip` times the slowest round trip the case
    /// measured ([`measure_round_trip`](Self::measure_round_trip)) if that
    /// is more: a bound on what a loaded machine stretches.
    pub fn allowing_for_load(&self, bound: Duration, per_round_trip: u32) -> Duration {
        let measured = *self.0.measured.lock().unwrap_or_else(|e| e.into_inner());
        measured.map_or(bound, |rt| bound.max(rt * per_round_trip))
    }

    /// Updates the measured figures.
    pub fn figures(&self, update: impl FnOnce(&mut Figures)) {
        update(&mut self.log().figures);
    }

    /// Adds an observation to the report.
    pub fn note(&self, note: impl Into<String>) {
        self.log().notes.push(note.into());
    }

    /// Awaits `fut`, failing the case if it takes longer than `limit`.
    pub async fn within<T>(
        &self,
        limit: Duration,
        what: impl Display,
        fut: impl Future<Output = T>,
    ) -> Step<T> {
        tokio::time::timeout(limit, fut)
            .await
            .map_err(|_| Failure::Fail(format!("{what}: nothing after {limit:?}")))
    }

    /// Waits until `link` holds nothing back and, if it forwarded requests
    /// since `since` (what a heal or an end of delay let go), until an
    /// answer came after the first of them: the held traffic has landed.
    /// At most `cap`, which is also how long it waits where the link cannot
    /// tell (nor is it an error to reach it: a client may send what is never
    /// answered, an HTTP/2 window update). Returns how long it waited, or
    /// `None` where the link cannot tell.
    pub async fn until_link_quiet(
        &self,
        link: &dyn Link,
        since: tokio::time::Instant,
        cap: Duration,
    ) -> Option<Duration> {
        let began = tokio::time::Instant::now();
        let deadline = began + cap;
        loop {
            let (Some(held), Some(sent)) = (link.in_flight(), link.requests_since(since)) else {
                tokio::time::sleep_until(deadline).await;
                return None;
            };
            let answered = sent
                .first()
                .is_none_or(|&first| link.last_answer_at().is_some_and(|a| a >= first));
            if (held == 0 && answered) || tokio::time::Instant::now() >= deadline {
                return Some(began.elapsed());
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// Waits until `n` candidates wait for `key` (polling the factory's
    /// counter), or for [`Timing::settle`] where it has none.
    pub async fn until_waiting(&self, key: &ElectionKey, n: usize) -> Step {
        let limit = self.timing().settle.max(Duration::from_millis(500)) * 10;
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            match self.factory().waiting(key).await {
                None => {
                    tokio::time::sleep(self.timing().settle).await;
                    return Ok(());
                }
                // A count that could not be read for a transient reason
                // (the inspector's connection broken by an earlier case's
                // server restart) is read again, until the deadline.
                Some(Err(e)) if e.is_retryable() && tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(20)).await
                }
                Some(Err(e)) => return Err(Failure::Fail(format!("counting waiters: {e}"))),
                Some(Ok(k)) if k >= n => return Ok(()),
                Some(Ok(k)) if tokio::time::Instant::now() >= deadline => {
                    return Err(Failure::Fail(format!(
                        "{k} of {n} candidates queued after {limit:?}"
                    )))
                }
                Some(Ok(_)) => tokio::time::sleep(Duration::from_millis(2)).await,
            }
        }
    }
}
