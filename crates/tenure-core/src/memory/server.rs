//! The shared state of the in-memory backend: holders, queues, watchers.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::stream::BoxStream;
use tokio::sync::{oneshot, watch, Notify};
use tokio::time::Instant;

use super::faults::Connection;
use super::Faults;
use crate::{
    Candidacy, CandidateId, Capabilities, ElectionKey, Error, FencingToken, LeaderEvent,
    LeaderInfo, LossReason, LossSignal, Result,
};

/// Counters kept by the in-memory server.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct MemoryStats {
    /// Leases granted.
    pub grants: u64,
    /// Successful renewals.
    pub renewals: u64,
    /// Leases released by their holder.
    pub releases: u64,
    /// Leases that ran out (or were expired by a fault knob).
    pub expiries: u64,
    /// Candidates that joined a waiting queue.
    pub enqueued: u64,
    /// Waiting candidates that withdrew.
    pub withdrawn: u64,
    /// Times a waiting candidate was woken.
    pub wakeups: u64,
    /// Requests other than renewals: acquires (each attempt), releases and
    /// watches opened (inspecting the server, as `MemoryBackend::holder`
    /// does, is not a request).
    pub requests: u64,
    /// Messages the server sent unasked: grants handed to waiting
    /// candidates, and watch events after each watch's first.
    pub notifications: u64,
}

impl MemoryStats {
    /// State changes on the server: grants, renewals, releases, expiries and queue changes.
    pub fn writes(&self) -> u64 {
        self.grants + self.renewals + self.releases + self.expiries + self.enqueued + self.withdrawn
    }

    /// Everything the server served but heartbeats: requests other than
    /// renewals, and notifications.
    pub fn served(&self) -> u64 {
        self.requests + self.notifications
    }
}

/// A grant made by the server.
pub(super) struct Grant {
    pub id: u64,
    pub token: FencingToken,
    pub granted_at: Instant,
    /// Fired when the grant's record is wiped out of band.
    pub loss: LossSignal,
}

struct Holder {
    grant: u64,
    /// The client (its session) that holds it.
    session: u64,
    identity: CandidateId,
    token: FencingToken,
    /// How long the server keeps it after each renewal: the candidacy's
    /// TTL, or less where its session's node gives less (`limit_session`).
    ttl: Duration,
    expires_at: Instant,
    loss: LossSignal,
}

struct Waiter {
    id: u64,
    session: u64,
    candidacy: Candidacy,
    grant_tx: Option<oneshot::Sender<Grant>>,
    wake: Arc<Notify>,
}

struct KeyState {
    holder: Option<Holder>,
    queue: VecDeque<Waiter>,
    events: watch::Sender<LeaderEvent>,
}

impl KeyState {
    fn new() -> Self {
        KeyState {
            holder: None,
            queue: VecDeque::new(),
            events: watch::Sender::new(LeaderEvent::Vacant),
        }
    }

    fn event(&self) -> LeaderEvent {
        match &self.holder {
            Some(h) => LeaderEvent::Elected(LeaderInfo {
                identity: h.identity.clone(),
                token: Some(h.token),
            }),
            None => LeaderEvent::Vacant,
        }
    }
}

#[derive(Default)]
struct State {
    keys: HashMap<ElectionKey, KeyState>,
    /// Sessions whose server node gives them less than their TTLs.
    limits: HashMap<u64, Limit>,
    next_id: u64,
    next_token: u64,
    next_session: u64,
    stats: MemoryStats,
    clock: ClockRate,
    /// Sessions whose clients' clocks run at a rate of their own against
    /// the server's (a simulation's members; none by default).
    session_clocks: HashMap<u64, ClockRate>,
    /// Told of every grant at its instant (a simulation's judge; none by default).
    on_grant: Option<GrantHook>,
}

/// Called under the server's lock with each grant: key, holder, token.
pub(super) type GrantHook = Arc<dyn Fn(&ElectionKey, &CandidateId, FencingToken) + Send + Sync>;

/// How fast the server's clock runs against the clients' (one process,
/// one tokio clock): 1.0 by default; 1.01 is 1 % fast, so the server keeps
/// a lease for its TTL by its own clock, 1 % less by the clients'.
#[derive(Clone, Copy, Debug, PartialEq)]
struct ClockRate(f64);

impl Default for ClockRate {
    fn default() -> Self {
        ClockRate(1.0)
    }
}

