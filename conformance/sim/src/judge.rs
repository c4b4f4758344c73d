//! The checks, run at the instant each thing happens: every grant, every
//! poll of a member's task, every fence write, every loss, every return
//! of `shutdown()`, and once for liveness after the heal.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::FutureExt;
use tenure_core::{CandidateId, ElectionKey, FencingToken, LeaderInfo, LossReason, Term};
use tokio::time::Instant;

use crate::plan::Plan;
use crate::trace::{Event, Trace};

/// A broken promise: which check, what it saw, when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The check that failed (see the crate's doc for each).
    pub check: &'static str,
    /// What it saw.
    pub detail: String,
    /// When, from the start of the schedule.
    pub at: Duration,
}

/// One term the application was given, as the judge follows it.
struct TermBook {
    member: usize,
    key: usize,
    token: u64,
    /// Which elector of the member (a new one after a shutdown or restart).
    elector: u64,
    term: Term,
    /// Set while `run`'s work for the term is alive (`None`: a campaign's).
    work: Option<Arc<AtomicBool>>,
    began: Instant,
    /// A check saw the term not valid.
    seen_invalid: bool,
    /// Settled and not valid: nothing about it can change any more.
    done: bool,
    /// Its record was deleted on the server while it led: not judged at
    /// the grants that follow, nor for stepping down.
    wiped: bool,
}

struct MemberBook {
    paused: bool,
    /// When it last resumed: its tasks run again from that instant on.
    resumed_at: Option<Instant>,
    /// Since when nothing disturbed the member (`None`: disturbed now).
    calm_since: Option<Instant>,
}

/// Candidates of a key that failed together at a server restart.
#[derive(Default)]
struct Herd {
    failed: Vec<usize>,
    retried_at: BTreeMap<usize, Instant>,
}

struct Books {
    start: Instant,
    closed: bool,
    trace: Trace,
    violation: Option<Violation>,
    keys: Vec<String>,
    last_token: Vec<Option<u64>>,
    last_grant_at: Vec<Option<Instant>>,
    /// Every grant of each key: token and instant.
    grants: Vec<Vec<(u64, Instant)>>,
    fence_highest: Vec<Option<u64>>,
    terms: Vec<TermBook>,
    members: Vec<MemberBook>,
    /// Per (member, key): when its last acquire failed.
    acquire_failed: BTreeMap<(usize, usize), Instant>,
    server_restarts: Vec<Instant>,
    /// Releases on their way, by key and token: their electors ended the
    /// terms before sending them.
    releasing: Vec<(usize, u64)>,
    herds: BTreeMap<(usize, Instant), Herd>,
}

/// The judge of one schedule. Never call the server while holding its
/// lock: the server calls [`Judge::granted`] under its own.
pub struct Judge {
    books: Mutex<Books>,
}

impl std::fmt::Debug for Judge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Judge")
    }
}

/// How many candidates of a key, failing together, make a herd when all
/// retry at one instant: with jittered back-off (at least 25 one-millisecond
/// steps wide) that happens by chance about once in 15,000 such failures.
const HERD: usize = 4;

/// The member an identity (`m3`) names.
pub fn member_of(identity: &CandidateId) -> usize {
    identity.as_str()[1..]
        .parse()
        .expect("identities are m<number>")
}

impl Judge {
    pub(crate) fn new(start: Instant, plan: &Plan) -> Judge {
        Judge {
            books: Mutex::new(Books {
                start,
                closed: false,
                trace: Trace::default(),
                violation: None,
                keys: plan.keys.clone(),
                last_token: vec![None; plan.keys.len()],
                last_grant_at: vec![None; plan.keys.len()],
                grants: vec![Vec::new(); plan.keys.len()],
                fence_highest: vec![None; plan.keys.len()],
                terms: Vec::new(),
                members: (0..plan.joins.len())
                    .map(|_| MemberBook {
                        paused: false,
                        resumed_at: None,
                        calm_since: Some(start),
                    })
                    .collect(),
                acquire_failed: BTreeMap::new(),
                server_restarts: Vec::new(),
                releasing: Vec::new(),
                herds: BTreeMap::new(),
            }),
        }
    }

