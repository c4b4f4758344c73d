//! The two safety observers of every case: the validity intervals of all
//! candidates on one monotonic clock, and a store that leaders write
//! through with their fencing tokens.

use std::sync::Mutex;
use std::time::Duration;

use futures::FutureExt;

use tenure_core::{Fence, FencingToken, Term};
use tokio::time::Instant;

/// One leadership term as its candidate saw it.
#[derive(Clone, Debug)]
pub struct TermRecord {
    /// The election (terms of different keys may overlap).
    pub key: String,
    /// The holder.
    pub holder: String,
    /// Its token, where the backend gives one.
    pub token: Option<FencingToken>,
    /// When the candidate learnt it leads.
    pub start: Instant,
    /// A lower bound on when the backend granted it, the start the overlap
    /// check judges by: no later than `start`; where the candidate's link
    /// tells when it forwarded requests, the later of the last request it
    /// forwarded before the answer and the instant the grant's deadline
    /// counts from (see [`SafetyRecorder::granted_after`]).
    pub granted_after: Instant,
    /// Its local deadline, as last extended.
    pub valid_until: Instant,
    /// When it stopped believing it leads (stepped down, saw the loss, crashed).
    pub ended: Option<Instant>,
    live: Option<Term>,
    /// The Elector terms of the key the witness at this grant found over
    /// (not valid, their `lost()` resolved).
    seen_over: Vec<TermId>,
}

impl TermRecord {
    /// The end of validity: the deadline, or the loss if that came first.
    pub fn end(&self) -> Instant {
        let valid_until = self
            .live
            .as_ref()
            .map_or(self.valid_until, |t| t.valid_until().max(self.valid_until));
        self.ended.map_or(valid_until, |e| e.min(valid_until))
    }
}

/// Which term a write or an event belongs to; terms are numbered in the
/// order candidates learnt of their grants.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct TermId(usize);

/// Every candidate of a case reports its terms here; any two overlapping
/// intervals `[start, end)` are a split brain.
#[derive(Debug, Default)]
pub struct SafetyRecorder {
    terms: Mutex<Vec<TermRecord>>,
    /// Split brains the witness at a grant saw.
    witnessed: Mutex<Vec<String>>,
}

impl SafetyRecorder {
    fn terms(&self) -> std::sync::MutexGuard<'_, Vec<TermRecord>> {
        self.terms.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A raw lease of `key` granted to `holder`, learnt of at `start`.
    pub fn begin(
        &self,
        key: &str,
        holder: &str,
        token: Option<FencingToken>,
        start: Instant,
        valid_until: Instant,
    ) -> TermId {
        let mut terms = self.terms();
        terms.push(TermRecord {
            key: key.to_owned(),
            holder: holder.to_owned(),
            token,
            start,
            granted_after: start,
            valid_until,
            ended: None,
            live: None,
            seen_over: Vec::new(),
        });
        let id = TermId(terms.len() - 1);
        Self::witness(&mut terms, id, &mut self.witnessed());
        id
    }

    /// At a grant: every other Elector term of the key that still claims
    /// validity (its own [`Term::is_valid`], read now), or whose
    /// [`Term::lost`] does not resolve at once, is a split brain seen as it
    /// happens, whatever the terms' recorded ends say: the holder must
    /// stop believing it leads, and be told so, before anyone else is
    /// granted.
    fn witness(terms: &mut [TermRecord], id: TermId, seen: &mut Vec<String>) {
        let mut over = Vec::new();
        let new = &terms[id.0];
        for (i, old) in terms.iter().enumerate() {
            let Some(live) = old
                .live
                .as_ref()
                .filter(|_| i != id.0 && old.key == new.key)
            else {
                continue;
            };
            let what = if live.is_valid() {
                format!(
                    "still believed it led (is_valid, valid for {:?} more)",
                    live.valid_until().saturating_duration_since(Instant::now())
                )
            } else if live.lost().now_or_never().is_none() {
                "was over, but its lost() had not resolved".to_owned()
            } else {
                over.push(TermId(i));
                continue;
            };
            seen.push(format!(
                "{} (token {:?}) {what} when {} (token {:?}) was granted",
                old.holder,
                old.token.map(|t| t.get()),
                new.holder,
                new.token.map(|t| t.get()),
            ));
        }
        terms[id.0].seen_over = over;
    }

    fn witnessed(&self) -> std::sync::MutexGuard<'_, Vec<String>> {
        self.witnessed.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What the witness at each grant saw: Elector terms of the key that
    /// still claimed validity when another candidate was granted it.
    pub fn witnessed_overlaps(&self) -> Vec<String> {
        self.witnessed().clone()
    }

    /// Lowers term `id`'s [`granted_after`](TermRecord::granted_after) to
    /// `at`, a lower bound on when the backend granted it (never later
    /// than the instant the candidate learnt of the grant).
    pub fn granted_after(&self, id: TermId, at: Instant) {
        let mut terms = self.terms();
        let t = &mut terms[id.0];
        t.granted_after = at.min(t.start);
    }

    /// A raw lease, as granted, learnt of at `start`.
    pub fn begin_lease(&self, lease: &tenure_core::Lease, start: Instant) -> TermId {
        self.begin(
            lease.key().as_str(),
            lease.holder().as_str(),
            lease.token(),
            start,
            lease.valid_until(),
        )
    }

