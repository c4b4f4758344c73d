//! The backend's one ZooKeeper session, replaced by a new one once it ends:
//! the candidacies that live on it, the timeout its servers grant it, and a
//! close that ends it.

use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tenure_core::{Error, Result};
use tokio::sync::{watch, Mutex};
use tokio::time::Instant;
use zookeeper_client::{Client, StateWatcher};

use crate::error::{map, unavailable, BACKEND};
use crate::latch;
use crate::probe;
use crate::relay::{ConnectionId, Relay};
use crate::terms::Terms;
use crate::ZooKeeperOptions;

/// The current session. Every election of the backend shares it; once the
/// server expires it (or it fails authentication, or a server gives it a
/// shorter timeout than asked for, or it is closed), the next operation
/// opens a new one, and nodes of the old one are never reused.
#[derive(Debug)]
pub(crate) struct Sessions {
    /// The servers of the connect string (see [`crate::relay::servers`]).
    servers: Vec<Arc<str>>,
    options: ZooKeeperOptions,
    current: Mutex<Option<Arc<Session>>>,
}

impl Sessions {
    pub(crate) fn new(servers: Vec<Arc<str>>, options: ZooKeeperOptions) -> Self {
        Sessions {
            servers,
            options,
            current: Mutex::new(None),
        }
    }

    /// The live session, connecting a new one if there is none.
    pub(crate) async fn session(&self) -> Result<Arc<Session>> {
        let mut current = self.current.lock().await;
        if let Some(session) = current.as_ref().filter(|s| !s.ended()) {
            return Ok(session.clone());
        }
        let (client, relay, terms) = self.connect().await?;
        let session = Session::start(
            client,
            relay,
            terms,
            self.options.session_timeout,
            self.close_bound(),
        );
        *current = Some(session.clone());
        Ok(session)
    }

    /// A client of the live session (see [`Session::client`]).
    pub(crate) async fn client(&self) -> Result<Client> {
        self.session().await?.client()
    }

    /// The open session's id, if there is one (none before the first
    /// operation, or once it ended); never opens one.
    pub(crate) async fn open_id(&self) -> Option<i64> {
        let current = self.current.lock().await;
        current.as_ref().filter(|s| !s.ended()).map(|s| s.id)
    }

    /// Opens a session: first asks every server what it would give it
    /// ([`probe::check`]), then connects through a [`Relay`], which reports
    /// every server's grant to the session's [`Terms`] from then on.
    async fn connect(&self) -> Result<(Client, Relay, Arc<Terms>)> {
        let requested = self.options.session_timeout;
        let patience = connection_timeout(requested);
        probe::check(&self.servers, &self.options, patience).await?;
        let terms = Terms::new(requested);
        let relay = Relay::start(&self.servers, terms.clone(), patience)?;
        // With a connection timeout of a third of the session timeout (see
        // `connection_timeout`), the client pings after an eighth of it
        // without sending anything, checked every 24th: the servers hear
        // from the session at least every sixth of its timeout, which
        // `ZooKeeperOptions::expiry_lead` counts on (measured by the test
        // `an_idle_session_is_heard_from_at_least_every_sixth_of_its_timeout`).
        let mut connector = Client::connector()
            .with_session_timeout(requested)
            .with_connection_timeout(patience);
        if let Some((scheme, auth)) = &self.options.auth {
            connector = connector.with_auth(scheme, auth);
        }
        let connect = connector.connect(relay.connect_string());
        let client = match tokio::time::timeout(
            self.options.request_timeout.max(requested),
            connect,
        )
        .await
        {
            Ok(result) => result.map_err(map)?,
            Err(_) => {
                return Err(Error::Timeout {
                    operation: "connect",
                    after: self.options.request_timeout.max(requested),
                })
            }
        };
        let negotiated = client.session_timeout();
        if negotiated != requested {
            // A server the probe could not reach, or one whose
            // configuration changed since.
            let server = terms
                .last_granted()
                .map_or_else(|| "(unknown)".into(), |(server, _)| server);
            return Err(probe::refusal(&server, negotiated, requested));
        }
        tracing::debug!(
            backend = BACKEND,
            session = client.session_id().0,
            server = terms.last_granted().map(|(s, _)| s).as_deref(),
            "ZooKeeper session established"
        );
        Ok((client, relay, terms))
    }

