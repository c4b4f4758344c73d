//! Waiting in line (the crate README's "Waiting in line"): the Lease names
//! the next two waiters in labels, the others wait in the queue Lease; a
//! named waiter that is gone is passed over one grace after its turn, and
//! one that withdraws names the next in line in its place.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{env, granted_within, hold, wait_for_grant, Env, TTL};
use k8s_openapi::api::coordination::v1::Lease;
use tenure_conformance::{Link, LinkFault};
use tenure_core::LeaseBackend;
use tenure_testkit::harness::wait_for;
use tokio::time::Instant;

const NEXT: &str = "tenure.dev/next-";
const WAITER: &str = "tenure.dev/waiter-";

/// One grace at the common TTL of 2 s: TTL/8, at least 250 ms.
const GRACE: Duration = Duration::from_millis(250);

/// The tags `lease` names next in line.
fn named(lease: &Lease) -> Vec<String> {
    let labels = lease.metadata.labels.clone().unwrap_or_default();
    labels
        .keys()
        .filter_map(|k| k.strip_prefix(NEXT).map(str::to_owned))
        .collect()
}

/// The queue's entries: tag to identity.
async fn queued(env: &Env, key: &str) -> BTreeMap<String, String> {
    let Some(queue) = env.raw.get_opt(&format!("{key}-queue")).await.unwrap() else {
        return BTreeMap::new();
    };
    let annotations = queue.metadata.annotations.unwrap_or_default();
    annotations
        .into_iter()
        .filter_map(|(k, v)| {
            let tag = k.strip_prefix(WAITER)?.to_owned();
            let identity = v.split_once(' ')?.1.to_owned();
            Some((tag, identity))
        })
        .collect()
}

/// Waits (up to 10 s) until Lease `key` names `n` waiters; their tags.
async fn until_named(env: &Env, key: &str, n: usize) -> Vec<String> {
    let what = format!("{key} to name {n} waiters");
    wait_for(what, Duration::from_secs(10), || async {
        let lease = env.raw.get(key).await.ok()?;
        let tags = named(&lease);
        (tags.len() == n).then_some(tags)
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_named_waiter_that_is_gone_is_passed_over_one_grace_after_its_turn() {
    let env = env().await;
    let (a, b) = (env.backend().await, env.backend().await);
    let (gone, link) = env.proxied_backend().await;
    let lease = hold(&a, "gone", "a").await;
    let first = wait_for_grant(&gone, "gone", "first");
    let first_tag = until_named(&env, "gone", 1).await;
    let second = wait_for_grant(&b, "gone", "second");
    until_named(&env, "gone", 2).await;
    // The first in line can no longer hear or write anything.
    link.set(LinkFault::Blackhole).await.unwrap();

    let released = Instant::now();
    a.release(&lease).await.unwrap();
    let (granted, at) = granted_within(TTL, second, "the second in line led").await;
    let took = at - released;
    assert!(
        took >= GRACE && took <= GRACE + Duration::from_millis(750),
        "the second in line led {took:?} after the release (one grace is {GRACE:?})"
    );
    assert_eq!(granted.holder().as_str(), "second");
    // Its take-over passed the first over: the Lease no longer names it.
    let now = env.raw.get("gone").await.unwrap();
    assert!(!named(&now).contains(&first_tag[0]), "{:?}", now.metadata);
    first.abort();
    link.set(LinkFault::Pass).await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dropped_waiter_names_the_next_in_line_in_its_place() {
    let env = env().await;
    let backends = [
        env.backend().await,
        env.backend().await,
        env.backend().await,
        env.backend().await,
    ];
    let lease = hold(&backends[0], "dropped", "a").await;
    let w1 = wait_for_grant(&backends[1], "dropped", "w1");
    let [w1_tag] = <[String; 1]>::try_from(until_named(&env, "dropped", 1).await).unwrap();
    let w2 = wait_for_grant(&backends[2], "dropped", "w2");
    until_named(&env, "dropped", 2).await;
    // The line is full: the third waits in the queue.
    let w3 = wait_for_grant(&backends[3], "dropped", "w3");
    let queue = wait_for("w3 to queue", Duration::from_secs(10), || async {
        let queue = queued(&env, "dropped").await;
        (queue.len() == 1).then_some(queue)
    })
    .await
    .unwrap();
    let (w3_tag, identity) = queue.into_iter().next().unwrap();
    assert_eq!(identity, "w3");

    // w1 withdraws: w3 is named in its place.
    w1.abort();
    let tags = wait_for("w1 to be unnamed", Duration::from_secs(10), || async {
        let tags = named(&env.raw.get("dropped").await.ok()?);
        (!tags.contains(&w1_tag)).then_some(tags)
    })
    .await
    .unwrap();
    assert_eq!(tags.len(), 2, "{tags:?}");
    assert!(tags.contains(&w3_tag), "{tags:?}");

    // The release goes to w2 at once, then w3's turn comes at once.
    let released = Instant::now();
    backends[0].release(&lease).await.unwrap();
    let (granted, at) = granted_within(TTL, w2, "w2 led").await;
    assert!(at - released < GRACE, "w2 led {:?} after", at - released);
    let released = Instant::now();
    backends[2].release(&granted).await.unwrap();
    let (granted, at) = granted_within(TTL, w3, "w3 led").await;
    assert!(at - released < GRACE, "w3 led {:?} after", at - released);
    assert_eq!(granted.holder().as_str(), "w3");
    // Granted, w3 left the queue.
    wait_for("w3 to leave the queue", Duration::from_secs(10), || async {
        queued(&env, "dropped").await.is_empty().then_some(())
    })
    .await
    .unwrap();
    backends[3].release(&granted).await.unwrap();
}
