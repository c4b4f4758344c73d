//! A waiting candidate's place in line: named on the Lease (nominees.rs),
//! or in the queue Lease (queue.rs) until someone names it.
//!
//! A waiter that finds the Lease held names itself if the Lease names
//! fewer than [`NOMINEES`] (a compare-and-swap that changes only a label),
//! else joins the queue. Named, it hears every change of the Lease on its
//! watch (which selects on its label) and judges expiry as every tenure
//! candidate does. Not named, it hears nothing, and reads the Lease now and
//! then ([`Waiter::until`]), in case every named waiter is gone. Whoever
//! takes the Lease over names the next waiters in line in the same write;
//! once granted, it leaves the queue. A waiter dropped while it waits
//! leaves the queue, and, if the Lease names it, names the next in line in
//! its place, so that the release after it is not held back.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::PostParams;
use kube::Api;
use tenure_core::hosted::{bounded, spawn_cleanup, CleanupOnDrop};
use tenure_core::Candidacy;
use tokio::time::Instant;

use crate::error::{refused, Refused};
use crate::nominees::{self, NOMINEES};
use crate::observe::LeaseWatch;
use crate::queue::{self, Entry};
use crate::record::{self, Term};

/// The back-off after a failed join: a delay drawn between half and all of
/// a cap that doubles from 1 s to 60 s.
const JOIN_RETRY_MIN: Duration = Duration::from_millis(500);
const JOIN_RETRY_MAX: Duration = Duration::from_secs(60);

/// What a waiter did about its place in line.
pub(crate) enum Step {
    /// Nothing to do: wait for a change.
    Wait,
    /// It named itself; the watch (open from the look before) tells of it.
    Named,
    /// The Lease changed under its write: look again.
    LookAgain,
}

/// What a dropped wait leaves undone: its queue entry, its name on the Lease.
struct Withdrawal {
    api: Api<Lease>,
    key: String,
    tag: String,
    /// Whether it may be in the queue.
    queued: bool,
    ttl: Duration,
    after: Duration,
}

/// One waiting acquire's place in line.
pub(crate) struct Waiter {
    api: Api<Lease>,
    key: String,
    ttl: Duration,
    after: Duration,
    /// Its queue entry (the tag also names it on the Lease).
    entry: Entry,
    /// In the queue as far as it knows (its join answered).
    queued: bool,
    /// After a join that failed: when it tries again (never sooner than
    /// the server's `Retry-After`), and how many failed in a row.
    rejoin_at: Option<Instant>,
    join_failures: u32,
    /// Expired entries of the line as last read: its next join deletes them.
    stale: Vec<String>,
    /// The queue cannot be joined at all (no PATCH served, or not allowed):
    /// it watches the whole Lease instead, as every waiter did before
    /// there was a line, and takes its turn after the named waiters'.
    hears_all: bool,
    /// Names of itself that met a changed Lease, since the last deadline.
    conflicts: u32,
    /// Armed once it has written anything: withdraws it if the wait is dropped.
    withdrawal: Option<CleanupOnDrop<Withdrawal>>,
    /// The queue as last read, and when: whom it names on taking over.
    line: Option<(Instant, Vec<Entry>)>,
    /// Whether it was first in line at the last look.
    first: bool,
    /// The term it saw held at the last look.
    term: Option<Term>,
    /// When it reads the Lease next while not named.
    look_at: Option<Instant>,
}

impl Waiter {
    pub(crate) fn new(api: Api<Lease>, candidacy: &Candidacy, after: Duration) -> Waiter {
        Waiter {
            api,
            key: candidacy.key().as_str().to_owned(),
            ttl: candidacy.ttl(),
            after,
            entry: Entry {
                tag: nominees::new_tag(),
                order: nominees::now_order(),
                identity: candidacy.identity().as_str().to_owned(),
                expires: 0,
            },
            queued: false,
            rejoin_at: None,
            join_failures: 0,
            stale: Vec::new(),
            hears_all: false,
            conflicts: 0,
            withdrawal: None,
            line: None,
            first: false,
            term: None,
            look_at: None,
        }
    }

    /// Whether it watches the whole Lease (it cannot join the queue).
    pub(crate) fn hears_all(&self) -> bool {
        self.hears_all
    }

