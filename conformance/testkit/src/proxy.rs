//! A TCP fault proxy: put one between each candidate and its server to cut
//! that candidate off without touching the server or the other candidates.
//!
//! [`FaultProxy::start`] listens on `127.0.0.1:0` and forwards every
//! connection to one upstream address. [`FaultProxy::set`] switches the
//! [`Mode`] at any time; it applies to open connections and new ones alike:
//!
//! | mode | open connections | new connections |
//! |---|---|---|
//! | [`Mode::Pass`] | bytes flow | accepted, connected upstream |
//! | [`Mode::Delay`]`(d)` | each chunk is held `d` in each direction (a round trip gains `2d`) | accepted, connected upstream |
//! | [`Mode::DelayAnswers`]`(d)` | each chunk from upstream is held `d`; chunks to upstream pass at once | accepted, connected upstream |
//! | [`Mode::Blackhole`] | nothing flows either way; bytes are held, not dropped, and reads stop once a few chunks are held, so TCP backpressure builds as on a dead link | accepted (the handshake completes) but not connected upstream: the client waits |
//! | [`Mode::Reset`] | closed with RST (`SO_LINGER` 0) on both sides | accepted and closed with RST at once: the first read fails with `ConnectionReset` |
//! | [`Mode::DropAnswers`] | what the client sends is forwarded at once; what the upstream answers is read and thrown away | accepted, connected upstream |
//!
//! [`FaultProxy::reset_connections`] resets the connections open now, and
//! lets new ones through as the mode says: a transient fault the client
//! recovers from by reconnecting.
//!
//! Leaving `DropAnswers` resets every connection that lost an answer: its
//! byte stream is out of step (the client waits for answers the upstream
//! sent and the proxy threw away, or would read the next answer as the
//! one it waits for), and no protocol recovers from that but by starting
//! afresh, so the proxy does what a real network path would do in the end.
//! A connection that lost nothing is left as it is. Calls still waiting for
//! a lost answer then fail with `ConnectionReset` instead of hanging
//! forever.
//!
//! Leaving `Blackhole` releases what was held: open connections resume,
//! like TCP after a healed partition, unless an endpoint gave up meanwhile
//! (as a client with a deadline does; then that side closes or resets and the
//! other side follows). Connections accepted during the blackhole are
//! connected upstream then. Leaving `Reset` lets new connections work again;
//! reset ones stay gone. Closes pass through in order: a FIN after the bytes
//! before it, an RST (or any error) on one side resets the other.
//!
//! The proxy notes when it forwarded bytes towards the upstream
//! ([`FaultProxy::last_request_at`], an upper bound for the send time of
//! every request a client made before; [`FaultProxy::requests_since`], each
//! write, so a case can name the request that starts a TTL), when it last
//! delivered an answer ([`FaultProxy::last_answer_at`]), and how many chunks
//! it has read and not yet delivered or dropped ([`FaultProxy::in_flight`]):
//! what a case waits on instead of sleeping while held bytes land. A [`Tap`] given at the start
//! ([`FaultProxy::start_tapped`]) sees every byte forwarded, each way, per
//! connection (to count a protocol's messages).
//!
//! Dropping the proxy stops listening and closes every connection.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

/// What the proxy does to the bytes it carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Forward everything at once.
    #[default]
    Pass,
    /// Forward everything, each chunk `Duration` after it was read.
    Delay(Duration),
    /// Forward what the client sends at once, and what the upstream answers
    /// `Duration` after it was read.
    DelayAnswers(Duration),
    /// Forward nothing, keep every connection open.
    Blackhole,
    /// Reset every connection, open or new.
    Reset,
    /// Forward what the client sends at once (the upstream executes it),
    /// read what the upstream answers and throw it away; leaving this mode
    /// resets every connection that lost an answer.
    DropAnswers,
}

/// Sees what a proxy forwards, each way, connection by connection.
pub trait Tap: Send + Sync + 'static {
    /// For a new connection (once connected upstream): an observer of the
    /// bytes forwarded to the upstream (requests), and one of the bytes
    /// forwarded to the client (answers), each called in order with every
    /// chunk once it was written.
    fn connection(&self) -> (Observer, Observer);
}

/// Sees the bytes of one direction of one connection, chunk by chunk.
pub type Observer = Box<dyn FnMut(&[u8]) + Send>;