impl ClockRate {
    /// `span` of the server's time, in the clients' time.
    fn real(self, span: Duration) -> Duration {
        span.div_f64(self.0)
    }
}

/// What a session's server node gives it (see `Server::limit_session`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Limit {
    /// The longest the server keeps the session's leases after it last
    /// heard of them.
    max: Duration,
    /// The client learns of it (its leases counting on more end).
    heeded: bool,
}

impl State {
    /// The server's clock rate against `session`'s client.
    fn clock_of(&self, session: u64) -> ClockRate {
        self.session_clocks
            .get(&session)
            .copied()
            .unwrap_or(self.clock)
    }

    fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// How long the server keeps a lease of `session` whose TTL is `ttl`
    /// after it last heard of it; whether the client heeds a shortfall.
    fn kept(&self, session: u64, ttl: Duration) -> (Duration, bool) {
        match self.limits.get(&session) {
            Some(limit) if limit.max < ttl => (limit.max, limit.heeded),
            _ => (ttl, false),
        }
    }

    /// Makes `candidacy` the holder of `key` under grant `id` (a waiter's own id,
    /// so its drop guard can recognise a grant it never saw) for `session`.
    /// The caller checked the key is vacant.
    fn grant(
        &mut self,
        key: &ElectionKey,
        candidacy: &Candidacy,
        id: u64,
        session: u64,
        now: Instant,
    ) -> Grant {
        self.next_token += 1;
        let token = FencingToken::new(self.next_token);
        self.stats.grants += 1;
        let (ttl, short) = self.kept(session, candidacy.ttl());
        let clock = self.clock_of(session);
        let ks = self.keys.entry(key.clone()).or_insert_with(KeyState::new);
        let loss = LossSignal::new();
        if short {
            // Its session is already kept for less than the TTL: the
            // client ends it at once (see `Server::limit_session`).
            loss.fire(LossReason::Revoked);
        }
        ks.holder = Some(Holder {
            grant: id,
            session,
            identity: candidacy.identity().clone(),
            token,
            ttl,
            expires_at: now + clock.real(ttl),
            loss: loss.clone(),
        });
        if let Some(hook) = &self.on_grant {
            hook(key, candidacy.identity(), token);
        }
        Grant {
            id,
            token,
            granted_at: now,
            loss,
        }
    }

    /// Drops an expired holder; then hands a vacant key to the head of its queue.
    fn settle(&mut self, key: &ElectionKey, now: Instant) {
        let Some(ks) = self.keys.get_mut(key) else {
            return;
        };
        if ks.holder.as_ref().is_some_and(|h| h.expires_at <= now) {
            ks.holder = None;
            self.stats.expiries += 1;
        }
        while self.keys[key].holder.is_none() {
            let Some(mut head) = self.keys.get_mut(key).and_then(|ks| ks.queue.pop_front()) else {
                break;
            };
            let grant = self.grant(key, &head.candidacy, head.id, head.session, now);
            let tx = head
                .grant_tx
                .take()
                .expect("a queued waiter has its sender");
            self.stats.wakeups += 1;
            self.stats.notifications += 1;
            if let Err(unsent) = tx.send(grant) {
                // The waiter is gone (its drop guard runs under this lock, so this
                // is only reachable if it was dropped without one): undo.
                let ks = self.keys.get_mut(key).expect("key exists");
                if ks.holder.as_ref().is_some_and(|h| h.grant == unsent.id) {
                    ks.holder = None;
                }
            }
        }
        if let Some(ks) = self.keys.get_mut(key) {
            if let Some(head) = ks.queue.front() {
                head.wake.notify_one();
            }
            let event = ks.event();
            ks.events.send_if_modified(|e| {
                let changed = *e != event;
                *e = event;
                changed
            });
        }
    }
}

pub(super) struct Server {
    capabilities: Capabilities,
    state: Mutex<State>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("capabilities", &self.capabilities)
            .finish_non_exhaustive()
    }
}

impl Server {
    pub fn new(capabilities: Capabilities) -> Self {
        Server {
            capabilities,
            state: Mutex::default(),
        }
    }

    pub fn capabilities(&self) -> &Capabilities {
        &self.capabilities
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_settled(&self, key: &ElectionKey) -> MutexGuard<'_, State> {
        let mut st = self.lock();
        st.settle(key, Instant::now());
        st
    }