    fn books(&self) -> MutexGuard<'_, Books> {
        self.books.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends an event to the trace.
    pub(crate) fn push(&self, event: Event) {
        self.books().push(event);
    }

    /// The key's index.
    pub(crate) fn key_index(&self, key: &ElectionKey) -> usize {
        self.books()
            .keys
            .iter()
            .position(|k| k == key.as_str())
            .expect("a key of the plan")
    }

    pub(crate) fn violation(&self) -> Option<Violation> {
        self.books().violation.clone()
    }

    /// Stops judging: the runtime is being torn down.
    pub(crate) fn close(&self) {
        self.books().closed = true;
    }

    pub(crate) fn outcome(&self) -> (Option<Violation>, u64, u64, Vec<String>) {
        let b = self.books();
        (
            b.violation.clone(),
            b.trace.hash(),
            b.trace.len(),
            b.trace.tail(),
        )
    }

    /// The server granted `key` to `identity` with `token`: checks (1)
    /// and (2), at the grant's instant, under the server's lock.
    pub(crate) fn granted(&self, key: &ElectionKey, identity: &CandidateId, token: FencingToken) {
        let mut b = self.books();
        if b.closed {
            return;
        }
        let k = b
            .keys
            .iter()
            .position(|n| n == key.as_str())
            .expect("a key of the plan");
        let (member, token) = (member_of(identity), token.get());
        b.push(Event::Granted(key.to_string(), member, token));
        if let Some(last) = b.last_token[k].filter(|last| token <= *last) {
            b.violate(
                "tokens",
                format!("{key}: token {token} granted to m{member} after token {last}"),
            );
        }
        let now = Instant::now();
        // A member paused now, or resumed this instant, has not run since.
        let paused: Vec<bool> = b
            .members
            .iter()
            .map(|m| m.paused || m.resumed_at == Some(now))
            .collect();
        let releasing = std::mem::take(&mut b.releasing);
        let found = b
            .terms
            .iter_mut()
            .filter(|t| t.key == k && !t.done && !t.wiped && t.token != token)
            .find_map(|t| {
                let released = releasing.contains(&(t.key, t.token));
                judge_at_grant(t, now, paused[t.member], released).map(|d| (t.member, d))
            });
        b.releasing = releasing;
        if let Some((old, (check, what))) = found {
            b.violate(
                check,
                format!(
                    "{key}: when the server granted token {token} to m{member}, m{old}'s {what}"
                ),
            );
        }
        b.last_token[k] = Some(token);
        b.last_grant_at[k] = Some(now);
        b.grants[k].push((token, now));
    }

    /// The application was given a term: the judge follows it from now.
    pub(crate) fn register(
        self: &Arc<Self>,
        member: usize,
        elector: u64,
        term: Term,
        work: Option<Arc<AtomicBool>>,
    ) {
        let token = term.token().expect("the memory backend fences").get();
        let index = {
            let mut b = self.books();
            let key = b
                .keys
                .iter()
                .position(|n| n == term.key().as_str())
                .expect("a key of the plan");
            b.push(Event::Leading(member, term.key().to_string(), token));
            // The application sees tokens increase too: an older grant
            // delivered late is past its deadline, and never becomes a term.
            let before = b
                .terms
                .iter()
                .filter(|t| t.key == key)
                .map(|t| t.token)
                .max();
            if let Some(before) = before.filter(|b| token <= *b) {
                b.violate(
                    "tokens",
                    format!(
                        "{}: m{member} was given a term with token {token} after one with {before}",
                        term.key()
                    ),
                );
            }
            b.terms.push(TermBook {
                member,
                key,
                token,
                elector,
                term: term.clone(),
                work,
                began: Instant::now(),
                seen_invalid: false,
                done: false,
                wiped: false,
            });
            b.terms.len() - 1
        };
        // Not the member's: the judge's own, never paused.
        let judge = self.clone();
        let watcher = async move {
            let reason = term.lost().await;
            judge.lost(index, reason);
        };
        crate::executor::spawn(Box::pin(watcher), None);
    }