    /// The label that names it, which its watch selects on.
    pub(crate) fn label(&self) -> String {
        nominees::label(&self.entry.tag)
    }

    /// Where `lease` has it in line.
    pub(crate) fn position(&self, lease: &Lease) -> Option<usize> {
        nominees::position(lease, &self.entry.tag)
    }

    /// How long after `lease` became free it holds back.
    pub(crate) fn hold_back(&self, lease: &Lease) -> Duration {
        let named = nominees::named(lease).len();
        nominees::hold_back(self.position(lease), named, self.ttl)
    }

    /// Until when it waits for a change of `lease`, which runs out at
    /// `expires`: then, if `lease` names it (its watch tells it of every
    /// change meanwhile); else until its next look, drawn between half and
    /// one and a half of a period that grows with the line (so that the
    /// waiters not named read the Lease a few times a TTL between them, not
    /// once each), but at least twice the TTL; or until it joins the queue
    /// again after a join that failed, if that comes first.
    pub(crate) fn until(&mut self, lease: &Lease, expires: Instant) -> Instant {
        if self.position(lease).is_some() || self.hears_all {
            return expires;
        }
        let now = Instant::now();
        let look_at = match self.look_at.filter(|at| *at > now) {
            Some(at) => at,
            None => {
                let line = self.line.as_ref().map_or(0, |(_, line)| line.len()) as u32;
                let base = (self.ttl * 2).max(Duration::from_secs(5));
                let period = (base + base * line / 16).min(queue::longest_look(self.ttl));
                let at = now + period.mul_f64(0.5 + rand::random::<f64>());
                self.look_at = Some(at);
                at
            }
        };
        match self.rejoin_at {
            Some(rejoin_at) if !self.queued => rejoin_at.min(look_at),
            _ => look_at,
        }
    }

    /// Takes its place in line, `lease` (held) as it was just read, the
    /// watch to be opened from there first: it names itself if the Lease
    /// names fewer than [`NOMINEES`], else joins the queue. Named first
    /// in line, it reads the queue, to know whom to name next.
    pub(crate) async fn settle_in(&mut self, lease: &Lease, watch: &mut LeaseWatch) -> Step {
        let looking = self.look_at.is_some_and(|at| at <= Instant::now());
        if looking {
            // This is the look its deadline brought: it tries naming itself
            // again from here on.
            self.look_at = None;
            self.conflicts = 0;
        }
        let named = nominees::named(lease);
        let term = Term::of(lease);
        let taken_over = self.term.replace(term.clone()).is_some_and(|t| t != term);
        if let Some(position) = self.position(lease) {
            let first = position == 0;
            let stale = self
                .line
                .as_ref()
                .is_none_or(|(at, _)| at.elapsed() > self.ttl * 2);
            // Waiters may be queued behind the named ones if the line is
            // full, or if someone just took the Lease over (and named whom
            // it knew of). Alone in a line it named itself into, it does
            // not look: a waiter queues only behind a full line.
            let may_queue = named.len() >= NOMINEES || taken_over;
            if first && (!self.first || stale || taken_over) && may_queue {
                self.read_line(lease).await;
            }
            self.first = first;
            return Step::Wait;
        }
        self.first = false;
        if named.len() < NOMINEES && self.conflicts < 3 && !self.hears_all {
            return self.name_itself(lease, watch).await;
        }
        if !self.queued {
            if self.rejoin_at.is_none_or(|at| at <= Instant::now()) {
                self.join().await;
            }
        } else if looking {
            self.keep_entry().await;
        }
        Step::Wait
    }

    /// At a look: writes its entry again once half its lifetime has gone,
    /// or if the queue no longer lists it (passed over, the queue Lease
    /// deleted), so that it neither expires nor starves.
    async fn keep_entry(&mut self) {
        let half = queue::lifetime(self.ttl).as_secs() / 2;
        if self.entry.expires <= queue::unix_now() + half {
            self.join().await;
            return;
        }
        match queue::read(&self.api, &self.key, self.ttl, self.after).await {
            Ok(line) => {
                let listed = line.iter().any(|e| e.tag == self.entry.tag);
                self.stale = queue::expired(&line);
                self.line = Some((Instant::now(), line));
                if !listed {
                    tracing::debug!(
                        lease = self.key,
                        tag = self.entry.tag,
                        "no longer in the queue: joining it again"
                    );
                    self.join().await;
                }
            }
            Err(error) => tracing::debug!(lease = self.key, %error, "could not read the queue"),
        }
    }

