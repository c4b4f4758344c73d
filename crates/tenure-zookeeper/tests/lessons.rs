//! The lessons Curator's users paid for, each as a test against a real ZooKeeper.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{
    candidacy, candidacy_with_ttl, children, connect, connect_to, ends_retryably, ensemble, plain,
    two_sessions, until_children, until_children_within, wait_for_grant, zookeeper, TTL,
};
use futures::StreamExt;
use tenure_core::{
    AcquireMode, Acquisition, Candidacy, CandidateId, ElectionKey, Elector, Error, LeaderEvent,
    Lease, LeaseBackend,
};
use tenure_testkit::harness::{wait_for, Cluster, Topology};
use tenure_testkit::measure::{p99, until_told_lost};
use tenure_testkit::proxy::{FaultProxy, Mode};
use tenure_testkit::ProxyLink;
use tenure_zookeeper::zookeeper_client::{Acls, Client, CreateMode};
use tenure_zookeeper::ZooKeeperBackend;
use tokio::time::Instant;

async fn hold(backend: &ZooKeeperBackend, key: &str, who: &str) -> Lease {
    common::hold(backend, &candidacy(key, who)).await
}

#[tokio::test(flavor = "multi_thread")]
async fn node_names_and_token_match_curator_leader_latch() {
    let cluster = zookeeper().await;
    let a = connect(&cluster).await;
    let lease = hold(&a, "layout", "replica-a").await;
    let zk = plain(&cluster).await;
    let found = children(&zk, "/layout").await;
    assert_eq!(found.len(), 1, "{found:?}");
    let name = &found[0];
    // `_c_<uuid>-latch-<10-digit sequence>`, data = identity, token = czxid.
    let (head, seq) = name.rsplit_once("-latch-").expect("latch- in the name");
    assert!(head.starts_with("_c_") && head.len() == 3 + 36, "{name}");
    assert!(
        seq.len() == 10 && seq.bytes().all(|b| b.is_ascii_digit()),
        "{name}"
    );
    let (data, stat) = zk.get_data(&format!("/layout/{name}")).await.unwrap();
    assert_eq!(data, b"replica-a");
    assert_eq!(lease.token().map(|t| t.get() as i64), Some(stat.czxid));
    assert_ne!(stat.ephemeral_owner, 0, "the node must be ephemeral");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_ttl_other_than_the_session_timeout_is_refused_naming_it() {
    let cluster = zookeeper().await;
    let a = connect(&cluster).await;
    let c = candidacy_with_ttl("other-ttl", "a", TTL * 2);
    match a.acquire(&c, AcquireMode::Once).await {
        Err(Error::InvalidArgument {
            field: "ttl",
            reason,
        }) => assert!(reason.contains("session timeout"), "{reason}"),
        other => panic!("expected InvalidArgument(ttl), got {other:?}"),
    }
    assert!(children(&plain(&cluster).await, "/other-ttl")
        .await
        .is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_session_timeout_outside_the_servers_bounds_is_refused() {
    let cluster = zookeeper().await;
    // The harness's servers allow 400 ms .. 20 s. (A tick_time this short
    // gets past tenure's own check, so that the server's answer is tested.)
    // Just below the bound: the client's connection timeout is a third of
    // the session timeout, and the handshake must finish within it for the
    // server's answer to be heard at all (at 100 ms, 33 ms was too short
    // once on a loaded CI machine: "Unavailable { source: Timeout }").
    let options = common::options()
        .with_session_timeout(Duration::from_millis(390))
        .with_tick_time(Duration::from_millis(30));
    match ZooKeeperBackend::connect(&cluster.endpoints().join(","), options).await {
        Err(Error::InvalidArgument {
            field: "session_timeout",
            reason,
        }) => assert!(reason.contains("minSessionTimeout"), "{reason}"),
        other => panic!("expected InvalidArgument(session_timeout), got {other:?}"),
    }
}

#[tokio::test]
async fn a_tick_time_above_a_third_of_the_session_timeout_is_refused_naming_it() {
    // Refused before any connection: nothing listens on this port.
    let options = common::options().with_tick_time(Duration::from_millis(400));
    match ZooKeeperBackend::connect("127.0.0.1:1", options).await {
        Err(Error::InvalidArgument {
            field: "tick_time",
            reason,
        }) => assert!(reason.contains("3 ticks"), "{reason}"),
        other => panic!("expected InvalidArgument(tick_time), got {other:?}"),
    }
    let url = "zk://127.0.0.1:1?session_timeout=1s&tick_time=0ms";
    assert!(matches!(
        ZooKeeperBackend::connect_url(url).await,
        Err(Error::InvalidArgument {
            field: "tick_time",
            ..
        })
    ));
}

/// A 3-node ensemble, one of its followers, a client connected to that
/// follower only, and one connected to the ensemble's leader only (sessions
/// of `ttl`).
async fn follower_and_leader_clients(
    ttl: Duration,
) -> (Cluster, usize, ZooKeeperBackend, ZooKeeperBackend) {
    let (cluster, leader) = ensemble().await;
    let follower = (leader + 1) % 3;
    let options = common::options().with_session_timeout(ttl);
    let at = |i: usize| cluster.nodes()[i].endpoint();
    let on_follower = ZooKeeperBackend::connect(&at(follower), options.clone())
        .await
        .unwrap();
    let on_leader = ZooKeeperBackend::connect(&at(leader), options)
        .await
        .unwrap();
    (cluster, follower, on_follower, on_leader)
}

/// A follower passes its clients' activity on to the quorum leader (whose
/// tracker expires sessions) only in its answers to the leader's pings, every
/// half tick. Cut off from the leader right after answering a renewal, it
/// leaves the leader counting the session's timeout from activity before that
/// renewal; `valid_until` must still come before anyone else leads.
///
/// Half a second of silence before the renewal (just under the client's own
/// ping interval at this TTL) makes the leader's last news of the session
/// that old unless a ping of the leader reaches the follower between the
/// renewal and the cut. Counted from the renewal's send time alone,
/// `valid_until` would outlive the session by up to that much.
#[tokio::test(flavor = "multi_thread")]
async fn a_follower_cut_off_right_after_a_renewal_never_lets_two_lead() {
    let ttl = Duration::from_secs(4);
    let (cluster, follower, a, b) = follower_and_leader_clients(ttl).await;
    let candidacy = |who: &str| candidacy_with_ttl("relay", who, ttl);
    let lease = common::hold(&a, &candidacy("a")).await;
    let lease = a.renew(&lease).await.unwrap();
    tokio::time::sleep(Duration::from_millis(450)).await;
    let lease = a.renew(&lease).await.unwrap();
    cluster.partition(follower).await.unwrap();
    let valid_until = lease.valid_until();
    assert_eq!(
        valid_until,
        lease.sent_at() + ttl - lease.candidacy().drift_margin() - a.expiry_lead()
    );
    let acquired = tokio::time::timeout(ttl * 3, b.acquire(&candidacy("b"), AcquireMode::Wait))
        .await
        .expect("b waited past three TTLs")
        .unwrap();
    let granted_at = Instant::now();
    assert!(acquired.granted().is_some(), "b was not granted");
    assert!(
        granted_at >= valid_until,
        "b led {:?} before a's valid_until",
        valid_until - granted_at
    );
    cluster.heal(follower).await.unwrap();
}

/// A watch begins with the state as of its call, even on a follower that has
/// not applied the latest grant. A follower cut off from its leader answers
/// reads from what it has for up to syncLimit ticks (2 s here) before it
/// notices; a watch started there without a `sync` first began `Vacant`
/// while another candidate held the key (seen on the suite's 3-node
/// `watch_starts_with_current_state` and reproduced here). With the `sync`,
/// the first look waits for the leader: it fails (retryably) or reports the
/// holder, and is never `Vacant` while the key is held.
#[tokio::test(flavor = "multi_thread")]
async fn a_watch_through_a_cut_off_follower_never_begins_vacant_while_the_key_is_held() {
    let ttl = Duration::from_secs(4);
    let (cluster, follower, watcher, b) = follower_and_leader_clients(ttl).await;
    let key = ElectionKey::new("stale-look").unwrap();
    let candidacy = Candidacy::new(key.clone(), CandidateId::new("b").unwrap(), ttl).unwrap();
    cluster.partition(follower).await.unwrap();
    let lease = common::hold(&b, &candidacy).await;
    let first = tokio::time::timeout(ttl, async {
        let mut events = watcher.watch(&key).await?;
        events.next().await.expect("a watch's first event")
    })
    .await;
    cluster.heal(follower).await.unwrap();
    if let Ok(Ok(LeaderEvent::Vacant)) = first {
        panic!(
            "the watch began Vacant while b held the key (token {:?}): a stale look",
            lease.token()
        );
    }
}

/// CURATOR-696: a node left by an earlier session must never make a
/// candidate leader; after an expiry the candidate re-enters with a new node.
#[tokio::test(flavor = "multi_thread")]
async fn after_session_expiry_the_old_node_is_never_reused() {
    let cluster = zookeeper().await;
    let upstream = cluster.nodes()[0].addr();
    let proxy = FaultProxy::start(upstream).await.unwrap();
    let a = connect_to(&proxy.addr().to_string()).await;
    let first = hold(&a, "expiry", "a").await;
    let zk = plain(&cluster).await;
    let old = children(&zk, "/expiry").await;
    assert_eq!(old.len(), 1);
    // Cut a off for longer than its session: the server expires it.
    proxy.set(Mode::Blackhole);
    tokio::time::sleep(TTL * 3).await;
    assert!(!first.is_valid(), "a still believes it leads");
    assert!(
        children(&zk, "/expiry").await.is_empty(),
        "the old node outlived its session"
    );
    proxy.set(Mode::Pass);
    assert!(a.renew(&first).await.is_err_and(|e| e.is_lease_lost()));
    // A new acquisition runs on a new session with a new node.
    let second = wait_for("a leads again", Duration::from_secs(10), || {
        let a = a.clone();
        async move {
            a.acquire(&candidacy("expiry", "a"), AcquireMode::Once)
                .await
                .ok()
                .and_then(Acquisition::granted)
        }
    })
    .await
    .unwrap();
    let now = children(&zk, "/expiry").await;
    assert_eq!(now.len(), 1);
    assert_ne!(now, old, "the old node was reused");
    assert!(second.token() > first.token());
}

/// CURATOR-460: a disconnected leader is not leader past `valid_until`, which
/// counts from the send time of its last answered request, whatever the
/// session turns out to be later; nobody else leads before that.
#[tokio::test(flavor = "multi_thread")]
async fn a_disconnected_leader_stops_by_valid_until_before_anyone_else_leads() {
    let cluster = zookeeper().await;
    let proxy = FaultProxy::start(cluster.nodes()[0].addr()).await.unwrap();
    let a = connect_to(&proxy.addr().to_string()).await;
    let b = connect(&cluster).await;
    let lease = hold(&a, "cut", "a").await;
    let lease = a.renew(&lease).await.unwrap();
    let valid_until = lease.valid_until();
    assert!(valid_until <= lease.sent_at() + TTL);
    proxy.set(Mode::Blackhole);
    // Renewals fail while cut off; the lease is never extended.
    let renewed = a.renew(&lease).await;
    assert!(renewed.is_err(), "renewed while cut off");
    let waiting = {
        let b = b.clone();
        tokio::spawn(async move {
            // b's own connection may be given up on a loaded machine
            // (zookeeper-client drops one that answers nothing for a third
            // of the session timeout): its wait then ends with a retryable
            // error, and it waits again, as the Elector's campaign does.
            let mut attempts = 0;
            let lease = loop {
                attempts += 1;
                match b.acquire(&candidacy("cut", "b"), AcquireMode::Wait).await {
                    Ok(acquired) => break acquired.granted().expect("granted"),
                    Err(e) if e.is_retryable() && attempts < 5 => continue,
                    Err(e) => return Err(e),
                }
            };
            Ok::<_, Error>((Instant::now(), lease))
        })
    };
    let (granted_at, _) = waiting.await.unwrap().unwrap();
    assert!(
        granted_at >= valid_until,
        "b led {:?} before a's valid_until",
        valid_until - granted_at
    );
    assert!(
        granted_at <= valid_until + TTL + Duration::from_secs(1),
        "failover too slow"
    );
    proxy.set(Mode::Pass);
    assert!(a.renew(&lease).await.is_err_and(|e| e.is_lease_lost()));
}

/// CURATOR-724: an election whose nodes and path vanished during an outage
/// does not leave a waiting candidate stuck.
#[tokio::test(flavor = "multi_thread")]
async fn a_candidate_whose_path_vanished_re_enters_and_leads() {
    let (cluster, a, b) = two_sessions().await;
    let lease = hold(&a, "gone", "a").await;
    let elector = Elector::builder(b.clone())
        .key("gone")
        .identity("b")
        .ttl(TTL)
        .build()
        .unwrap();
    let campaign = tokio::spawn({
        let elector = elector.clone();
        async move { elector.campaign().await }
    });
    let zk = plain(&cluster).await;
    until_children_within(&zk, "/gone", 2, Duration::from_secs(5)).await;
    // Every node and the election path itself are deleted by hand, in one
    // transaction: all gone at once, as an outage leaves them. (One by one,
    // the wait could end on the leader's deletion and claim, rightly, before
    // its own node's turn came: a leader whose node is deleted by hand learns
    // it at its next renewal, which is not what this test is about.)
    let mut gone = zk.new_multi_writer();
    for name in children(&zk, "/gone").await {
        gone.add_delete(&format!("/gone/{name}"), None).unwrap();
    }
    gone.add_delete("/gone", None).unwrap();
    gone.commit().await.unwrap();
    let leadership = tokio::time::timeout(Duration::from_secs(5), campaign)
        .await
        .expect("b stuck")
        .unwrap()
        .unwrap();
    assert!(leadership.is_valid());
    assert!(a.renew(&lease).await.is_err_and(|e| e.is_lease_lost()));
    assert_eq!(children(&zk, "/gone").await.len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn release_deletes_only_our_node_and_lets_the_next_lead_at_once() {
    let (cluster, a, b) = two_sessions().await;
    let lease = hold(&a, "handover", "a").await;
    let waiting = wait_for_grant(&b, candidacy("handover", "b"));
    let zk = plain(&cluster).await;
    until_children_within(&zk, "/handover", 2, Duration::from_secs(5)).await;
    let released = Instant::now();
    a.release(&lease).await.unwrap();
    let (granted, led) = waiting.await.unwrap();
    assert!(granted.unwrap().granted().is_some());
    assert!(
        led - released < Duration::from_millis(200),
        "{:?}",
        led - released
    );
    assert_eq!(
        children(&zk, "/handover").await.len(),
        1,
        "release deleted b's node"
    );
    // A second release is harmless and deletes nothing else.
    a.release(&lease).await.unwrap();
    assert_eq!(children(&zk, "/handover").await.len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dropped_wait_leaves_no_node_behind() {
    let (cluster, a, b) = two_sessions().await;
    let lease = hold(&a, "dropped", "a").await;
    let wants = candidacy("dropped", "b");
    let attempt = b.acquire(&wants, AcquireMode::Wait);
    assert!(tokio::time::timeout(Duration::from_millis(300), attempt)
        .await
        .is_err());
    // b's node is withdrawn.
    let zk = plain(&cluster).await;
    until_children_within(&zk, "/dropped", 1, Duration::from_secs(2)).await;
    a.release(&lease).await.unwrap();
}

/// The name and data of each child of an election node.
async fn nodes_of(zk: &Client, election: &str) -> Vec<(String, Vec<u8>)> {
    let mut found = Vec::new();
    for name in children(zk, election).await {
        let (data, _) = zk.get_data(&format!("{election}/{name}")).await.unwrap();
        found.push((name, data));
    }
    found
}

/// The name of the node whose data is `identity`.
async fn node_of(zk: &Client, election: &str, identity: &str) -> String {
    nodes_of(zk, election)
        .await
        .into_iter()
        .find(|(_, data)| data == identity.as_bytes())
        .map(|(name, _)| name)
        .unwrap_or_else(|| panic!("no node of {identity} under {election}"))
}

/// Waits until the server holds `n` watches (a waiting candidate holds two:
/// its predecessor and its own node).
async fn until_watches(cluster: &Cluster, n: u64) {
    wait_for("the watches set", Duration::from_secs(5), || async move {
        let stats = cluster.stats(0).await.ok()?;
        (stats.get("zk_watch_count") >= n).then_some(())
    })
    .await
    .unwrap();
}

/// etcd#11456 on ZooKeeper: a waiting candidate whose own node is deleted
/// (by hand, here) stops waiting at once, with a retryable error, instead of
/// waiting on its predecessor for a node that is gone.
#[tokio::test(flavor = "multi_thread")]
async fn a_waiting_candidate_whose_node_is_deleted_stops_waiting_at_once() {
    let (cluster, a, b) = two_sessions().await;
    let lease = hold(&a, "orphaned", "a").await;
    let waiting = wait_for_grant(&b, candidacy("orphaned", "b"));
    until_watches(&cluster, 2).await;
    let zk = plain(&cluster).await;
    let ours = node_of(&zk, "/orphaned", "b").await;
    zk.delete(&format!("/orphaned/{ours}"), None).await.unwrap();
    let whose = "b, whose node was deleted,";
    ends_retryably(waiting, Duration::from_secs(2), whose).await;
    a.renew(&lease).await.expect("a still leads");
}

/// CURATOR-696, seen from the node: a node that bears our name but belongs
/// to another session (ours deleted and that one created in its place in the
/// transaction that deletes the leader's, so no view ever lacks the name)
/// never makes us leader, though it is now the lowest. Both wake-ups are
/// covered: by the leader's deletion (then one `sync` must not be enough) and
/// by our own node's; which comes first is up to the scheduler, so four
/// elections go at once.
#[tokio::test(flavor = "multi_thread")]
async fn a_node_of_another_session_under_our_name_never_makes_us_leader() {
    const ELECTIONS: usize = 4;
    let (cluster, a, b) = two_sessions().await;
    let mut leases = Vec::new();
    let mut waiting = Vec::new();
    for i in 0..ELECTIONS {
        let key = format!("impostor-{i}");
        leases.push(hold(&a, &key, "a").await);
        waiting.push(wait_for_grant(&b, candidacy(&key, "b")));
    }
    until_watches(&cluster, 2 * ELECTIONS as u64).await;
    let zk = plain(&cluster).await;
    let mut swap = zk.new_multi_writer();
    for i in 0..ELECTIONS {
        let election = format!("/impostor-{i}");
        let leader = node_of(&zk, &election, "a").await;
        let ours = node_of(&zk, &election, "b").await;
        swap.add_delete(&format!("{election}/{leader}"), None)
            .unwrap();
        swap.add_delete(&format!("{election}/{ours}"), None)
            .unwrap();
        swap.add_create(
            &format!("{election}/{ours}"),
            b"b",
            &CreateMode::Ephemeral.with_acls(Acls::anyone_all()),
        )
        .unwrap();
    }
    swap.commit().await.unwrap();
    for wait in waiting {
        let whose = "b, its node swapped for another session's,";
        ends_retryably(wait, Duration::from_secs(2), whose).await;
    }
}

/// A request in flight when the server falls silent fails once the client
/// gives the connection up ("no response from connection", which the client
/// reports as a custom error), and that failure is retryable: an Elector's
/// campaign retries instead of ending, and a waiting candidate whose own
/// watch was being set looks again instead of withdrawing.
#[tokio::test(flavor = "multi_thread")]
async fn a_request_cut_off_by_a_silent_server_fails_retryably() {
    let cluster = zookeeper().await;
    let proxy = FaultProxy::start(cluster.nodes()[0].addr()).await.unwrap();
    let a = connect_to(&proxy.addr().to_string()).await;
    proxy.set(Mode::Blackhole);
    let outcome = tokio::time::timeout(
        TTL * 3,
        a.acquire(&candidacy("silent", "a"), AcquireMode::Wait),
    )
    .await
    .expect("the request outlived the connection timeout");
    match outcome {
        Err(e) => assert!(e.is_retryable(), "{e}"),
        Ok(acquisition) => panic!("acquired through a silent server: {acquisition:?}"),
    }
    proxy.set(Mode::Pass);
}

/// A renewal whose connection the client gives up under it (the server
/// silent for the client's connection timeout, a third of the session
/// timeout, as a JVM starved of CPU can be) is sent once more through the
/// client's next connection, within the lease's deadline: a server that
/// answers again in time costs the holder no renewal. The first renewal
/// of a session has no server proven by an answered renewal to leave
/// early, so it used to fail with "no response from connection", and the
/// suite's `renew_extends` failed on a loaded machine.
#[tokio::test(flavor = "multi_thread")]
async fn a_renewal_whose_connection_the_client_gave_up_is_sent_once_more_in_time() {
    // Longer than the other lessons' so that the silence, the reconnect
    // and the renewal's second send fit well within the lease.
    let session = Duration::from_secs(3);
    let cluster = zookeeper().await;
    let proxy = FaultProxy::start(cluster.nodes()[0].addr()).await.unwrap();
    let a = ZooKeeperBackend::connect(
        &proxy.addr().to_string(),
        common::options().with_session_timeout(session),
    )
    .await
    .expect("connect");
    let lease = common::hold(&a, &candidacy_with_ttl("given-up", "a", session)).await;
    proxy.set(Mode::Blackhole);
    let sent = Instant::now();
    let renewal = tokio::spawn(async move { a.renew(&lease).await.map(|l| (l, a)) });
    // The client gives the silent connection up a third of the session
    // timeout after its last answer (the grant's, just now); it then
    // reconnects, through the blackhole, which holds the new connection
    // until it ends.
    tokio::time::sleep(session / 3 + Duration::from_millis(400)).await;
    proxy.set(Mode::Pass);
    let renewed = renewal.await.unwrap();
    let took = sent.elapsed();
    match renewed {
        Ok((lease, a)) => {
            assert!(lease.is_valid(), "renewed, but not valid after {took:?}");
            a.release(&lease).await.expect("release");
        }
        Err(e) => panic!(
            "the renewal failed after {took:?} ({e}), though the server answered again {:?} \
             after it was sent, well within the lease",
            session / 3 + Duration::from_millis(400)
        ),
    }
}

/// Sets every proxy of a link to `mode`.
fn cut(link: &ProxyLink, mode: Mode) {
    for proxy in link.proxies() {
        proxy.set(mode);
    }
}

/// Issue 12: a withdrawal whose delete dies with its connection is retried
/// until it lands (or the session ends), so the node of a dropped campaign
/// never outlives it while its session lives on. A waiting candidate's link
/// is cut for half its session timeout, its campaign dropped during the cut,
/// and the cut ends with a reset: the delete sent into it is lost, as when a
/// connection dies under a request. The session survives. Once the holder
/// resigns, the candidate that waited behind the withdrawn one leads within
/// a round trip, and the withdrawn candidate's session owns no node.
#[tokio::test(flavor = "multi_thread")]
async fn a_withdrawal_lost_with_its_connection_is_retried_until_it_lands() {
    let ttl = Duration::from_secs(4);
    let cluster = Cluster::start(Topology::ZooKeeper { nodes: 3 })
        .await
        .expect("ZooKeeper ensemble");
    let options = common::options().with_session_timeout(ttl);
    let direct = cluster.endpoints().join(",");
    let a = ZooKeeperBackend::connect(&direct, options.clone())
        .await
        .unwrap();
    let c = Arc::new(
        ZooKeeperBackend::connect(&direct, options.clone())
            .await
            .unwrap(),
    );
    let servers: Vec<_> = cluster.nodes().iter().map(|n| n.addr()).collect();
    let (link, addrs) = ProxyLink::start_all(&servers).await.unwrap();
    let proxied: Vec<String> = addrs.iter().map(ToString::to_string).collect();
    let b = Arc::new(
        ZooKeeperBackend::connect(&proxied.join(","), options)
            .await
            .unwrap(),
    );
    let b_session = b.session_id().await.unwrap();
    let zk = plain(&cluster).await;

    let lease = common::hold(&a, &candidacy_with_ttl("ghost", "a", ttl)).await;
    let waiting_b = wait_for_grant(&b, candidacy_with_ttl("ghost", "b", ttl));
    until_children(&zk, "/ghost", 2).await;
    let mut waiting_c = wait_for_grant(&c, candidacy_with_ttl("ghost", "c", ttl));
    until_children(&zk, "/ghost", 3).await;

    cut(&link, Mode::Blackhole);
    waiting_b.abort(); // b's campaign is dropped: its withdrawal goes into the cut
    tokio::time::sleep(ttl / 2).await;
    cut(&link, Mode::Reset);
    tokio::time::sleep(Duration::from_millis(100)).await;
    cut(&link, Mode::Pass);
    // However long the withdrawal takes to land, it must land while b's
    // session lives; the hand-over below is what tells.
    let _ = wait_for("b's node withdrawn", ttl, || {
        let zk = zk.clone();
        async move { (children(&zk, "/ghost").await.len() == 2).then_some(()) }
    })
    .await;

    let released = Instant::now();
    a.release(&lease).await.unwrap();
    let bound = Duration::from_millis(300);
    let (granted, led) = match tokio::time::timeout(bound, &mut waiting_c).await {
        Ok(outcome) => outcome.unwrap(),
        Err(_) => panic!(
            "c still waits {bound:?} after a's release, behind {:?} (b's session {b_session:x} \
             owns {:?}): b's withdrawn node outlived its candidacy",
            nodes_of(&zk, "/ghost").await,
            common::owned_by(&zk, "/ghost", b_session).await,
        ),
    };
    assert!(granted.unwrap().granted().is_some(), "c was not granted");
    assert!(led - released < bound, "{:?}", led - released);
    assert_eq!(
        b.session_id().await,
        Some(b_session),
        "b's session did not outlive the cut: the test proves nothing"
    );
    assert_eq!(
        common::owned_by(&zk, "/ghost", b_session).await,
        Vec::<String>::new(),
        "b's session still owns a node"
    );
}

/// Issue 12: a node of our own session that no live candidacy of this
/// backend tracks (a withdrawal that never landed leaves one) is deleted at
/// the next look at its election, so a new candidacy never queues behind its
/// own ghost. Another session's node is left alone.
#[tokio::test(flavor = "multi_thread")]
async fn a_node_of_our_session_that_no_candidacy_tracks_is_deleted_at_the_next_look() {
    let cluster = zookeeper().await;
    let a = connect(&cluster).await;
    let zk = plain(&cluster).await;
    let ours = a.client().await.unwrap();
    let stray = "/stray/_c_00000000-0000-4000-8000-000000000000-latch-";
    let ephemeral = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
    ours.mkdir(
        "/stray",
        &CreateMode::Container.with_acls(Acls::anyone_all()),
    )
    .await
    .unwrap();
    ours.create(stray, b"ghost", &ephemeral).await.unwrap();
    drop(ours);

    let lease = hold(&a, "stray", "a").await;
    assert_eq!(
        nodes_of(&zk, "/stray")
            .await
            .into_iter()
            .map(|(_, data)| data)
            .collect::<Vec<_>>(),
        vec![b"a".to_vec()],
        "the ghost outlived a's look at its election"
    );
    a.release(&lease).await.unwrap();

    // Another session's candidate is not ours to delete.
    zk.create(stray, b"other", &ephemeral).await.unwrap();
    match a
        .acquire(&candidacy("stray", "a"), AcquireMode::Once)
        .await
        .unwrap()
    {
        Acquisition::Held(info) => assert_eq!(info.identity.as_str(), "other"),
        Acquisition::Granted(_) => panic!("a was granted ahead of another session's node"),
    }
    assert_eq!(children(&zk, "/stray").await.len(), 1);
}

/// Issue 12: elections `k` and `k/b` are independent, though `k/b`'s
/// election node is a child of `k`'s: only candidate nodes count as
/// candidates (in a single attempt, a wait and a watch).
#[tokio::test(flavor = "multi_thread")]
async fn nested_elections_are_independent() {
    let (_cluster, a, b) = two_sessions().await;
    let inner = hold(&a, "nest/b", "a").await;
    let mut watch = b.watch(&ElectionKey::new("nest").unwrap()).await.unwrap();
    let outer = hold(&b, "nest", "b").await;
    let first = watch.next().await.unwrap().unwrap();
    assert_eq!(
        first,
        LeaderEvent::Vacant,
        "with nest/b held, a watch of nest began with {first:?}"
    );
    let next = tokio::time::timeout(Duration::from_secs(2), watch.next())
        .await
        .expect("the watch of nest saw no leader")
        .unwrap()
        .unwrap();
    match next {
        LeaderEvent::Elected(info) => assert_eq!(info.identity.as_str(), "b"),
        other => panic!("the watch of nest saw {other:?}"),
    }
    b.release(&outer).await.unwrap();
    // A waiting acquire does not queue behind the inner election's node.
    let waited = tokio::time::timeout(
        Duration::from_secs(2),
        b.acquire(&candidacy("nest", "b"), AcquireMode::Wait),
    )
    .await
    .expect("a wait on nest queued behind nest/b")
    .unwrap();
    b.release(&waited.granted().expect("granted"))
        .await
        .unwrap();
    a.release(&inner).await.unwrap();

    // The other way round: with `nest2` held, `nest2/b` is free.
    let outer = hold(&a, "nest2", "a").await;
    let inner = hold(&b, "nest2/b", "b").await;
    b.release(&inner).await.unwrap();
    a.release(&outer).await.unwrap();
    // A key whose node `nest` would take for a candidate is refused.
    match a
        .acquire(&candidacy("nest/latch-0000000001", "a"), AcquireMode::Once)
        .await
    {
        Err(Error::InvalidArgument { field: "key", .. }) => {}
        other => panic!("expected InvalidArgument(key), got {other:?}"),
    }
}

/// A holder whose node is deleted out of band (`deleteall` in zkCli, an
/// operator's cleanup, another session's `delete`) learns it from the watch
/// it keeps on its own node, not at its next renewal (up to a third of the
/// TTL later): its lease is no longer valid within 50 ms of the delete, at
/// the 99th percentile of 100 deletes. (Curator's LeaderLatch likewise
/// watches its own node and resets on its deletion.)
#[tokio::test(flavor = "multi_thread")]
async fn a_holder_whose_node_is_deleted_stops_being_valid_within_50ms() {
    let cluster = zookeeper().await;
    let (a, operator) = (connect(&cluster).await, plain(&cluster).await);
    let mut took = Vec::new();
    for trial in 0..100 {
        let election = format!("deleted-{trial}");
        let lease = hold(&a, &election, "a").await;
        let node = node_of(&operator, &format!("/{election}"), "a").await;
        operator
            .delete(&format!("/{election}/{node}"), None)
            .await
            .unwrap();
        let deleted = Instant::now();
        took.push(until_told_lost(&lease, deleted, TTL, trial).await);
    }
    let p99 = p99(&mut took, "out-of-band delete to lease ended");
    assert!(p99 <= Duration::from_millis(50), "p99 {p99:?}");
}

/// A server that freezes (a GC pause, a stalled VM) answers nothing and
/// closes nothing; with a majority serving on, the leader it served must
/// renew through another and keep leading, wherever in its renewal cycle the
/// freeze comes. The worst point is just before a renewal: the renewal goes
/// out to the frozen server with two renewal intervals of the lease left
/// (0.40 of the TTL here), and the client must notice, reconnect elsewhere
/// and renew within them.
///
/// zookeeper-client notices only after its connection timeout (a third of
/// the session timeout) of silence counted from its last answer, on a
/// 24th-of-a-TTL tick, and then picks the next server at random, the frozen
/// one again a third of the time. On a loaded CI machine that left 19 ms for
/// the reconnect and the renewal, and the lease ended (issue 44: "the lease
/// had 388.78ms left when it returned; ... the other follower got 1
/// connection(s) and 8 request(s) after the pause began, the first at
/// +369.37ms"). So the backend leaves a server that has not answered a
/// renewal once only a reserve of the lease is left (four of its observed
/// renewal round trips at the 99th percentile, at least a sixth of the
/// TTL), and its relay refuses the server it left until the client
/// reaches another, so the client does not go back to it: neither a
/// step-down nor a connection to the frozen server is excused.
///
/// The session sees only the two followers, one proxy each, so a freeze
/// leaves the ensemble's leader and the other follower serving. Six
/// freezes, from right after a renewal's answer to just before the next
/// renewal; each lasts longer than the TTL. See the `_on_a_slow_path`
/// variant for the load that made this fail.
#[tokio::test(flavor = "multi_thread")]
async fn a_leader_whose_server_freezes_at_any_point_of_its_renewal_cycle_keeps_leading() {
    leader_keeps_leading_through_freezes(Duration::ZERO).await;
}

/// The load of issue 44's CI machine, made deterministic: every answer of
/// both followers comes 15 ms late (their proxies hold it), so a renewal
/// takes about 15 ms and a reconnect with a renewal about three times that
/// (the handshake, the ping zookeeper-client sends after it, the sync with
/// its read), as a loaded host stretches them. Waiting for the client's own
/// connection timeout, and going back to the frozen server, lost the lease
/// on the old code three runs in three ("the client connected 1 more
/// time(s) to the frozen server; the other follower got 1 connection(s) and
/// 6 request(s) after the pause began, the first at +706.848941ms", with
/// 535 ms of lease left), as did the lesson above; leaving when only four
/// renewal round trips of the lease are left, for a server the client does
/// not go back to, does not.
///
/// The bound is sound under load: load stretches the observed round trips
/// too, and the reserve with them, up to half of what the lease has left
/// when the renewal goes out (0.2 of the TTL). What it cannot absorb is a
/// host so loaded that a reconnect and a renewal take longer than that:
/// with 25 ms held back and a CPU hog beside the test on this 2-core
/// machine, the handshake alone took 149 ms after a leave at 201 ms left,
/// and the lease ended (2 runs in 4); with 15 ms, 4 runs in 4 passed.
#[tokio::test(flavor = "multi_thread")]
async fn a_leader_whose_server_freezes_at_any_point_of_its_renewal_cycle_keeps_leading_on_a_slow_path(
) {
    leader_keeps_leading_through_freezes(Duration::from_millis(15)).await;
}

/// The lessons above: freezes of the server in use at six points of the
/// renewal cycle, with every answer `answer_delay` late.
async fn leader_keeps_leading_through_freezes(answer_delay: Duration) {
    // `TENURE_LOG=tenure_zookeeper=debug` (with `--nocapture`) logs the backend.
    tenure_testkit::log_from_env();
    let (cluster, leader) = ensemble().await;
    let followers: Vec<usize> = (0..3).filter(|&n| n != leader).collect();
    let mut proxies = Vec::new();
    for &n in &followers {
        let proxy = FaultProxy::start(cluster.nodes()[n].addr()).await.unwrap();
        if !answer_delay.is_zero() {
            proxy.set(Mode::DelayAnswers(answer_delay));
        }
        proxies.push(proxy);
    }
    let connect_string = proxies
        .iter()
        .map(|p| p.addr().to_string())
        .collect::<Vec<_>>()
        .join(",");
    let backend: Arc<dyn LeaseBackend> = connect_to(&connect_string).await;
    let elector = Elector::builder(backend)
        .key("frozen-server")
        .identity("a")
        .ttl(TTL)
        .build()
        .unwrap();
    // The follower the session talks to: the one its pings went to last.
    let in_use = || {
        let last = |i: usize| proxies[i].last_request_at();
        usize::from(last(1) > last(0))
    };
    // When the next renewal's answer moves valid_until.
    let renewal = |term: &tenure_core::Term| {
        let (term, before) = (term.clone(), term.valid_until());
        async move {
            let deadline = Instant::now() + TTL;
            while term.valid_until() == before {
                assert!(
                    term.ended().is_none(),
                    "the term ended ({:?}) while waiting for a renewal",
                    term.ended()
                );
                assert!(Instant::now() < deadline, "no renewal in a TTL");
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            Instant::now()
        }
    };
    let phases = [0.0, 0.2, 0.4, 0.6, 0.8, 0.95];
    let mut kept = Vec::new();
    let leadership = elector.campaign().await.unwrap();
    for phase in phases {
        let term = leadership.term();
        let first = renewal(&term).await;
        let renewed = renewal(&term).await;
        let interval = renewed - first;
        tokio::time::sleep_until(renewed + interval.mul_f64(phase)).await;
        let proxy = in_use();
        let (frozen, opened) = (followers[proxy], proxies[proxy].connections_opened());
        let until = term.valid_until();
        let other = &proxies[1 - proxy];
        let other_opened = other.connections_opened();
        let pausing = Instant::now();
        cluster.pause(frozen).await.unwrap();
        let paused = Instant::now();
        tokio::time::sleep(TTL + Duration::from_millis(200)).await;
        let ended = term.ended();
        let moved = term.valid_until() > until;
        let went_back = proxies[proxy].connections_opened() - opened;
        // Where the time went, for a failure: what the lease had left, and
        // when the session's requests reached the other follower.
        let since = |at: Instant| format!("{:?}", at.saturating_duration_since(pausing));
        let moved_to_other = other.requests_since(pausing);
        let timeline = format!(
            "the pause call took {:?}; the lease had {:?} left when it returned; the frozen \
             server last answered at -{:?}; the client connected {went_back} more time(s) to \
             the frozen server; the other follower got {} connection(s) and {} request(s) \
             after the pause began, the first at +{}",
            paused - pausing,
            until.saturating_duration_since(paused),
            proxies[proxy]
                .last_answer_at()
                .map_or(Duration::ZERO, |at| pausing.saturating_duration_since(at)),
            other.connections_opened() - other_opened,
            moved_to_other.len(),
            moved_to_other
                .first()
                .map_or("never".to_owned(), |at| since(*at)),
        );
        cluster.unpause(frozen).await.unwrap();
        let after = paused - renewed;
        assert!(
            ended.is_none() && moved,
            "node {frozen} froze {after:?} after a renewal's answer (renewals {interval:?} \
             apart, answers {answer_delay:?} late) and for {:?}, with the leader and the other \
             follower serving; the leader {}; {timeline}",
            paused.elapsed(),
            match ended {
                Some(reason) => format!("lost its lease ({reason:?})"),
                None => "renewed nothing".to_owned(),
            }
        );
        assert_eq!(
            went_back, 0,
            "the client went back to the frozen server, and kept leading: {timeline}"
        );
        kept.push(format!("{}", after.as_millis()));
        cluster.settle(Duration::from_millis(200)).await.unwrap();
    }
    eprintln!(
        "answers {answer_delay:?} late: kept leading through freezes of its server {} ms after \
         a renewal",
        kept.join(", "),
    );
    leadership.resign().await.unwrap();
}

/// An operator's `set` on our node (or a tool that tags nodes) bumps its
/// data version. A delete that insists on version 0 is then refused for
/// ever, and the node, whose session lives on, blocks the queue: a lease
/// nobody renews must still end within its TTL, and a release must still
/// free the key.
#[tokio::test(flavor = "multi_thread")]
async fn a_node_whose_data_was_set_by_hand_is_still_deleted_when_its_lease_ends() {
    let (cluster, a, b) = two_sessions().await;
    let zk = plain(&cluster).await;

    // Not renewed: the expiry timer must delete the node.
    let _unrenewed = hold(&a, "set-by-hand", "a").await;
    let node = node_of(&zk, "/set-by-hand", "a").await;
    zk.set_data(&format!("/set-by-hand/{node}"), b"tagged", None)
        .await
        .unwrap();
    let wants = candidacy("set-by-hand", "b");
    let waiting = b.acquire(&wants, AcquireMode::Wait);
    let granted = tokio::time::timeout(TTL + Duration::from_secs(1), waiting).await;
    let lease = match granted {
        Ok(Ok(Acquisition::Granted(lease))) => lease,
        other => panic!(
            "b was not granted within the TTL + 1 s after a's node was set by hand: {other:?}"
        ),
    };

    // Released: the release must delete it.
    let node = node_of(&zk, "/set-by-hand", "b").await;
    zk.set_data(&format!("/set-by-hand/{node}"), b"tagged", None)
        .await
        .unwrap();
    b.release(&lease)
        .await
        .expect("release after a set by hand");
    assert!(
        children(&zk, "/set-by-hand").await.is_empty(),
        "the released node is still there"
    );
}

/// Tells `created` each time a create request (opcode 1, or 15 for
/// create2) goes through a proxy. Frames are a 4-byte big-endian length,
/// then the frame; a request's frame starts with its xid and opcode; the
/// first frame of a connection is its handshake.
struct CreateSeen {
    created: Arc<tokio::sync::Notify>,
}

impl tenure_testkit::proxy::Tap for CreateSeen {
    fn connection(
        &self,
    ) -> (
        tenure_testkit::proxy::Observer,
        tenure_testkit::proxy::Observer,
    ) {
        let created = self.created.clone();
        let mut pending = Vec::new();
        let mut handshake_seen = false;
        (
            Box::new(move |bytes: &[u8]| {
                pending.extend_from_slice(bytes);
                while pending.len() >= 4 {
                    let len = u32::from_be_bytes(pending[..4].try_into().unwrap()) as usize;
                    if pending.len() < 4 + len {
                        break;
                    }
                    let frame: Vec<u8> = pending.drain(..4 + len).skip(4).collect();
                    if !handshake_seen {
                        handshake_seen = true;
                    } else if frame.len() >= 8 {
                        let opcode = i32::from_be_bytes(frame[4..8].try_into().unwrap());
                        if opcode == 1 || opcode == 15 {
                            created.notify_one();
                        }
                    }
                }
            }),
            Box::new(|_: &[u8]| {}),
        )
    }
}

/// A connection that dies under a create (a TCP reset, a server gone
/// silent) gives zookeeper-client's `Custom` error, not `ConnectionLoss`;
/// either way the create may have landed. The campaign must look for its
/// node (protected mode: its name bears our uuid) and go on with it, not
/// fail and leave it queued.
#[tokio::test(flavor = "multi_thread")]
async fn a_create_whose_connection_resets_under_it_finds_its_node() {
    let ttl = Duration::from_secs(4);
    let cluster = zookeeper().await;
    let created = Arc::new(tokio::sync::Notify::new());
    let tap = Arc::new(CreateSeen {
        created: created.clone(),
    });
    let upstream = cluster.nodes()[0].addr();
    let proxy = FaultProxy::start_tapped(upstream, Some(tap)).await.unwrap();
    let options = common::options().with_session_timeout(ttl);
    let a = ZooKeeperBackend::connect(&proxy.addr().to_string(), options)
        .await
        .unwrap();
    let session = a.session_id().await;
    // Answers wait, so the reset below comes before the create's answer.
    proxy.set(Mode::DelayAnswers(Duration::from_millis(300)));
    let wants = candidacy_with_ttl("reset-create", "a", ttl);
    let acquiring = a.acquire(&wants, AcquireMode::Once);
    let cutting = async {
        created.notified().await;
        proxy.set(Mode::Reset);
        tokio::time::sleep(Duration::from_millis(100)).await;
        proxy.set(Mode::Pass);
    };
    let (granted, ()) = tokio::join!(acquiring, cutting);
    let lease = match granted {
        Ok(Acquisition::Granted(lease)) => lease,
        other => panic!("a's campaign did not go on with the node its lost create made: {other:?}"),
    };
    assert_eq!(
        a.session_id().await,
        session,
        "the session did not survive the reset: the test proves nothing"
    );
    let zk = plain(&cluster).await;
    let found = children(&zk, "/reset-create").await;
    assert_eq!(
        found.len(),
        1,
        "one node, the one the lost create made: {found:?}"
    );
    let (_, stat) = zk
        .get_data(&format!("/reset-create/{}", found[0]))
        .await
        .unwrap();
    assert_eq!(lease.token().map(|t| t.get() as i64), Some(stat.czxid));
}