/// A fault-injecting TCP proxy in front of one upstream address.
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    upstream: SocketAddr,
    mode: watch::Sender<Mode>,
    resets: Arc<watch::Sender<u64>>,
    open: Arc<AtomicUsize>,
    opened: Arc<AtomicUsize>,
    traffic: Arc<Traffic>,
    accept_loop: JoinHandle<()>,
}

impl FaultProxy {
    /// Listens on `127.0.0.1:0` and forwards to `upstream`, in [`Mode::Pass`].
    pub async fn start(upstream: SocketAddr) -> std::io::Result<FaultProxy> {
        Self::start_tapped(upstream, None).await
    }

    /// [`start`](Self::start), with `tap` seeing what every connection forwards.
    pub async fn start_tapped(
        upstream: SocketAddr,
        tap: Option<Arc<dyn Tap>>,
    ) -> std::io::Result<FaultProxy> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let addr = listener.local_addr()?;
        let (mode, mode_rx) = watch::channel(Mode::Pass);
        let resets = Arc::new(watch::Sender::new(0));
        let open = Arc::new(AtomicUsize::new(0));
        let opened = Arc::new(AtomicUsize::new(0));
        let traffic = Arc::new(Traffic::default());
        let accept_loop = tokio::spawn(accept_loop(
            listener,
            upstream,
            Switches {
                mode: mode_rx,
                resets: resets.clone(),
            },
            open.clone(),
            opened.clone(),
            traffic.clone(),
            tap,
        ));
        Ok(FaultProxy {
            addr,
            upstream,
            mode,
            resets,
            open,
            opened,
            traffic,
            accept_loop,
        })
    }

    /// The address candidates connect to instead of the upstream.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The address it forwards to.
    pub fn upstream(&self) -> SocketAddr {
        self.upstream
    }

    /// Switches the mode for open and new connections.
    pub fn set(&self, mode: Mode) {
        tracing::debug!(proxy = %self.addr, upstream = %self.upstream, ?mode, "fault proxy mode");
        self.mode.send_replace(mode);
    }

    /// Resets (RST) every connection open now, whatever the mode; new
    /// connections are served as the mode says.
    pub fn reset_connections(&self) {
        tracing::debug!(proxy = %self.addr, upstream = %self.upstream, "fault proxy resets its connections");
        self.resets.send_modify(|n| *n += 1);
    }

    /// The current mode.
    pub fn mode(&self) -> Mode {
        *self.mode.borrow()
    }

    /// When bytes from a client were last written towards the upstream.
    pub fn last_request_at(&self) -> Option<Instant> {
        self.traffic.lock().requests.back().copied()
    }

    /// When bytes from a client were written towards the upstream at or
    /// after `since`, in order: one instant a write (the last
    /// [`REQUESTS_KEPT`] writes are kept).
    pub fn requests_since(&self, since: Instant) -> Vec<Instant> {
        let log = self.traffic.lock();
        log.requests
            .iter()
            .copied()
            .filter(|&t| t >= since)
            .collect()
    }

    /// When bytes from the upstream were last written to a client.
    pub fn last_answer_at(&self) -> Option<Instant> {
        self.traffic.lock().last_answer
    }

    /// Chunks read (either way) and neither delivered nor thrown away yet:
    /// what a delay or a blackhole holds.
    pub fn in_flight(&self) -> usize {
        self.traffic.in_flight.load(Ordering::SeqCst)
    }

    /// Client connections currently open through the proxy.
    pub fn open_connections(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }

    /// Client connections accepted since the proxy started, closed ones
    /// included.
    pub fn connections_opened(&self) -> usize {
        self.opened.load(Ordering::SeqCst)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        // Dropping the accept loop drops its JoinSet, which aborts every
        // connection task and so closes their sockets.
        self.accept_loop.abort();
    }
}

