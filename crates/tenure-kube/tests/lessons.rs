//! The lessons Kubernetes leader election paid for, each as a test against
//! the Lease API test server.

mod common;

use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use common::{
    candidacy, env, env_with, go_lease, granted_within, held_by, hold, leave_free, spec,
    wait_for_grant, wait_with, Env, Waiting, TTL,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::chrono::{TimeDelta, Utc};
use kube::api::PostParams;
use kube::Api;
use tenure_conformance::{Link, LinkFault};
use tenure_core::{AcquireMode, Acquisition, Candidacy, FencingToken, LeaseBackend};
use tenure_kube::KubeBackend;
use tenure_lease_server::Requests;
use tenure_testkit::harness::wait_for;
use tenure_testkit::measure::{p99, until_told_lost};
use tenure_testkit::ProxyLink;
use tokio::task::JoinHandle;
use tokio::time::{timeout, Instant};

/// Waits (up to 10 s) until `landed` says that `task`'s write reached the
/// server, drops `task` while `link` still holds its answer back (the check
/// says it did), then lets `link` pass again.
async fn drop_once_landed<T, F, Fut>(link: &ProxyLink, task: JoinHandle<T>, landed: F, what: &str)
where
    T: Debug,
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<()>>,
{
    wait_for(format!("{what} to land"), Duration::from_secs(10), landed)
        .await
        .unwrap();
    task.abort();
    let cancelled = task.await;
    assert!(
        cancelled.as_ref().is_err_and(|e| e.is_cancelled()),
        "{what}'s answer arrived before it was dropped: {cancelled:?}"
    );
    link.set(LinkFault::Pass).await.unwrap();
}

/// kubernetes#131867: a renewal whose request reached the server but whose
/// answer never came back leaves our resourceVersion stale; the release
/// after it must still free the Lease, not fail on the 409 and leave it held
/// until it expires.
#[tokio::test(flavor = "multi_thread")]
async fn release_after_a_renewal_whose_answer_was_lost_frees_the_lease_at_once() {
    let env = env().await;
    let (a, link) = env.proxied_backend().await;
    let b = env.backend().await;
    let lease = hold(&a, "race", "a").await;
    let before = env.raw.get("race").await.unwrap().metadata.resource_version;

    // 1 s each way: the renewal lands after 1 s, its answer would arrive after 2 s.
    link.set(LinkFault::Delay(Duration::from_secs(2)))
        .await
        .unwrap();
    let renewal = tokio::spawn({
        let (a, lease) = (a.clone(), lease.clone());
        async move { a.renew(&lease).await }
    });
    let landed = || {
        let (raw, before) = (env.raw.clone(), before.clone());
        async move {
            let now = raw.get("race").await.ok()?.metadata.resource_version;
            (now != before).then_some(())
        }
    };
    drop_once_landed(&link, renewal, landed, "the renewal").await;

    let released = Instant::now();
    a.release(&lease).await.expect("release");
    let took = released.elapsed();
    let after = spec(&env.raw, "race").await;
    assert_eq!(
        after.holder_identity.as_deref(),
        Some(""),
        "the release left the Lease held: {after:?}"
    );
    assert_eq!(after.lease_duration_seconds, Some(1));
    assert!(took < TTL, "the release took {took:?}");
    // Another candidate takes the released Lease at once.
    hold(&b, "race", "b").await;
}

/// kubernetes#131867 again, in process: renewals and releases of one lease
/// started together, in either order, always leave the Lease free for the
/// next candidate at once; a renewal that ran after the release says so.
#[tokio::test(flavor = "multi_thread")]
async fn release_racing_a_renewal_always_leaves_the_lease_free() {
    let (env, [a, b]) = env_with().await;
    for round in 0..12u64 {
        let lease = hold(&a, "race", "a").await;
        let renewal = tokio::spawn({
            let (a, lease) = (a.clone(), lease.clone());
            async move {
                tokio::time::sleep(Duration::from_millis(round % 3)).await;
                a.renew(&lease).await
            }
        });
        let release = tokio::spawn({
            let (a, lease) = (a.clone(), lease.clone());
            async move {
                tokio::time::sleep(Duration::from_millis(round % 4)).await;
                a.release(&lease).await
            }
        });
        let (renewed, released) = (renewal.await.unwrap(), release.await.unwrap());
        released.expect("release");
        if let Err(e) = renewed {
            assert!(e.is_lease_lost(), "round {round}: renewal failed: {e}");
        }
        let after = spec(&env.raw, "race").await;
        assert_eq!(
            after.holder_identity.as_deref(),
            Some(""),
            "round {round}: left held: {after:?}"
        );
        let lease_b = b
            .acquire(&candidacy("race", "b"), AcquireMode::Once)
            .await
            .unwrap()
            .granted()
            .unwrap_or_else(|| panic!("round {round}: b could not take the released Lease"));
        b.release(&lease_b).await.unwrap();
    }
}

/// After a release, the lease is gone: renewing it is `LeaseLost` and
/// writes nothing (it must not "renew" the released record); a second
/// release is a no-op.
#[tokio::test(flavor = "multi_thread")]
async fn renew_after_release_is_lease_lost_and_writes_nothing() {
    let (env, [a]) = env_with().await;
    let lease = hold(&a, "done", "a").await;
    a.release(&lease).await.unwrap();
    let released = env.raw.get("done").await.unwrap();
    let writes = env.server.writes();
    let err = a.renew(&lease).await.expect_err("renewed a released lease");
    assert!(err.is_lease_lost(), "{err}");
    a.release(&lease).await.expect("a second release");
    assert_eq!(env.server.writes(), writes, "wrote after the release");
    assert_eq!(env.raw.get("done").await.unwrap(), released);
}

/// kube-leader-election: taking a free Lease without resourceVersion lets two
/// candidates both win. Every write is a compare-and-swap: of two candidates
/// racing for a free (missing or released) Lease, exactly one is granted and
/// the other is told who holds it.
#[tokio::test(flavor = "multi_thread")]
async fn two_candidates_racing_for_a_free_lease_never_both_win() {
    let (_env, [a, b]) = env_with().await;
    let mut tokens = Vec::new();
    for round in 0..10 {
        let (wants_a, wants_b) = (candidacy("contested", "a"), candidacy("contested", "b"));
        let (ra, rb) = tokio::join!(
            a.acquire(&wants_a, AcquireMode::Once),
            b.acquire(&wants_b, AcquireMode::Once)
        );
        let (winner, lease, loser) = match (ra.unwrap(), rb.unwrap()) {
            (Acquisition::Granted(l), Acquisition::Held(h)) => (&a, l, h),
            (Acquisition::Held(h), Acquisition::Granted(l)) => (&b, l, h),
            (ra, rb) => panic!(
                "round {round}: a granted {}, b granted {}",
                ra.granted().is_some(),
                rb.granted().is_some()
            ),
        };
        assert_eq!(&loser.identity, lease.holder(), "round {round}");
        assert_eq!(loser.token, lease.token(), "round {round}");
        tokens.push(lease.token().unwrap().get());
        winner.release(&lease).await.unwrap();
    }
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens did not strictly increase: {tokens:?}"
    );
}

