//! `Elector::shutdown` with every etcd member out of reach: the README
//! promises it returns once the lease is released or, failing that, given
//! up after about one TTL. (A file of its own: `shutdown` waits for every
//! cleanup of the process, and other tests' cleanups would count.)

mod common;


use common::{client, etcd, TTL};
use tenure_core::Elector;
use tokio::time::Instant;

#[tokio::test(flavor = "multi_thread")]
async fn shutdown_with_etcd_out_of_reach_takes_about_one_ttl() {
    let cluster = etcd().await;
    let a = client(&cluster).await;
    let elector = Elector::builder(a.clone())
        .key("shutdown-unreachable")
        .identity("a")
        .ttl(TTL)
        .build()
        .unwrap();
    let leadership = elector.campaign().await.unwrap();
    drop(a);
    cluster.kill(0).await.expect("etcd stopped");
    let started = Instant::now();
    drop(leadership);
    elector.shutdown().await;
    let took = started.elapsed();
    eprintln!("shutdown took {took:?} with etcd out of reach");
    // One TTL of release tries (bounded by the Elector's own timeout), the
    // close's revoke (an eighth of the TTL) and an eighth for a loaded
    // machine. Before, the dropped term's cleanup tried its delete for
    // another TTL after the release had given up: 3.06 s here.
    let bound = TTL + TTL / 4;
    assert!(
        took <= bound,
        "shutdown took {took:?} with etcd out of reach (bound {bound:?}: about one TTL)"
    );
}