    /// A term's `lost()` resolved: a step-down is only allowed if something
    /// disturbed the member during the term.
    fn lost(&self, index: usize, reason: LossReason) {
        let mut b = self.books();
        if b.closed {
            return;
        }
        let (member, key, token, began, wiped) = {
            let t = &b.terms[index];
            (t.member, t.key, t.token, t.began, t.wiped)
        };
        let name = b.keys[key].clone();
        b.push(Event::Lost(member, name.clone(), token, reason.as_str()));
        let involuntary = !matches!(reason, LossReason::Resigned | LossReason::Shutdown);
        let calm = b.members[member].calm_since.is_some_and(|c| c < began);
        if involuntary && calm && !wiped {
            b.violate(
                "step-down",
                format!(
                    "{name}: m{member}'s term {token} ended ({}) though its link was clean and \
                     nothing paused it since the term began",
                    reason.as_str()
                ),
            );
        }
    }

    /// A member's task was polled: none of its terms that was seen ended
    /// may be valid again.
    pub(crate) fn after_poll(&self, member: usize) {
        let mut b = self.books();
        if b.closed {
            return;
        }
        let mut found = None;
        for t in b.terms.iter_mut().filter(|t| t.member == member && !t.done) {
            let valid = t.term.is_valid();
            if valid && t.seen_invalid {
                found.get_or_insert((t.key, t.token));
            }
            if !valid {
                t.seen_invalid = true;
                t.done = t.term.settled().now_or_never().is_some();
            }
        }
        if let Some((key, token)) = found {
            let name = b.keys[key].clone();
            b.violate(
                "ended-once",
                format!("{name}: m{member}'s term {token} was seen ended, and is valid again"),
            );
        }
    }

    /// The deadline of the member's valid term that ends first.
    pub(crate) fn first_deadline(&self, member: usize) -> Option<Instant> {
        let b = self.books();
        b.terms
            .iter()
            .filter(|t| t.member == member && !t.done && t.term.is_valid())
            .map(|t| t.term.valid_until())
            .min()
    }

    /// A leader's work wrote through the key's fence (check 3).
    pub(crate) fn wrote(&self, member: usize, key: usize, token: u64, accepted: bool) {
        let mut b = self.books();
        let name = b.keys[key].clone();
        b.push(Event::Wrote(member, name.clone(), token, accepted));
        let highest = b.fence_highest[key];
        if accepted {
            if let Some(highest) = highest.filter(|h| token < *h) {
                b.violate(
                    "fence",
                    format!("{name}: the fence accepted m{member}'s token {token} after {highest}"),
                );
            }
            b.fence_highest[key] = Some(highest.map_or(token, |h| h.max(token)));
        }
    }

    /// `shutdown()` of a member's elector returned: every term of it has
    /// settled (released, or given up after its release failed).
    pub(crate) fn shut_down(&self, member: usize, key: usize, elector: u64) {
        let mut b = self.books();
        let name = b.keys[key].clone();
        b.push(Event::ShutDown(member, name.clone()));
        let unsettled = b
            .terms
            .iter()
            .find(|t| {
                t.member == member
                    && t.key == key
                    && t.elector == elector
                    && t.term.settled().now_or_never().is_none()
            })
            .map(|t| t.token);
        if let Some(token) = unsettled {
            b.violate(
                "shutdown",
                format!("{name}: m{member}'s shutdown() returned before its term {token} settled"),
            );
        }
    }

    /// A member's elector calls `acquire`: a retry after a failure at a
    /// server restart joins that restart's herd (checked when all retried).
    pub(crate) fn acquire_called(&self, member: usize, key: usize) {
        let mut b = self.books();
        let Some(failed) = b.acquire_failed.remove(&(member, key)) else {
            return;
        };
        let now = Instant::now();
        let Some(herd) = b.herds.get_mut(&(key, failed)) else {
            return;
        };
        herd.retried_at.entry(member).or_insert(now);
        let complete = herd.failed.len() >= HERD && herd.retried_at.len() == herd.failed.len();
        let together = herd.retried_at.values().all(|at| *at == now);
        let n = herd.failed.len();
        if complete && together {
            let name = b.keys[key].clone();
            let since = failed - b.start;
            b.violate(
                "herd",
                format!(
                    "{name}: all {n} candidates that failed at the server restart at {:.3}s \
                     retried at the same instant",
                    since.as_secs_f64()
                ),
            );
        }
    }

