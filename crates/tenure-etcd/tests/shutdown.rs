//! `Elector::shutdown` with every etcd member out of reach: the README
//! promises it returns once the lease is released or, failing that, given
//! up after about one TTL. (A file of its own: `shutdown` waits for every
//! cleanup of the process, and other tests' cleanups would count.)

mod common;

use common::{client, etcd, TTL};
use tenure_core::Elector;
use tokio::time::Instant;

/// The tests of this file one at a time: each waits for every cleanup of
/// the process, the other's too.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread")]
async fn shutdown_with_etcd_out_of_reach_takes_about_one_ttl() {
    let _alone = ONE_AT_A_TIME.lock().await;
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

/// A term whose renewal found its key gone (`LeaseLost`) has nothing left
/// to delete: dropping it leaves no cleanup that a shutdown would wait for
/// until the term's deadline.
#[tokio::test(flavor = "multi_thread")]
async fn a_term_found_lost_leaves_no_cleanup_to_wait_for() {
    let _alone = ONE_AT_A_TIME.lock().await;
    use tenure_core::LeaseBackend;
    let cluster = etcd().await;
    let a = client(&cluster).await;
    let lease = common::hold(&a, "lost-then-dropped", "a").await;
    let (key, _, _) = common::keys(&a, "lost-then-dropped/").await.remove(0);
    a.client().kv_client().delete(key, None).await.unwrap();
    assert!(a.renew(&lease).await.is_err(), "renewed a deleted key");
    let deadline = lease.valid_until();
    drop(lease);
    let waited = Instant::now();
    tenure_core::hosted::cleanups_finished().await;
    assert!(
        Instant::now() + TTL / 2 < deadline,
        "the dropped term's cleanup was waited for {:?}, until {:?} before its deadline",
        waited.elapsed(),
        deadline.saturating_duration_since(Instant::now())
    );
}
