//! Waiting in line (the crate README's "Waiting in line"): the Lease names
//! the next two waiters in labels, the others wait in the queue Lease; a
//! named waiter that is gone is passed over one grace after its turn, and
//! one that withdraws names the next in line in its place.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{env, granted_within, hold, wait_for_grant, Env, TTL};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::PostParams;
use tenure_conformance::{Link, LinkFault};
use tenure_core::LeaseBackend;
use tenure_lease_server::Requests;
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

/// Waits (up to 10 s) until the queue of `key` lists `identity`; its tag.
async fn until_queued(env: &Env, key: &str, identity: &str) -> String {
    let what = format!("{identity} to queue for {key}");
    wait_for(what, Duration::from_secs(10), || async {
        let queue = queued(env, key).await;
        queue
            .into_iter()
            .find_map(|(tag, who)| (who == identity).then_some(tag))
    })
    .await
    .unwrap()
}

/// How long a queued waiter may take to lead after a release when both
/// waiters the Lease names are gone: the named ones hold back none and one
/// grace, everyone after them two; the rest covers the release, the watch
/// event that tells the waiter, and its take-over, three round trips to a
/// server on this host, with room for a loaded machine (each is a few
/// milliseconds; the old wait was a periodic look, seconds at this TTL).
const AFTER_TWO_TURNS: Duration = Duration::from_millis(2 * 250 + 500);

/// Issue 44: when both waiters the Lease names are gone (crashed, cut off,
/// exited without withdrawing), a release must still reach the waiters in
/// the queue, who heard nothing of the Lease: the next in line leads once
/// the named ones' turns have passed, not at its next periodic look.
#[tokio::test(flavor = "multi_thread")]
async fn a_release_reaches_the_queue_when_both_named_waiters_are_gone() {
    let env = env().await;
    let (a, w) = (env.backend().await, env.backend().await);
    let (g1, link1) = env.proxied_backend().await;
    let (g2, link2) = env.proxied_backend().await;
    let lease = hold(&a, "gone-both", "a").await;
    let first = wait_for_grant(&g1, "gone-both", "g1");
    until_named(&env, "gone-both", 1).await;
    let second = wait_for_grant(&g2, "gone-both", "g2");
    until_named(&env, "gone-both", 2).await;
    let queued_waiter = wait_for_grant(&w, "gone-both", "w");
    until_queued(&env, "gone-both", "w").await;
    // Both named waiters can no longer hear or write anything.
    link1.set(LinkFault::Blackhole).await.unwrap();
    link2.set(LinkFault::Blackhole).await.unwrap();

    let released = Instant::now();
    a.release(&lease).await.unwrap();
    let (granted, at) = granted_within(
        Duration::from_secs(15),
        queued_waiter,
        "the queued waiter led",
    )
    .await;
    let took = at - released;
    eprintln!("with both named waiters gone, the queued waiter led {took:?} after the release");
    assert!(
        took <= AFTER_TWO_TURNS,
        "the queued waiter led {took:?} after the release, with both named waiters gone \
         (bound {AFTER_TWO_TURNS:?}: two graces of {GRACE:?} and room for three round trips)"
    );
    assert_eq!(granted.holder().as_str(), "w");
    w.release(&granted).await.unwrap();
    first.abort();
    second.abort();
    link1.set(LinkFault::Pass).await.unwrap();
    link2.set(LinkFault::Pass).await.unwrap();
}

/// A waiter's queue entry as a crashed waiter of an earlier tenure left it
/// (`<order> <identity>`), joined `age` ago.
fn ghost_entry(age: Duration) -> String {
    let order = std::time::SystemTime::now() - age;
    let micros = order
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros();
    format!("{micros} ghost")
}