    fn arm(&mut self) -> &mut Withdrawal {
        let withdrawal = self.withdrawal.get_or_insert_with(|| {
            CleanupOnDrop::arm(
                Withdrawal {
                    api: self.api.clone(),
                    key: self.key.clone(),
                    tag: self.entry.tag.clone(),
                    queued: false,
                    ttl: self.ttl,
                    after: self.after,
                },
                |w| Box::pin(withdraw(w)),
            )
        });
        withdrawal.state_mut()
    }

    async fn name_itself(&mut self, lease: &Lease, watch: &mut LeaseWatch) -> Step {
        let rv = lease.metadata.resource_version.clone().unwrap_or_default();
        // Watch from the look first: the watch then tells of our own write.
        watch.open(&rv).await;
        self.arm();
        let mut next = record::trimmed(lease.clone());
        nominees::name(&mut next, &self.entry.tag, self.entry.order);
        let written = bounded(
            "name waiter",
            self.after,
            self.api.replace(&self.key, &PostParams::default(), &next),
        )
        .await;
        match written {
            Ok(Ok(_)) => {
                tracing::debug!(
                    lease = self.key,
                    tag = self.entry.tag,
                    "named itself next in line"
                );
                Step::Named
            }
            Ok(Err(e)) => match refused(e) {
                Refused::Conflict | Refused::NotFound => {
                    self.conflicts += 1;
                    Step::LookAgain
                }
                Refused::Other(error) => {
                    tracing::debug!(lease = self.key, %error, "could not name itself next in line");
                    self.conflicts = u32::MAX;
                    Step::Wait
                }
            },
            Err(error) => {
                tracing::debug!(lease = self.key, %error, "could not name itself next in line");
                self.conflicts = u32::MAX;
                Step::LookAgain
            }
        }
    }

    /// Joins the queue, or writes its entry again (a new expiry, the same
    /// place in line). A join that fails for a while (a 5xx, a 429, no
    /// answer) is tried again after a back-off, never sooner than the
    /// server's `Retry-After`; it keeps its place, which is when it first
    /// came.
    async fn join(&mut self) {
        // Sent: it may land whatever the answer, so a dropped wait leaves.
        self.arm().queued = true;
        self.entry.expires = queue::unix_now() + queue::lifetime(self.ttl).as_secs();
        let stale = std::mem::take(&mut self.stale);
        let joined = queue::join(
            &self.api,
            &self.key,
            &self.entry,
            &stale,
            self.ttl,
            self.after,
        )
        .await;
        match joined {
            Ok(line) => {
                tracing::debug!(
                    lease = self.key,
                    tag = self.entry.tag,
                    waiting = line.len(),
                    "joined the queue"
                );
                self.queued = true;
                self.rejoin_at = None;
                self.join_failures = 0;
                self.stale = queue::expired(&line);
                self.line = Some((Instant::now(), line));
            }
            Err(failed) if failed.error.is_retryable() => {
                // Not fatal: it tries again after a back-off.
                self.queued = false;
                self.join_failures += 1;
                let cap = JOIN_RETRY_MIN
                    .saturating_mul(1 << self.join_failures.min(10))
                    .min(JOIN_RETRY_MAX);
                let mut delay = cap.mul_f64(0.5 + rand::random::<f64>() / 2.0);
                if let Some(asked) = failed.retry_after {
                    delay = delay.max(asked.min(JOIN_RETRY_MAX));
                }
                let error = failed.error;
                tracing::debug!(lease = self.key, %error, retry_in = ?delay, "could not join the queue");
                self.rejoin_at = Some(Instant::now() + delay);
            }
            Err(failed) => {
                let error = failed.error;
                let why = "cannot join the queue Lease (tenure needs patch on \
                           leases.coordination.k8s.io for it, and room in its annotations); \
                           watching the whole Lease instead";
                if error.to_string().contains("Too long") {
                    // Full of live waiters' entries (expired ones were
                    // deleted first): unexpected, and costly.
                    tracing::warn!(lease = self.key, %error, "{why}");
                } else {
                    tracing::info!(lease = self.key, %error, "{why}");
                }
                self.queued = false;
                self.hears_all = true;
            }
        }
    }