    /// Closes the open session, if any, and waits (at most a request
    /// timeout) until the client reports it closed: the servers have then
    /// deleted every node it owned. The next operation opens a new session.
    pub(crate) async fn close(&self) {
        let Some(session) = self.current.lock().await.take() else {
            return;
        };
        session.close(self.close_bound()).await;
    }

    /// How long a close waits for the client to report the session closed.
    fn close_bound(&self) -> Duration {
        self.options
            .request_timeout
            .min(self.options.session_timeout)
    }

    /// The session timeout every session is opened with.
    pub(crate) fn session_timeout(&self) -> Duration {
        self.options.session_timeout
    }
}

/// The client's connection timeout for a session timeout: a third of it.
///
/// It is how long the client waits for any answer before it gives a server
/// up, and for a new connection's handshake, so it is both how slow a server
/// may answer and how long a frozen one goes unnoticed by the client alone.
/// A renewal keeps a lease valid for the session timeout less the expiry
/// lead (a sixth of it plus a tick) and the drift margin: 0.61 of it at 1 s
/// with a 200 ms tick and at the defaults (10 s, 2 s), 0.48 at 6 s with a
/// 2 s tick. The Elector renews every third of that, so a renewal goes out
/// with two thirds of it left (0.40 of the session timeout at 1 s). When a
/// server freezes just before a renewal, the client's last answer may have
/// come just before too, and this timeout (checked every 24th of the
/// session timeout) leaves 0.03 of the session timeout at 1 s, nothing at
/// 6 s, for the reconnect and the renewal elsewhere; and the client may go
/// back to the frozen server first, which costs another timeout. So the
/// backend does not wait for it: a renewal not answered while a reserve of
/// its lease is left leaves the server (`Session::answered_in_time`), and
/// the relay keeps the client from going back to it (see [`crate::relay`],
/// "Leaving a frozen server"). This timeout stays a third, not shorter:
/// the suite's slow links answer a quarter of the session timeout late.
pub(crate) fn connection_timeout(session_timeout: Duration) -> Duration {
    session_timeout / 3
}

/// One ZooKeeper session.
///
/// zookeeper-client closes a session (its servers then delete the session's
/// ephemeral nodes at once) only when the last clone of its `Client` is
/// dropped. So the backend keeps exactly one lasting clone, here, and
/// everything else that talks to the session (a campaign, a watch, a held
/// lease's expiry timer, a withdrawal) takes a clone only for work that
/// [`unless_closed`](Self::unless_closed) ends: [`close`](Self::close) drops
/// the lasting clone and ends that work, so the last clone goes. A held
/// lease keeps the session, not a client.
///
/// It also knows which of its nodes live candidacies still track (see
/// [`Claim`]): any other candidate node the session owns is a withdrawal that
/// never landed, and the next look at its election deletes it.
///
/// Its client reaches the servers through a [`Relay`], which reports each
/// server's grant to its [`Terms`]: should one give the session less than
/// asked for, the leases counting on it end at once (see [`crate::terms`])
/// and the session closes itself, so that the next operation opens a new
/// one, whose [probe](crate::probe) names the server.
#[derive(Debug)]
pub(crate) struct Session {
    id: i64,
    client: std::sync::Mutex<Option<Client>>,
    state: StateWatcher,
    closing: watch::Sender<bool>,
    /// The node-name prefixes (`_c_<uuid>-latch-`) of live candidacies.
    claimed: std::sync::Mutex<HashSet<String>>,
    terms: Arc<Terms>,
    /// Renewals being gathered into one request.
    renewals: crate::renewals::Renewals,
    /// Listens for the client while the session lives.
    relay: Relay,
    /// The session timeout (every lease's TTL).
    timeout: Duration,
    /// How long the session's last renewals took, sent to answered.
    round_trips: std::sync::Mutex<RoundTrips>,
    /// The connection the last renewal answered was sent on.
    answered_on: std::sync::Mutex<Option<ConnectionId>>,
}

fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// The last [`RoundTrips::KEPT`] round trips of a session's renewals.
#[derive(Debug, Default)]
struct RoundTrips(std::collections::VecDeque<Duration>);

impl RoundTrips {
    const KEPT: usize = 128;

    fn push(&mut self, took: Duration) {
        if self.0.len() == Self::KEPT {
            self.0.pop_front();
        }
        self.0.push_back(took);
    }

    /// The 99th percentile (nearest rank), zero before the first.
    fn p99(&self) -> Duration {
        let mut sorted: Vec<Duration> = self.0.iter().copied().collect();
        sorted.sort_unstable();
        let rank = (sorted.len() * 99).div_ceil(100);
        rank.checked_sub(1)
            .and_then(|i| sorted.get(i).copied())
            .unwrap_or_default()
    }
}

/// How much of a lease a renewal that its server has not answered leaves
/// for going to another server: four of the session's renewal round trips
/// at the 99th percentile (a reconnect and a renewal take about three: the
/// handshake, the ping zookeeper-client sends after it, the sync with its
/// read), at least a sixth of the session timeout, and at most half of what
/// the lease has `left` as the renewal goes out, so that a server always
/// gets that half to answer. The sixth: a reconnect and a renewal took more
/// than a tenth (100 ms at 1 s) on a loaded 2-core machine. A renewal the
/// Elector sends with 0.40 of the session timeout left still waits 0.23 of
/// it for its server, above the eighth the suite's slow links hold answers
/// back at the Elector's pace; one sent on a fresh lease waits 0.45, above
/// the quarter they hold there.
fn reserve(p99: Duration, timeout: Duration, left: Duration) -> Duration {
    (p99 * 4).max(timeout / 6).min(left / 2)
}

impl Session {
    /// The session of `client` (connected through `relay`), which closes
    /// itself (waiting at most `close_bound`) once a server gives it a
    /// shorter timeout than asked for.
    fn start(
        client: Client,
        relay: Relay,
        terms: Arc<Terms>,
        timeout: Duration,
        close_bound: Duration,
    ) -> Arc<Session> {
        let session = Arc::new(Session {
            id: client.session_id().0,
            state: client.state_watcher(),
            client: std::sync::Mutex::new(Some(client)),
            closing: watch::Sender::new(false),
            claimed: Default::default(),
            terms: terms.clone(),
            renewals: Default::default(),
            relay,
            timeout,
            round_trips: Default::default(),
            answered_on: Default::default(),
        });
        let (watched, mut closing) = (Arc::downgrade(&session), session.closing.subscribe());
        // Ends with the session (closed, or dropped) unless it shrinks first.
        tenure_core::heartbeat_runtime().spawn(async move {
            let shrunk = tokio::select! {
                _ = closing.wait_for(|closed| *closed) => false,
                _ = terms.shrunk() => true,
            };
            if let Some(session) = watched.upgrade().filter(|_| shrunk) {
                session.close(close_bound).await;
            }
        });
        session
    }

    /// What the servers granted the session, and the leases counting on it.
    pub(crate) fn terms(&self) -> &Arc<Terms> {
        &self.terms
    }

    /// The session id.
    pub(crate) fn id(&self) -> i64 {
        self.id
    }

    /// A client of this session, for requests, or for a wait inside
    /// [`unless_closed`](Self::unless_closed); an error once it is closed.
    /// Renewals being gathered into one request.
    pub(crate) fn renewals(&self) -> &crate::renewals::Renewals {
        &self.renewals
    }

    pub(crate) fn client(&self) -> Result<Client> {
        self.client
            .lock()
            .unwrap()
            .clone()
            .ok_or_else(|| unavailable("the ZooKeeper session was closed"))
    }

    /// Whether the session ended: closed, expired, failed authentication, or
    /// given a shorter timeout than asked for (it closes itself then).
    pub(crate) fn ended(&self) -> bool {
        *self.closing.borrow()
            || self.state.peek_state().is_terminated()
            || self.terms.shrink().is_some()
    }

