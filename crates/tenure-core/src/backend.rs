//! The one trait a backend implements.

use std::fmt::Debug;

use async_trait::async_trait;
use futures::stream::BoxStream;

use crate::{Candidacy, Capabilities, ElectionKey, LeaderEvent, LeaderInfo, Lease, Result};

/// Whether [`LeaseBackend::acquire`] makes one attempt or waits for the lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AcquireMode {
    /// One attempt: the lease, or who holds it.
    Once,
    /// Queue up and return when granted.
    Wait,
}

/// The outcome of [`LeaseBackend::acquire`].
#[derive(Clone, Debug)]
pub enum Acquisition {
    /// We hold the lease.
    Granted(Lease),
    /// Someone else holds it (only from [`AcquireMode::Once`]).
    Held(LeaderInfo),
}

impl Acquisition {
    /// The lease, if granted.
    pub fn granted(self) -> Option<Lease> {
        match self {
            Acquisition::Granted(lease) => Some(lease),
            Acquisition::Held(_) => None,
        }
    }
}

/// A coordination system that can grant a time-limited, exclusive lease on a key.
///
/// Object safe: use it as `Arc<dyn LeaseBackend>`. One value is one client
/// (one connection or session) and serves any number of keys at once.
///
/// # Contract
///
/// Every backend MUST:
///
/// 1. **validate before sending**: reject a candidacy that breaks
///    [`capabilities`](Self::capabilities) (key rule, key length, TTL bounds and
///    granularity) with [`Error::InvalidArgument`](crate::Error::InvalidArgument)
///    naming the field, and write nothing.
/// 2. **acquire once**: with [`AcquireMode::Once`] make one attempt and return
///    [`Acquisition::Granted`] or [`Acquisition::Held`] with the holder.
/// 3. **acquire and wait**: with [`AcquireMode::Wait`] return only when granted.
///    A backend that declares `herd_free_wait` MUST wake only the next candidate
///    in line when the lease frees, so a leadership change costs O(1) writes.
/// 4. **withdraw on drop**: when a waiting `acquire` future is dropped, leave
///    no queue entry behind (or one that the backend removes by itself at once).
/// 5. **deadline from send time**: set the lease's deadline from the instant the
///    granting (or renewing) request was *sent*, via [`Lease::new`] and
///    [`Lease::renewed`], never from when the answer arrived.
/// 6. **exclusive**: never grant a key while an earlier grant's TTL, counted
///    from when its last successful request reached the backend, has not run out
///    and it was not released.
/// 7. **renew**: extend the lease by its TTL, or fail with
///    [`Error::LeaseLost`](crate::Error::LeaseLost) if anyone else could hold it
///    now; a transient failure is a retryable error, not `LeaseLost`.
/// 8. **release**: free the key so the next candidate can be granted at once,
///    only if this lease still holds it (compare the grant, never delete by name),
///    even when a renewal of the same lease was cancelled midway.
/// 9. **fence**: where `capabilities().fencing` holds, give every grant a token
///    strictly greater than every token granted before for that key, including
///    the same identity acquiring again, and across the backend's own failures.
/// 10. **watch**: stream the current state first, then every change in order:
///     a new holder or token ([`LeaderEvent::Elected`]) or [`LeaderEvent::Vacant`]
///     (released or expired); a slow reader may skip intermediate states but
///     always sees the latest.
///
/// 11. **close**: [`close`](Self::close) returns only once every candidacy
///     this client withdrew and every grant it could not hand over is gone
///     from the server, and its connections or sessions are closed.
/// 12. **independent keys**: treat every key as its own election, never as a
///     prefix: holding `a/b` (or `a.b`) says nothing about `a`, and the
///     reverse.
///
/// A backend MUST NOT compare timestamps across machines to judge expiry.
#[async_trait]
pub trait LeaseBackend: Send + Sync + Debug + 'static {
    /// A short name for logs and errors (`memory`, `etcd`, ...).
    fn name(&self) -> &'static str;

    /// What this backend promises.
    fn capabilities(&self) -> Capabilities;

    /// Checks a candidacy before anything is sent (contract point 1); by
    /// default against [`capabilities`](Self::capabilities). A backend with
    /// rules of its own (a reserved path) adds them here; the
    /// [`Checked`](crate::layers::Checked) layer calls it before `acquire`.
    fn check(&self, candidacy: &Candidacy) -> Result<()> {
        self.capabilities().check(candidacy)
    }

    /// Checks a key before a watch is set up; by default against
    /// [`capabilities`](Self::capabilities). The
    /// [`Checked`](crate::layers::Checked) layer calls it before `watch`.
    fn check_key(&self, key: &ElectionKey) -> Result<()> {
        self.capabilities().check_key(key)
    }

    /// Takes the lease for a candidacy; see the contract, points 1 to 6.
    async fn acquire(&self, candidacy: &Candidacy, mode: AcquireMode) -> Result<Acquisition>;

    /// Extends a lease; see the contract, point 7.
    async fn renew(&self, lease: &Lease) -> Result<Lease>;

    /// Gives a lease up; see the contract, point 8.
    async fn release(&self, lease: &Lease) -> Result<()>;

    /// Observes who leads a key; see the contract, point 10.
    async fn watch(&self, key: &ElectionKey) -> Result<BoxStream<'static, Result<LeaderEvent>>>;

    /// Ends this client; see the contract, point 11. Call it when nothing
    /// uses the client any more (`Elector::shutdown` does, when it holds the
    /// last reference): a process that exits right after it leaves nothing
    /// behind that a standby would have to wait out. Calls made afterwards
    /// may fail. The default does nothing.
    async fn close(&self) -> Result<()> {
        Ok(())
    }
}
