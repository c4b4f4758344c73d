//! The two safety observers of every case: the validity intervals of all
//! candidates on one monotonic clock, and a store that leaders write
//! through with their fencing tokens.

use std::sync::Mutex;

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
    /// Its local deadline, as last extended.
    pub valid_until: Instant,
    /// When it stopped believing it leads (stepped down, saw the loss, crashed).
    pub ended: Option<Instant>,
    live: Option<Term>,
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
            valid_until,
            ended: None,
            live: None,
        });
        TermId(terms.len() - 1)
    }

    /// An Elector's term, whose deadline its renewer moves.
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

    /// Every pair of overlapping terms of one key, described.
    pub fn overlaps(&self) -> Vec<String> {
        let mut terms = self.terms().clone();
        terms.sort_by_key(|t| t.start);
        let mut found = Vec::new();
        for (i, a) in terms.iter().enumerate() {
            for b in terms[i + 1..].iter().filter(|b| b.key == a.key) {
                if b.start < a.end() {
                    found.push(format!(
                        "{} (token {:?}) still valid for {:?} after {} (token {:?}) began",
                        a.holder,
                        a.token.map(|t| t.get()),
                        a.end() - b.start,
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
