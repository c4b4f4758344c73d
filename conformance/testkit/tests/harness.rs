//! Proves the container harness: every topology starts and serves real
//! clients on 127.0.0.1, and every fault has the effect it claims. Each test
//! ends by dropping its cluster and checking docker holds nothing of its run.

use std::collections::HashMap;
use std::time::Duration;

use bollard::models::NetworkCreateRequest;
use bollard::Docker;
use tenure_testkit::harness::probe::{self, Resp};
use tenure_testkit::harness::{
    leftovers, sweep, wait_for, Cluster, HarnessError, Image, Topology, LABEL,
};

/// Failover and recovery bounds, generous for a 2-core machine.
const RECOVERY: Duration = Duration::from_secs(30);

fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "tenure_conformance=info".into()),
        )
        .with_test_writer()
        .try_init();
}

async fn docker() -> Docker {
    Docker::connect_with_local_defaults()
        .unwrap()
        .negotiate_version()
        .await
        .unwrap()
}

/// Drops the cluster and asserts docker has no container or network of its run.
async fn drop_and_assert_removed(cluster: Cluster) {
    let run = cluster.run_id().to_string();
    assert!(
        !leftovers(Some(&run)).await.unwrap().is_empty(),
        "the run's resources are labelled"
    );
    drop(cluster);
    let left = leftovers(Some(&run)).await.unwrap();
    assert!(left.is_empty(), "left behind by run {run}: {left:?}");
}

/// The error a stopped node gives: the connection is refused, not left hanging.
fn assert_refused<T: std::fmt::Debug>(result: Result<T, HarnessError>) {
    match result {
        Err(e) => assert!(!e.is_timeout(), "expected a refused connection, got {e}"),
        Ok(v) => panic!("a killed node answered {v:?}"),
    }
}

fn assert_times_out<T: std::fmt::Debug>(result: Result<T, HarnessError>) {
    match result {
        Err(e) => assert!(e.is_timeout(), "expected a timeout, got {e}"),
        Ok(v) => panic!("a paused node answered {v:?}"),
    }
}

/// The host port docker actually publishes the node's client port on.
async fn published_port(container: &str) -> Option<u16> {
    let inspect = docker()
        .await
        .inspect_container(container, None)
        .await
        .ok()?;
    let ports = inspect.network_settings?.ports?;
    let bindings = ports.into_values().flatten().flatten();
    bindings.filter_map(|b| b.host_port?.parse().ok()).next()
}

/// Starts `topology`, with the tests' tracing on; and its endpoints, one
/// a node, each on 127.0.0.1.
async fn start(topology: Topology) -> (Cluster, Vec<String>) {
    init_tracing();
    let cluster = Cluster::start(topology).await.unwrap();
    let eps = cluster.endpoints();
    assert_eq!(eps.len(), topology.size());
    assert!(eps.iter().all(|ep| ep.starts_with("127.0.0.1:")), "{eps:?}");
    (cluster, eps)
}

/// The leader `Cluster::start` waited for.
async fn leader_after_start(cluster: &Cluster) -> usize {
    cluster
        .leader_index()
        .await
        .unwrap()
        .expect("a leader after start")
}

/// The key the etcd tests write.
const KEY: &[u8] = b"harness/k";

async fn etcd_value(endpoint: &str) -> Option<Vec<u8>> {
    probe::etcd_get(endpoint, KEY).await.ok().flatten()
}

async fn assert_etcd_holds(endpoint: &str, value: &[u8]) {
    assert_eq!(
        etcd_value(endpoint).await.as_deref(),
        Some(value),
        "{endpoint}"
    );
}

/// Waits until the member at `endpoint` holds `value` (it caught up).
async fn until_etcd_holds(what: &str, endpoint: &str, value: &[u8]) {
    wait_for(what, RECOVERY, || async {
        (etcd_value(endpoint).await.as_deref() == Some(value)).then_some(())
    })
    .await
    .unwrap();
}

async fn redis(endpoint: &str, args: &[&[u8]]) -> Resp {
    probe::redis_command(endpoint, args).await.unwrap()
}

async fn assert_pong(endpoint: &str) {
    assert_eq!(
        redis(endpoint, &[b"PING"]).await,
        Resp::Simple("PONG".into())
    );
}

