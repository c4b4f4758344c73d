//! One leadership term as the application sees it: `Leadership` and `Term`.

use std::fmt;
use std::ops::Deref;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::{oneshot, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::planted::{ElectorBug, Planted};
use super::ElectorState;
use crate::{CandidateId, ElectionKey, FencingToken, LossReason, Result};

#[derive(Clone, Copy, Debug)]
pub(crate) struct Status {
    pub valid_until: Instant,
    pub ended: Option<LossReason>,
    /// The renewer has finished: the lease is released, lost or given up.
    pub settled: bool,
}

pub(crate) struct TermShared {
    pub key: ElectionKey,
    pub identity: CandidateId,
    pub token: Option<FencingToken>,
    pub status: watch::Sender<Status>,
    /// Cancelled when the term ends ([`Term::cancellation_token`]).
    pub cancel: CancellationToken,
    /// A bug planted for the conformance suite's tests (none otherwise).
    pub planted: Planted,
    /// Set while `Elector::run` runs the term's work: at shutdown the
    /// renewer releases only once `run` has dropped it.
    pub in_run: std::sync::atomic::AtomicBool,
    /// Cancelled once `run` has dropped the term's work.
    pub work_dropped: CancellationToken,
    /// The elector's state, which shows this term as leading until it ends.
    pub standing: Option<Standing>,
}

/// A term's place in its elector's [`ElectorState`].
pub(crate) struct Standing {
    pub state: Arc<watch::Sender<ElectorState>>,
    /// Terms the elector has begun; this one is number `no`.
    pub terms: Arc<AtomicU64>,
    pub no: u64,
}

impl Standing {
    /// Whether no newer term of the elector has begun.
    pub fn current(&self) -> bool {
        self.terms.load(Ordering::SeqCst) == self.no
    }

    /// Shows the elector as a follower, unless a newer term leads.
    pub fn leave(&self) {
        self.state.send_if_modified(|s| {
            let ours = matches!(s, ElectorState::Leader { .. }) && self.current();
            if ours {
                *s = ElectorState::Follower;
            }
            ours
        });
    }
}

impl TermShared {
    /// Resolves once nothing of `run` holds the term's work any more (at
    /// once for a term `run` does not lead), or at `deadline`.
    pub async fn work_dropped(&self, deadline: Instant) {
        if self.in_run.load(Ordering::SeqCst) {
            crate::simulation::select! {
                _ = self.work_dropped.cancelled() => {}
                _ = tokio::time::sleep_until(deadline) => {}
            }
        }
    }

    /// Ends the term (first reason wins). Called before any release is sent,
    /// so nobody here believes it leads once anyone else could.
    pub fn end(&self, reason: LossReason) -> bool {
        let first = self.status.send_if_modified(|s| {
            let first = s.ended.is_none();
            if first {
                s.ended = Some(reason);
            }
            first
        });
        self.cancel.cancel();
        if let Some(standing) = &self.standing {
            standing.leave();
        }
        first
    }
}

/// A read-only, cloneable view of one leadership term: token, validity, loss.
///
/// Hand it to the tasks that do the leader's work.
#[derive(Clone)]
pub struct Term {
    pub(crate) shared: Arc<TermShared>,
}

impl Term {
    /// The election key.
    pub fn key(&self) -> &ElectionKey {
        &self.shared.key
    }

    /// Our identity.
    pub fn identity(&self) -> &CandidateId {
        &self.shared.identity
    }

    /// The fencing token of this term (`None` on backends that cannot fence).
    /// Pass it with every write downstream.
    pub fn token(&self) -> Option<FencingToken> {
        self.shared.token
    }

    /// The current local deadline; renewals move it forward.
    pub fn valid_until(&self) -> Instant {
        self.shared.status.borrow().valid_until
    }

    /// Whether we may still act as leader: the term has not ended and its
    /// deadline has not passed. Check it right before each leader-only action.
    pub fn is_valid(&self) -> bool {
        let s = *self.shared.status.borrow();
        s.ended.is_none() && Instant::now() < s.valid_until
    }

    /// A token cancelled when the term ends, for any reason (at the latest
    /// at its deadline), before any release is sent: hand it to the tasks
    /// the leader's work starts, so they stop with the term. `run` cancels
    /// the work itself. Cancelling the returned token (a child) stops only
    /// its own holders, never the term.
    pub fn cancellation_token(&self) -> CancellationToken {
        self.shared.cancel.child_token()
    }

    /// Why the term ended, if it has.
    pub fn ended(&self) -> Option<LossReason> {
        let s = *self.shared.status.borrow();
        s.ended
            .or((Instant::now() >= s.valid_until).then_some(LossReason::Expired))
    }

    /// Resolves when the term ends, for any reason, at the latest at the
    /// deadline (timed on the caller's own runtime as well as by the renewer).
    pub async fn lost(&self) -> LossReason {
        let reason = self.lost_now().await;
        if let Some(late) = self.shared.planted.lost_late() {
            tokio::time::sleep(late).await; // the planted bug
        }
        reason
    }

    async fn lost_now(&self) -> LossReason {
        let mut rx = self.shared.status.subscribe();
        loop {
            let s = *rx.borrow_and_update();
            if let Some(reason) = s.ended {
                return reason;
            }
            crate::simulation::select! {
                _ = tokio::time::sleep_until(s.valid_until) => {
                    // The deadline may have moved while we slept.
                    let s = *rx.borrow();
                    if s.ended.is_none() && Instant::now() >= s.valid_until {
                        return LossReason::Expired;
                    }
                }
                changed = rx.changed() => {
                    if changed.is_err() {
                        // The renewer is gone; its last word stands.
                        let s = *rx.borrow();
                        return s.ended.unwrap_or(LossReason::Expired);
                    }
                }
            }
        }
    }
}

impl Term {
    /// Resolves once the term has ended and its renewer has finished: the
    /// lease was released (or lost, or given up after the release failed).
    pub async fn settled(&self) {
        let mut rx = self.shared.status.subscribe();
        let _ = rx.wait_for(|s| s.settled).await;
    }
}

impl fmt::Debug for Term {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Term")
            .field("key", self.key())
            .field("identity", self.identity())
            .field("token", &self.token())
            .field("valid", &self.is_valid())
            .finish()
    }
}

