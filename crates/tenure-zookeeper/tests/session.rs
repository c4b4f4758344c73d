//! The backend's ZooKeeper session: how often an idle one talks to the
//! servers (the expiry lead counts on it), and how `close` ends it.

mod common;

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{candidacy_with_ttl, children, connect_to, owned_by, plain, zookeeper, TTL};
use tenure_core::{AcquireMode, LeaseBackend};
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
    let longest = gaps.iter().copied().max().unwrap();
    let limit = TTL / 6;
    let slack = Duration::from_millis(30);
    eprintln!(
        "idle session, TTL {TTL:?}: {} packets in {watched:?}, longest silence {longest:?} \
         (limit {limit:?} + {slack:?}); silences {gaps:?}",
        sends.len()
    );
    assert!(
        longest <= limit + slack,
        "an idle session went {longest:?} without a packet to the server, more than a sixth of \
         its timeout ({limit:?}) plus {slack:?} of slack: zookeeper-client's ping cadence \
         changed, and ZooKeeperOptions::expiry_lead (and Sessions::connect) must change with it"
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
    let queued = {
        let (a, wants) = (a.clone(), wants("closing-queue", "a"));
        tokio::spawn(async move { a.acquire(&wants, AcquireMode::Wait).await })
    };
    let standby = {
        let (b, wants) = (b.clone(), wants("closing", "b"));
        tokio::spawn(async move {
            let granted = b.acquire(&wants, AcquireMode::Wait).await;
            (Instant::now(), granted)
        })
    };
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
    let (led, granted) = tokio::time::timeout(bound, standby)
        .await
        .unwrap_or_else(|_| panic!("b still waits {bound:?} after a's close"))
        .unwrap();
    assert!(granted.unwrap().granted().is_some(), "b was not granted");
    assert!(
        led.saturating_duration_since(closed) < bound,
        "{:?}",
        led - closed
    );
    match tokio::time::timeout(Duration::from_secs(1), queued)
        .await
        .expect("a's queued candidacy still waits after close")
        .unwrap()
    {
        Err(e) => assert!(e.is_retryable(), "{e}"),
        Ok(acquisition) => panic!("a's queued candidacy got {acquisition:?} after close"),
    }
    assert!(a.renew(&lease).await.is_err_and(|e| e.is_lease_lost()));
    assert_eq!(children(&zk, "/closing-queue").await.len(), 1);
    c.release(&before).await.unwrap();
}