    /// An Elector's term, whose deadline its renewer moves and whose own
    /// [`Term::is_valid`] the witness at later grants of the key reads.
    pub fn begin_term(&self, term: &Term, start: Instant) -> TermId {
        let id = self.begin(
            term.key().as_str(),
            term.identity().as_str(),
            term.token(),
            start,
            term.valid_until(),
        );
        self.terms()[id.0].live = Some(term.clone());
        id
    }

    /// A renewal moved the deadline.
    pub fn extend(&self, id: TermId, valid_until: Instant) {
        let mut terms = self.terms();
        let t = &mut terms[id.0];
        t.valid_until = t.valid_until.max(valid_until);
    }

    /// The candidate stopped believing it leads at `at` (the first report counts).
    pub fn end(&self, id: TermId, at: Instant) {
        let mut terms = self.terms();
        let t = &mut terms[id.0];
        t.ended = Some(t.ended.map_or(at, |e| e.min(at)));
    }

    /// The term's record.
    pub fn get(&self, id: TermId) -> TermRecord {
        self.terms()[id.0].clone()
    }

    /// How many terms were recorded.
    pub fn len(&self) -> usize {
        self.terms().len()
    }

    /// Whether no term was recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Tokens in the order candidates learnt of their grants.
    pub fn tokens(&self) -> Vec<Option<FencingToken>> {
        self.terms().iter().map(|t| t.token).collect()
    }

    /// Every pair of overlapping terms of one key, described: a term whose
    /// [`granted_after`](TermRecord::granted_after) comes before an earlier
    /// term's [`end`](TermRecord::end).
    ///
    /// Where `granted_after` is the grantee link's last forwarded request
    /// (earlier than when the candidate learnt of the grant), that request
    /// may still have been on its way, and been served after the earlier
    /// term's release: it counts from `in_flight` later (at most from when
    /// the candidate learnt of the grant). With the case's round trip
    /// measured, half of it; else none.
    ///
    /// The end an Elector term's watcher records is when the watcher ran
    /// after the term's `lost()` resolved, which may trail the term's real
    /// end by a task's scheduling; where the witness at `b`'s grant read
    /// the term itself and found it over, that exact reading stands.
    pub fn overlaps(&self, in_flight: Duration) -> Vec<String> {
        let mut terms: Vec<(TermId, TermRecord)> = self
            .terms()
            .iter()
            .enumerate()
            .map(|(i, t)| (TermId(i), t.clone()))
            .collect();
        terms.sort_by_key(|(_, t)| t.start);
        let mut found = Vec::new();
        for (i, (a_id, a)) in terms.iter().enumerate() {
            let later = terms[i + 1..].iter().map(|(_, b)| b);
            for b in later.filter(|b| b.key == a.key && !b.seen_over.contains(a_id)) {
                let granted = if b.granted_after < b.start {
                    (b.granted_after + in_flight).min(b.start)
                } else {
                    b.start
                };
                if granted < a.end() {
                    found.push(format!(
                        "{} (token {:?}) still valid for {:?} after {} (token {:?}) was granted",
                        a.holder,
                        a.token.map(|t| t.get()),
                        a.end() - granted,
                        b.holder,
                        b.token.map(|t| t.get()),
                    ));
                }
            }
        }
        found
    }
}

#[derive(Debug, Default)]
struct StoreState {
    newest_written: Option<TermId>,
    accepted: u64,
    refused: u64,
    stale_accepted: Vec<String>,
    fresh_refused: Vec<String>,
}

/// The downstream service of every case: leaders write through a [`Fence`]
/// with their token, and the store judges each write by term order.
#[derive(Debug, Default)]
pub struct FencedStore {
    fence: Fence,
    state: Mutex<StoreState>,
}

/// What the store did with a write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Write {
    /// Stored.
    Accepted,
    /// Refused for a stale token.
    Refused,
}

impl FencedStore {
    /// Writes for term `term` of `holder` with `token` (no token: nothing to
    /// fence with, the write is stored).
    pub fn write(&self, term: TermId, holder: &str, token: Option<FencingToken>) -> Write {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let stale = st.newest_written.is_some_and(|n| term < n);
        let accepted = match token {
            Some(token) => self.fence.check("conformance", token).is_ok(),
            None => true,
        };
        if accepted {
            st.accepted += 1;
            if stale {
                st.stale_accepted.push(format!(
                    "{holder} (token {:?}) wrote after a newer leader",
                    token.map(|t| t.get())
                ));
            } else {
                st.newest_written = Some(term);
            }
            Write::Accepted
        } else {
            st.refused += 1;
            if !stale {
                st.fresh_refused.push(format!(
                    "{holder} (token {:?}) is the newest leader yet was refused",
                    token.map(|t| t.get())
                ));
            }
            Write::Refused
        }
    }

    /// (accepted, refused) so far.
    pub fn counts(&self) -> (u64, u64) {
        let st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        (st.accepted, st.refused)
    }

    /// Stale writes that got in, and fresh writes that were kept out.
    pub fn violations(&self) -> (Vec<String>, Vec<String>) {
        let st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        (st.stale_accepted.clone(), st.fresh_refused.clone())
    }
}