/// `b` waiting for `key` in the background, once it has read the Lease and
/// watches it; the task ends with b's answer and when it came.
async fn waits(b: &Arc<KubeBackend>, key: &str) -> Waiting {
    let waiting = wait_for_grant(b, key, "b");
    tokio::time::sleep(Duration::from_millis(300)).await;
    waiting
}

/// A release written right after a renewal reaches a waiting candidate at
/// once. The renewal is an event the standby sees; had it watched anew from
/// that event, the release would often land first, before the new watch
/// existed, and reach it only through etcd's catch-up loop (every 100 ms).
#[tokio::test(flavor = "multi_thread")]
async fn a_release_right_after_a_renewal_reaches_a_waiting_candidate_at_once() {
    let (_env, [a, b]) = env_with().await;
    let mut took = Vec::new();
    for round in 0..8 {
        let key = format!("renew-then-release-{round}");
        let lease = hold(&a, &key, "a").await;
        let waiting = waits(&b, &key).await;
        let lease = a.renew(&lease).await.expect("renew");
        let released = Instant::now();
        a.release(&lease).await.expect("release");
        let (granted, at) = granted_within(TTL, waiting, "b was granted within the TTL").await;
        b.release(&granted).await.unwrap();
        took.push(at - released);
    }
    took.sort();
    eprintln!("from the release to b's grant, sorted: {took:?}");
    // Through the catch-up loop, a release reaches the waiter 0 to 100 ms
    // late, often: the median and the sixth of eight samples show it. The
    // slowest sample is not judged: with the suites' fault cases running
    // beside this test on two cores, one sample in some runs took longer
    // than 60 ms even with the waiter watching from the right revision.
    let (median, most) = (took[took.len() / 2], took[took.len() * 3 / 4 - 1]);
    assert!(
        median <= Duration::from_millis(25) && most <= Duration::from_millis(60),
        "from the release to b's grant, sorted: {took:?}"
    );
}

