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
    /// In the queue (or its join sent).
    queued: bool,
    /// A join that failed: not tried again before the next read of the Lease
    /// that a deadline brings.
    join_failed: bool,
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
            },
            queued: false,
            join_failed: false,
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
    /// once each), but at least twice the TTL.
    pub(crate) fn until(&mut self, lease: &Lease, expires: Instant) -> Instant {
        if self.position(lease).is_some() || self.hears_all {
            return expires;
        }
        let now = Instant::now();
        if let Some(at) = self.look_at.filter(|at| *at > now) {
            return at;
        }
        let line = self.line.as_ref().map_or(0, |(_, line)| line.len()) as u32;
        let base = (self.ttl * 2).max(Duration::from_secs(5));
        let period = (base + base * line / 16).min((self.ttl * 10).max(Duration::from_secs(60)));
        let at = now + period.mul_f64(0.5 + rand::random::<f64>());
        self.look_at = Some(at);
        at
    }

    /// Takes its place in line, `lease` (held) as it was just read, the
    /// watch to be opened from there first: it names itself if the Lease
    /// names fewer than [`NOMINEES`], else joins the queue. Named first
    /// in line, it reads the queue, to know whom to name next.
    pub(crate) async fn settle_in(&mut self, lease: &Lease, watch: &mut LeaseWatch) -> Step {
        if self.look_at.is_some_and(|at| at <= Instant::now()) {
            // This is the look its deadline brought: it tries joining and
            // naming itself again from here on.
            self.look_at = None;
            self.join_failed = false;
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
        if !self.queued && !self.join_failed {
            self.join().await;
        }
        Step::Wait
    }

    fn arm(&mut self) -> &mut Withdrawal {
        let withdrawal = self.withdrawal.get_or_insert_with(|| {
            CleanupOnDrop::arm(
                Withdrawal {
                    api: self.api.clone(),
                    key: self.key.clone(),
                    tag: self.entry.tag.clone(),
                    queued: false,
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

    async fn join(&mut self) {
        self.arm().queued = true;
        self.queued = true;
        match queue::join(&self.api, &self.key, &self.entry, self.after).await {
            Ok(line) => {
                tracing::debug!(
                    lease = self.key,
                    tag = self.entry.tag,
                    waiting = line.len(),
                    "joined the queue"
                );
                self.line = Some((Instant::now(), line));
            }
            Err(error) if error.is_retryable() => {
                // Not fatal: it reads the Lease now and then, and tries
                // again then.
                tracing::debug!(lease = self.key, %error, "could not join the queue");
                self.join_failed = true;
            }
            Err(error) => {
                tracing::info!(
                    lease = self.key,
                    %error,
                    "cannot join the queue Lease (tenure needs patch on leases.coordination.k8s.io \
                     for it); watching the whole Lease instead"
                );
                self.hears_all = true;
            }
        }
    }

    /// Reads the queue, `lease` as last seen: its holder, who may not
    /// have left the queue yet, is not in line.
    async fn read_line(&mut self, lease: &Lease) {
        match queue::read(&self.api, &self.key, self.after).await {
            Ok(mut line) => {
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
        if let Some(withdrawal) = self.withdrawal.take() {
            withdrawal.disarm();
        }
        let mut leaving = skipped;
        if self.queued {
            leaving.push(self.entry.tag.clone());
        }
        if leaving.is_empty() {
            return;
        }
        let (api, key, after) = (self.api.clone(), self.key.clone(), self.after);
        spawn_cleanup(async move {
            if let Err(error) = queue::leave(&api, &key, &leaving, after).await {
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
        match queue::leave(&w.api, &w.key, tag, w.after).await {
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
            line = queue::read(&w.api, &w.key, w.after).await.ok();
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