    /// A new client's session number.
    pub fn new_session(&self) -> u64 {
        let mut st = self.lock();
        st.next_session += 1;
        st.next_session
    }

    pub fn try_acquire(
        &self,
        candidacy: &Candidacy,
        session: u64,
    ) -> std::result::Result<Grant, LeaderInfo> {
        let key = candidacy.key();
        let mut st = self.lock_settled(key);
        st.stats.requests += 1;
        if let Some(LeaderEvent::Elected(info)) = st.keys.get(key).map(KeyState::event) {
            return Err(info);
        }
        let id = st.id();
        let grant = st.grant(key, candidacy, id, session, Instant::now());
        st.settle(key, Instant::now());
        Ok(grant)
    }

    /// Queues `candidacy` and resolves when it is granted. Only the head of the
    /// queue ever wakes (to time the holder's expiry); dropping the future
    /// withdraws the candidacy and releases a grant it did not get to see.
    pub async fn acquire_waiting(&self, candidacy: &Candidacy, session: u64) -> Grant {
        let key = candidacy.key().clone();
        let (tx, mut rx) = oneshot::channel();
        let wake = Arc::new(Notify::new());
        let id = {
            let mut st = self.lock();
            let id = st.id();
            st.stats.enqueued += 1;
            st.stats.requests += 1;
            st.keys
                .entry(key.clone())
                .or_insert_with(KeyState::new)
                .queue
                .push_back(Waiter {
                    id,
                    session,
                    candidacy: candidacy.clone(),
                    grant_tx: Some(tx),
                    wake: wake.clone(),
                });
            st.settle(&key, Instant::now());
            id
        };
        let guard = WithdrawOnDrop {
            server: self,
            key: &key,
            waiter: id,
        };
        loop {
            // The head times the holder's expiry; everyone else just waits.
            let expiry = {
                let st = self.lock();
                let ks = &st.keys[&key];
                match (ks.queue.front(), &ks.holder) {
                    (Some(head), Some(h)) if head.id == id => Some(h.expires_at),
                    _ => None,
                }
            };
            crate::simulation::select! {
                grant = &mut rx => {
                    std::mem::forget(guard);
                    return grant.expect("the server never drops a queued waiter's sender");
                }
                _ = wake.notified() => {}
                _ = sleep_until_opt(expiry) => {
                    drop(self.lock_settled(&key));
                }
            }
        }
    }

    pub fn renew(&self, key: &ElectionKey, grant: u64, ttl: Duration) -> Result<()> {
        let mut st = self.lock_settled(key);
        let session = st
            .keys
            .get(key)
            .and_then(|ks| ks.holder.as_ref())
            .map(|h| h.session);
        let (kept, short) = session.map_or((ttl, false), |s| st.kept(s, ttl));
        let clock = session.map_or(st.clock, |s| st.clock_of(s));
        let holder = st.keys.get_mut(key).and_then(|ks| ks.holder.as_mut());
        match holder {
            // The client knows its session is kept for less than the
            // lease counts on: the lease ended there.
            Some(h) if h.grant == grant && short => {
                Err(Error::lease_lost(key.as_str(), LossReason::Revoked))
            }
            Some(h) if h.grant == grant => {
                h.ttl = kept;
                h.expires_at = Instant::now() + clock.real(kept);
                st.stats.renewals += 1;
                Ok(())
            }
            // Someone else was granted the key since.
            Some(_) => Err(Error::lease_lost(key.as_str(), LossReason::TakenOver)),
            // The grant expired, was released or wiped: the server cannot tell which.
            None => Err(Error::lease_lost(key.as_str(), LossReason::Revoked)),
        }
    }

    pub fn release(&self, key: &ElectionKey, grant: u64) {
        let mut st = self.lock_settled(key);
        st.stats.requests += 1;
        let Some(ks) = st.keys.get_mut(key) else {
            return;
        };
        if ks.holder.as_ref().is_some_and(|h| h.grant == grant) {
            ks.holder = None;
            st.stats.releases += 1;
            st.settle(key, Instant::now());
        }
    }

    pub fn expire_now(&self, key: &ElectionKey) {
        let mut st = self.lock();
        if let Some(h) = st.keys.get_mut(key).and_then(|ks| ks.holder.as_mut()) {
            h.expires_at = Instant::now();
        }
        st.settle(key, Instant::now());
    }