/// A waiting candidate whose watch is answered 410 Gone (etcd compacted
/// past the Lease's resourceVersion) lists the Lease, as client-go's
/// reflector does, and watches on from the list's resourceVersion: it waits
/// quietly, however long the Lease stays unchanged, and is granted at once
/// on release. Watching again from the Lease's own resourceVersion would be
/// refused again and again, a request loop until the holder next writes.
#[tokio::test(flavor = "multi_thread")]
async fn a_waiting_candidate_answered_410_gone_waits_quietly_and_leads_at_once() {
    let (env, [a, b]) = env_with().await;
    let lease = hold(&a, "compacted", "a").await;
    let waiting = waits(&b, "compacted").await;
    env.server.expire_watches().await.expect("compaction");
    tokio::time::sleep(Duration::from_millis(100)).await;
    // a writes nothing for 600 ms (well within the TTL): b must not either.
    let before = env.server.served();
    tokio::time::sleep(Duration::from_millis(600)).await;
    let served = env.server.served() - before;
    let released = Instant::now();
    a.release(&lease).await.expect("release");
    let (_, at) = granted_within(TTL, waiting, "b was granted within the TTL").await;
    let took = at - released;
    eprintln!("after 410 Gone: {served} served in 600 ms; release to grant {took:?}");
    assert!(
        served <= 2,
        "the waiting candidate made the server serve {served} requests and events in 600 ms \
         after its watch was answered 410 Gone"
    );
    // "At once": 6-8 ms alone on 2 cores, 62 ms once in CI with both suite
    // lanes beside it. 90 ms still fails a waiter that went through the
    // watch-error path (100 ms asleep before it lists again); a waiter
    // that loops on 410 fails the request count above.
    assert!(
        took <= Duration::from_millis(90),
        "from the release to b's grant: {took:?}"
    );
}

/// client-go#448: expiry is judged by how long this process has seen the
/// record unchanged, never by renewTime against local wall time. A holder
/// whose clock is an hour behind is not taken at once; one whose clock is an
/// hour ahead does not keep the Lease for an hour.
#[tokio::test(flavor = "multi_thread")]
async fn renew_time_from_a_skewed_clock_neither_frees_nor_pins_a_lease() {
    let env = env().await;
    let duration_secs = TTL.as_secs() as i32;
    let mut written = std::collections::HashMap::new();
    for (name, skew) in [("behind", -3600), ("ahead", 3600)] {
        let mut lease = go_lease(name, &format!("clock-{name}"), duration_secs, 2);
        let spec = lease.spec.as_mut().unwrap();
        let skewed = MicroTime(Utc::now() + TimeDelta::seconds(skew));
        spec.renew_time = Some(skewed.clone());
        spec.acquire_time = Some(skewed);
        let created = env
            .raw
            .create(&PostParams::default(), &lease)
            .await
            .unwrap();
        written.insert(name, common::rv(&created));
    }
    let tenure = env.backend().await;
    let first_look = Instant::now();
    for name in ["behind", "ahead"] {
        // Not taken: it has never seen the Lease unchanged.
        let holder = held_by(&tenure, name, "rust").await;
        assert_eq!(holder.identity.as_str(), format!("clock-{name}"));
    }
    let waits: Vec<_> = ["behind", "ahead"]
        .into_iter()
        .map(|name| (name, wait_for_grant(&tenure, name, "rust")))
        .collect();
    for (name, wait) in waits {
        let (lease, at) = granted_within(TTL + Duration::from_secs(3), wait, "never taken").await;
        let after = at - first_look;
        println!("{name}: taken {after:?} after the first look");
        assert!(
            after >= TTL,
            "{name}: taken after {after:?}, before leaseDurationSeconds"
        );
        assert!(
            after <= TTL + Duration::from_secs(1),
            "{name}: taken only after {after:?}"
        );
        let token = lease.token().expect("a token");
        assert!(
            token > FencingToken::new(written[name]),
            "{name}: token {token} is not above the taken Lease's resourceVersion"
        );
    }
}