#[tokio::test]
async fn image_is_found_or_built_with_the_current_version() {
    init_tracing();
    let image = Image::ensure().await.unwrap();
    assert_eq!(image.name(), Image::name_for_this_version());
    let inspect = docker().await.inspect_image(image.name()).await.unwrap();
    let labels = inspect.config.and_then(|c| c.labels).unwrap_or_default();
    let version = image.name().rsplit(':').next().unwrap();
    assert_eq!(
        labels.get("tenure.conformance.image").map(String::as_str),
        Some(version)
    );
}

#[tokio::test]
async fn sweep_removes_only_resources_of_dead_processes() {
    init_tracing();
    let docker = docker().await;
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let make = |name: &str, owner: String| NetworkCreateRequest {
        name: name.to_string(),
        labels: Some(HashMap::from([
            (LABEL.to_string(), "1".to_string()),
            ("tenure.conformance.run".to_string(), name.to_string()),
            ("tenure.conformance.owner".to_string(), owner),
        ])),
        ..Default::default()
    };
    let dead = format!("tenure-sweep-test-dead-{}", std::process::id());
    let alive = format!("tenure-sweep-test-alive-{}", std::process::id());
    // Pid 1's start time is never 1 tick: this owner is dead.
    docker
        .create_network(make(&dead, format!("{}/1/1", host.trim())))
        .await
        .unwrap();
    // A process on another host sharing the engine is never judged dead.
    docker
        .create_network(make(&alive, "elsewhere/1/1".to_string()))
        .await
        .unwrap();
    // Another test's Cluster::start may sweep first, so count nothing:
    // judge by what is left.
    sweep().await.unwrap();
    let dead_left = leftovers(Some(&dead)).await.unwrap();
    let alive_left = leftovers(Some(&alive)).await.unwrap();
    docker.remove_network(&alive).await.unwrap();
    assert!(dead_left.is_empty(), "dead owner's network survived");
    assert_eq!(alive_left.networks, vec![alive.clone()]);
}

#[tokio::test]
async fn etcd_single_node_serves_and_survives_pause_partition_and_kill() {
    let (cluster, eps) = start(Topology::Etcd { nodes: 1 }).await;
    let ep = &eps[0];
    assert_eq!(cluster.leader_index().await.unwrap(), Some(0));

    // A real write and read through the JSON gateway, counted by the server.
    let before = cluster.stats(0).await.unwrap();
    let revision = probe::etcd_put(ep, KEY, b"v1").await.unwrap();
    assert!(revision >= 2, "revision {revision}");
    assert_etcd_holds(ep, b"v1").await;
    let delta = cluster.stats(0).await.unwrap().since(&before);
    assert_eq!(delta.get("etcd_mvcc_put_total"), 1, "{delta:?}");
    assert!(delta.get("etcd_server_proposals_committed_total") >= 1);

    // Paused: the port accepts, nothing answers; then it answers again.
    cluster.pause(0).await.unwrap();
    assert_times_out(probe::etcd_health(ep).await);
    cluster.unpause(0).await.unwrap();
    wait_for("etcd to answer after unpause", RECOVERY, || async {
        probe::etcd_health(ep).await.ok().filter(|h| *h)
    })
    .await
    .unwrap();

    // Partitioned from (no) peers: the client path is untouched.
    cluster.partition(0).await.unwrap();
    assert!(probe::etcd_health(ep).await.unwrap());
    cluster.heal(0).await.unwrap();

    // Killed: refused; started: same port, same data.
    let port = cluster.node(0).unwrap().host_port();
    cluster.kill(0).await.unwrap();
    assert_refused(probe::etcd_health(ep).await);
    cluster.start_node(0).await.unwrap();
    let container = cluster.node(0).unwrap().container().to_string();
    assert_eq!(published_port(&container).await, Some(port));
    assert_etcd_holds(ep, b"v1").await;

    drop_and_assert_removed(cluster).await;
}

