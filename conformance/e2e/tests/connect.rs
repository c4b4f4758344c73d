//! `tenure::connect` end to end, as a user would call it: for every scheme a
//! real server in a container (the Kubernetes one is the Lease API test
//! server over etcd), two clients made from the same URL, one leads, the
//! other sees it lead and takes over once it resigns.

use std::time::Duration;

use futures::StreamExt;
use tenure::{Elector, LeaderEvent};
use tenure_lease_server::LeaseServer;
use tenure_testkit::harness::{Cluster, Topology};

const TTL: Duration = Duration::from_secs(2);

/// Two candidates from `url`: a leads, b sees a lead and takes over at a's
/// resignation, with a greater token where the backend fences.
async fn hand_over(url: &str, fences: bool) {
    let elector = |who: &'static str| async move {
        let backend = tenure::connect(url)
            .await
            .unwrap_or_else(|e| panic!("{url}: {e}"));
        let mut builder = Elector::builder(backend)
            .key("connect-e2e")
            .identity(who)
            .ttl(TTL);
        if !fences {
            builder = builder.allow_unfenced();
        }
        builder.build().unwrap()
    };
    let (a, b) = (elector("a").await, elector("b").await);
    let led = a.campaign().await.unwrap();
    assert_eq!(
        led.token().is_some(),
        fences,
        "{url}: token {:?}",
        led.token()
    );
    let mut seen = b.observe();
    let first = tokio::time::timeout(TTL, seen.next()).await.unwrap();
    assert!(
        matches!(&first, Some(LeaderEvent::Elected(info)) if info.identity.as_str() == "a"),
        "{url}: b first saw {first:?}"
    );
    let standby = tokio::spawn(async move { b.campaign().await.map(|l| (b, l)) });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let token = led.token();
    let resigned = tokio::time::Instant::now();
    led.resign().await.unwrap();
    let (b, took_over) = tokio::time::timeout(TTL, standby)
        .await
        .unwrap_or_else(|_| panic!("{url}: b did not lead within a TTL of a's resignation"))
        .unwrap()
        .unwrap();
    println!("{url}: hand-over in {:?}", resigned.elapsed());
    if fences {
        assert!(
            took_over.token() > token,
            "{url}: tokens {token:?} then {:?}",
            took_over.token()
        );
    }
    took_over.resign().await.unwrap();
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_scheme_connects_and_hands_over() {
    let (etcd, zk, redis) = tokio::join!(
        Cluster::start(Topology::Etcd { nodes: 1 }),
        Cluster::start(Topology::ZooKeeper { nodes: 1 }),
        Cluster::start(Topology::Redis { masters: 1 }),
    );
    let (etcd, zk, redis) = (etcd.unwrap(), zk.unwrap(), redis.unwrap());
    let etcd_url = format!("etcd://{}/connect-e2e/", etcd.endpoints().join(","));
    hand_over(&etcd_url, true).await;
    let zk_url = format!(
        "zk://{}/connect-e2e?session_timeout=2s&tick_time=200ms",
        zk.endpoints().join(",")
    );
    hand_over(&zk_url, true).await;
    hand_over(
        &format!(
            "redis://{}?allow_unfenced=true",
            redis.endpoints().join(",")
        ),
        false,
    )
    .await;
    let etcd_http: Vec<String> = etcd
        .endpoints()
        .iter()
        .map(|e| format!("http://{e}"))
        .collect();
    let lease_server = LeaseServer::start(&etcd_http).await.unwrap();
    let kubeconfig = lease_server.kubeconfig_file().unwrap();
    hand_over(&kubeconfig.url(), true).await;
}

#[tokio::test]
async fn bad_urls_name_the_field_before_any_connection() {
    for url in [
        "etcd://",
        "zk://h:2181?bogus=1",
        "kube://h:1/",
        "redis://h:6379",
        "nosuch://h:1",
        "h:2379",
    ] {
        match tenure::connect(url).await {
            Err(tenure::Error::InvalidArgument { field, .. }) => {
                assert!(
                    field == "url" || field == "allow_unfenced",
                    "{url}: {field}"
                )
            }
            Err(other) => panic!("{url}: expected InvalidArgument, got {other}"),
            Ok(_) => panic!("{url}: connected"),
        }
    }
}