/// Tokens survive the Lease being deleted out of band: after a few terms,
/// an operator deletes the Lease; the next grant's token is still above
/// every earlier one, so a `Fence` that saw the deposed holder's token takes
/// the new leader's writes.
#[tokio::test(flavor = "multi_thread")]
async fn token_after_the_lease_is_deleted_out_of_band_is_above_every_earlier_one() {
    let (env, [a, b]) = env_with().await;
    for _ in 0..3 {
        leave_free(&b, "deleted", "b").await;
    }
    let old = hold(&a, "deleted", "a").await;
    let old_token = old.token().expect("a token");

    env.raw
        .delete("deleted", &Default::default())
        .await
        .unwrap();
    let new = hold(&b, "deleted", "b").await;
    let new_token = new.token().expect("a token");
    assert!(
        new_token > old_token,
        "the token after the Lease was deleted ({new_token}) is not above the deposed holder's ({old_token})"
    );

    let fence = tenure_core::Fence::new();
    fence
        .check("invoices", old_token)
        .expect("the deposed holder's write, while it led");
    fence
        .check("invoices", new_token)
        .expect("the new leader's write was refused by the fence");
    assert!(
        fence.check("invoices", old_token).is_err(),
        "the deposed holder's write was accepted after the new leader's"
    );
}

/// A campaign dropped while its granting write is in flight (sent, answer
/// not yet read) leaves nothing behind: if the write landed, a cleanup
/// releases it, and a standby leads within a few hundred milliseconds
/// instead of waiting out the TTL of a Lease nobody renews. Here the Lease
/// does not exist yet.
#[tokio::test(flavor = "multi_thread")]
async fn acquire_dropped_while_its_write_is_in_flight_leaves_the_lease_free() {
    let env = env().await;
    let (a, link) = env.proxied_backend().await;
    dropped_grant_is_released(&env, a, link, "in-flight").await;
}

/// The same with a Lease that exists and is free: the grant is a take-over.
#[tokio::test(flavor = "multi_thread")]
async fn acquire_dropped_while_its_take_over_is_in_flight_leaves_the_lease_free() {
    let (env, [b]) = env_with().await;
    leave_free(&b, "in-flight", "b").await;
    let (a, link) = env.proxied_backend().await;
    dropped_grant_is_released(&env, a, link, "in-flight").await;
}

/// The same with leaseTransitions tokens, where a new Lease is granted by
/// its create.
#[tokio::test(flavor = "multi_thread")]
async fn acquire_dropped_while_its_create_is_in_flight_leaves_the_lease_free_with_lease_transitions(
) {
    let env = env().await;
    let (a, link) = env.proxied_backend_with(common::lease_transitions()).await;
    dropped_grant_is_released(&env, a, link, "in-flight").await;
}

/// Drops `a`'s campaign for `key` once its granting write has landed but
/// before its answer is read, and checks that a standby leads at once.
async fn dropped_grant_is_released(
    env: &Env,
    a: Arc<KubeBackend>,
    link: Arc<ProxyLink>,
    key: &str,
) {
    let b = env.backend().await;
    // A long TTL, so that requests slowed to 2 s stay within their deadline
    // (the TTL caps it) and a Lease left held would be held for long.
    const LONG: Duration = Duration::from_secs(10);
    let wants = |who: &str| Candidacy::parse(key, who, LONG).unwrap();

    // 1 s each way: a's write lands 1 s after it was sent, its answer would
    // come 1 s later.
    link.set(LinkFault::Delay(Duration::from_secs(2)))
        .await
        .unwrap();
    let campaign = wait_with(&a, wants("a"));
    let landed = || {
        let raw = env.raw.clone();
        async move {
            let spec = raw.get_opt(key).await.ok()??.spec?;
            (spec.holder_identity.as_deref() == Some("a")).then_some(())
        }
    };
    drop_once_landed(&link, campaign, landed, "a's write").await;

    let dropped = Instant::now();
    let standby = wait_with(&b, wants("b"));
    granted_within(
        LONG + Duration::from_secs(3),
        standby,
        "the standby never led",
    )
    .await;
    let took = dropped.elapsed();
    println!("the standby led {took:?} after the campaign was dropped");
    assert!(
        took < Duration::from_millis(500),
        "the standby led only {took:?} after the campaign was dropped: the dropped campaign's grant was left held"
    );
    assert_eq!(
        spec(&env.raw, key).await.holder_identity.as_deref(),
        Some("b")
    );
}