/// Issue 44: ghosts in the line, waiters that crashed long ago: the Lease
/// names two that are gone, and the queue holds two more entries ahead of
/// the one live waiter. Entries expire: the release reaches the live
/// waiter, who leads once the named ones' turns have passed, and the
/// ghosts' entries leave the queue.
#[tokio::test(flavor = "multi_thread")]
async fn ghost_entries_in_the_queue_neither_stall_the_line_nor_stay() {
    let env = env().await;
    let (a, w) = (env.backend().await, env.backend().await);
    let key = "ghosts";
    let lease = hold(&a, key, "a").await;
    let hour = Duration::from_secs(3600);
    let mut planted = env.raw.get(key).await.unwrap();
    planted.metadata.labels = Some(
        [
            (format!("{NEXT}00000000000000a1"), "1".to_owned()),
            (format!("{NEXT}00000000000000a2"), "2".to_owned()),
        ]
        .into(),
    );
    env.raw
        .replace(key, &PostParams::default(), &planted)
        .await
        .unwrap();
    let mut queue = Lease::default();
    queue.metadata.name = Some(format!("{key}-queue"));
    queue.metadata.annotations = Some(
        [
            ("tenure.dev/queue-for".to_owned(), key.to_owned()),
            (format!("{WAITER}00000000000000b1"), ghost_entry(hour)),
            (format!("{WAITER}00000000000000b2"), ghost_entry(hour / 2)),
        ]
        .into(),
    );
    queue.spec = Some(Default::default());
    env.raw
        .create(&PostParams::default(), &queue)
        .await
        .unwrap();
    // The renewal after the planting: the holder wrote the Lease as it is.
    let lease = a.renew(&lease).await.unwrap();

    let waiting = wait_for_grant(&w, key, "w");
    until_queued(&env, key, "w").await;
    let released = Instant::now();
    a.release(&lease).await.unwrap();
    let (granted, at) =
        granted_within(Duration::from_secs(15), waiting, "the live waiter led").await;
    let took = at - released;
    eprintln!("behind ghosts in line, the live waiter led {took:?} after the release");
    assert!(
        took <= AFTER_TWO_TURNS,
        "the live waiter led {took:?} after the release, behind ghosts in line \
         (bound {AFTER_TWO_TURNS:?})"
    );
    let left = wait_for(
        "the ghosts to leave the queue",
        Duration::from_secs(10),
        || async {
            let queue = queued(&env, key).await;
            queue.is_empty().then_some(())
        },
    )
    .await;
    assert!(
        left.is_ok(),
        "ghost entries stayed in the queue: {:?}",
        queued(&env, key).await
    );
    w.release(&granted).await.unwrap();
}

/// Issue 44: a waiter whose join of the queue failed once (429 with
/// `Retry-After`: API Priority and Fairness shedding load) joins again
/// after it, keeping its place: it came before a waiter that joined
/// later, and is named before it.
#[tokio::test(flavor = "multi_thread")]
async fn a_waiter_whose_join_failed_joins_again_and_keeps_its_place() {
    let env = env().await;
    let backends = [
        env.backend().await,
        env.backend().await,
        env.backend().await,
        env.backend().await,
        env.backend().await,
    ];
    let key = "rejoin";
    let lease = hold(&backends[0], key, "a").await;
    let w1 = wait_for_grant(&backends[1], key, "w1");
    until_named(&env, key, 1).await;
    let w2 = wait_for_grant(&backends[2], key, "w2");
    until_named(&env, key, 2).await;
    env.server
        .refuse_next(Requests::Patch, 1, 429, Some(Duration::from_secs(1)));
    let w3 = wait_for_grant(&backends[3], key, "w3");
    wait_for(
        "w3's join to be refused",
        Duration::from_secs(10),
        || async { (!env.server.refusing(Requests::Patch)).then_some(()) },
    )
    .await
    .unwrap();
    let w4 = wait_for_grant(&backends[4], key, "w4");
    until_queued(&env, key, "w4").await;
    // After the Retry-After (1 s) and a back-off, w3 is in line again.
    let rejoined = wait_for("w3 to join again", Duration::from_secs(5), || async {
        let queue = queued(&env, key).await;
        queue
            .into_iter()
            .find_map(|(tag, who)| (who == "w3").then_some(tag))
    })
    .await;
    let w3_tag = rejoined.unwrap_or_else(|_| {
        panic!(
            "w3, whose join was refused once (429, Retry-After: 1), was not in the queue 5 s \
             later; it never joins again, and waiters after it are named first"
        )
    });

    // The release goes to w1, who names w3 beside w2: it came before w4.
    backends[0].release(&lease).await.unwrap();
    let (granted, _) = granted_within(TTL, w1, "w1 led").await;
    let now = env.raw.get(key).await.unwrap();
    assert!(
        named(&now).contains(&w3_tag),
        "w1's take-over named {:?}, not w3 ({w3_tag}), which came before w4",
        named(&now)
    );
    backends[1].release(&granted).await.unwrap();
    let (granted, _) = granted_within(TTL, w2, "w2 led").await;
    backends[2].release(&granted).await.unwrap();
    let (granted, _) = granted_within(TTL, w3, "w3 led before w4").await;
    assert_eq!(granted.holder().as_str(), "w3");
    backends[3].release(&granted).await.unwrap();
    let (granted, _) = granted_within(TTL, w4, "w4 led").await;
    backends[4].release(&granted).await.unwrap();
}