    /// Runs a renewal, made by `renewal` and sent now, whose answer keeps a
    /// lease valid; `valid_until` is the lease's deadline without it.
    ///
    /// A server that has not answered by the time only a
    /// [`reserve`] of the lease is left is left for another: the
    /// relay resets the connection it was sent on (if the session still
    /// uses it), the renewal fails at once, the client reconnects elsewhere,
    /// not to the server left (see [`crate::relay`], "Leaving a frozen
    /// server"), where the renewal is sent once more (`renewal` makes it),
    /// within the lease's deadline. zookeeper-client
    /// alone would wait for a third of the session timeout of silence,
    /// counted from its last answer, which may come just before a renewal
    /// that a freezing server never answers: that leaves 0.03 of the session
    /// timeout for the reconnect and the renewal at 1 s with a 200 ms tick
    /// (less than a loaded host takes), and none at 6 s with a 2 s tick.
    /// The reserve counts from what the lease has left, so it holds at
    /// every point of the renewal cycle and for every tick.
    ///
    /// A renewal answered on its first server adds its round trip to the
    /// session's.
    pub(crate) async fn answered_in_time<T, F>(
        &self,
        valid_until: Instant,
        renewal: impl Fn() -> F,
    ) -> Result<T>
    where
        F: Future<Output = Result<T>>,
    {
        let sent = Instant::now();
        let on = self.relay.connection();
        let left = valid_until.saturating_duration_since(sent);
        let p99 = lock(&self.round_trips).p99();
        let reserve = reserve(p99, self.timeout, left);
        // Only a server that answered the session's last renewal is left:
        // not one the client just reached (a retry after leaving another).
        let proven = *lock(&self.answered_on);
        let work = renewal();
        tokio::pin!(work);
        let Some(on) = on.filter(|on| proven == Some(*on)) else {
            let answered = self.answered(sent, on, work.await);
            return self.once_more(answered, valid_until, renewal).await;
        };
        let early = tokio::select! {
            biased;
            answered = work.as_mut() => Some(answered),
            () = tokio::time::sleep_until(valid_until - reserve) => None,
        };
        if let Some(answered) = early {
            let answered = self.answered(sent, Some(on), answered);
            return self.once_more(answered, valid_until, renewal).await;
        }
        let Some(server) = self.relay.leave(on) else {
            return self.answered(sent, Some(on), work.await);
        };
        tracing::warn!(
            backend = BACKEND,
            session = self.id,
            %server,
            unanswered_for = ?sent.elapsed(),
            "a ZooKeeper server did not answer a renewal with {reserve:?} of the lease left; \
             reconnecting to another"
        );
        match work.await {
            Ok(answered) => Ok(answered),
            // Failed because it was left: once more, through the server
            // the client reconnects to, for as long as the lease lasts (a
            // caller's retry would come later, after its back-off).
            Err(error) => match tokio::time::timeout_at(valid_until, renewal()).await {
                Ok(answered) => answered,
                Err(_) => Err(error),
            },
        }
    }

    /// A renewal that failed retryably before the relay left its server
    /// (zookeeper-client gave its connection up under it: no answer for a
    /// third of the session timeout, as from a server starved of CPU; or
    /// the connection broke) is sent once more (`renewal` makes it) through
    /// the server the client reconnects to, within the lease's deadline,
    /// as one the relay left is. A caller's retry would come after its
    /// back-off, and a raw lease's caller may make none. The deadline the
    /// answer gives counts from when the second was sent (`renewal`'s own
    /// send time), as any renewal's does.
    async fn once_more<T, F>(
        &self,
        first: Result<T>,
        valid_until: Instant,
        renewal: impl Fn() -> F,
    ) -> Result<T>
    where
        F: Future<Output = Result<T>>,
    {
        match first {
            Err(error) if error.is_retryable() && !self.ended() => {
                tracing::debug!(
                    backend = BACKEND,
                    session = self.id,
                    %error,
                    "a renewal failed with its connection; sending it once more"
                );
                match tokio::time::timeout_at(valid_until, renewal()).await {
                    Ok(answered) => answered,
                    Err(_) => Err(error),
                }
            }
            answered => answered,
        }
    }