/// A holder whose Lease is deleted out of band (`kubectl delete lease`, a
/// namespace cleanup) learns it from the watch it keeps on its own Lease,
/// not at its next renewal (up to a third of the TTL later): its lease is no
/// longer valid within 50 ms of the delete, at the 99th percentile of 100
/// deletes.
#[tokio::test(flavor = "multi_thread")]
async fn a_holder_whose_lease_is_deleted_stops_being_valid_within_50ms() {
    let (env, [a]) = env_with().await;
    let mut took = Vec::new();
    for trial in 0..100 {
        let name = format!("deleted-{trial}");
        let lease = hold(&a, &name, "a").await;
        env.raw.delete(&name, &Default::default()).await.unwrap();
        let deleted = Instant::now();
        took.push(until_told_lost(&lease, deleted, TTL, trial).await);
    }
    let p99 = p99(&mut took, "out-of-band delete to lease ended");
    assert!(p99 <= Duration::from_millis(50), "p99 {p99:?}");
}

/// The watch of its own Lease tells a holder of a take-over (another
/// writer put its own holderIdentity in, as `kubectl apply` of a client-go
/// peer's record could) as `TakenOver`; the holder's own renewals, which
/// the same watch sees, never end its lease.
#[tokio::test(flavor = "multi_thread")]
async fn a_holder_is_told_of_a_take_over_but_not_of_its_own_renewals() {
    let (env, [a]) = env_with().await;
    let mut lease = hold(&a, "overtaken", "a").await;
    for _ in 0..3 {
        lease = a.renew(&lease).await.expect("a renewal");
    }
    let quiet = timeout(Duration::from_millis(200), lease.loss_signalled()).await;
    assert!(
        quiet.is_err(),
        "the holder's own renewals ended its lease: {quiet:?}"
    );
    assert!(lease.is_valid());
    let mut current = env.raw.get("overtaken").await.unwrap();
    let theirs = go_lease("overtaken", "b", 2, 99);
    current.spec = theirs.spec;
    env.raw
        .replace("overtaken", &PostParams::default(), &current)
        .await
        .unwrap();
    let reason = timeout(TTL, lease.loss_signalled())
        .await
        .expect("never told of the take-over within the TTL");
    assert_eq!(reason, tenure_core::LossReason::TakenOver);
    assert!(!lease.is_valid());
}

/// A waiting candidate waits through the apiserver's transient errors (a
/// 500 while its etcd restarts, a broken connection): it reads the Lease
/// again with back-off, and is granted once the holder releases. A waiting
/// acquire that returned the first such error made the suite's cluster
/// restart case fail ("b waits: ... 500 etcd grpc request cancelled").
#[tokio::test(flavor = "multi_thread")]
async fn a_waiting_candidate_waits_through_a_broken_connection() {
    let (env, [a]) = env_with().await;
    let (b, link) = env.proxied_backend().await;
    let lease = hold(&a, "broken-wait", "a").await;
    let waiting = waits(&b, "broken-wait").await;
    // Every connection of b's reset for half a second: its watch breaks,
    // its reads of the Lease fail.
    link.proxies()[0].set(tenure_testkit::proxy::Mode::Reset);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !waiting.is_finished(),
        "b's waiting acquire ended while its connection was broken: {:?}",
        waiting.await.unwrap().0.map(|_| "granted")
    );
    link.proxies()[0].set(tenure_testkit::proxy::Mode::Pass);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    a.release(&lease).await.expect("release");
    let (granted, at) = granted_within(TTL, waiting, "b was granted within the TTL").await;
    eprintln!(
        "release to grant after the broken connection: {:?}",
        at - released
    );
    b.release(&granted).await.unwrap();
}

