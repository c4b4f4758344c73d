//! The adapters that plug harness clusters and fault proxies into the suite:
//! `ClusterServers` does to real etcd containers what `ServerFaults` says,
//! and `ProxyLink` cuts and heals a client's traffic.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tenure_conformance::suite::RECOVERY;
use tenure_conformance::{Link, LinkFault, ServerFaults};
use tenure_testkit::harness::{leftovers, probe, wait_for, Cluster, Topology};
use tenure_testkit::{ClusterServers, ProxyLink};

/// GET /health through `addr` on a fresh connection, within `timeout`.
async fn health(addr: SocketAddr, timeout: Duration) -> reqwest::Result<String> {
    let client = reqwest::Client::builder()
        .timeout(timeout)
        .pool_max_idle_per_host(0)
        .build()?;
    let resp = client.get(format!("http://{addr}/health")).send().await?;
    resp.error_for_status()?.text().await
}

async fn leader_other_than(servers: &ClusterServers, old: usize) -> usize {
    wait_for("a new leader through the adapter", RECOVERY, || async {
        servers.leader().await.ok().flatten().filter(|&i| i != old)
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn cluster_servers_kill_start_restart_and_name_the_leader() {
    let cluster = Arc::new(Cluster::start(Topology::Etcd { nodes: 3 }).await.unwrap());
    let run = cluster.run_id().to_string();
    let servers = ClusterServers::new(cluster.clone());
    assert_eq!(servers.nodes(), 3);
    let leader = servers
        .leader()
        .await
        .unwrap()
        .expect("a leader after start");
    assert_eq!(Some(leader), cluster.leader_index().await.unwrap());

    // A follower: down, then serving again.
    let follower = (leader + 1) % 3;
    servers.kill(follower).await.unwrap();
    assert!(!cluster.serving(follower).await.unwrap());
    servers.start(follower).await.unwrap();
    assert!(cluster.serving(follower).await.unwrap());

    // The servers' leader: another is named, the same the harness names.
    servers.kill(leader).await.unwrap();
    assert!(!cluster.serving(leader).await.unwrap());
    let new = leader_other_than(&servers, leader).await;
    assert_eq!(Some(new), cluster.leader_index().await.unwrap());
    servers.start(leader).await.unwrap();
    assert!(cluster.serving(leader).await.unwrap());

    // Restart everything: every node serves again, with its data and a leader.
    let eps = cluster.endpoints();
    probe::etcd_put(&eps[new], b"adapters/k", b"v1")
        .await
        .unwrap();
    servers.restart_all().await.unwrap();
    for (i, ep) in eps.iter().enumerate() {
        assert!(cluster.serving(i).await.unwrap(), "node {i}");
        let value = probe::etcd_get(ep, b"adapters/k").await.unwrap();
        assert_eq!(value.as_deref(), Some(&b"v1"[..]), "node {i}");
    }
    assert!(servers.leader().await.unwrap().is_some());

    // Misuse is an error, not a panic: no node 7.
    let err = servers.kill(7).await.unwrap_err();
    assert!(matches!(err, tenure_core::Error::Backend { .. }), "{err:?}");

    drop(servers);
    drop(Arc::try_unwrap(cluster).expect("the only handle"));
    assert!(leftovers(Some(&run)).await.unwrap().is_empty());
}

#[tokio::test]
async fn cluster_servers_over_redis_masters_name_no_leader() {
    let cluster = Arc::new(
        Cluster::start(Topology::Redis { masters: 1 })
            .await
            .unwrap(),
    );
    let servers = ClusterServers::new(cluster);
    let err = servers.leader().await.unwrap_err();
    assert!(
        matches!(err, tenure_core::Error::Unsupported { .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn proxy_link_blackholes_delays_and_passes_http() {
    let cluster = Cluster::start(Topology::Etcd { nodes: 1 }).await.unwrap();
    let upstream = cluster.node(0).unwrap().addr();
    let step = Duration::from_secs(2);

    let (link, addr) = ProxyLink::start(upstream).await.unwrap();
    assert_ne!(addr, upstream);
    assert!(health(addr, step).await.unwrap().contains("true"));

    link.set(LinkFault::Blackhole).await.unwrap();
    let cut = health(addr, Duration::from_millis(500)).await;
    assert!(cut.as_ref().is_err_and(|e| e.is_timeout()), "{cut:?}");

    link.set(LinkFault::Pass).await.unwrap();
    assert!(health(addr, step).await.unwrap().contains("true"));

    // A delay of d adds d to a round trip (half each way).
    let d = Duration::from_millis(600);
    link.set(LinkFault::Delay(d)).await.unwrap();
    let sent = Instant::now();
    health(addr, step * 2).await.unwrap();
    assert!(sent.elapsed() >= d, "{:?}", sent.elapsed());
    link.set(LinkFault::Pass).await.unwrap();

    // One link over several endpoints switches every proxy together.
    let (link, addrs) = ProxyLink::start_all(&[upstream, upstream]).await.unwrap();
    assert_eq!(addrs.len(), 2);
    link.set(LinkFault::Blackhole).await.unwrap();
    for addr in &addrs {
        let cut = health(*addr, Duration::from_millis(300)).await;
        assert!(cut.as_ref().is_err_and(|e| e.is_timeout()), "{cut:?}");
    }
    link.set(LinkFault::Pass).await.unwrap();
    for addr in &addrs {
        assert!(health(*addr, step).await.unwrap().contains("true"));
    }
}