    /// A member's elector sends the release of a term (`on_its_way`), or
    /// the release came back.
    pub(crate) fn releasing(&self, key: &ElectionKey, token: u64, on_its_way: bool) {
        let mut b = self.books();
        let k = b
            .keys
            .iter()
            .position(|n| n == key.as_str())
            .expect("a key of the plan");
        match on_its_way {
            true => b.releasing.push((k, token)),
            false => {
                if let Some(i) = b.releasing.iter().position(|r| *r == (k, token)) {
                    b.releasing.swap_remove(i);
                }
            }
        }
    }

    /// A member's `acquire` returned.
    pub(crate) fn acquire_answered(&self, member: usize, key: usize, ok: bool) {
        let mut b = self.books();
        let now = Instant::now();
        if ok {
            b.acquire_failed.remove(&(member, key));
            return;
        }
        b.acquire_failed.insert((member, key), now);
        if b.server_restarts.last() == Some(&now) {
            let herd = b.herds.entry((key, now)).or_default();
            if !herd.failed.contains(&member) {
                herd.failed.push(member);
            }
        }
    }

    /// The key's record is about to be deleted on the server.
    pub(crate) fn wiping(&self, key: usize) {
        let mut b = self.books();
        let name = b.keys[key].clone();
        b.push(Event::Wiped(name));
        for t in b.terms.iter_mut().filter(|t| t.key == key) {
            t.wiped = true;
        }
    }

    /// A holder resigned (`ok`: the backend confirmed the release) after
    /// starting at `started`, with candidates `waiting` on the server then:
    /// on a calm member's link a waiting candidate is granted within the
    /// round trip of the release (the links are instant when clean).
    pub(crate) fn resigned(
        &self,
        member: usize,
        key: usize,
        token: u64,
        (ok, waiting, started): (bool, bool, Instant),
    ) {
        let mut b = self.books();
        let name = b.keys[key].clone();
        b.push(Event::Resigned(member, name.clone(), token, ok));
        let calm = b.members[member].calm_since.is_some_and(|c| c < started);
        let granted = b.last_grant_at[key].is_some_and(|at| at >= started);
        if ok && waiting && calm && !granted {
            b.violate(
                "hand-over",
                format!(
                    "{name}: m{member} resigned term {token} on a clean link with candidates \
                     waiting, and nobody was granted the key by the time the release was answered"
                ),
            );
        }
    }

    /// A member's `observe()` reported a leader (its member and token) or a
    /// vacancy (check 5): a leader the server replaced is not reported
    /// after, if the observer's link was clean (a round trip of no time)
    /// from that leader's grant on.
    pub(crate) fn observed(&self, member: usize, key: usize, leader: Option<(usize, u64)>) {
        let mut b = self.books();
        let name = b.keys[key].clone();
        b.push(Event::Observed(member, name.clone(), leader));
        let Some((_, token)) = leader else {
            return;
        };
        let now = Instant::now();
        let calm_since = b.members[member].calm_since;
        let grants = &b.grants[key];
        let granted_at = grants.iter().find(|(t, _)| *t == token).map(|(_, at)| *at);
        let judged = matches!((calm_since, granted_at), (Some(c), Some(g)) if c < g);
        let replaced = grants
            .iter()
            .find(|(t, at)| judged && *t > token && *at < now)
            .copied();
        if let Some((newer, at)) = replaced {
            b.violate(
                "observe",
                format!(
                    "{name}: m{member}'s observe() reported token {token} {:?} after the server \
                     granted token {newer}, its link clean all along",
                    now - at
                ),
            );
        }
    }

    /// Every link was reset at once.
    pub(crate) fn server_restarted(&self) {
        let mut b = self.books();
        let now = Instant::now();
        b.server_restarts.push(now);
        for m in &mut b.members {
            m.calm_since = m.calm_since.map(|_| now);
        }
        b.push(Event::ServerRestart);
    }

