//! The backend's ZooKeeper session: how often an idle one talks to the
//! servers (the expiry lead counts on it), how `close` ends it, and what
//! happens when a server gives it a shorter timeout than asked for.

mod common;

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{
    candidacy_with_ttl, children, connect_to, ends_retryably, ensemble, owned_by, plain,
    wait_for_grant, zookeeper, TTL,
};
use tenure_core::{AcquireMode, Error, LeaseBackend, LossReason};
use tenure_testkit::harness::{wait_for, Cluster, ZooKeeperNodeSettings};
use tenure_testkit::proxy::Mode;
use tenure_testkit::ProxyLink;
use tenure_zookeeper::ZooKeeperBackend;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

/// A TCP proxy that notes when each chunk from a client reaches it.
struct CountingProxy {
    addr: SocketAddr,
    sends: Arc<Mutex<Vec<Instant>>>,
    task: tokio::task::JoinHandle<()>,
}

impl CountingProxy {
    async fn start(upstream: SocketAddr) -> CountingProxy {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let sends = Arc::new(Mutex::new(Vec::new()));
        let noted = sends.clone();
        let task = tokio::spawn(async move {
            loop {
                let (client, _) = listener.accept().await.unwrap();
                let server = TcpStream::connect(upstream).await.unwrap();
                tokio::spawn(forward(client, server, noted.clone()));
            }
        });
        CountingProxy { addr, sends, task }
    }

    /// The times client chunks arrived since the last call.
    fn take(&self) -> Vec<Instant> {
        std::mem::take(&mut *self.sends.lock().unwrap())
    }
}

impl Drop for CountingProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn forward(mut client: TcpStream, mut server: TcpStream, sends: Arc<Mutex<Vec<Instant>>>) {
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut client_read, mut client_write) = client.split();
    let (mut server_read, mut server_write) = server.split();
    let up = async {
        let mut buf = vec![0; 16 * 1024];
        loop {
            let n = client_read.read(&mut buf).await?;
            if n == 0 {
                return server_write.shutdown().await;
            }
            sends.lock().unwrap().push(Instant::now());
            server_write.write_all(&buf[..n]).await?;
        }
    };
    let down = tokio::io::copy(&mut server_read, &mut client_write);
    let _ = tokio::try_join!(up, down);
}

/// `ZooKeeperBackend::expiry_lead` counts on the servers hearing from a
/// session at least every sixth of its timeout, however idle it is: with a
/// connection timeout of a third of the session timeout, zookeeper-client
/// 0.11.2 pings after an eighth of silence, checked every 24th. This
/// measures it, so that a client upgrade that changes the cadence fails here
/// (the workspace pins `=0.11.2` for that reason).
#[tokio::test(flavor = "multi_thread")]
async fn an_idle_session_is_heard_from_at_least_every_sixth_of_its_timeout() {
    let cluster = zookeeper().await;
    let proxy = CountingProxy::start(cluster.nodes()[0].addr()).await;
    let backend = connect_to(&proxy.addr.to_string()).await;
    let session = backend.session_id().await.expect("a session");
    // From here on the session is idle: only its pings go out.
    proxy.take();
    let started = Instant::now();
    let watched = TTL * 4;
    tokio::time::sleep(watched).await;
    let ended = Instant::now();
    let sends = proxy.take();
    let mut marks = vec![started];
    marks.extend(sends.iter().copied());
    marks.push(ended);
    let gaps: Vec<Duration> = marks.windows(2).map(|w| w[1] - w[0]).collect();
    let limit = TTL / 6;
    let slack = Duration::from_millis(30);
    // The cadence is judged on all but the longest tenth of the silences: a
    // loaded machine (this runs beside the suites) can hold the client's
    // timer task back once or twice by tens of milliseconds, but a changed
    // cadence moves every silence (a ping after a sixth, or a check every
    // eighth instead of every 24th, puts most of them past the limit).
    let mut sorted = gaps.clone();
    sorted.sort();
    let outliers = gaps.len() / 10;
    let typical = sorted[sorted.len() - 1 - outliers];
    let longest = *sorted.last().unwrap();
    eprintln!(
        "idle session, TTL {TTL:?}: {} packets in {watched:?}, longest silence {longest:?}, \
         longest but {outliers} {typical:?} (limit {limit:?} + {slack:?}); silences {gaps:?}",
        sends.len()
    );
    // Once every sixth of the timeout is 24 in four timeouts; outliers
    // excused above must not hide a cadence that sends far fewer.
    assert!(
        sends.len() >= 20,
        "an idle session sent {} packets in {watched:?}, far fewer than one every sixth of its \
         timeout (24)",
        sends.len()
    );
    assert!(
        typical <= limit + slack,
        "an idle session went {typical:?} without a packet to the server more than {outliers} \
         times in {watched:?}, more than a sixth of its timeout ({limit:?}) plus {slack:?} of \
         slack (silences {gaps:?}): zookeeper-client's ping cadence changed, and \
         ZooKeeperOptions::expiry_lead (and Sessions::connect) must change with it"
    );
    assert_eq!(backend.session_id().await, Some(session));
}

