//! Fault knobs for one in-memory client: fail, delay or cut off its calls.

use std::time::Duration;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::{Error, Result};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct FaultState {
    fail: bool,
    /// How many times the client's connections were reset: a call or watch
    /// that began under an older count fails.
    resets: u64,
    drop_answers: bool,
    cut_off: bool,
    node_down: bool,
    watches_silent: bool,
    trusts_watches: bool,
    ignores_session_limits: bool,
    keeps_undelivered_grants: bool,
    transient_is_lost: bool,
    request_delay: Duration,
    response_delay: Duration,
}

/// The network between one [`MemoryBackend`](super::MemoryBackend) client and the shared server.
///
/// Flip these in your own tests to see what your code does when the
/// coordination service misbehaves. Changes apply to calls from then on, and
/// a cut-off call in flight resumes when the link is healed.
#[derive(Debug)]
pub struct Faults {
    state: watch::Sender<FaultState>,
    traffic: Mutex<Traffic>,
    in_flight: AtomicUsize,
}

/// When the client's requests reached the server, and its answers it.
#[derive(Debug, Default)]
struct Traffic {
    /// The last [`REQUESTS_KEPT`] requests.
    requests: VecDeque<Instant>,
    last_answer: Option<Instant>,
}

/// How many requests [`Faults::requests_since`] can tell of.
const REQUESTS_KEPT: usize = 4096;

impl Default for Faults {
    fn default() -> Self {
        Faults {
            state: watch::Sender::new(FaultState::default()),
            traffic: Mutex::new(Traffic::default()),
            in_flight: AtomicUsize::new(0),
        }
    }
}

/// Counts a request or an answer as on its way while it lives.
struct OnItsWay<'a>(&'a AtomicUsize);

impl<'a> OnItsWay<'a> {
    fn new(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::SeqCst);
        OnItsWay(count)
    }
}

impl Drop for OnItsWay<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Faults {
    /// Every call fails at once with a retryable [`Error::Unavailable`].
    pub fn fail_calls(&self, fail: bool) {
        self.state.send_modify(|s| s.fail = fail);
    }

    /// Resets the client's connections now, as a TCP reset would: every
    /// call in flight (a waiting acquire too) fails with a retryable
    /// [`Error::Unavailable`], and every open watch ends with one; calls
    /// made from now on go through as the other faults say.
    pub fn reset_connections(&self) {
        self.state.send_modify(|s| s.resets += 1);
    }

    /// Drops the client's answers: requests still reach the server and are
    /// executed, but what the server answers is lost, so the client cannot
    /// tell whether its write took. A call (or watch event) whose answer
    /// is lost hangs until the answers are let through again, then fails
    /// with a retryable [`Error::Unavailable`], as a call on a TCP
    /// connection that was reset for being out of step does. An acquire
    /// that fails so releases the grant it did not get to see, as a
    /// dropped one does.
    pub fn drop_answers(&self, drop: bool) {
        self.state.send_modify(|s| s.drop_answers = drop);
    }

    /// Blackholes the link: calls (and watch events) hang until [`heal`](Self::heal).
    pub fn cut_off(&self) {
        self.state.send_modify(|s| s.cut_off = true);
    }

    /// Restores a cut-off link.
    pub fn heal(&self) {
        self.state.send_modify(|s| s.cut_off = false);
    }

    /// Marks the server node this client talks to as down (killed, paused,
    /// or without a leader to commit through): calls and watch events hang
    /// as with [`cut_off`](Self::cut_off) until it is back. Kept apart from
    /// the link's own faults: [`heal`](Self::heal) and [`reset`](Self::reset)
    /// leave it as it is.
    pub fn node_down(&self, down: bool) {
        self.state.send_modify(|s| s.node_down = down);
    }

    /// Silences this client's watches, as a server node cut off from its
    /// peers does (it still answers, but learns of no change): requests
    /// still reach the server (a client with every endpoint moves them to a
    /// node that can serve), but the news a watch would carry does not
    /// come. A waiting candidate still hears of its grant, from the look it
    /// takes every eighth of its TTL while it waits, as tenure-etcd's
    /// waiters do (tenure-kube's look every quarter). Kept apart from the
    /// link's own faults, like
    /// [`node_down`](Self::node_down).
    pub fn silence_watches(&self, silent: bool) {
        self.state.send_modify(|s| s.watches_silent = silent);
    }