    /// A member's state: paused or not, and calm (its link clean, running)
    /// or not. Calm counts from the first call that says so.
    pub(crate) fn member_state(&self, member: usize, paused: bool, calm: bool) {
        let mut b = self.books();
        let now = Instant::now();
        let m = &mut b.members[member];
        if m.paused && !paused {
            m.resumed_at = Some(now);
        }
        m.paused = paused;
        m.calm_since = match (calm, m.calm_since) {
            (false, _) => None,
            (true, Some(since)) => Some(since),
            (true, None) => Some(now),
        };
    }

    /// An instant's disturbance (a reset of the member's connections).
    pub(crate) fn jolted(&self, member: usize) {
        let mut b = self.books();
        let now = Instant::now();
        let m = &mut b.members[member];
        m.calm_since = m.calm_since.map(|_| now);
    }

    /// Liveness after the heal (check 4): each key has a holder on the
    /// server whose term is valid.
    pub(crate) fn leaders(&self, holders: &[Option<LeaderInfo>], bound: Duration) {
        let mut b = self.books();
        let tokens: Vec<Option<u64>> = holders
            .iter()
            .map(|h| h.as_ref().and_then(|h| h.token).map(FencingToken::get))
            .collect();
        b.push(Event::Leaders(tokens.clone()));
        for (k, token) in tokens.iter().enumerate() {
            let valid = token.is_some_and(|token| {
                b.terms
                    .iter()
                    .any(|t| t.key == k && t.token == token && t.term.is_valid())
            });
            if !valid {
                let name = b.keys[k].clone();
                b.violate(
                    "liveness",
                    format!(
                        "{name}: no valid leader {bound:?} (TTL + 2 round trips) after the last \
                         fault healed; the server's holder: {token:?}"
                    ),
                );
            }
        }
    }
}

impl Books {
    fn push(&mut self, event: Event) {
        // The trace ends at the first violation: its tail is what led there.
        if self.violation.is_some() {
            return;
        }
        let at = Instant::now() - self.start;
        self.trace.push(at, event);
    }

    fn violate(&mut self, check: &'static str, detail: String) {
        if self.violation.is_none() && !self.closed {
            let at = Instant::now() - self.start;
            self.violation = Some(Violation { check, detail, at });
        }
    }
}

/// Check (1) for one other term of the key at the instant of a grant: the
/// failed check and what it saw, if any.
fn judge_at_grant(
    t: &mut TermBook,
    now: Instant,
    paused: bool,
    released: bool,
) -> Option<(&'static str, String)> {
    let token = t.token;
    if t.term.is_valid() {
        return Some(("overlap", format!("term {token} is still valid")));
    }
    t.seen_invalid = true;
    // A term its elector ended (resigned, shut down, told by the server,
    // or at its deadline, then released) ended before its release went
    // out; one the server let run out must have run out strictly before
    // the server's grant.
    let by_deadline = matches!(t.term.ended(), None | Some(LossReason::Expired));
    if by_deadline && !released && t.term.valid_until() >= now {
        return Some((
            "deadline",
            format!(
                "term {token} ran out at the grant's instant, not before it ({:?} after)",
                t.term.valid_until() - now
            ),
        ));
    }
    if t.term.lost().now_or_never().is_none() {
        return Some(("lost", format!("term {token}'s lost() has not resolved")));
    }
    // A paused member's tasks cannot run: what it does when it resumes is
    // judged then (its work checks is_valid() first, which is false).
    if paused {
        return None;
    }
    if !t.term.cancellation_token().is_cancelled() {
        return Some((
            "cancelled",
            format!("term {token}'s cancellation token is not cancelled"),
        ));
    }
    if t.work.as_ref().is_some_and(|w| w.load(Ordering::SeqCst)) {
        let how = match released {
            true => "its own release",
            false => "the server",
        };
        return Some((
            "work",
            format!("run's work for term {token} is still running (the term ended by {how})"),
        ));
    }
    None
}