/// Issue 44: the queue Lease used to keep an entry for every waiter that
/// ever crashed, until kube-apiserver's limit on an object's annotations
/// (256 KiB in all) refused every join with 422, and every waiter then
/// watched the whole Lease again, silently. Here the queue holds a little
/// under 256 KiB of entries of waiters gone an hour ago: a new waiter's
/// join is refused, deletes the expired entries, and joins.
#[tokio::test(flavor = "multi_thread")]
async fn a_queue_full_of_expired_entries_still_takes_a_new_waiter() {
    let env = env().await;
    let (a, w) = (env.backend().await, env.backend().await);
    let key = "full";
    let lease = hold(&a, key, "a").await;
    // The Lease names two waiters (gone): a new one queues.
    let mut planted = env.raw.get(key).await.unwrap();
    planted.metadata.labels = Some(
        [
            (format!("{NEXT}00000000000000a1"), "1".to_owned()),
            (format!("{NEXT}00000000000000a2"), "2".to_owned()),
        ]
        .into(),
    );
    env.raw
        .replace(key, &PostParams::default(), &planted)
        .await
        .unwrap();
    let identity = format!("ghost-{}", "g".repeat(200));
    let mut annotations = BTreeMap::from([("tenure.dev/queue-for".to_owned(), key.to_owned())]);
    let mut size = annotations
        .iter()
        .map(|(k, v)| k.len() + v.len())
        .sum::<usize>();
    for i in 0.. {
        let entry = (
            format!("{WAITER}{i:016x}"),
            format!(
                "{} {identity}",
                ghost_entry(Duration::from_secs(3600))
                    .split_once(' ')
                    .unwrap()
                    .0
            ),
        );
        let grown = size + entry.0.len() + entry.1.len();
        if grown > 256 * 1024 - 512 {
            break;
        }
        size = grown;
        annotations.insert(entry.0, entry.1);
    }
    let ghosts = annotations.len() - 1;
    // Less room left than one more entry takes (34 bytes of key alone).
    let padding = "example.com/padding".to_owned();
    let fill = 256 * 1024 - 20 - size - padding.len();
    annotations.insert(padding, "p".repeat(fill));
    let size = 256 * 1024 - 20;
    let mut queue = Lease::default();
    queue.metadata.name = Some(format!("{key}-queue"));
    queue.metadata.annotations = Some(annotations);
    queue.spec = Some(Default::default());
    env.raw
        .create(&PostParams::default(), &queue)
        .await
        .unwrap();

    let waiting = wait_for_grant(&w, key, "w");
    let joined = wait_for("w to join the queue", Duration::from_secs(10), || async {
        let queue = queued(&env, key).await;
        queue.values().any(|who| who == "w").then_some(queue.len())
    })
    .await;
    let left = joined.unwrap_or_else(|_| {
        panic!(
            "w did not join a queue holding {ghosts} entries ({size} bytes) of waiters gone an \
             hour ago; the join was refused for the annotations' size"
        )
    });
    assert_eq!(left, 1, "the expired entries stayed: {left} in the queue");
    let queue = env.raw.get(&format!("{key}-queue")).await.unwrap();
    assert!(queue
        .metadata
        .annotations
        .unwrap()
        .contains_key("example.com/padding"));
    a.release(&lease).await.unwrap();
    let (granted, _) = granted_within(Duration::from_secs(15), waiting, "w led").await;
    w.release(&granted).await.unwrap();
}