/// `LeaseBackend::close` ends the session: when it returns, every node the
/// session owned (a held lease's, a queued candidacy's) is gone from the
/// server, a standby leads at once, and the queued candidacy's wait ends
/// with a retryable error. Leases and waits still hold on to the session
/// when it is called.
#[tokio::test(flavor = "multi_thread")]
async fn close_deletes_every_node_of_the_session_and_a_standby_leads_at_once() {
    // Leases outlive close by far (and a request deadline of a second keeps
    // the close of a session in use short), so only close can take them.
    let ttl = Duration::from_secs(4);
    let options = common::options()
        .with_session_timeout(ttl)
        .with_request_timeout(Duration::from_secs(1));
    let cluster = zookeeper().await;
    let endpoints = cluster.endpoints().join(",");
    let mut backends = Vec::new();
    for _ in 0..3 {
        let backend = ZooKeeperBackend::connect(&endpoints, options.clone())
            .await
            .unwrap();
        backends.push(Arc::new(backend));
    }
    let (a, b, c) = (
        backends[0].clone(),
        backends[1].clone(),
        backends[2].clone(),
    );
    let wants = |key: &str, who: &str| candidacy_with_ttl(key, who, ttl);
    let zk = plain(&cluster).await;
    let lease = common::hold(&a, &wants("closing", "a")).await;
    let before = common::hold(&c, &wants("closing-queue", "c")).await;
    let queued = wait_for_grant(&a, wants("closing-queue", "a"));
    let standby = wait_for_grant(&b, wants("closing", "b"));
    common::until_children(&zk, "/closing", 2).await;
    common::until_children(&zk, "/closing-queue", 2).await;
    let session = a.session_id().await.expect("a's session");
    let lease = a.renew(&lease).await.unwrap();

    LeaseBackend::close(&*a).await.unwrap();
    let closed = Instant::now();
    assert!(lease.is_valid(), "a's lease lapsed before close returned");
    let mut left = owned_by(&zk, "/closing", session).await;
    left.extend(owned_by(&zk, "/closing-queue", session).await);
    assert!(
        left.is_empty(),
        "nodes of a's session outlived close: {left:?}"
    );
    let bound = Duration::from_millis(300);
    let (granted, led) = tokio::time::timeout(bound, standby)
        .await
        .unwrap_or_else(|_| panic!("b still waits {bound:?} after a's close"))
        .unwrap();
    assert!(granted.unwrap().granted().is_some(), "b was not granted");
    assert!(
        led.saturating_duration_since(closed) < bound,
        "{:?}",
        led - closed
    );
    let whose = "a's queued candidacy, after close,";
    ends_retryably(queued, Duration::from_secs(1), whose).await;
    assert!(a.renew(&lease).await.is_err_and(|e| e.is_lease_lost()));
    assert_eq!(children(&zk, "/closing-queue").await.len(), 1);
    c.release(&before).await.unwrap();
}