/// A take-over committed in etcd but answered with an error (kube-apiserver's
/// 500 "etcdserver: request timed out" or "leader changed", a load
/// balancer's 502/503/504) leaves a Lease naming a candidate that does not
/// know it leads. Only a 2xx or a definite refusal (400, 403, 404, 409,
/// 422) tells that candidate what became of its write; after any other
/// answer the grant guard looks, and releases what landed, so a standby
/// leads at once instead of waiting out a TTL nobody renews.
#[tokio::test(flavor = "multi_thread")]
async fn a_take_over_answered_504_after_it_committed_leaves_the_lease_to_a_standby_at_once() {
    let (env, [a, b]) = env_with().await;
    // The Lease exists and is free: a's grant is one take-over.
    leave_free(&a, "maybe-applied", "a").await;

    env.server.answer_next_write_after_commit(
        504,
        "Timeout: request did not complete within requested timeout - context deadline exceeded",
    );
    let writes_before = env.server.writes();
    let answer = a
        .acquire(&candidacy("maybe-applied", "a"), AcquireMode::Once)
        .await;
    let answered = Instant::now();
    let error = answer
        .map(|_| ())
        .expect_err("a's take-over was answered 504");
    assert!(error.is_retryable(), "a 504 is not retryable: {error}");
    // The take-over committed: the Lease names a, or (the guard was quick)
    // a's release of it followed, a second write.
    let written = spec(&env.raw, "maybe-applied").await;
    let writes = env.server.writes() - writes_before;
    assert!(
        written.holder_identity.as_deref() == Some("a")
            || (written.holder_identity.as_deref() == Some("") && writes >= 2),
        "the take-over answered 504 did not commit ({writes} writes since): {written:?}"
    );

    let waiting = wait_for_grant(&b, "maybe-applied", "b");
    let (lease, at) = granted_within(TTL * 2, waiting, "b was not granted within two TTLs").await;
    let took = at - answered;
    eprintln!("from a's 504 to b's grant: {took:?}");
    assert!(
        took <= Duration::from_millis(500),
        "b was granted {took:?} after a's take-over was answered 504 (committed): \
         the Lease named a, and nobody renewed or released it"
    );
    b.release(&lease).await.unwrap();
}

/// A renewal keeps no one else's leaseDurationSeconds: client-go peers
/// (and tenure's) judge expiry by the stored duration, so a holder that
/// renewed a Lease an operator had shortened to 1 s, keeping the 1 s,
/// would go on leading for its own TTL while they take over after 1 s.
/// client-go writes its duration with every renewal; so does tenure, and
/// it never counts a deadline past what the stored record grants.
#[tokio::test(flavor = "multi_thread")]
async fn a_renewal_writes_its_ttl_over_a_shortened_lease_duration_and_counts_no_further() {
    let (env, [a]) = env_with().await;
    let lease = hold(&a, "shortened", "a").await;
    // Into the next wall-clock second, so that the renewal is sent at once.
    common::wall_clock_at(
        k8s_openapi::chrono::Utc::now().timestamp() + 1,
        Duration::from_millis(50),
    )
    .await;
    let mut current = env.raw.get("shortened").await.unwrap();
    current.spec.as_mut().unwrap().lease_duration_seconds = Some(1);
    env.raw
        .replace("shortened", &PostParams::default(), &current)
        .await
        .unwrap();

    let sent = Instant::now();
    let renewed = a.renew(&lease).await.expect("renew");
    let stored = spec(&env.raw, "shortened").await.lease_duration_seconds;
    let allowed = sent + Duration::from_secs(stored.unwrap_or(0).max(0) as u64);
    eprintln!(
        "renewed over leaseDurationSeconds 1: stored {stored:?}, valid {:?} after the send",
        renewed.valid_until() - sent
    );
    assert!(
        renewed.valid_until() <= allowed,
        "the renewal counts its lease until {:?} after it was sent, but the stored record \
         (leaseDurationSeconds {stored:?}) lets peers take over {:?} after it",
        renewed.valid_until() - sent,
        allowed - sent
    );
    assert_eq!(
        stored,
        Some(TTL.as_secs() as i32),
        "the renewal kept someone else's leaseDurationSeconds"
    );
}

