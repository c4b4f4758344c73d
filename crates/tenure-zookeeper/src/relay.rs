//! A relay in this process between a session's client and each server,
//! which reads the session timeout every server grants the session at each
//! connect and reconnect.
//!
//! # Why
//!
//! ZooKeeper negotiates a session's timeout at every reconnect, and a server
//! whose `maxSessionTimeout` is below the timeout asked for gives the session
//! its own maximum (and its leader then expires the session that much
//! sooner). zookeeper-client 0.11.2 adopts the new timeout without a word
//! (`handle_connect_response` → `reset_timeout`), asks for it on every later
//! reconnect, and keeps reporting the first one from
//! `Client::session_timeout()`; no event carries it. Every lease counts from
//! the timeout asked for, so a session shrunk that way expires, and another
//! candidate is granted, while its holder still believes it leads.
//!
//! So the client does not connect to the servers, but to one listener here
//! per server (`127.0.0.1`, a port of its own), which forwards every byte
//! both ways and reads the first frame each server sends on each connection:
//! the `ConnectResponse` (`int32` length, `int32` protocolVersion, `int32`
//! timeOut, `int64` sessionId, ...). Its timeout goes to the session's
//! [`Terms`] before the frame goes on to the client: below the timeout asked
//! for, every lease of the session ends there and the session closes.
//!
//! A probe from outside (a throwaway session to each server after every
//! reconnect) was the other way: it learns what each server would give a
//! new session, but not which server the session reconnected to. A server
//! it cannot reach (killed or frozen, which is when sessions reconnect)
//! leaves unknown whether that one shrank the session: either every lease
//! ends whenever a server is down (a follower's crash would end the terms
//! of every holder whose session was on it), or the probe trusts it (and
//! misses the shrinking server that went down right after answering). Its
//! verdict also comes a probe's round trips after the reconnect, and each
//! probe opens and closes a session per server, writes all of them. The
//! relay knows which server answered and what it gave, on the session's own
//! connection, before the client does, and writes nothing.
//! (A probe still runs once, before a session opens:
//! [`probe`](crate::probe).)
//!
//! # The window
//!
//! A server that gives the session `s` below the timeout asked for starts
//! counting `s` when it handles our `ConnectRequest` (a follower has the
//! quorum leader revalidate the session, and the leader's tracker counts
//! from then), which is after the relay forwarded that request, and answers
//! after that. The leases end when the answer reaches the relay, before the
//! client sees it (so before the session's next request or ping could go
//! out on that connection). The server cannot expire the session earlier
//! than `s` after it handled the request, and `s` is at least its
//! `minSessionTimeout`, which ZooKeeper keeps at 2 `tickTime` or more by
//! default. The holder therefore stops first as long as the answer takes less
//! than `s` to come back from the server, a one-way trip: 400 ms with the
//! test servers' 200 ms tick, 4 s at ZooKeeper's defaults. (A slower answer
//! still ends the leases when it comes.)
//!
//! What the relay cannot see: a server that handles a reconnect and never
//! answers it (it dies, freezes or is cut off in between). If it gave the
//! session less, the session's next reconnect, to another server, asks for
//! the full timeout again (the client never adopted the smaller one) and
//! restores it; only a client that reaches no server for `s` after that
//! could lose its session before its lease ends. That takes a server that
//! shrinks sessions, which [`probe`](crate::probe) refuses at connect unless
//! it changed since (a rolling change) or was out of reach then.
//!
//! Faults pass through as they are: a server that refuses a connection or
//! resets it resets the client's (a plain close closes it), a silent one is
//! silent. TLS connections cannot be relayed; tenure-zookeeper refuses them.
//!
//! # Leaving a frozen server
//!
//! A server that freezes (a GC pause, a stalled VM) answers nothing and
//! closes nothing. zookeeper-client gives its connection up only after its
//! connection timeout (a third of the session timeout) of silence, and then
//! picks the next server at random, the frozen one again as often as not.
//! Two things here make that quicker, with more than one server:
//!
//! - [`Relay::leave`] resets the session's connection on request: the
//!   backend asks when a renewal went unanswered until only a reserve of its
//!   lease is left (see `Session::answered_in_time`), and the client, whose
//!   requests on it fail at once, reconnects.
//! - The server the client left owing an answer (so asked to, or on its own
//!   timeout) has its next connection refused at once, unless the client
//!   reached another server first: zookeeper-client then tries the next
//!   server without a pause, instead of waiting a connection timeout for a
//!   handshake the frozen server never answers. zookeeper-client picks its
//!   next server at random, so it may pick the left one again at once: it
//!   is refused until another server's handshake completes, at most
//!   [`REFUSALS_PER_SERVER`] times the number of servers in a row (each
//!   refusal costs the client one immediate retry); should every other
//!   server be out of reach too, it is tried as before after that.