/// The session timeout of the shrink lessons: 2 s, whose leases stay valid
/// for 1.43 s after a renewal (less the drift margin and the expiry lead).
const SHRINK_TTL: Duration = Duration::from_secs(2);

/// What the ensemble's node 2 (index 1) allows at most in those lessons:
/// less than [`SHRINK_TTL`], so a session that reconnects to it is given this.
const SHRUNK: Duration = Duration::from_millis(600);

/// "Node 2", the node with a lower `maxSessionTimeout`, of the first shrink
/// lesson's 3-node ensemble (the second picks a follower).
const LOW: usize = 1;

/// A through a fault proxy to every node of `cluster` (index order), B
/// direct to the two nodes other than `low`, whose own sessions nothing
/// shrinks.
async fn shrink_clients(
    cluster: &Cluster,
    low: usize,
) -> (Arc<ProxyLink>, String, Arc<ZooKeeperBackend>) {
    let servers: Vec<_> = cluster.nodes().iter().map(|n| n.addr()).collect();
    let (link, addrs) = ProxyLink::start_all(&servers).await.unwrap();
    let proxied: Vec<String> = addrs.iter().map(ToString::to_string).collect();
    let others: Vec<String> = (0..3)
        .filter(|&i| i != low)
        .map(|i| cluster.endpoints()[i].clone())
        .collect();
    let direct = others.join(",");
    let b = ZooKeeperBackend::connect(&direct, shrink_options())
        .await
        .expect("b connects to the generous nodes");
    (link, proxied.join(","), Arc::new(b))
}

fn shrink_options() -> tenure_zookeeper::ZooKeeperOptions {
    common::options().with_session_timeout(SHRINK_TTL)
}

/// B's campaign: the instant it was granted (or its error).
fn standby(
    b: &Arc<ZooKeeperBackend>,
    key: &str,
) -> tokio::task::JoinHandle<tenure_core::Result<Instant>> {
    let (b, wants) = (b.clone(), candidacy_with_ttl(key, "b", SHRINK_TTL));
    tokio::spawn(async move {
        let granted = b.acquire(&wants, AcquireMode::Wait).await?;
        let at = Instant::now();
        assert!(granted.granted().is_some(), "b was not granted");
        Ok(at)
    })
}

/// Sets every proxy of `link` but node `keep`'s to `mode`.
fn cut_all_but(link: &ProxyLink, keep: usize, mode: Mode) {
    for (i, proxy) in link.proxies().iter().enumerate() {
        if i != keep {
            proxy.set(mode);
        }
    }
}

/// Cuts A's links to every node but node 2 (`low`; resets: its connection drops at
/// once) and renews until a renewal is answered, which must have gone
/// through node 2: the renewed lease, or the renewal's error once it is
/// not retryable (the lease lost).
async fn through_node_2_only(
    a: &ZooKeeperBackend,
    link: &ProxyLink,
    low: usize,
    lease: &tenure_core::Lease,
) -> tenure_core::Result<tenure_core::Lease> {
    let before = link.proxies()[low].connections_opened();
    cut_all_but(link, low, Mode::Reset);
    let others_closed = || {
        link.proxies()
            .iter()
            .enumerate()
            .all(|(i, p)| i == low || p.open_connections() == 0)
    };
    wait_for("a's other links reset", Duration::from_secs(5), || async {
        others_closed().then_some(())
    })
    .await
    .unwrap();
    let renewed = wait_for(
        "a renewal answered through node 2",
        Duration::from_secs(10),
        || async {
            match a.renew(lease).await {
                Err(e) if e.is_retryable() => None,
                other => Some(other),
            }
        },
    )
    .await
    .unwrap();
    assert!(
        link.proxies()[low].connections_opened() > before,
        "a's session never connected through node 2"
    );
    // The other nodes pass on what they heard of the session before the
    // cut (with the timeout they gave it) in their answers to the quorum
    // leader's next ping, which may come after node 2's: let that pass, so
    // that the lease below counts from a renewal after it.
    let renewed = renewed?;
    tokio::time::sleep(common::TICK * 2).await;
    a.renew(&renewed).await
}