async fn accept_loop(
    listener: TcpListener,
    upstream: SocketAddr,
    switches: Switches,
    open: Arc<AtomicUsize>,
    opened: Arc<AtomicUsize>,
    traffic: Arc<Traffic>,
    tap: Option<Arc<dyn Tap>>,
) {
    let Switches { mode, resets } = switches;
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((client, _)) => {
                    opened.fetch_add(1, Ordering::SeqCst);
                    connections.spawn(serve(client, upstream, mode.clone(), resets.subscribe(), open.clone(), traffic.clone(), tap.clone()));
                }
                Err(e) => {
                    // Out of descriptors or the like: back off briefly.
                    tracing::warn!(error = %e, "fault proxy accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// What the proxy's owner switches: the mode, and resets of the
/// connections open at the time.
struct Switches {
    mode: watch::Receiver<Mode>,
    resets: Arc<watch::Sender<u64>>,
}

/// How many request writes [`FaultProxy::requests_since`] can tell of.
pub const REQUESTS_KEPT: usize = 4096;

/// What a proxy's connections forwarded, and hold now.
#[derive(Debug, Default)]
struct Traffic {
    log: std::sync::Mutex<TrafficLog>,
    in_flight: AtomicUsize,
}

#[derive(Debug, Default)]
struct TrafficLog {
    /// When bytes were written towards the upstream, the last
    /// [`REQUESTS_KEPT`] writes.
    requests: std::collections::VecDeque<Instant>,
    /// When bytes were last written to the client.
    last_answer: Option<Instant>,
}

impl Traffic {
    fn lock(&self) -> std::sync::MutexGuard<'_, TrafficLog> {
        self.log.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn wrote(&self, direction: Direction) {
        let now = Instant::now();
        let mut log = self.lock();
        match direction {
            Direction::Requests => {
                if log.requests.len() == REQUESTS_KEPT {
                    log.requests.pop_front();
                }
                log.requests.push_back(now);
            }
            Direction::Answers => log.last_answer = Some(now),
        }
    }
}

/// Counts a chunk as in flight from when it was read until it was written
/// or thrown away (or its connection ended).
struct InFlight(Arc<Traffic>);

impl InFlight {
    fn new(traffic: &Arc<Traffic>) -> InFlight {
        traffic.in_flight.fetch_add(1, Ordering::SeqCst);
        InFlight(traffic.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Which way a pipe carries bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Direction {
    /// Client to upstream: requests.
    Requests,
    /// Upstream to client: answers.
    Answers,
}

/// Counts a connection as open for as long as it lives.
struct OpenGuard(Arc<AtomicUsize>);

impl OpenGuard {
    fn new(open: Arc<AtomicUsize>) -> OpenGuard {
        open.fetch_add(1, Ordering::SeqCst);
        OpenGuard(open)
    }
}

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Closes a socket with RST instead of FIN.
fn reset(stream: TcpStream) {
    let _ = socket2::SockRef::from(&stream).set_linger(Some(Duration::ZERO));
    drop(stream);
}

async fn serve(
    mut client: TcpStream,
    upstream: SocketAddr,
    mut mode: watch::Receiver<Mode>,
    mut resets: watch::Receiver<u64>,
    open: Arc<AtomicUsize>,
    traffic: Arc<Traffic>,
    tap: Option<Arc<dyn Tap>>,
) {
    let _open = OpenGuard::new(open);
    // Connect upstream only once something may flow.
    loop {
        let current = *mode.borrow_and_update();
        match current {
            Mode::Reset => return reset(client),
            Mode::Blackhole => tokio::select! {
                changed = mode.changed() => if changed.is_err() { return },
                _ = resets.changed() => return reset(client),
            },
            Mode::Pass | Mode::Delay(_) | Mode::DelayAnswers(_) | Mode::DropAnswers => break,
        }
    }
    let mut server = match TcpStream::connect(upstream).await {
        Ok(server) => server,
        Err(e) => {
            tracing::debug!(%upstream, error = %e, "fault proxy could not reach upstream");
            return reset(client);
        }
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (requests_seen, answers_seen) = match tap {
        Some(tap) => {
            let (requests, answers) = tap.connection();
            (Some(requests), Some(answers))
        }
        None => (None, None),
    };
    // Set once an answer was thrown away: the stream is out of step.
    let (lost_answer, lost_answer_rx) = watch::channel(false);
    let clean = {
        let (client_read, client_write) = client.split();
        let (server_read, server_write) = server.split();
        let forward = async {
            tokio::try_join!(
                pipe(
                    client_read,
                    server_write,
                    mode.clone(),
                    Direction::Requests,
                    &traffic,
                    requests_seen,
                    None,
                ),
                pipe(
                    server_read,
                    client_write,
                    mode.clone(),
                    Direction::Answers,
                    &traffic,
                    answers_seen,
                    Some(&lost_answer),
                ),
            )
            .is_ok()
        };
        tokio::select! {
            clean = forward => clean,
            () = until_reset(mode.clone()) => false,
            () = until_out_of_step(mode.clone(), lost_answer_rx) => false,
            _ = resets.changed() => false,
        }
    };
    if !clean {
        reset(client);
        reset(server);
    }
}

/// Returns once the mode is [`Mode::Reset`].
async fn until_reset(mut mode: watch::Receiver<Mode>) {
    loop {
        if *mode.borrow_and_update() == Mode::Reset {
            return;
        }
        if mode.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// Returns once the connection lost an answer and the mode no longer
/// drops them: its stream is out of step, and only a reset ends that.
async fn until_out_of_step(mut mode: watch::Receiver<Mode>, mut lost: watch::Receiver<bool>) {
    loop {
        if *lost.borrow_and_update() && *mode.borrow_and_update() != Mode::DropAnswers {
            return;
        }
        tokio::select! {
            changed = mode.changed() => if changed.is_err() { std::future::pending::<()>().await },
            changed = lost.changed() => if changed.is_err() { std::future::pending::<()>().await },
        }
    }
}

/// Returns once a chunk read at `read_at`, going `direction`, may be
/// written: `true`; `false` if it must be thrown away instead (an answer
/// while the mode drops them).
async fn until_forwardable(
    mode: &mut watch::Receiver<Mode>,
    read_at: Instant,
    direction: Direction,
) -> bool {
    loop {
        let current = *mode.borrow_and_update();
        let delay = match current {
            Mode::Delay(delay) => Some(delay),
            Mode::DelayAnswers(delay) if direction == Direction::Answers => Some(delay),
            _ => None,
        };
        match current {
            Mode::Pass => return true,
            Mode::DropAnswers => return direction == Direction::Requests,
            Mode::DelayAnswers(_) if delay.is_none() => return true,
            Mode::Delay(_) | Mode::DelayAnswers(_) => {
                let delay = delay.expect("set for these modes");
                tokio::select! {
                    () = tokio::time::sleep_until(read_at + delay) => return true,
                    changed = mode.changed() => {
                        if changed.is_err() {
                            tokio::time::sleep_until(read_at + delay).await;
                            return true;
                        }
                    }
                }
            }
            // Reset is handled by the connection; hold until then.
            Mode::Blackhole | Mode::Reset => {
                if mode.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        }
    }
}

/// Copies one direction: a reader stamps each chunk with the time it was
/// read, a writer forwards it when the mode allows. An empty chunk is EOF,
/// forwarded as a write shutdown (FIN). A chunk the mode drops (EOF too) is
/// thrown away, and `lost` is set.
async fn pipe(
    mut from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
    mut mode: watch::Receiver<Mode>,
    direction: Direction,
    traffic: &Arc<Traffic>,
    mut seen: Option<Observer>,
    lost: Option<&watch::Sender<bool>>,
) -> std::io::Result<()> {
    let (chunks, mut pending) = mpsc::channel::<(Instant, Vec<u8>, InFlight)>(8);
    let read = async move {
        loop {
            let mut buf = vec![0; 16 * 1024];
            let n = from.read(&mut buf).await?;
            buf.truncate(n);
            let held = InFlight::new(traffic);
            if chunks.send((Instant::now(), buf, held)).await.is_err() || n == 0 {
                return Ok::<(), std::io::Error>(());
            }
        }
    };
    let write = async move {
        while let Some((read_at, chunk, _held)) = pending.recv().await {
            if !until_forwardable(&mut mode, read_at, direction).await {
                tracing::trace!(bytes = chunk.len(), "fault proxy drops an answer");
                if let Some(lost) = lost {
                    lost.send_replace(true);
                }
                continue;
            }
            if chunk.is_empty() {
                to.shutdown().await?;
                return Ok(());
            }
            to.write_all(&chunk).await?;
            traffic.wrote(direction);
            if let Some(seen) = &mut seen {
                seen(&chunk);
            }
        }
        Ok::<(), std::io::Error>(())
    };
    tokio::try_join!(read, write).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::ErrorKind;

    /// What an echo server saw: the connections it accepted, and every
    /// byte it received.
    #[derive(Default)]
    struct Seen {
        accepted: AtomicUsize,
        received: std::sync::Mutex<Vec<u8>>,
    }

    /// A proxy in front of a new echo server, and what that server sees.
    async fn proxied_echo_server() -> (FaultProxy, Arc<Seen>) {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Seen::default());
        let kept = seen.clone();
        tokio::spawn(async move {
            loop {
                let (mut stream, _) = listener.accept().await.unwrap();
                kept.accepted.fetch_add(1, Ordering::SeqCst);
                let kept = kept.clone();
                tokio::spawn(async move {
                    let mut buf = [0; 1024];
                    loop {
                        match stream.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => {
                                kept.received.lock().unwrap().extend_from_slice(&buf[..n]);
                                if stream.write_all(&buf[..n]).await.is_err() {
                                    return;
                                }
                            }
                        }
                    }
                });
            }
        });
        (FaultProxy::start(addr).await.unwrap(), seen)
    }

    /// A client through a proxy in front of a new echo server, which
    /// echoed one message through it; and what that server sees.
    async fn connected() -> (FaultProxy, Arc<Seen>, TcpStream) {
        let (proxy, seen) = proxied_echo_server().await;
        let mut client = client_of(&proxy).await;
        assert_echoed(&mut client, b"ok").await;
        (proxy, seen, client)
    }

    /// A client connected through `proxy`.
    async fn client_of(proxy: &FaultProxy) -> TcpStream {
        TcpStream::connect(proxy.addr()).await.unwrap()
    }

    /// Sends `payload` and asserts it comes back.
    async fn assert_echoed(stream: &mut TcpStream, payload: &[u8]) {
        stream.write_all(payload).await.unwrap();
        assert_reads(stream, payload).await;
    }

    /// Asserts the next bytes on `stream` are `expected`.
    async fn assert_reads(stream: &mut TcpStream, expected: &[u8]) {
        let mut buf = vec![0; expected.len()];
        stream.read_exact(&mut buf).await.unwrap();
        assert_eq!(buf, expected);
    }

    const QUIET: Duration = Duration::from_millis(300);

    /// Asserts nothing arrives on `stream` for a while.
    async fn assert_silent(stream: &mut TcpStream) {
        let mut byte = [0; 1];
        let read = tokio::time::timeout(QUIET, stream.read(&mut byte)).await;
        assert!(read.is_err(), "expected silence, read {read:?}");
    }

    /// Asserts the next read on `stream` fails with `ConnectionReset`.
    async fn assert_reset(stream: &mut TcpStream) {
        let mut byte = [0; 1];
        match tokio::time::timeout(Duration::from_secs(5), stream.read(&mut byte)).await {
            Ok(Err(e)) => assert_eq!(e.kind(), ErrorKind::ConnectionReset),
            other => panic!("expected a read error, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn pass_forwards_both_ways() {
        let (proxy, _, mut client) = connected().await;
        assert_ne!(proxy.addr(), proxy.upstream());
        assert_echoed(&mut client, b"hello").await;
        assert_eq!(proxy.open_connections(), 1);
    }

    #[tokio::test]
    async fn delay_adds_the_delay_in_each_direction() {
        let (proxy, _, mut client) = connected().await;
        proxy.set(Mode::Delay(Duration::from_millis(150)));
        let started = Instant::now();
        assert_echoed(&mut client, b"slow").await;
        let delayed = started.elapsed();
        assert!(
            delayed >= Duration::from_millis(300),
            "round trip took {delayed:?}"
        );
        proxy.set(Mode::Pass);
        let started = Instant::now();
        assert_echoed(&mut client, b"fast").await;
        assert!(started.elapsed() < Duration::from_millis(150));
    }

    #[tokio::test]
    async fn held_answers_are_counted_until_delivered_and_each_request_is_logged() {
        let (proxy, _) = proxied_echo_server().await;
        let mut client = client_of(&proxy).await;
        assert_eq!(proxy.in_flight(), 0);
        proxy.set(Mode::DelayAnswers(Duration::from_millis(200)));
        let began = Instant::now();
        client.write_all(b"one").await.unwrap();
        // The request passes at once; its echo is held.
        let deadline = Instant::now() + Duration::from_secs(2);
        while !(proxy.in_flight() == 1 && proxy.requests_since(began).len() == 1)
            && Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert_eq!(proxy.in_flight(), 1, "the held answer is in flight");
        let sent = proxy.requests_since(began);
        assert_eq!(sent.len(), 1, "{sent:?}");
        assert!(proxy.last_answer_at().is_none());
        assert_reads(&mut client, b"one").await;
        let answered = proxy.last_answer_at().expect("an answer was delivered");
        assert!(answered >= sent[0] + Duration::from_millis(200));
        assert_eq!(proxy.in_flight(), 0);
        // A second request, its forwarding logged after the first.
        proxy.set(Mode::Pass);
        assert_echoed(&mut client, b"two").await;
        let both = proxy.requests_since(began);
        assert_eq!(both.len(), 2, "{both:?}");
        assert!(both[1] > both[0]);
        assert_eq!(proxy.requests_since(both[1]), vec![both[1]]);
        assert_eq!(proxy.last_request_at(), Some(both[1]));
    }

    #[tokio::test]
    async fn blackhole_holds_bytes_on_open_connections_until_pass() {
        let (proxy, _, mut client) = connected().await;
        proxy.set(Mode::Blackhole);
        client.write_all(b"held").await.unwrap();
        assert_silent(&mut client).await;
        proxy.set(Mode::Pass);
        assert_reads(&mut client, b"held").await;
    }

    #[tokio::test]
    async fn blackhole_accepts_new_connections_but_forwards_nothing() {
        let (proxy, seen) = proxied_echo_server().await;
        proxy.set(Mode::Blackhole);
        let mut client = client_of(&proxy).await;
        client.write_all(b"anyone?").await.unwrap();
        assert_silent(&mut client).await;
        assert_eq!(
            seen.accepted.load(Ordering::SeqCst),
            0,
            "upstream saw a connection"
        );
        assert_eq!(proxy.open_connections(), 1);
        proxy.set(Mode::Pass);
        assert_reads(&mut client, b"anyone?").await;
    }

    #[tokio::test]
    async fn reset_closes_open_connections_with_rst() {
        let (proxy, _, mut client) = connected().await;
        proxy.set(Mode::Reset);
        assert_reset(&mut client).await;
    }

    #[tokio::test]
    async fn reset_resets_new_connections_and_pass_serves_them_again() {
        let (proxy, seen) = proxied_echo_server().await;
        proxy.set(Mode::Reset);
        // The handshake may complete before the proxy resets; either way no
        // byte gets through.
        if let Ok(mut client) = TcpStream::connect(proxy.addr()).await {
            assert_reset(&mut client).await;
        }
        assert_eq!(seen.accepted.load(Ordering::SeqCst), 0);
        proxy.set(Mode::Pass);
        assert_echoed(&mut client_of(&proxy).await, b"again").await;
    }

    #[tokio::test]
    async fn drop_answers_executes_requests_and_resets_the_connection_afterwards() {
        let (proxy, seen, mut client) = connected().await;
        let mut untouched = client_of(&proxy).await;
        assert_echoed(&mut untouched, b"hi").await;
        proxy.set(Mode::DropAnswers);
        client.write_all(b"lost").await.unwrap();
        assert_silent(&mut client).await;
        assert_eq!(&seen.received.lock().unwrap()[..], b"okhilost");
        proxy.set(Mode::Pass);
        assert_reset(&mut client).await;
        // A connection that lost nothing goes on; new ones work.
        assert_echoed(&mut untouched, b"on").await;
        assert_echoed(&mut client_of(&proxy).await, b"new").await;
    }

    #[tokio::test]
    async fn reset_connections_resets_open_ones_and_serves_new_ones() {
        let (proxy, _, mut client) = connected().await;
        proxy.reset_connections();
        assert_reset(&mut client).await;
        assert_echoed(&mut client_of(&proxy).await, b"new").await;
    }

    #[tokio::test]
    async fn an_unreachable_upstream_resets_the_client() {
        // Bind then drop: nothing listens on this port any more.
        let dead = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        let upstream = dead.local_addr().unwrap();
        drop(dead);
        let proxy = FaultProxy::start(upstream).await.unwrap();
        assert_reset(&mut client_of(&proxy).await).await;
    }

    #[tokio::test]
    async fn client_close_is_forwarded_and_the_connection_ends() {
        let (proxy, _, mut client) = connected().await;
        client.shutdown().await.unwrap();
        let mut rest = Vec::new();
        client.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty());
        drop(client);
        crate::harness::wait_for(
            "the proxied connection to end",
            Duration::from_secs(5),
            || async { (proxy.open_connections() == 0).then_some(()) },
        )
        .await
        .unwrap();
    }

    #[tokio::test]
    async fn dropping_the_proxy_closes_its_connections() {
        let (proxy, _, mut client) = connected().await;
        drop(proxy);
        let mut byte = [0; 1];
        let read = tokio::time::timeout(Duration::from_secs(5), client.read(&mut byte))
            .await
            .expect("the connection closes");
        assert!(matches!(read, Ok(0) | Err(_)), "read {read:?}");
    }
}