use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tenure_core::{Error, Result};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio::task::AbortHandle;
use tokio::time::Instant;

use crate::error::BACKEND;
use crate::terms::Terms;

/// ZooKeeper's client port, for a server named without one.
const DEFAULT_PORT: u16 = 2181;

/// The servers of a connect string (`host:port,host:port`), each as
/// `host:port` (a port of 2181 where none is given; IPv6 hosts in
/// brackets); `InvalidArgument` naming `connect_string` for a malformed or
/// TLS (`tcp+tls://`) entry. Chroots are refused before this.
pub(crate) fn servers(connect_string: &str) -> Result<Vec<Arc<str>>> {
    let invalid = |why: String| Error::invalid("connect_string", why);
    connect_string
        .split(',')
        .map(|entry| {
            let entry = entry.trim();
            if entry.starts_with("tcp+tls://") {
                return Err(invalid(format!(
                    "{entry:?}: TLS to ZooKeeper is not supported by tenure-zookeeper yet"
                )));
            }
            let entry = entry.strip_prefix("tcp://").unwrap_or(entry);
            let (host, port) = if let Some(rest) = entry.strip_prefix('[') {
                let (host, after) = rest
                    .split_once(']')
                    .ok_or_else(|| invalid(format!("{entry:?}: an unclosed [")))?;
                let port = match after {
                    "" => None,
                    _ => Some(after.strip_prefix(':').ok_or_else(|| {
                        invalid(format!("{entry:?}: a port must follow ] after a colon"))
                    })?),
                };
                (format!("[{host}]"), port)
            } else {
                match entry.rsplit_once(':') {
                    Some((host, port)) => (host.to_owned(), Some(port)),
                    None => (entry.to_owned(), None),
                }
            };
            if host.is_empty() || host == "[]" {
                return Err(invalid(format!("{entry:?}: a server without a host")));
            }
            let port = match port {
                None => DEFAULT_PORT,
                Some(port) => port
                    .parse::<u16>()
                    .ok()
                    .filter(|p| *p != 0)
                    .ok_or_else(|| invalid(format!("{entry:?}: {port:?} is not a port")))?,
            };
            Ok(Arc::from(format!("{host}:{port}")))
        })
        .collect()
}

/// One listener per server, for one session's client; they stop listening
/// when this is dropped (connections already relayed live on until either
/// side closes them).
#[derive(Debug)]
pub(crate) struct Relay {
    connect_string: String,
    listeners: Vec<AbortHandle>,
    routes: Arc<Routes>,
}

/// One relayed connection of the session, from its handshake on.
pub(crate) type ConnectionId = u64;

/// How many times in a row, per server of the ensemble, a new connection
/// to the server the client left owing an answer is refused before one is
/// let through (should no other server answer). Refused at random picks
/// among three servers, the client lands on another with a chance of
/// 1 - 3^-12 before then, where once left it back on the frozen server one
/// time in three (a full session-timeout third lost: the lease with it).
const REFUSALS_PER_SERVER: usize = 4;

/// What a relay's connections share: which one the session uses, and
/// which server its client is not to go back to.
#[derive(Debug)]
struct Routes {
    servers: Vec<Arc<str>>,
    state: Mutex<RouteState>,
}

#[derive(Debug, Default)]
struct RouteState {
    next_id: ConnectionId,
    /// The connection whose handshake completed last, while it lives.
    current: Option<Current>,
    /// The server (its index) the client last left owing an answer: its
    /// new connections are refused at once until another server's
    /// handshake completes, at most [`REFUSALS_PER_SERVER`] times the
    /// number of servers in a row.
    avoid: Option<usize>,
    /// How many connections to `avoid` were refused since it was set.
    refused: usize,
}

#[derive(Debug)]
struct Current {
    id: ConnectionId,
    server: usize,
    leave: Arc<Notify>,
    traffic: Arc<Mutex<Traffic>>,
}