/// When `lease`'s term ends: its loss signal, or else its `valid_until`.
fn term_end(lease: &tenure_core::Lease, signalled_at: Option<Instant>) -> Instant {
    match signalled_at {
        Some(at) => at.min(lease.valid_until()),
        None => lease.valid_until(),
    }
}

/// The instant `lease`'s loss signal fires, stamped by a task of its own.
fn loss_stamp(lease: &tenure_core::Lease) -> tokio::task::JoinHandle<(Instant, LossReason)> {
    let lease = lease.clone();
    tokio::spawn(async move {
        let reason = lease.loss_signalled().await;
        (Instant::now(), reason)
    })
}

/// When B's campaign was granted (within four TTLs), and A's loss signal
/// (when and why), had it fired by then.
async fn b_granted_and_a_told(
    waiting: tokio::task::JoinHandle<tenure_core::Result<Instant>>,
    signalled: tokio::task::JoinHandle<(Instant, LossReason)>,
) -> (Instant, Option<(Instant, LossReason)>) {
    let granted_at = tokio::time::timeout(SHRINK_TTL * 4, waiting)
        .await
        .expect("b waited past four TTLs")
        .unwrap()
        .unwrap();
    let told = match tokio::time::timeout(Duration::ZERO, signalled).await {
        Ok(stamp) => Some(stamp.unwrap()),
        Err(_) => None,
    };
    (granted_at, told)
}

/// Issue 23: ZooKeeper renegotiates a session's timeout on every reconnect,
/// and a server whose `maxSessionTimeout` is below the one asked for gives
/// the session its own maximum; zookeeper-client adopts it without a word
/// (and asks for it on every later reconnect), while tenure counts every
/// lease from the timeout asked for. Node 2 of this ensemble allows 600 ms;
/// A asks for 2 s. A session of A's that reconnects to node 2 would expire
/// 600 ms after A was last heard of, while A leads for 1.43 s after each
/// renewal: so A must be refused at connect, with an error that names node 2,
/// what it negotiated and what was asked.
///
/// Should A connect (as it did before the fix, whenever its first server was
/// not node 2), the lesson goes on to show what follows: A holds, its link to
/// the other nodes is cut so its session moves to node 2, A renews, then A is
/// cut off entirely, and B (on the other nodes) must not be granted before
/// A's term ends.
#[tokio::test(flavor = "multi_thread")]
async fn a_server_that_would_shrink_the_session_is_refused_at_connect_naming_it() {
    let cluster = Cluster::start_zookeeper_with(
        3,
        &[(LOW, ZooKeeperNodeSettings::max_session_timeout(SHRUNK))],
    )
    .await
    .expect("ZooKeeper ensemble with a node of its own");
    let (link, proxied, b) = shrink_clients(&cluster, LOW).await;
    let low = link.proxies()[LOW].addr().to_string();
    let mut attempts = 0;
    let a = loop {
        attempts += 1;
        match ZooKeeperBackend::connect(&proxied, shrink_options()).await {
            Ok(a) => break a,
            Err(Error::InvalidArgument {
                field: "session_timeout",
                reason,
            }) if reason.contains(&low) => {
                for part in [format!("{SHRUNK:?}"), format!("{SHRINK_TTL:?}")] {
                    assert!(reason.contains(&part), "{part} missing: {reason}");
                }
                assert!(reason.contains("maxSessionTimeout"), "{reason}");
                return;
            }
            // Before the fix only a first connection to node 2 itself was
            // refused (its error names no server): connect again until the
            // first server is another, as it is two times in three.
            Err(Error::InvalidArgument {
                field: "session_timeout",
                ..
            }) if attempts < 20 => continue,
            Err(other) => panic!("a's connect failed: {other:?}"),
        }
    };
    let key = "shrunk-at-connect";
    let lease = common::hold(&a, &candidacy_with_ttl(key, "a", SHRINK_TTL)).await;
    let signalled = loss_stamp(&lease);
    let waiting = standby(&b, key);
    common::until_children(&plain(&cluster).await, &format!("/{key}"), 2).await;

    let lease = through_node_2_only(&a, &link, LOW, &lease)
        .await
        .expect("a renewal through node 2");
    link.proxies()[LOW].set(Mode::Blackhole);
    let cut_at = Instant::now();
    let (granted_at, told) = b_granted_and_a_told(waiting, signalled).await;
    let signalled_at = told.map(|(at, _)| at);
    let ended = term_end(&lease, signalled_at);
    eprintln!(
        "renewal sent {:?} before the cut; b granted {:?} after it; valid_until {:?} after it",
        cut_at - lease.sent_at(),
        granted_at - lease.sent_at(),
        lease.valid_until() - lease.sent_at()
    );
    assert!(
        granted_at >= ended,
        "b was granted {:?} before a's term ended (valid_until {:?} after its renewal through \
         node 2, no loss signalled: {}): a's session shrank to node 2's maxSessionTimeout \
         {SHRUNK:?} on its reconnect and expired while a still led",
        ended - granted_at,
        lease.valid_until() - lease.sent_at(),
        signalled_at.is_none(),
    );
    panic!(
        "a connected although node 2 ({low}) would shrink its session to {SHRUNK:?} \
         (b waited until a's term ended)"
    );
}

