//! One frozen member of three must not hold up a hand-over: the requests
//! that end a term (and those that start one) go to one member at a time,
//! as renewals do, each try bounded well below the request timeout.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{candidacy_with_ttl, hold_with, key_of, wait_for_grant};
use tenure_core::LeaseBackend;
use tenure_etcd::{EtcdBackend, EtcdOptions};
use tenure_testkit::harness::{Cluster, Topology};
use tokio::time::Instant;

/// A TTL at which a request's timeout (the smaller of the TTL and
/// [`EtcdOptions::request_timeout`], 5 s) is 5 s: one request left to a
/// frozen member held a hand-over that long.
const TTL: Duration = Duration::from_secs(5);

/// How long a release may take, and how long after it began the standby
/// must lead, with one member of three frozen. Sound under load: a try on
/// the frozen member gives up after an eighth of the request timeout
/// (625 ms), the next try goes to a member that answers (a guarded delete:
/// one raft write, milliseconds here; a holder hears of a delete within
/// 50 ms at the 99th percentile, lessons.rs), and the standby, whose
/// client reaches only the servers' leader, hears of the delete on its
/// watch and reads its place once: 375 ms are left for those. Before, a
/// request the balanced channel sent to the frozen member waited out the
/// whole 5 s.
const WITHIN: Duration = Duration::from_secs(1);

/// Trials, each with a follower frozen: etcd-client's channel picks a
/// member at random for each request, so the old code sent one trial's
/// release to the frozen member with probability 1/3 (all 12 missing it:
/// (2/3)^12, under 1 %).
const TRIALS: usize = 12;

/// a (a client of all three members) holds, b (a client of the servers'
/// leader alone, so that no pause touches it) waits; the follower a sent
/// its requests to is frozen (`docker pause`: its port still accepts
/// connections, nothing answers); a resigns. Its release must return, and
/// b lead, within [`WITHIN`] of the release's start.
///
/// Each trial's a is a new client whose first endpoint is the follower
/// frozen: a client sends to its first member until it fails a try
/// (members.rs), so the release's first try is the frozen member's, and
/// the trial measures what that costs. (The old code's channel picked at
/// random for each request.)
#[tokio::test(flavor = "multi_thread")]
async fn a_frozen_member_does_not_hold_up_a_release() {
    let cluster = Cluster::start(Topology::Etcd { nodes: 3 })
        .await
        .expect("a 3-member etcd");
    let leader = cluster
        .leader_index()
        .await
        .expect("the members' status")
        .expect("a leader among the members");
    let followers: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
    let endpoint = |i: usize| cluster.node(i).expect("a member").endpoint();
    let b = Arc::new(
        EtcdBackend::connect(&[endpoint(leader)], EtcdOptions::default())
            .await
            .expect("b connects to the servers' leader"),
    );
    for trial in 0..TRIALS {
        let (frozen, other) = (followers[trial % 2], followers[(trial + 1) % 2]);
        let endpoints = [endpoint(frozen), endpoint(other), endpoint(leader)];
        let a = Arc::new(
            EtcdBackend::connect(&endpoints, EtcdOptions::default())
                .await
                .expect("a connects to every member"),
        );
        let name = format!("frozen-{trial}");
        let lease = hold_with(&a, &candidacy_with_ttl(&name, "a", TTL)).await;
        let waiting = wait_for_grant(&b, candidacy_with_ttl(&name, "b", TTL));
        key_of(&b, &format!("{name}/"), "b").await;
        cluster.pause(frozen).await.expect("docker pause");
        let released = Instant::now();
        let result = a.release(&lease).await;
        let release_took = released.elapsed();
        let led = tokio::time::timeout(TTL * 2, waiting).await;
        let b_led_after = released.elapsed();
        cluster.unpause(frozen).await.expect("docker unpause");
        assert!(
            release_took <= WITHIN,
            "trial {trial}: a's release took {release_took:?} ({result:?}) with member {frozen} frozen"
        );
        result.expect("a releases");
        let (outcome, at) = led.expect("b leads within 2 TTL").expect("b's task");
        let b_lease = outcome
            .expect("b's campaign")
            .granted()
            .expect("b is granted");
        let took = at.saturating_duration_since(released);
        assert!(
            took <= WITHIN,
            "trial {trial}: b led {took:?} after a's release began (member {frozen} frozen; b's campaign returned {b_led_after:?} after)"
        );
        println!(
            "trial {trial}: member {frozen} frozen; a's release took {release_took:?}, b led {took:?} after it began"
        );
        b.release(&b_lease).await.expect("b releases");
    }
}