    /// A bug, for the conformance suite's mutants: the waiter trusts its
    /// watch and never looks, so through a [silenced](Self::silence_watches)
    /// watch it hears of its grant only once the watch speaks again.
    #[doc(hidden)]
    pub fn trust_watches(&self, trust: bool) {
        self.state.send_modify(|s| s.trusts_watches = trust);
    }

    /// A bug, for the conformance suite's mutants: the client does not
    /// learn what its session is given at a reconnect, so a
    /// [session limit](super::MemoryBackend::limit_session) below its
    /// leases' TTLs ends none of them: they keep their old deadlines while
    /// the server keeps them for less.
    #[doc(hidden)]
    pub fn ignore_session_limits(&self, ignore: bool) {
        self.state
            .send_modify(|s| s.ignores_session_limits = ignore);
    }

    pub(crate) fn ignores_session_limits(&self) -> bool {
        self.state.borrow().ignores_session_limits
    }

    /// A bug, for the conformance suite's mutants: the client forgets a
    /// grant whose answer it did not get (lost on the way, or the call
    /// dropped before it came) instead of releasing it, so the grant holds
    /// the key, unrenewed, until its TTL runs out.
    #[doc(hidden)]
    pub fn keep_undelivered_grants(&self, keep: bool) {
        self.state
            .send_modify(|s| s.keeps_undelivered_grants = keep);
    }

    pub(crate) fn keeps_undelivered_grants(&self) -> bool {
        self.state.borrow().keeps_undelivered_grants
    }

    /// A bug, for the conformance suite's mutants: a renewal that fails
    /// with a connection error (a reset, a call failed at once) is
    /// reported as [`Error::LeaseLost`], though the lease may well be
    /// alive on the server and its deadline ahead.
    #[doc(hidden)]
    pub fn report_transient_errors_as_lost(&self, lost: bool) {
        self.state.send_modify(|s| s.transient_is_lost = lost);
    }

    pub(crate) fn transient_is_lost(&self) -> bool {
        self.state.borrow().transient_is_lost
    }

    /// Delays each request by `delay` before it reaches the server.
    pub fn delay_requests(&self, delay: Duration) {
        self.state.send_modify(|s| s.request_delay = delay);
    }

    /// Delays each answer by `delay` after the server has acted.
    pub fn delay_responses(&self, delay: Duration) {
        self.state.send_modify(|s| s.response_delay = delay);
    }

    /// When the last request of this client reached the server.
    pub fn last_request_at(&self) -> Option<Instant> {
        self.traffic().requests.back().copied()
    }

    /// When this client's requests reached the server at or after `since`,
    /// in order (the last few thousand are kept).
    pub fn requests_since(&self, since: Instant) -> Vec<Instant> {
        let traffic = self.traffic();
        traffic
            .requests
            .iter()
            .copied()
            .filter(|&t| t >= since)
            .collect()
    }

    /// When an answer last reached this client.
    pub fn last_answer_at(&self) -> Option<Instant> {
        self.traffic().last_answer
    }