/// Issue 23, a rolling configuration change: every server allows A's 2 s
/// when A connects, then node 2 is restarted with a `maxSessionTimeout` of
/// 600 ms, and A's session reconnects to it (its links to the other nodes
/// are cut), where it is given 600 ms. A's term must end before B (on the
/// other nodes) is granted, even with A cut off right after: A's lease, which
/// counts 2 s from each renewal, must end at the reconnect, and A's session
/// must not be used again: A's next campaign is refused naming node 2.
#[tokio::test(flavor = "multi_thread")]
async fn a_session_shrunk_by_a_rolling_restart_ends_its_terms_before_anyone_else_leads() {
    // Node 2 is a follower: the servers keep their leader while it restarts.
    let (cluster, leader) = ensemble().await;
    let low = (leader + 1) % 3;
    let (link, proxied, b) = shrink_clients(&cluster, low).await;
    let a = Arc::new(
        ZooKeeperBackend::connect(&proxied, shrink_options())
            .await
            .expect("every server allows 2 s"),
    );
    let key = "shrunk-by-restart";
    let wants = candidacy_with_ttl(key, "a", SHRINK_TTL);
    let lease = common::hold(&a, &wants).await;
    let signalled = loss_stamp(&lease);
    let waiting = standby(&b, key);
    common::until_children(&plain(&cluster).await, &format!("/{key}"), 2).await;

    // A keeps renewing while node 2 restarts (seconds: a JVM starting).
    let latest = Arc::new(std::sync::Mutex::new(lease));
    let renewing = {
        let (a, latest) = (a.clone(), latest.clone());
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(SHRINK_TTL / 4).await;
                let current = latest.lock().unwrap().clone();
                match a.renew(&current).await {
                    Ok(renewed) => *latest.lock().unwrap() = renewed,
                    Err(e) if e.is_retryable() => {}
                    Err(e) => return e,
                }
            }
        })
    };
    cluster
        .restart_zookeeper_node_with(low, ZooKeeperNodeSettings::max_session_timeout(SHRUNK))
        .await
        .unwrap();
    renewing.abort();
    let _ = renewing.await;
    let lease = latest.lock().unwrap().clone();
    assert!(lease.is_valid(), "a's lease lapsed while node 2 restarted");

    let renewed = through_node_2_only(&a, &link, low, &lease).await;
    let lease = renewed.as_ref().map_or(lease, Clone::clone);
    link.proxies()[low].set(Mode::Blackhole);
    let (granted_at, signalled_at) = b_granted_and_a_told(waiting, signalled).await;
    let ended = term_end(&lease, signalled_at.map(|(at, _)| at));
    assert!(
        granted_at >= ended,
        "b was granted {:?} before a's term ended (valid_until {:?} after its renewal through \
         node 2, loss signalled: {signalled_at:?}): a's session shrank to node 2's new \
         maxSessionTimeout {SHRUNK:?} on its reconnect and expired while a still led",
        ended - granted_at,
        lease.valid_until() - lease.sent_at(),
    );
    let (at, reason) = signalled_at.expect("a's term ended by its valid_until, not at the shrink");
    assert_eq!(reason, LossReason::Revoked);
    assert!(
        renewed.is_err_and(|e| e.is_lease_lost()),
        "a renewed on its shrunk session"
    );
    eprintln!(
        "a's term ended {:?} before b's grant, {:?} before its valid_until",
        granted_at - at,
        lease.valid_until().saturating_duration_since(at)
    );

    // Whatever node a reaches now, its next session is refused naming node 2.
    for proxy in link.proxies() {
        proxy.set(Mode::Pass);
    }
    let low = link.proxies()[low].addr().to_string();
    match a.acquire(&wants, AcquireMode::Once).await {
        Err(Error::InvalidArgument {
            field: "session_timeout",
            reason,
        }) => assert!(reason.contains(&low), "{reason}"),
        other => panic!("a campaigned again on a shrinking ensemble: {other:?}"),
    }
}