/// client-go sees renewTime to the second, so a renewal waits for the
/// next second of the wall clock after one that was answered (renew_time.rs).
/// After a failed one it need not: a retry in the same second counts its
/// deadline from the failed write's send (the first of that second), which
/// is later than the last answered renewal's, and is a change to a
/// client-go peer whichever of the two landed. Renewals settle just after
/// the turn of each second; at the 2 s minimum TTL a lease granted at
/// `S + 10 ms` runs until about `S + 1.97 s`, so a retry of a renewal that
/// failed at `S + 1.01 s` that waited for `S + 2 s` came too late, and one
/// failed renewal ended the term.
#[tokio::test(flavor = "multi_thread")]
async fn a_renewal_that_failed_once_is_retried_in_the_same_second_and_the_holder_keeps_leading() {
    let (env, [a]) = env_with().await;
    let second = Utc::now().timestamp() + 1;
    common::wall_clock_at(second, Duration::from_millis(10)).await;
    let lease = hold(&a, "retried", "a").await;
    common::wall_clock_at(second + 1, Duration::from_millis(10)).await;
    env.server.refuse_next(Requests::Update, 1, 500, None);
    let failed = a.renew(&lease).await;
    assert!(
        failed.as_ref().is_err_and(|e| e.is_retryable()),
        "the renewal refused 500 was {failed:?}"
    );
    let retried = a.renew(&lease).await;
    let renewed =
        retried.unwrap_or_else(|e| {
            panic!(
            "a renewal retried {:?} after the turn of the wall clock's second, {:?} before the \
             lease's end, after one answered 500: {e}",
            Duration::from_nanos(Utc::now().timestamp_subsec_nanos().into()),
            lease.valid_until().saturating_duration_since(Instant::now()),
        )
        });
    assert!(renewed.valid_until() > lease.valid_until() + Duration::from_millis(500));
    assert!(renewed.is_valid());
    let stored = spec(&env.raw, "retried").await;
    assert_eq!(stored.holder_identity.as_deref(), Some("a"));
    a.release(&renewed).await.unwrap();
}

/// A Lease API whose Lease `name` is held by a peer that writes nothing
/// for a while.
async fn env_with_idle_lease(name: &str) -> Env {
    let env = env().await;
    env.raw
        .create(&PostParams::default(), &go_lease(name, "go", 30, 0))
        .await
        .unwrap();
    env
}

/// A Lease held by a peer that writes nothing for a while, whose etcd
/// history was compacted past its resourceVersion, and a waiting candidate.
/// Its first watch, from the Lease's own resourceVersion, is refused 410
/// Gone; the candidate lists the Lease once and watches on from the list's
/// resourceVersion, which the server still has: then it is quiet until the
/// Lease changes, and sees the change at once.
async fn env_with_compacted_idle_lease(name: &str) -> Env {
    let env = env_with_idle_lease(name).await;
    env.server.expire_watches().await.expect("compaction");
    env
}

/// Frees the Lease as a peer's release does.
async fn free(raw: &Api<Lease>, name: &str) {
    let mut lease = raw.get(name).await.unwrap();
    let spec = lease.spec.as_mut().unwrap();
    spec.holder_identity = Some(String::new());
    spec.lease_duration_seconds = Some(1);
    raw.replace(name, &PostParams::default(), &lease)
        .await
        .unwrap();
}

/// The requests the server answers (and watch events it sends) while a
/// candidate, a backend of its own, waits on `wants` for `window`, from its
/// first look on; the waiting task goes on.
async fn served_while_waiting(env: &Env, wants: Candidacy, window: Duration) -> (u64, Waiting) {
    let b = env.backend().await;
    let before = env.server.served();
    let waiting = wait_with(&b, wants);
    tokio::time::sleep(window).await;
    (env.server.served() - before, waiting)
}

/// The requests served to a candidate (`who`) that waits on `wants` for
/// `window`, which must be `most` at the most; its wait is then dropped.
async fn served_at_most(env: &Env, wants: Candidacy, window: Duration, most: u64, who: &str) {
    let (served, waiting) = served_while_waiting(env, wants, window).await;
    waiting.abort();
    eprintln!("{who}: {served} requests in {window:?}");
    assert!(served <= most, "{who} made {served} requests in {window:?}");
}

/// Watch failures (issue 23): a waiter whose watch starts from a compacted
/// resourceVersion treats the 410 Gone as client-go's reflector does (list,
/// then watch from the list's resourceVersion) whether it comes as an HTTP
/// 410 (an older apiserver, a proxy) or as kube-apiserver's one ERROR event:
/// five requests (its look, the refused watch, the write that names it next
/// in line, the list, the watch from it), then none while the Lease stays
/// unchanged. It used to look and watch again every 100 ms for as long as
/// the Lease was not written.
#[tokio::test(flavor = "multi_thread")]
async fn a_waiter_on_a_compacted_idle_lease_lists_once_and_waits_quietly() {
    let env = env_with_compacted_idle_lease("compacted-idle").await;
    let wants = candidacy("compacted-idle", "b");
    let (served, waiting) = served_while_waiting(&env, wants, Duration::from_millis(600)).await;
    eprintln!("a waiter on a compacted idle Lease: {served} requests in 600 ms");
    assert!(
        served <= 5,
        "a waiter on a compacted, idle Lease made {served} requests in 600 ms \
         (its look, the watch answered 410, its nomination, one list and one watch from it \
         are 5)"
    );
    let freed = Instant::now();
    free(&env.raw, "compacted-idle").await;
    let (_, at) = granted_within(TTL, waiting, "b was granted within the TTL").await;
    let took = at - freed;
    assert!(
        took <= Duration::from_millis(500),
        "the watch from the list's resourceVersion did not carry the release: b led {took:?} after it"
    );
}