    /// Reads the queue, `lease` as last seen: its holder, who may not
    /// have left the queue yet, is not in line.
    async fn read_line(&mut self, lease: &Lease) {
        match queue::read(&self.api, &self.key, self.ttl, self.after).await {
            Ok(mut line) => {
                self.stale = queue::expired(&line);
                let holder = lease
                    .spec
                    .as_ref()
                    .and_then(|s| s.holder_identity.as_deref());
                line.retain(|e| Some(e.identity.as_str()) != holder);
                self.line = Some((Instant::now(), line));
            }
            Err(error) => tracing::debug!(lease = self.key, %error, "could not read the queue"),
        }
    }

    /// Writes into `lease`, about to take `observed` over, whom it names
    /// next (nominees.rs); returns the waiters it passed over. Where it
    /// passes someone over (after a grace: no hurry) it reads the queue
    /// first; first in line, it names from the queue as it read it on
    /// becoming first (settle_in), never delaying the hand-over by a read.
    pub(crate) async fn hand_on(&mut self, lease: &mut Lease, observed: &Lease) -> Vec<String> {
        let named = nominees::named(observed);
        let position = self.position(observed);
        let passes = !named.is_empty() && position != Some(0);
        let fresh = self
            .line
            .as_ref()
            .is_some_and(|(at, _)| at.elapsed() < nominees::grace(self.ttl));
        if passes && !fresh {
            self.read_line(observed).await;
        }
        let line = self.line.as_ref().map(|(_, l)| l.as_slice()).unwrap_or(&[]);
        let skipped = nominees::hand_on(lease, &self.entry.tag, line);
        let next: Vec<_> = nominees::named(lease).into_iter().map(|n| n.tag).collect();
        tracing::debug!(
            lease = self.key,
            tag = self.entry.tag,
            ?position,
            ?skipped,
            ?next,
            "taking the Lease over"
        );
        skipped
    }

    /// Granted: leaves the queue (with the waiters it passed over), in the
    /// background; nothing is left to withdraw.
    pub(crate) fn granted(mut self, skipped: Vec<String>) {
        let mut sent_join = false;
        if let Some(mut withdrawal) = self.withdrawal.take() {
            sent_join = withdrawal.state_mut().queued;
            withdrawal.disarm();
        }
        // With the waiters it passed over goes every expired entry it knows
        // of (and every one the answer shows: queue::leave).
        let mut leaving = skipped;
        leaving.append(&mut self.stale);
        if sent_join {
            leaving.push(self.entry.tag.clone());
        }
        if leaving.is_empty() {
            return;
        }
        let (api, key, ttl, after) = (self.api.clone(), self.key.clone(), self.ttl, self.after);
        spawn_cleanup(async move {
            if let Err(error) = queue::leave(&api, &key, &leaving, ttl, after).await {
                tracing::debug!(lease = key, %error, "could not leave the queue");
            }
        });
    }
}

/// A dropped wait: out of the queue; if the Lease names it, the next in
/// line named in its place (a compare-and-swap, tried a few times).
async fn withdraw(w: Withdrawal) {
    let tag = std::slice::from_ref(&w.tag);
    let mut line = None;
    if w.queued {
        match queue::leave(&w.api, &w.key, tag, w.ttl, w.after).await {
            Ok(left) => line = Some(left),
            Err(error) => tracing::debug!(lease = w.key, %error, "could not leave the queue"),
        }
    }
    for _ in 0..3 {
        let lease = match bounded("get lease", w.after, w.api.get_opt(&w.key)).await {
            Ok(Ok(Some(lease))) => lease,
            _ => return,
        };
        if nominees::position(&lease, &w.tag).is_none() {
            return;
        }
        if line.is_none() {
            line = queue::read(&w.api, &w.key, w.ttl, w.after).await.ok();
        }
        let mut next = record::trimmed(lease);
        nominees::unname(&mut next, &w.tag);
        nominees::fill(&mut next, line.as_deref().unwrap_or(&[]), tag);
        let written = bounded(
            "unname waiter",
            w.after,
            w.api.replace(&w.key, &PostParams::default(), &next),
        )
        .await;
        let conflict = matches!(&written, Ok(Err(kube::Error::Api(e))) if e.code == 409);
        if !conflict {
            return;
        }
    }
}