    /// A renewal sent at `sent` on connection `on` was answered: its round
    /// trip counts, and the connection has answered one.
    fn answered<T>(
        &self,
        sent: Instant,
        on: Option<ConnectionId>,
        answered: Result<T>,
    ) -> Result<T> {
        if answered.is_ok() {
            lock(&self.round_trips).push(sent.elapsed());
            if on.is_some() && on == self.relay.connection() {
                *lock(&self.answered_on) = on;
            }
        }
        answered
    }

    /// Runs `work` unless (or until) the session is closed: `None` then, and
    /// `work` (with the clients it holds) is dropped at once.
    pub(crate) async fn unless_closed<F: Future>(&self, work: F) -> Option<F::Output> {
        let mut closing = self.closing.subscribe();
        tokio::select! {
            biased;
            _ = closing.wait_for(|closed| *closed) => None,
            output = work => Some(output),
        }
    }

    /// Marks the nodes named `prefix<sequence>` as a live candidacy's until
    /// the claim is dropped (once its node is known gone).
    pub(crate) fn claim(self: &Arc<Self>, prefix: &str) -> Claim {
        self.claimed.lock().unwrap().insert(prefix.to_owned());
        Claim {
            session: self.clone(),
            prefix: prefix.to_owned(),
        }
    }

    /// Whether a live candidacy of this session claims the node `name`.
    pub(crate) fn claims(&self, name: &str) -> bool {
        latch::prefix_of(name).is_some_and(|prefix| self.claimed.lock().unwrap().contains(prefix))
    }

    /// Ends every use of the session, lets go of its client, and waits (at
    /// most `bound`) until the client reports the session closed.
    async fn close(&self, bound: Duration) {
        self.closing.send_replace(true);
        drop(self.client.lock().unwrap().take());
        let mut state = self.state.clone();
        let closed = async {
            while !state.state().is_terminated() {
                state.changed().await;
            }
        };
        match tokio::time::timeout(bound, closed).await {
            Ok(()) => tracing::debug!(
                backend = BACKEND,
                session = self.id,
                "ZooKeeper session closed"
            ),
            Err(_) => tracing::warn!(
                backend = BACKEND,
                session = self.id,
                "ZooKeeper session not closed within {bound:?}: the servers may be out of \
                 reach, or a client taken with ZooKeeperBackend::client still holds it"
            ),
        }
    }
}

/// A live candidacy's claim on its nodes (by their `_c_<uuid>-latch-`
/// prefix), from before its create is sent until its node is known gone.
#[derive(Debug)]
pub(crate) struct Claim {
    session: Arc<Session>,
    prefix: String,
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.session.claimed.lock().unwrap().remove(&self.prefix);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn the_reserve_is_four_round_trips_at_least_a_sixth_and_never_over_half_of_what_is_left() {
        let timeout = Duration::from_millis(1200);
        // 0.40 of the TTL left as a renewal goes out (200 ms tick).
        let left = 482 * MS;
        assert_eq!(reserve(Duration::ZERO, timeout, left), 200 * MS);
        assert_eq!(reserve(10 * MS, timeout, left), 200 * MS);
        assert_eq!(reserve(55 * MS, timeout, left), 220 * MS);
        assert_eq!(reserve(80 * MS, timeout, left), 241 * MS);
        assert_eq!(reserve(2 * MS, timeout, 170 * MS), 85 * MS);
    }

    #[test]
    fn the_p99_of_round_trips_is_the_nearest_rank_of_the_last_kept() {
        let mut trips = RoundTrips::default();
        assert_eq!(trips.p99(), Duration::ZERO);
        for ms in 1..=100 {
            trips.push(ms * MS);
        }
        assert_eq!(trips.p99(), 99 * MS);
        // Only the last 128 count.
        for _ in 0..RoundTrips::KEPT {
            trips.push(3 * MS);
        }
        assert_eq!(trips.p99(), 3 * MS);
    }
}