impl Routes {
    fn state(&self) -> std::sync::MutexGuard<'_, RouteState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a new connection to `server` is refused.
    ///
    /// zookeeper-client opens a connection only once it gave up the last:
    /// if that one's server owed it an answer, this is the client leaving
    /// it on its own timeout (its close may not have reached the relay yet).
    fn refuse(&self, server: usize) -> bool {
        let mut state = self.state();
        if let Some(left) = state.current.take() {
            if lock(&left.traffic).owing() && self.servers.len() > 1 {
                state.avoid = Some(left.server);
                state.refused = 0;
            }
        }
        let refuse = state.avoid == Some(server);
        if refuse {
            state.refused += 1;
            if state.refused >= REFUSALS_PER_SERVER * self.servers.len() {
                state.avoid = None;
            }
        }
        refuse
    }

    fn new_id(&self) -> ConnectionId {
        let mut state = self.state();
        state.next_id += 1;
        state.next_id
    }

    /// Connection `id` to `server` completed a handshake: the session's now.
    fn connected(&self, current: Current) {
        let mut state = self.state();
        state.current = Some(current);
        state.avoid = None;
    }

    /// Connection `id` to `server` ended; `owing` if its client closed it
    /// while the server owed an answer.
    fn closed(&self, id: ConnectionId, server: usize, owing: bool) {
        let mut state = self.state();
        if state.current.as_ref().is_some_and(|c| c.id == id) {
            state.current = None;
        }
        if owing && self.servers.len() > 1 {
            state.avoid = Some(server);
            state.refused = 0;
        }
    }
}

impl Relay {
    /// Listens on `127.0.0.1` for each of `servers`, on the heartbeat
    /// runtime (which drives the sessions), reporting every server's
    /// answer to a connect to `terms`. A server not connected within
    /// `patience` counts as refusing; one side of a connection closed, the
    /// other gets `patience` to close too.
    pub(crate) fn start(
        servers: &[Arc<str>],
        terms: Arc<Terms>,
        patience: Duration,
    ) -> Result<Relay> {
        let mut addrs = Vec::with_capacity(servers.len());
        let mut listeners = Vec::with_capacity(servers.len());
        let routes = Arc::new(Routes {
            servers: servers.to_vec(),
            state: Mutex::default(),
        });
        for index in 0..servers.len() {
            let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
                .and_then(|l| l.set_nonblocking(true).map(|()| l))
                .map_err(|e| Error::backend(BACKEND, e))?;
            addrs.push(
                listener
                    .local_addr()
                    .map_err(|e| Error::backend(BACKEND, e))?,
            );
            let target = Target {
                index,
                routes: routes.clone(),
                terms: terms.clone(),
                patience,
            };
            let task = accept(listener, target);
            listeners.push(tenure_core::heartbeat_runtime().spawn(task).abort_handle());
        }
        let connect_string = addrs
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(",");
        tracing::debug!(backend = BACKEND, ?servers, relayed_by = %connect_string, "relaying the session's connections");
        Ok(Relay {
            connect_string,
            listeners,
            routes,
        })
    }

    /// What the client connects to: the listeners, in the servers' order.
    pub(crate) fn connect_string(&self) -> &str {
        &self.connect_string
    }

    /// The connection the session uses now, if one is up.
    pub(crate) fn connection(&self) -> Option<ConnectionId> {
        self.routes.state().current.as_ref().map(|c| c.id)
    }

    /// Resets connection `id` if it is still the session's, and refuses its
    /// server's next connection (see the module's "Leaving a frozen
    /// server"); the server left, if it was. Never with a single server:
    /// there is nowhere else to go.
    pub(crate) fn leave(&self, id: ConnectionId) -> Option<Arc<str>> {
        if self.routes.servers.len() < 2 {
            return None;
        }
        let mut state = self.routes.state();
        if state.current.as_ref().is_none_or(|c| c.id != id) {
            return None;
        }
        let current = state.current.take()?;
        state.avoid = Some(current.server);
        current.leave.notify_one();
        Some(self.routes.servers[current.server].clone())
    }
}

/// What one listener relays to: its server, and what it reports to.
#[derive(Clone, Debug)]
struct Target {
    index: usize,
    routes: Arc<Routes>,
    terms: Arc<Terms>,
    patience: Duration,
}