    /// The key's record deleted out of band: its holder (which watches
    /// its own record) is told at once.
    pub fn wipe(&self, key: &ElectionKey) {
        let mut st = self.lock();
        if let Some(ks) = st.keys.get_mut(key) {
            if let Some(holder) = ks.holder.take() {
                holder.loss.fire(LossReason::Deleted);
            }
        }
        st.settle(key, Instant::now());
    }

    /// From now on the server keeps the leases of client `session` at most
    /// `max` after it last heard of them (`None`: their whole TTLs), as a
    /// ZooKeeper server whose `maxSessionTimeout` is below the timeout a
    /// session asks for does to one that reconnects to it. The reconnect
    /// counts as hearing of them: each lease held with a longer TTL is kept
    /// `max` from now. Where the client `heeded` it (it learns the timeout
    /// its session is given at each reconnect), each such lease ends here,
    /// its loss signal fired ([`LossReason::Revoked`]), and renewing it is
    /// `LeaseLost`; otherwise the lease goes on, renewed for `max` at a time.
    /// Asking again for the limit in force changes nothing.
    pub fn limit_session(&self, session: u64, max: Option<Duration>, heeded: bool) {
        let mut st = self.lock();
        let limit = max.map(|max| Limit { max, heeded });
        if st.limits.get(&session).copied() == limit {
            return;
        }
        let Some(limit) = limit else {
            st.limits.remove(&session);
            return;
        };
        st.limits.insert(session, limit);
        let now = Instant::now();
        let clock = st.clock_of(session);
        let mut touched = Vec::new();
        for (key, ks) in st.keys.iter_mut() {
            if let Some(h) = ks.holder.as_mut() {
                if h.session == session && h.ttl > limit.max {
                    h.ttl = limit.max;
                    h.expires_at = now + clock.real(limit.max);
                    if heeded {
                        h.loss.fire(LossReason::Revoked);
                    }
                    touched.push(key.clone());
                }
            }
        }
        for key in touched {
            // Wakes the head waiter, whose timer changed.
            st.settle(&key, now);
        }
    }

    /// Every holder's TTL starts over from now (a deadline never moves back).
    pub fn refresh_all(&self) {
        let mut st = self.lock();
        let now = Instant::now();
        let keys: Vec<ElectionKey> = st.keys.keys().cloned().collect();
        for key in keys {
            let session = st.keys[&key].holder.as_ref().map(|h| h.session);
            let clock = session.map_or(st.clock, |s| st.clock_of(s));
            if let Some(h) = st.keys.get_mut(&key).and_then(|ks| ks.holder.as_mut()) {
                h.expires_at = h.expires_at.max(now + clock.real(h.ttl));
            }
            // Wakes the head waiter, whose timer changed.
            st.settle(&key, now);
        }
    }

    /// Every key loses its holder at once; waiters are granted in turn.
    pub fn wipe_all(&self) {
        let mut st = self.lock();
        let now = Instant::now();
        let keys: Vec<ElectionKey> = st.keys.keys().cloned().collect();
        for key in keys {
            if let Some(ks) = st.keys.get_mut(&key) {
                ks.holder = None;
            }
            st.settle(&key, now);
        }
    }

    pub fn holder(&self, key: &ElectionKey) -> Option<LeaderInfo> {
        let st = self.lock_settled(key);
        st.keys.get(key).and_then(|ks| ks.event().leader().cloned())
    }

    pub fn queue_len(&self, key: &ElectionKey) -> usize {
        self.lock().keys.get(key).map_or(0, |ks| ks.queue.len())
    }

    pub fn knows(&self, key: &ElectionKey) -> bool {
        self.lock().keys.contains_key(key)
    }

    pub fn stats(&self) -> MemoryStats {
        self.lock().stats
    }

    /// From now on the server's clock runs `rate` times as fast as the
    /// clock of `session`'s client, for that client's leases.
    #[cfg_attr(not(feature = "__simulation"), allow(dead_code))]
    pub fn set_session_clock_rate(&self, session: u64, rate: f64) {
        assert!(
            rate.is_finite() && rate > 0.0,
            "a clock rate is a positive factor, not {rate}"
        );
        self.lock().session_clocks.insert(session, ClockRate(rate));
    }