#[tokio::test]
async fn etcd_three_nodes_fail_over_partition_pause_and_restart() {
    let (cluster, eps) = start(Topology::Etcd { nodes: 3 }).await;
    let leader = leader_after_start(&cluster).await;
    let follower = (leader + 1) % 3;
    let other = (leader + 2) % 3;

    // A write through a follower is replicated to every member.
    probe::etcd_put(&eps[follower], KEY, b"v1").await.unwrap();
    for ep in &eps {
        assert_etcd_holds(ep, b"v1").await;
    }

    // Partition a follower: it can't commit, yet its client port answers
    // (health false: no leader), while the majority goes on.
    cluster.partition(follower).await.unwrap();
    wait_for(
        "the cut-off member to lose its leader",
        RECOVERY,
        || async { (probe::etcd_health(&eps[follower]).await.ok() == Some(false)).then_some(()) },
    )
    .await
    .unwrap();
    assert!(probe::etcd_put(&eps[follower], KEY, b"lost").await.is_err());
    probe::etcd_put(&eps[leader], KEY, b"v2").await.unwrap();
    cluster.heal(follower).await.unwrap();
    until_etcd_holds("the healed member to catch up", &eps[follower], b"v2").await;

    // Kill the leader: another member is elected and takes writes.
    let old = cluster.await_leader(RECOVERY, |_| true).await.unwrap();
    cluster.kill(old).await.unwrap();
    assert_refused(probe::etcd_status(&eps[old]).await);
    let new = cluster.await_leader(RECOVERY, |i| i != old).await.unwrap();
    assert_ne!(new, old);
    probe::etcd_put(&eps[new], KEY, b"v3").await.unwrap();
    cluster.start_node(old).await.unwrap();
    until_etcd_holds("the restarted member to catch up", &eps[old], b"v3").await;

    // Pause a member: its requests time out, the others serve.
    let leader = cluster.await_leader(RECOVERY, |_| true).await.unwrap();
    let paused = if leader == other { follower } else { other };
    cluster.pause(paused).await.unwrap();
    assert_times_out(probe::etcd_status(&eps[paused]).await);
    probe::etcd_put(&eps[leader], KEY, b"v4").await.unwrap();
    cluster.unpause(paused).await.unwrap();
    until_etcd_holds("the unpaused member to catch up", &eps[paused], b"v4").await;

    // Restart everything: same ports, same data, a leader again.
    cluster.restart_all().await.unwrap();
    assert_eq!(cluster.endpoints(), eps);
    assert!(cluster.leader_index().await.unwrap().is_some());
    for ep in &eps {
        assert_etcd_holds(ep, b"v4").await;
    }
    let stats = cluster.stats_total().await.unwrap();
    assert!(
        stats.get("etcd_server_proposals_committed_total") > 0,
        "{stats:?}"
    );

    drop_and_assert_removed(cluster).await;
}

#[tokio::test]
async fn zookeeper_single_node_serves_and_survives_pause_and_kill() {
    let (cluster, eps) = start(Topology::ZooKeeper { nodes: 1 }).await;
    let ep = &eps[0];
    assert_eq!(probe::zk_four_letter(ep, "ruok").await.unwrap(), "imok");
    assert_eq!(
        probe::zk_mode(ep).await.unwrap().as_deref(),
        Some("standalone")
    );
    assert_eq!(cluster.leader_index().await.unwrap(), Some(0));

    // A real session (two transactions), seen in zxid and the packet counters.
    let before = cluster.stats(0).await.unwrap();
    let (session, zxid) = probe::zk_session(ep).await.unwrap();
    assert_ne!(session, 0);
    let after = cluster.stats(0).await.unwrap();
    assert!(
        after.get("zxid") >= zxid && zxid > before.get("zxid"),
        "{after:?}"
    );
    assert!(
        after.since(&before).get("zk_packets_received") >= 2,
        "{after:?}"
    );

    cluster.pause(0).await.unwrap();
    assert_times_out(probe::zk_four_letter(ep, "ruok").await);
    cluster.unpause(0).await.unwrap();
    wait_for("ZooKeeper to answer after unpause", RECOVERY, || async {
        probe::zk_four_letter(ep, "ruok")
            .await
            .ok()
            .filter(|a| a == "imok")
    })
    .await
    .unwrap();

    // Killed: refused; started: same port, the transaction log kept.
    cluster.kill(0).await.unwrap();
    assert_refused(probe::zk_four_letter(ep, "ruok").await);
    cluster.start_node(0).await.unwrap();
    assert!(cluster.stats(0).await.unwrap().get("zxid") >= zxid);
    probe::zk_session(ep).await.unwrap();

    drop_and_assert_removed(cluster).await;
}