    /// Requests and answers on their way now: held by a delay or a cut,
    /// not yet delivered (nor failed, nor dropped with their call).
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::SeqCst)
    }

    fn traffic(&self) -> std::sync::MutexGuard<'_, Traffic> {
        self.traffic.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Clears every fault of the link (not [`node_down`](Self::node_down)).
    pub fn reset(&self) {
        self.state.send_modify(|s| {
            *s = FaultState {
                resets: s.resets,
                node_down: s.node_down,
                watches_silent: s.watches_silent,
                trusts_watches: s.trusts_watches,
                ignores_session_limits: s.ignores_session_limits,
                keeps_undelivered_grants: s.keeps_undelivered_grants,
                transient_is_lost: s.transient_is_lost,
                ..FaultState::default()
            }
        });
    }

    async fn wait_connected(&self) {
        let mut rx = self.state.subscribe();
        // The sender lives as long as `self`, so this cannot fail.
        let _ = rx.wait_for(|s| !s.cut_off && !s.node_down).await;
    }

    /// The news of a waiting candidate's grant, reaching it: at once, or,
    /// while its watches are silent, at its next look (`look_every` after
    /// it began to listen; never, for a waiter that trusts its watch, until
    /// the watch speaks again).
    pub(crate) async fn hear_grant(&self, look_every: Duration) {
        let mut rx = self.state.subscribe();
        let look = tokio::time::sleep(look_every);
        tokio::pin!(look);
        loop {
            let s = *rx.borrow_and_update();
            if !s.watches_silent {
                return;
            }
            crate::simulation::select! {
                _ = &mut look, if !s.trusts_watches => return,
                changed = rx.changed() => if changed.is_err() { return },
            }
        }
    }

    /// The client's connection as it is now: calls made on it fail once
    /// it is [reset](Self::reset_connections).
    pub(crate) fn connection(&self) -> Connection {
        Connection(self.state.borrow().resets)
    }

    /// Returns once `connection` was reset.
    pub(crate) async fn until_reset(&self, connection: Connection) {
        let mut rx = self.state.subscribe();
        // The sender lives as long as `self`, so this cannot fail.
        let _ = rx.wait_for(|s| s.resets != connection.0).await;
    }

    /// `step`, unless `connection` is reset first: then a connection error.
    pub(crate) async fn on<T>(
        &self,
        connection: Connection,
        step: impl std::future::Future<Output = T>,
    ) -> Result<T> {
        crate::simulation::select! {
            out = step => Ok(out),
            () = self.until_reset(connection) => Err(unavailable("connection reset")),
        }
    }

    /// The way to the server: fails, hangs or waits as configured. The
    /// connection the call is made on, which its answer comes back on.
    pub(crate) async fn request(&self) -> Result<Connection> {
        let s = *self.state.borrow();
        if s.fail {
            return Err(unavailable("calls fail"));
        }
        let connection = self.connection();
        let on_its_way = OnItsWay::new(&self.in_flight);
        self.on(connection, async {
            self.wait_connected().await;
            if !s.request_delay.is_zero() {
                tokio::time::sleep(s.request_delay).await;
            }
        })
        .await?;
        {
            let mut traffic = self.traffic();
            if traffic.requests.len() == REQUESTS_KEPT {
                traffic.requests.pop_front();
            }
            traffic.requests.push_back(Instant::now());
        }
        drop(on_its_way);
        Ok(connection)
    }

    /// The way back from the server, on `connection`: waits as configured;
    /// fails if the connection is reset meanwhile, or if answers are
    /// dropped before it is delivered (then once they are let through
    /// again, as the reset of a connection out of step).
    pub(crate) async fn response(&self, connection: Connection) -> Result<()> {
        let _on_its_way = OnItsWay::new(&self.in_flight);
        let delivered = self
            .on(connection, async {
                let dropped = async {
                    let mut rx = self.state.subscribe();
                    // The sender lives as long as `self`, so this cannot fail.
                    let _ = rx.wait_for(|s| s.drop_answers).await;
                };
                let delivered = async {
                    self.wait_connected().await;
                    let delay = self.state.borrow().response_delay;
                    if !delay.is_zero() {
                        tokio::time::sleep(delay).await;
                    }
                };
                let lost = tokio::select! {
                    biased;
                    () = dropped => true,
                    () = delivered => false,
                };
                if lost {
                    let mut rx = self.state.subscribe();
                    // The sender lives as long as `self`, so this cannot fail.
                    let _ = rx.wait_for(|s| !s.drop_answers).await;
                    return Err(unavailable(
                        "the answer was lost; the connection, out of step, was reset",
                    ));
                }
                Ok(())
            })
            .await?;
        if delivered.is_ok() {
            self.traffic().last_answer = Some(Instant::now());
        }
        delivered
    }
}

/// The connection a call was made on (the reset count when it began).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Connection(u64);

/// A retryable connection error of the memory link, for `why`.
fn unavailable(why: &str) -> Error {
    Error::unavailable("memory", format!("injected fault: {why}"))
}