/// A thousand leaderships on one client would send two thousand requests
/// per renewal interval if each renewed alone (a `sync` and an `exists`).
/// The Elector renews the terms of a backend that batches on one grid, and
/// the session sends the renewals that come together as one `sync` and one
/// multi-read: here twenty leaderships cost the server a few requests per
/// interval, and every one of them keeps its term.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_renewals_of_many_leaderships_on_one_client_go_out_together() {
    const KEYS: usize = 20;
    let cluster = zookeeper().await;
    let backend = common::connect(&cluster).await;
    let mut held = Vec::new();
    for i in 0..KEYS {
        let elector = tenure_core::Elector::builder(backend.clone())
            .key(format!("many-{i}"))
            .identity("a")
            .ttl(TTL)
            .build()
            .unwrap();
        let leadership = elector.campaign().await.unwrap();
        held.push((elector, leadership));
    }
    // A renewal interval or two for every term to reach the grid.
    tokio::time::sleep(TTL).await;
    let received = || async {
        cluster
            .stats(0)
            .await
            .expect("the server's mntr")
            .get("zk_packets_received")
    };
    let before = received().await;
    let window = TTL * 2;
    tokio::time::sleep(window).await;
    let packets = received().await - before;
    // Renewing alone, every lease would renew at least every TTL/3, with
    // two requests each time.
    let alone = KEYS as u64 * 2 * (window.as_millis() / (TTL / 3).as_millis()) as u64;
    eprintln!("{packets} requests in {window:?} from {KEYS} leaderships (alone: at least {alone})");
    assert!(
        packets * 4 < alone,
        "{packets} requests reached the server in {window:?} from {KEYS} leaderships on one \
         client; renewing alone they would send at least {alone}"
    );
    for (elector, leadership) in &held {
        assert!(
            leadership.is_valid(),
            "{} lost its term",
            elector.candidacy().key()
        );
    }
    for (elector, leadership) in held {
        leadership.resign().await.unwrap();
        elector.shutdown().await;
    }
}