#[tokio::test]
async fn zookeeper_three_nodes_fail_over_partition_and_pause() {
    let (cluster, eps) = start(Topology::ZooKeeper { nodes: 3 }).await;
    let leader = leader_after_start(&cluster).await;
    let follower = (leader + 1) % 3;
    for (i, ep) in eps.iter().enumerate() {
        let mode = probe::zk_mode(ep).await.unwrap();
        let expected = if i == leader { "leader" } else { "follower" };
        assert_eq!(mode.as_deref(), Some(expected), "node {i}");
        probe::zk_session(ep).await.unwrap();
    }

    // Partition a follower: it stops serving, answering on its port that it
    // is not serving requests; the majority keeps its leader.
    cluster.partition(follower).await.unwrap();
    wait_for(
        "the cut-off server to leave the quorum",
        RECOVERY,
        || async {
            probe::zk_mode(&eps[follower])
                .await
                .ok()?
                .is_none()
                .then_some(())
        },
    )
    .await
    .unwrap();
    assert!(probe::zk_session(&eps[follower]).await.is_err());
    assert_eq!(cluster.leader_index().await.unwrap(), Some(leader));
    cluster.heal(follower).await.unwrap();
    wait_for("the healed server to follow again", RECOVERY, || async {
        (probe::zk_mode(&eps[follower]).await.ok()?.as_deref() == Some("follower")).then_some(())
    })
    .await
    .unwrap();

    // Kill the leader: a new one is elected among the others.
    cluster.kill(leader).await.unwrap();
    assert_refused(probe::zk_four_letter(&eps[leader], "ruok").await);
    let new = cluster
        .await_leader(RECOVERY, |i| i != leader)
        .await
        .unwrap();
    assert_ne!(new, leader);
    probe::zk_session(&eps[new]).await.unwrap();
    cluster.start_node(leader).await.unwrap();
    assert_eq!(
        probe::zk_mode(&eps[leader]).await.unwrap().as_deref(),
        Some("follower")
    );

    // Pause a follower: it times out; the quorum serves.
    let paused = (new + 1) % 3;
    cluster.pause(paused).await.unwrap();
    assert_times_out(probe::zk_four_letter(&eps[paused], "ruok").await);
    probe::zk_session(&eps[new]).await.unwrap();
    cluster.unpause(paused).await.unwrap();
    wait_for("the unpaused server to serve", RECOVERY, || async {
        probe::zk_mode(&eps[paused]).await.ok().flatten()
    })
    .await
    .unwrap();

    drop_and_assert_removed(cluster).await;
}

#[tokio::test]
async fn redis_single_master_serves_and_survives_pause_and_kill() {
    let (cluster, eps) = start(Topology::Redis { masters: 1 }).await;
    let ep = &eps[0];
    assert!(
        cluster.leader_index().await.is_err(),
        "masters have no leader"
    );

    let before = cluster.stats(0).await.unwrap();
    assert_eq!(
        redis(ep, &[b"SET", b"k", b"v"]).await,
        Resp::Simple("OK".into())
    );
    assert_eq!(
        redis(ep, &[b"GET", b"k"]).await,
        Resp::Bulk(Some(b"v".to_vec()))
    );
    let delta = cluster.stats(0).await.unwrap().since(&before);
    assert_eq!(delta.get("cmdstat_set.calls"), 1, "{delta:?}");
    assert_eq!(delta.get("cmdstat_get.calls"), 1, "{delta:?}");

    cluster.pause(0).await.unwrap();
    assert_times_out(probe::redis_command(ep, &[b"PING"]).await);
    cluster.unpause(0).await.unwrap();
    assert_pong(ep).await;

    // No peers: a partition leaves the master serving its clients.
    cluster.partition(0).await.unwrap();
    assert_pong(ep).await;
    cluster.heal(0).await.unwrap();

    // Killed: refused; started: same port, and empty (no persistence).
    cluster.kill(0).await.unwrap();
    assert_refused(probe::redis_command(ep, &[b"PING"]).await);
    cluster.start_node(0).await.unwrap();
    assert_eq!(redis(ep, &[b"GET", b"k"]).await, Resp::Bulk(None));

    drop_and_assert_removed(cluster).await;
}

#[tokio::test]
async fn redis_three_masters_are_independent() {
    let (cluster, eps) = start(Topology::Redis { masters: 3 }).await;
    assert_eq!(
        redis(&eps[0], &[b"SET", b"k", b"0"]).await,
        Resp::Simple("OK".into())
    );
    assert_eq!(redis(&eps[1], &[b"GET", b"k"]).await, Resp::Bulk(None));

    cluster.kill(1).await.unwrap();
    assert_refused(probe::redis_command(&eps[1], &[b"PING"]).await);
    for i in [0, 2] {
        assert_pong(&eps[i]).await;
    }
    cluster.restart(1).await.unwrap();
    assert_pong(&eps[1]).await;
    let total = cluster.stats_total().await.unwrap();
    assert!(total.get("cmdstat_set.calls") >= 1, "{total:?}");

    drop_and_assert_removed(cluster).await;
}