/// A request to the renewer to step down.
pub(crate) struct StepDown {
    pub reply: oneshot::Sender<Result<()>>,
}

/// Leadership of one key, held until resigned, dropped or lost.
///
/// Dereferences to its [`Term`] (token, `is_valid`, `lost`). Dropping it
/// releases the lease in the background; [`resign`](Self::resign) does the
/// same and waits for the backend to confirm. So `elector.campaign().await?;`
/// alone wins the lease and gives it up at once: bind the value
/// (`let leadership = elector.campaign().await?;`) for as long as you lead.
/// The compiler says so:
///
/// ```compile_fail
/// #![deny(unused_must_use)]
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure_core::Result<()> {
/// # use std::sync::Arc;
/// # let elector = tenure_core::Elector::builder(Arc::new(tenure_core::MemoryBackend::new()))
/// #     .key("k").identity("a").build()?;
/// elector.campaign().await?; // unused `Leadership` that must be used
/// # Ok(()) }
/// ```
#[must_use = "dropping a Leadership releases the lease at once; bind it for as long as you lead: `let leadership = ...`"]
pub struct Leadership {
    pub(crate) term: Term,
    pub(crate) step_down: Option<oneshot::Sender<StepDown>>,
}

impl Leadership {
    /// A cloneable view of this term for other tasks.
    pub fn term(&self) -> Term {
        self.term.clone()
    }

    /// Steps down: stops believing it leads at once, then releases the lease so
    /// a standby takes over immediately. Returns the backend's answer.
    pub async fn resign(mut self) -> Result<()> {
        let (reply, answer) = oneshot::channel();
        let Some(tx) = self.step_down.take() else {
            return Ok(());
        };
        // Stop believing first; only then may the release go out.
        if !self.term.shared.planted.is(ElectorBug::ReleaseBeforeEnd) {
            self.term.shared.end(LossReason::Resigned);
        }
        if tx.send(StepDown { reply }).is_err() {
            return Ok(()); // the renewer already finished: the term was lost
        }
        answer.await.unwrap_or(Ok(()))
    }
}

impl Deref for Leadership {
    type Target = Term;
    fn deref(&self) -> &Term {
        &self.term
    }
}

impl fmt::Debug for Leadership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.term, f)
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        if self.step_down.is_some() && !self.term.shared.planted.is(ElectorBug::ReleaseBeforeEnd) {
            // Closing the channel tells the renewer to end the term and release.
            // Mark the term over now, so clones of the Term stop at once too.
            self.term.shared.end(LossReason::Resigned);
        }
    }
}