/// Watch failures (issue 23): a waiter whose watch is refused (403: RBAC
/// without `watch`) reads the Lease after each back-off instead: the delay
/// drawn uniformly up to a cap doubling from 100 ms to 4 s (full jitter).
/// It used to look and watch again every 100 ms, about 28 requests in
/// 1.5 s; with the back-off, 18 or fewer but for a chance below 1 in 50,000
/// (a simulation of the draws: median 10), and one more: the write that
/// names it next in line.
#[tokio::test(flavor = "multi_thread")]
async fn a_waiter_whose_watch_is_forbidden_backs_off() {
    let env = env_with_idle_lease("no-watch").await;
    env.server.refuse(Requests::Watch, 403, None);
    // Failures that persist are told to the candidacy's owner (an Elector
    // counts them in its health).
    let told = Arc::new(std::sync::Mutex::new(Vec::new()));
    let wants = {
        let told = told.clone();
        candidacy("no-watch", "b").with_warnings(move |w| told.lock().unwrap().push(w))
    };
    let who = "a waiter whose watch is forbidden";
    served_at_most(&env, wants, Duration::from_millis(1500), 19, who).await;
    let told = told.lock().unwrap();
    assert!(
        told.len() == 1 && told[0].operation == "watch" && told[0].message.contains("list, watch"),
        "a waiter whose watch kept being forbidden told its owner {told:?}"
    );
}

/// Watch failures (issue 23): a waiter whose watch is answered 429 with
/// `Retry-After: 1` (API Priority and Fairness shedding load; the Status
/// also carries `details.retryAfterSeconds`) stays away for that second:
/// its look, the refused watch and the write that names it next in line,
/// then nothing for 900 ms.
#[tokio::test(flavor = "multi_thread")]
async fn a_waiter_answered_429_stays_away_for_its_retry_after() {
    let env = env_with_idle_lease("shed").await;
    env.server
        .refuse(Requests::Watch, 429, Some(Duration::from_secs(1)));
    let wants = candidacy("shed", "b");
    let who = "a waiter answered 429 with Retry-After: 1";
    served_at_most(&env, wants, Duration::from_millis(900), 3, who).await;
}

/// Watch failures (issue 23): a waiter whose list is refused (403: RBAC
/// without `list`) after its watch from a compacted resourceVersion ended
/// with 410 Gone backs off too, as after a failed watch. The forbidden list
/// used to send it straight back to look, watch and list again, with no
/// delay at all, for as long as the Lease was not written. With the
/// back-off (three requests a round), 27 or fewer in 1.5 s but for a chance
/// below 1 in 100,000 (a simulation of the draws: median 15), and two more:
/// the Lease names two waiters next in line already, so it joins the queue
/// (a patch of the queue Lease, which is not there, and its create) rather
/// than write the Lease, which would give it a watch from a new
/// resourceVersion.
#[tokio::test(flavor = "multi_thread")]
async fn a_waiter_whose_list_is_forbidden_backs_off() {
    let env = env().await;
    let mut lease = go_lease("no-list", "go", 30, 0);
    lease.metadata.labels = Some(
        [
            (
                "tenure.dev/next-00000000000000a1".to_owned(),
                "1".to_owned(),
            ),
            (
                "tenure.dev/next-00000000000000a2".to_owned(),
                "2".to_owned(),
            ),
        ]
        .into(),
    );
    env.raw
        .create(&PostParams::default(), &lease)
        .await
        .unwrap();
    env.server.expire_watches().await.expect("compaction");
    env.server.refuse(Requests::List, 403, None);
    let wants = candidacy("no-list", "b");
    let who = "a waiter whose list is forbidden";
    served_at_most(&env, wants, Duration::from_millis(1500), 29, who).await;
}