    /// The clock of `session`'s client just lost `lost` (its host was
    /// suspended while the server's clock ran on): each of its leases
    /// ends `lost` sooner in the client's time, now at the latest.
    #[cfg_attr(not(feature = "__simulation"), allow(dead_code))]
    pub fn session_clock_lost(&self, session: u64, lost: Duration) {
        let mut st = self.lock();
        let now = Instant::now();
        let mut touched = Vec::new();
        for (key, ks) in st.keys.iter_mut() {
            if let Some(h) = ks.holder.as_mut().filter(|h| h.session == session) {
                h.expires_at = h.expires_at.checked_sub(lost).unwrap_or(now).max(now);
                touched.push(key.clone());
            }
        }
        // In key order: the grants that follow are numbered the same every time.
        touched.sort_by(|a, b| a.as_str().cmp(b.as_str()));
        for key in touched {
            st.settle(&key, now);
        }
    }

    /// Calls `hook` with every grant from now on, under the server's lock.
    #[cfg_attr(not(feature = "__simulation"), allow(dead_code))]
    pub fn on_grant(&self, hook: GrantHook) {
        self.lock().on_grant = Some(hook);
    }

    /// From now on the server's clock runs `rate` times as fast as the
    /// clients' (leases granted or renewed from then on); see
    /// `MemoryBackend::set_server_clock_rate`.
    pub fn set_clock_rate(&self, rate: f64) {
        assert!(
            rate.is_finite() && rate > 0.0,
            "a clock rate is a positive factor, not {rate}"
        );
        self.lock().clock = ClockRate(rate);
    }

    pub fn watch(
        self: &Arc<Self>,
        key: ElectionKey,
        faults: Arc<Faults>,
        connection: Connection,
    ) -> BoxStream<'static, Result<LeaderEvent>> {
        let rx = {
            let mut st = self.lock();
            st.stats.requests += 1;
            st.keys.entry(key.clone()).or_insert_with(KeyState::new);
            st.settle(&key, Instant::now());
            st.keys[&key].events.subscribe()
        };
        let server = self.clone();
        // `last` is `None` before the first event; `ended` once the stream
        // told its connection's end.
        let state = (server, key, rx, faults, None::<LeaderEvent>, false);
        Box::pin(futures::stream::unfold(
            state,
            move |(server, key, mut rx, faults, last, ended)| async move {
                if ended {
                    return None;
                }
                loop {
                    // Notice expiry even when nobody else touches the key.
                    let expiry = {
                        let st = server.lock_settled(&key);
                        st.keys[&key].holder.as_ref().map(|h| h.expires_at)
                    };
                    let current = rx.borrow_and_update().clone();
                    if last.as_ref() != Some(&current) {
                        if last.is_some() {
                            server.lock().stats.notifications += 1;
                        }
                        // A reset connection, or a lost event, ends the watch
                        // with the connection's error.
                        if let Err(e) = faults.response(connection).await {
                            return Some((Err(e), (server, key, rx, faults, last, true)));
                        }
                        return Some((
                            Ok(current.clone()),
                            (server, key, rx, faults, Some(current), false),
                        ));
                    }
                    crate::simulation::select! {
                        changed = rx.changed() => if changed.is_err() { return None },
                        _ = sleep_until_opt(expiry) => {}
                        () = faults.until_reset(connection) => {
                            let e = Error::unavailable("memory", "injected fault: connection reset");
                            return Some((Err(e), (server, key, rx, faults, last, true)));
                        }
                    }
                }
            },
        ))
    }
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Removes a waiter from its queue when its acquire future is dropped, and
/// releases a grant that arrived but was never seen.
struct WithdrawOnDrop<'a> {
    server: &'a Server,
    key: &'a ElectionKey,
    waiter: u64,
}

impl Drop for WithdrawOnDrop<'_> {
    fn drop(&mut self) {
        let mut st = self.server.lock();
        let Some(ks) = st.keys.get_mut(self.key) else {
            return;
        };
        if let Some(pos) = ks.queue.iter().position(|w| w.id == self.waiter) {
            ks.queue.remove(pos);
            st.stats.withdrawn += 1;
        } else if ks.holder.as_ref().is_some_and(|h| h.grant == self.waiter) {
            // Granted, but the candidate left before it could see it.
            ks.holder = None;
            st.stats.releases += 1;
        }
        st.settle(self.key, Instant::now());
    }
}