impl Target {
    fn server(&self) -> &Arc<str> {
        &self.routes.servers[self.index]
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        for listener in &self.listeners {
            listener.abort();
        }
    }
}

async fn accept(listener: std::net::TcpListener, target: Target) {
    let listener = match TcpListener::from_std(listener) {
        Ok(listener) => listener,
        Err(error) => {
            let server = target.server();
            tracing::warn!(backend = BACKEND, %server, %error, "cannot relay to a ZooKeeper server");
            return;
        }
    };
    loop {
        match listener.accept().await {
            Ok((client, _)) => {
                tokio::spawn(relay(client, target.clone()));
            }
            Err(error) => {
                // Out of descriptors or the like: back off briefly.
                let server = target.server();
                tracing::debug!(backend = BACKEND, %server, %error, "relay accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

/// When a connection last carried bytes each way.
#[derive(Debug, Default)]
struct Traffic {
    request: Option<Instant>,
    answer: Option<Instant>,
}

impl Traffic {
    /// Whether the server owes an answer: bytes went to it after the last
    /// that came back (a request, a ping or a handshake unanswered).
    fn owing(&self) -> bool {
        match (self.request, self.answer) {
            (Some(request), Some(answer)) => request > answer,
            (Some(_), None) => true,
            (None, _) => false,
        }
    }
}

/// Which way a [`pipe`] carries bytes.
#[derive(Clone, Copy, Debug)]
enum Way {
    Requests,
    Answers,
}

fn lock(traffic: &Mutex<Traffic>) -> std::sync::MutexGuard<'_, Traffic> {
    traffic.lock().unwrap_or_else(|e| e.into_inner())
}

/// Copies `from` to `to` until `from` ends, noting in `traffic` when each
/// chunk was read.
async fn pipe<R, W>(
    from: &mut R,
    to: &mut W,
    way: Way,
    traffic: &Mutex<Traffic>,
) -> std::io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut chunk = vec![0u8; 16 * 1024];
    loop {
        let n = from.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        {
            let mut seen = lock(traffic);
            let at = match way {
                Way::Requests => &mut seen.request,
                Way::Answers => &mut seen.answer,
            };
            *at = Some(Instant::now());
        }
        to.write_all(&chunk[..n]).await?;
    }
}

/// Carries one client connection to the target's server and back.
async fn relay(client: TcpStream, target: Target) {
    let Target {
        index,
        ref routes,
        ref terms,
        patience,
    } = target;
    let server = target.server();
    if routes.refuse(index) {
        tracing::debug!(backend = BACKEND, %server, "refused a connection to the server the client just left unanswered");
        return reset(&client);
    }
    let upstream = match tokio::time::timeout(patience, TcpStream::connect(&**server)).await {
        Ok(Ok(upstream)) => upstream,
        Ok(Err(error)) => {
            tracing::debug!(backend = BACKEND, %server, %error, "a ZooKeeper server refused a connection");
            return reset(&client);
        }
        Err(_) => return reset(&client),
    };
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = upstream.into_split();
    let id = routes.new_id();
    let leave = Arc::new(Notify::new());
    let traffic = Arc::new(Mutex::new(Traffic::default()));
    let clean = {
        let requests = async {
            pipe(&mut client_read, &mut server_write, Way::Requests, &traffic).await?;
            server_write.shutdown().await
        };
        let answers = async {
            let live = handshake(&mut server_read, &mut client_write, server, terms).await?;
            lock(&traffic).answer = Some(Instant::now());
            if live {
                routes.connected(Current {
                    id,
                    server: index,
                    leave: leave.clone(),
                    traffic: traffic.clone(),
                });
            }
            pipe(&mut server_read, &mut client_write, Way::Answers, &traffic).await?;
            client_write.shutdown().await
        };
        tokio::pin!(requests, answers);
        let (first, requests_done) = tokio::select! {
            done = &mut requests => (Some(done), true),
            done = &mut answers => (Some(done), false),
            () = leave.notified() => (None, false),
        };
        // The client closed, or failed, first: did the server owe it an answer?
        let owing = requests_done && lock(&traffic).owing();
        routes.closed(id, index, owing);
        if owing {
            tracing::debug!(backend = BACKEND, %server, "the client left a server that owed it an answer");
        }
        // One side closed: the other gets `patience` to follow.
        let followed =
            |done: std::result::Result<std::io::Result<()>, _>| matches!(done, Ok(Ok(())));
        match (first, requests_done) {
            // Left (see `Relay::leave`): reset at once.
            (None, _) => false,
            (Some(Err(_)), _) => false,
            (Some(Ok(())), true) => followed(tokio::time::timeout(patience, answers).await),
            (Some(Ok(())), false) => followed(tokio::time::timeout(patience, requests).await),
        }
    };
    if !clean {
        reset(client_read.as_ref());
        reset(server_read.as_ref());
    }
}

/// Forwards the server's first frame, its `ConnectResponse`, once its
/// timeout and session id are in, reporting the timeout to `terms` first
/// (a session id of 0 is a refusal: the session expired); whether it was
/// for a live session.
async fn handshake<R, W>(
    from: &mut R,
    to: &mut W,
    server: &Arc<str>,
    terms: &Terms,
) -> std::io::Result<bool>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    // length, protocolVersion, timeOut, sessionId
    const HEAD: usize = 4 + 4 + 4 + 8;
    let mut head = Vec::with_capacity(HEAD);
    let mut chunk = [0u8; 512];
    while head.len() < HEAD {
        let n = from.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&chunk[..n]);
    }
    let granted = granted_timeout(&head);
    if let Some(granted) = granted {
        tracing::debug!(backend = BACKEND, %server, ?granted, "a ZooKeeper server answered a connect");
        terms.granted(server, granted);
    }
    to.write_all(&head).await?;
    Ok(granted.is_some())
}

/// The timeout a `ConnectResponse` grants, if the bytes begin with one
/// for a live session.
fn granted_timeout(head: &[u8]) -> Option<Duration> {
    let int = |at: usize| {
        head.get(at..at + 4)
            .map(|b| i32::from_be_bytes(b.try_into().unwrap()))
    };
    let timeout = int(8)?;
    let session = head
        .get(12..20)
        .map(|b| i64::from_be_bytes(b.try_into().unwrap()))?;
    (session != 0 && timeout > 0).then(|| Duration::from_millis(timeout as u64))
}

/// Closes a connection with RST, as a refusing or failing server does.
fn reset(stream: &TcpStream) {
    let _ = socket2::SockRef::from(stream).set_linger(Some(Duration::ZERO));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn servers_of_a_connect_string() {
        let servers = servers("a:1, tcp://b ,[::1]:2182,[fe80::1],10.0.0.1:2181").unwrap();
        let names: Vec<&str> = servers.iter().map(|s| &**s).collect();
        assert_eq!(
            names,
            [
                "a:1",
                "b:2181",
                "[::1]:2182",
                "[fe80::1]:2181",
                "10.0.0.1:2181"
            ]
        );
        for bad in [
            "a:1,,b",
            ":1",
            "a:0",
            "a:x",
            "[::1",
            "[::1]2181",
            "tcp+tls://a:1",
        ] {
            match super::servers(bad) {
                Err(Error::InvalidArgument {
                    field: "connect_string",
                    ..
                }) => {}
                other => panic!("{bad:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_connect_response_tells_its_timeout() {
        let mut frame = Vec::new();
        frame.extend_from_slice(&36i32.to_be_bytes());
        frame.extend_from_slice(&0i32.to_be_bytes());
        frame.extend_from_slice(&600i32.to_be_bytes());
        frame.extend_from_slice(&0x1234i64.to_be_bytes());
        assert_eq!(granted_timeout(&frame), Some(Duration::from_millis(600)));
        assert_eq!(granted_timeout(&frame[..19]), None);
        // An expired session's refusal: session id 0, timeout 0.
        let mut refusal = frame.clone();
        refusal[8..20].fill(0);
        assert_eq!(granted_timeout(&refusal), None);
    }

    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A server that answers every connection's first frame with a
    /// `ConnectResponse` for a live session, then reads and answers
    /// nothing more (a server that froze after the handshake); counts
    /// the connections it accepted.
    async fn frozen_after_handshake() -> (Arc<str>, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr: Arc<str> = listener.local_addr().unwrap().to_string().into();
        let accepted = Arc::new(AtomicUsize::new(0));
        let counted = accepted.clone();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                tokio::spawn(async move {
                    let len = conn.read_i32().await.unwrap_or(0);
                    let mut frame = vec![0; usize::try_from(len).unwrap_or(0)];
                    if conn.read_exact(&mut frame).await.is_err() {
                        return;
                    }
                    let mut answer = Vec::new();
                    answer.extend_from_slice(&0i32.to_be_bytes());
                    answer.extend_from_slice(&1000i32.to_be_bytes());
                    answer.extend_from_slice(&0x2ai64.to_be_bytes());
                    answer.extend_from_slice(&16i32.to_be_bytes());
                    answer.extend_from_slice(&[7; 16]);
                    answer.push(0);
                    let _ = conn.write_i32(answer.len() as i32).await;
                    let _ = conn.write_all(&answer).await;
                    let mut sink = [0u8; 512];
                    while matches!(conn.read(&mut sink).await, Ok(n) if n > 0) {}
                });
            }
        });
        (addr, accepted)
    }

    /// Opens a client connection through `listener` and completes its
    /// handshake, then sends `request` (unanswered by the server).
    async fn handshaken(listener: &str, request: bool) -> TcpStream {
        let mut conn = TcpStream::connect(listener).await.unwrap();
        conn.write_i32(4).await.unwrap();
        conn.write_all(&[0; 4]).await.unwrap();
        let len = conn.read_i32().await.unwrap();
        let mut answer = vec![0; usize::try_from(len).unwrap()];
        conn.read_exact(&mut answer).await.unwrap();
        if request {
            conn.write_i32(8).await.unwrap();
            conn.write_all(&[0, 0, 0, 1, 0, 0, 0, 9]).await.unwrap();
        }
        conn
    }

    /// Whether the relay refuses a new connection to `listener` at once
    /// (the reset may come before the connect returns).
    async fn refused(listener: &str, within: Duration) -> bool {
        match TcpStream::connect(listener).await {
            Ok(mut conn) => ended_within(&mut conn, within).await,
            Err(_) => true,
        }
    }

    /// Whether the relay ends a connection (reset or closed) within `within`.
    async fn ended_within(conn: &mut TcpStream, within: Duration) -> bool {
        let mut byte = [0u8; 1];
        matches!(
            tokio::time::timeout(within, conn.read(&mut byte)).await,
            Ok(Ok(0) | Err(_))
        )
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_left_server_is_reset_and_refused_until_another_answers() {
        let (a, a_accepted) = frozen_after_handshake().await;
        let (b, _) = frozen_after_handshake().await;
        let relay = Relay::start(
            &[a.clone(), b.clone()],
            Terms::new(Duration::from_secs(1)),
            Duration::from_millis(300),
        )
        .unwrap();
        let listeners: Vec<String> = relay
            .connect_string()
            .split(',')
            .map(str::to_owned)
            .collect();
        let short = Duration::from_millis(200);

        // Left on request: the connection is reset at once ...
        let mut on_a = handshaken(&listeners[0], true).await;
        // The relay takes it for the session's just after the answer passed.
        let mut id = relay.connection();
        for _ in 0..100 {
            if id.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
            id = relay.connection();
        }
        let id = id.expect("the handshaken connection");
        assert_eq!(relay.leave(id).as_deref(), Some(&*a));
        assert!(
            ended_within(&mut on_a, short).await,
            "the left connection lives on"
        );
        assert_eq!(relay.leave(id), None, "left twice");
        // ... and the next connection to its server is refused, upstream unseen.
        let before = a_accepted.load(Ordering::SeqCst);
        assert!(refused(&listeners[0], short).await, "not refused");
        assert_eq!(a_accepted.load(Ordering::SeqCst), before);
        // Again, while the client reaches no one else, up to the bound;
        // then it may come back.
        for _ in 1..REFUSALS_PER_SERVER * 2 {
            assert!(refused(&listeners[0], short).await, "not refused again");
        }
        assert_eq!(a_accepted.load(Ordering::SeqCst), before);
        let _back = handshaken(&listeners[0], false).await;
        assert_eq!(a_accepted.load(Ordering::SeqCst), before + 1);

        // The client leaves b on its own, owing an answer: b is refused.
        let on_b = handshaken(&listeners[1], true).await;
        drop(on_b);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(refused(&listeners[1], short).await, "b not refused");
        assert!(refused(&listeners[1], short).await, "b not refused again");
        // Reaching another server clears it.
        let _on_a = handshaken(&listeners[0], false).await;
        let _on_b = handshaken(&listeners[1], false).await;
    }
}
