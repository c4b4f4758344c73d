//! One lease per client and TTL, shared by the keys of all its candidacies
//! (as etcd's `concurrency.Session` shares one), renewed in rounds.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{candidacy, client, etcd, hold, keys, wait_for_grant, TTL};
use tenure_core::{Elector, ElectorState, Error, LeaseBackend, LossReason};
use tenure_etcd::etcd_client::GetOptions;
use tenure_etcd::EtcdBackend;
use tenure_testkit::harness::{wait_for, Cluster};
use tokio::time::Instant;

/// The lease each key under `prefix` is on.
async fn leases_of(backend: &EtcdBackend, prefix: &str) -> Vec<i64> {
    let answer = backend
        .client()
        .kv_client()
        .get(prefix, Some(GetOptions::new().with_prefix()))
        .await
        .unwrap();
    answer.kvs().iter().map(|kv| kv.lease()).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_keys_of_one_client_share_one_lease() {
    let cluster = etcd().await;
    let a = client(&cluster).await;
    let first = hold(&a, "share/x", "a").await;
    let mut second = hold(&a, "share/y", "a").await;
    let (x, y) = (
        leases_of(&a, "share/x/").await,
        leases_of(&a, "share/y/").await,
    );
    assert_eq!(x.len(), 1);
    assert_eq!(x, y, "two keys of one client on two leases");
    a.release(&first).await.unwrap();
    // The lease lives on for the other key.
    // (Assigned, so that the old value and its handle go.)
    second = a.renew(&second).await.expect("the other term goes on");
    assert_eq!(leases_of(&a, "share/y/").await, y);
    a.release(&second).await.unwrap();
    // The last key released and its handles gone, the lease is revoked.
    drop((first, second));
    let id = y[0];
    // (After a second's wait for the client's next candidacy.)
    wait_for("the lease revoked", TTL, || {
        let a = a.clone();
        async move {
            let live = a.client().lease_client().leases().await.unwrap();
            live.leases().iter().all(|l| l.id() != id).then_some(())
        }
    })
    .await
    .expect("the lease outlived its last key");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_key_deleted_out_of_band_ends_only_its_own_term() {
    let cluster = etcd().await;
    let a = client(&cluster).await;
    let x = hold(&a, "alone/x", "a").await;
    let y = hold(&a, "alone/y", "a").await;
    let (key, _, _) = keys(&a, "alone/x/").await.remove(0);
    a.client().kv_client().delete(key, None).await.unwrap();
    assert!(matches!(
        a.renew(&x).await,
        Err(Error::LeaseLost {
            reason: LossReason::Deleted,
            ..
        })
    ));
    let y = a.renew(&y).await.expect("the other term goes on");
    assert!(y.is_valid());
    assert_eq!(keys(&a, "alone/y/").await.len(), 1);
    a.release(&y).await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn the_shared_lease_revoked_out_of_band_ends_every_term_of_the_client() {
    let cluster = etcd().await;
    let a = client(&cluster).await;
    let x = hold(&a, "revoked/x", "a").await;
    let y = hold(&a, "revoked/y", "a").await;
    let lease = leases_of(&a, "revoked/x/").await[0];
    a.client().lease_client().revoke(lease).await.unwrap();
    for term in [&x, &y] {
        assert!(matches!(a.renew(term).await, Err(Error::LeaseLost { .. })));
    }
    // A new candidacy of the same client gets a new lease.
    let z = hold(&a, "revoked/z", "a").await;
    assert_ne!(leases_of(&a, "revoked/z/").await, vec![lease]);
    a.release(&z).await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_term_dropped_unreleased_deletes_its_key_at_its_deadline_though_the_lease_lives_on() {
    let cluster = etcd().await;
    let a = client(&cluster).await;
    let mut kept = hold(&a, "dropped-term/kept", "a").await;
    // A term dropped without a release (its holder crashed, or gave it up
    // at its deadline): its key must not go before the term's deadline,
    // nor stay after it, kept alive by the client's other term.
    let lost = hold(&a, "dropped-term/lost", "a").await;
    let deadline = lost.valid_until();
    drop(lost);
    tokio::time::sleep(TTL / 3).await;
    kept = a.renew(&kept).await.expect("the other term goes on");
    tokio::time::sleep_until(deadline - Duration::from_millis(200)).await;
    assert_eq!(
        keys(&a, "dropped-term/lost/").await.len(),
        1,
        "the dropped term's key went before its deadline"
    );
    kept = a.renew(&kept).await.expect("the other term goes on");
    wait_for(
        "the dropped term's key deleted",
        Duration::from_secs(1),
        || {
            let a = a.clone();
            async move {
                keys(&a, "dropped-term/lost/")
                    .await
                    .is_empty()
                    .then_some(())
            }
        },
    )
    .await
    .expect("the dropped term's key outlived its deadline");
    let kept = a.renew(&kept).await.expect("the other term goes on");
    a.release(&kept).await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn two_candidacies_of_one_client_queue_on_one_election() {
    let cluster = etcd().await;
    let a = client(&cluster).await;
    let first = hold(&a, "twice", "a-1").await;
    let waiting = wait_for_grant(&a, candidacy("twice", "a-2"));
    wait_for("the second candidacy queued", TTL, || {
        let a = a.clone();
        async move { (keys(&a, "twice/").await.len() == 2).then_some(()) }
    })
    .await
    .unwrap();
    let names: Vec<String> = keys(&a, "twice/").await.into_iter().map(|k| k.0).collect();
    assert_ne!(names[0], names[1]);
    a.release(&first).await.unwrap();
    let (outcome, _) = waiting.await.unwrap();
    let second = outcome.unwrap().granted().expect("a-2 leads");
    assert_eq!(second.holder().as_str(), "a-2");
    assert!(second.token() > first.token());
    a.release(&second).await.unwrap();
}

/// Every gRPC message the cluster's clients sent, keep-alives included.
async fn messages(cluster: &Cluster) -> u64 {
    let stats = cluster.stats_total().await.expect("etcd's metrics");
    stats
        .counters
        .iter()
        .filter(|(series, _)| {
            series.starts_with("grpc_server_msg_received_total{")
                && !series.contains("grpc_service=\"etcdserverpb.Maintenance\"")
        })
        .map(|(_, n)| n)
        .sum()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_renewals_of_many_leaderships_on_one_client_go_out_together() {
    const KEYS: usize = 20;
    let cluster = etcd().await;
    let backend = client(&cluster).await;
    let mut held = Vec::new();
    for i in 0..KEYS {
        let elector = tenure_core::Elector::builder(backend.clone())
            .key(format!("many-{i}"))
            .identity("a")
            .ttl(TTL)
            .build()
            .unwrap();
        let leadership = elector.campaign().await.unwrap();
        held.push((elector, leadership));
    }
    // A renewal interval or two for every term to reach the grid.
    tokio::time::sleep(TTL).await;
    let before = messages(&cluster).await;
    let window = TTL * 2;
    tokio::time::sleep(window).await;
    let sent = messages(&cluster).await - before;
    // Renewing alone, every lease would renew at least every TTL/3, with a
    // keep-alive and a read each time.
    let alone = KEYS as u64 * 2 * (window.as_millis() / (TTL / 3).as_millis()) as u64;
    eprintln!("{sent} requests in {window:?} from {KEYS} leaderships (alone: at least {alone})");
    assert!(
        sent * 4 < alone,
        "{sent} requests reached etcd in {window:?} from {KEYS} leaderships on one client; \
         renewing alone they would send at least {alone}"
    );
    for (elector, leadership) in &held {
        assert!(
            leadership.is_valid(),
            "{} lost its term",
            elector.candidacy().key()
        );
    }
    for (elector, leadership) in held {
        leadership.resign().await.unwrap();
        elector.shutdown().await;
    }
    assert!(keys(&backend, "many-").await.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dropped_campaign_on_a_shared_lease_leaves_no_key_behind() {
    let cluster = etcd().await;
    let (a, b) = (client(&cluster).await, client(&cluster).await);
    let held = hold(&a, "dropped-shared", "a").await;
    // b holds another election, so its lease lives on after the drop.
    let other = hold(&b, "dropped-shared-other", "b").await;
    let attempt = wait_for_grant(&b, candidacy("dropped-shared", "b"));
    wait_for("b queued", TTL, || {
        let a = a.clone();
        async move { (keys(&a, "dropped-shared/").await.len() == 2).then_some(()) }
    })
    .await
    .unwrap();
    attempt.abort();
    wait_for("b's key withdrawn", Duration::from_secs(1), || {
        let a = a.clone();
        async move { (keys(&a, "dropped-shared/").await.len() == 1).then_some(()) }
    })
    .await
    .unwrap();
    let other = b.renew(&other).await.expect("b's other term goes on");
    a.release(&held).await.unwrap();
    b.release(&other).await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn the_holders_of_one_client_watch_their_keys_on_one_stream() {
    const KEYS: usize = 20;
    let cluster = etcd().await;
    let a = client(&cluster).await;
    let streams = || async {
        let stats = cluster.stats(0).await.expect("etcd's metrics");
        (
            stats.get("etcd_debugging_mvcc_watch_stream_total"),
            stats.get("etcd_debugging_mvcc_watcher_total"),
        )
    };
    let (streams_before, watchers_before) = streams().await;
    let mut held = Vec::new();
    for i in 0..KEYS {
        held.push(hold(&a, &format!("one-stream/{i}"), "a").await);
    }
    wait_for("every holder's watch", TTL, || async {
        let (_, watchers) = streams().await;
        (watchers >= watchers_before + KEYS as u64).then_some(())
    })
    .await
    .unwrap();
    let (streams_after, _) = streams().await;
    assert!(
        streams_after <= streams_before + 1,
        "{KEYS} holders of one client opened {} watch streams",
        streams_after - streams_before
    );
    // Each key's deletion still ends its own term, and only it, at once.
    for (i, lease) in held.iter().enumerate().take(3) {
        let (key, _, _) = keys(&a, &format!("one-stream/{i}/")).await.remove(0);
        a.client().kv_client().delete(key, None).await.unwrap();
        let told = tokio::time::timeout(Duration::from_secs(1), lease.loss_signalled()).await;
        assert!(told.is_ok(), "holder {i} was not told its key went");
    }
    assert!(held[3..].iter().all(|l| l.is_valid()));
    for lease in &held[3..] {
        a.release(lease).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_holders_watch_survives_a_broken_stream_and_a_compaction() {
    let cluster = etcd().await;
    let a = client(&cluster).await;
    let (b, link) = common::connect_proxied(&cluster, tenure_etcd::EtcdOptions::default()).await;
    let lease = hold(&b, "compacted", "b").await;
    // The stream breaks; meanwhile the history from before is compacted
    // away, so the watch opened again from the key's creation is refused.
    for proxy in link.proxies() {
        proxy.set(tenure_testkit::proxy::Mode::Reset);
    }
    for i in 0..5 {
        a.client()
            .kv_client()
            .put(format!("filler/{i}"), "x", None)
            .await
            .unwrap();
    }
    let now = a.client().kv_client().get("filler/0", None).await.unwrap();
    let revision = now.header().unwrap().revision();
    a.client()
        .kv_client()
        .compact(revision, None)
        .await
        .unwrap();
    for proxy in link.proxies() {
        proxy.set(tenure_testkit::proxy::Mode::Pass);
    }
    // Watched again (after a look): the key's deletion still ends the term.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(lease.is_valid());
    let (key, _, _) = keys(&a, "compacted/").await.remove(0);
    a.client().kv_client().delete(key, None).await.unwrap();
    let told = tokio::time::timeout(Duration::from_secs(1), lease.loss_signalled()).await;
    assert!(told.is_ok(), "the holder was not told its key went");
}

/// An Elector on `backend` for `key` as `who`, retrying failed campaigns
/// within a quarter of a second (what this file's cases measure is the
/// backend, not the Elector's back-off).
fn elector_on(backend: &Arc<EtcdBackend>, key: &str, who: &str) -> Elector {
    Elector::builder(backend.clone())
        .key(key)
        .identity(who)
        .ttl(TTL)
        .retry_backoff(Duration::from_millis(50), Duration::from_millis(250))
        .build()
        .unwrap()
}

/// Runs `elector` (campaign, lead until lost, campaign again) in the background.
fn run_until_shutdown(elector: &Elector) -> tokio::task::JoinHandle<()> {
    let elector = elector.clone();
    tokio::spawn(async move {
        let _ = elector
            .run(|leadership| async move {
                leadership.lost().await;
            })
            .await;
    })
}

fn leads(elector: &Elector) -> bool {
    matches!(*elector.state().borrow(), ElectorState::Leader { .. })
}

/// Every etcd node stopped for four TTLs, then started: a restart elects a
/// new etcd leader, whose `Promote` gives every lease a fresh TTL. The
/// key of the term that ended in the outage could not be deleted (nothing
/// answered); it must not come back to lead for good, kept alive by the
/// same client's next campaigns on the shared lease, ahead of every
/// candidate. Someone leads within a TTL and a round trip of the restart
/// (etcd expires a lease nobody keeps alive a TTL after its promotion; a
/// second's round trip is generous on a loaded two-core machine, and the
/// bug this catches never ends).
#[tokio::test(flavor = "multi_thread")]
async fn a_key_abandoned_in_a_long_outage_does_not_lead_for_good_after_a_restart() {
    const KEY: &str = "abandoned";
    let cluster = etcd().await;
    let (a, b) = (client(&cluster).await, client(&cluster).await);
    let (ea, eb) = (elector_on(&a, KEY, "a"), elector_on(&b, KEY, "b"));
    let run_a = run_until_shutdown(&ea);
    wait_for("a leads", TTL * 2, || async { leads(&ea).then_some(()) })
        .await
        .expect("a leads before the outage");
    let run_b = run_until_shutdown(&eb);
    wait_for("b waits", TTL, || {
        let a = a.clone();
        async move { (keys(&a, "abandoned/").await.len() == 2).then_some(()) }
    })
    .await
    .expect("b queued behind a");
    cluster.kill(0).await.expect("etcd stopped");
    tokio::time::sleep(TTL * 4).await;
    assert!(!leads(&ea) && !leads(&eb), "someone led through the outage");
    cluster.start_node(0).await.expect("etcd started again");
    let restarted = Instant::now();
    let bound = TTL + Duration::from_secs(1);
    let led = wait_for("a or b leads", bound, || async {
        (leads(&ea) || leads(&eb)).then_some(())
    })
    .await;
    if led.is_err() {
        let named = ea.leader().await;
        let left = keys(&a, "abandoned/").await;
        panic!(
            "nobody led within {bound:?} of the restart (waited {:?}); leader() names {named:?}, \
             a's state {:?}, b's {:?}; the election's keys: {left:?}",
            restarted.elapsed(),
            *ea.state().borrow(),
            *eb.state().borrow()
        );
    }
    eprintln!(
        "{} led {:?} after the restart",
        if leads(&ea) { "a" } else { "b" },
        restarted.elapsed()
    );
    ea.shutdown().await;
    eb.shutdown().await;
    let _ = (run_a.await, run_b.await);
}

/// A server started with `--max-txn-ops` below the 128 gets a round reads
/// in one transaction refuses the whole transaction: the client learns
/// the limit and reads in smaller ones; six terms on one client keep
/// renewing on a server that takes four operations per transaction.
#[tokio::test(flavor = "multi_thread")]
async fn six_terms_of_one_client_renew_on_a_server_taking_four_operations_per_transaction() {
    let cluster = Cluster::start_etcd_with_args(1, &["--max-txn-ops=4"])
        .await
        .expect("etcd container");
    let a = client(&cluster).await;
    let mut held = Vec::new();
    for i in 0..6 {
        held.push(hold(&a, &format!("txn-ops/{i}"), "a").await);
    }
    // Asked for together: one round, one keep-alive, the reads after it.
    for _ in 0..2 {
        let renewed = futures::future::join_all(held.iter().map(|l| a.renew(l))).await;
        held = renewed
            .into_iter()
            .enumerate()
            .map(|(i, r)| r.unwrap_or_else(|e| panic!("term {i} of 6 not renewed: {e}")))
            .collect();
    }
    for lease in &held {
        a.release(lease).await.unwrap();
    }
}

/// A client shared by elections whose permissions differ: the user loses
/// read permission on one election (its role now writes there only). etcd
/// refuses a read transaction as a whole for one get it may not make; the
/// terms of the other elections must go on, and only the refused one end.
#[tokio::test(flavor = "multi_thread")]
async fn a_read_refused_on_one_election_ends_only_that_elections_term() {
    use tenure_testkit::harness::{EtcdAuth, EtcdTokens};
    let tokens = EtcdTokens::Simple {
        ttl: Duration::from_secs(300),
    };
    let cluster = Cluster::start_etcd_with_auth(1, EtcdAuth::new(tokens))
        .await
        .expect("an auth-enabled etcd container");
    for args in [
        &["user", "add", "limited:limited-pw"][..],
        &["role", "add", "elections"],
        &[
            "role",
            "grant-permission",
            "elections",
            "--prefix=true",
            "readwrite",
            "open/",
        ],
        &[
            "role",
            "grant-permission",
            "elections",
            "--prefix=true",
            "readwrite",
            "closing/",
        ],
        &["user", "grant-role", "limited", "elections"],
    ] {
        cluster.etcdctl(0, args).await.expect("etcdctl");
    }
    let url = format!(
        "etcd://limited:limited-pw@{}/",
        cluster.endpoints().join(",")
    );
    let a = Arc::new(EtcdBackend::connect_url(&url).await.expect("connect"));
    let open = hold(&a, "open", "a").await;
    let closing = hold(&a, "closing", "a").await;
    for args in [
        &[
            "role",
            "revoke-permission",
            "elections",
            "--prefix=true",
            "closing/",
        ][..],
        &[
            "role",
            "grant-permission",
            "elections",
            "--prefix=true",
            "write",
            "closing/",
        ],
    ] {
        cluster.etcdctl(0, args).await.expect("etcdctl");
    }
    // Asked for together: one round, one read transaction of both keys.
    let (open, closing) = tokio::join!(a.renew(&open), a.renew(&closing));
    assert!(
        closing.is_err(),
        "a term renewed on a key its client may no longer read"
    );
    let open = open.unwrap_or_else(|e| {
        panic!("the term of an election the client may still read ended with the other: {e}")
    });
    a.release(&open).await.unwrap();
}

/// `Elector::shutdown` closes a backend nothing else holds: its shared
/// leases are revoked then, not a second later (the linger kept for the
/// client's next candidacy), so nothing outlives a process that exits.
#[tokio::test(flavor = "multi_thread")]
async fn closing_the_backend_revokes_its_shared_lease_at_once() {
    let cluster = etcd().await;
    let (a, look) = (client(&cluster).await, client(&cluster).await);
    let elector = elector_on(&a, "closing", "a");
    let leadership = elector.campaign().await.unwrap();
    let id = leases_of(&look, "closing/").await[0];
    drop(a);
    leadership.resign().await.unwrap();
    elector.shutdown().await;
    let live = look.client().lease_client().leases().await.unwrap();
    assert!(
        live.leases().iter().all(|l| l.id() != id),
        "the closed backend's lease {id:x} outlived its shutdown"
    );
}

/// A holder renewing on the application's runtime
/// (`RenewOn::CurrentRuntime`) whose workers are all blocked renews
/// nothing, while a waiting candidacy of the same client keeps the shared
/// lease alive from the heartbeat thread. The holder's key must go at its
/// term's deadline (a TTL after its last renewal, plus etcd's lessor
/// slack and a round trip: 1 s is generous), not when the stall ends: a
/// standby would wait out the whole stall.
#[test]
fn a_starved_holders_key_goes_at_its_deadline_though_its_client_waits_elsewhere() {
    const STALL: Duration = Duration::from_secs(6);
    let side = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let app = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (cluster, c) = side.block_on(async {
        let cluster = etcd().await;
        let c = client(&cluster).await;
        (cluster, c)
    });
    // c leads "elsewhere" from its own runtime; a waits there.
    let holder_c = elector_on(&c, "elsewhere", "c");
    let c_leads = side.block_on(holder_c.campaign()).unwrap();
    let (a, _waiting, _leadership) = app.block_on(async {
        let a = client(&cluster).await;
        let starved = Elector::builder(a.clone())
            .key("starved")
            .identity("a")
            .ttl(TTL)
            .renew_on(tenure_core::RenewOn::CurrentRuntime)
            .build()
            .unwrap();
        let leadership = starved.campaign().await.unwrap();
        let waiter = elector_on(&a, "elsewhere", "a");
        let waiting = tokio::spawn(async move { waiter.campaign().await.map(drop) });
        wait_for("a waits elsewhere", TTL, || {
            let a = a.clone();
            async move { (keys(&a, "elsewhere/").await.len() == 2).then_some(()) }
        })
        .await
        .unwrap();
        (a, waiting, leadership)
    });
    // Watched from the side runtime: when a's key on "starved" goes.
    let gone = side.spawn({
        let c = c.clone();
        async move {
            let started = Instant::now();
            while !keys(&c, "starved/").await.is_empty() {
                if started.elapsed() > STALL * 2 {
                    return None;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Some(Instant::now())
        }
    });
    let stalled = Instant::now();
    app.block_on(async {
        let blockers: Vec<_> = (0..2)
            .map(|_| tokio::spawn(async { std::thread::sleep(STALL) }))
            .collect();
        std::thread::sleep(STALL);
        for b in blockers {
            b.await.unwrap();
        }
    });
    let gone = side.block_on(gone).unwrap();
    let bound = TTL + Duration::from_secs(1);
    match gone {
        Some(at) => assert!(
            at - stalled <= bound,
            "the starved holder's key went {:?} after the stall began (bound {bound:?}; the stall lasted {STALL:?})",
            at - stalled
        ),
        None => panic!("the starved holder's key outlived a {STALL:?} stall and {STALL:?} more"),
    }
    drop(a);
    side.block_on(async move {
        drop(c_leads);
        holder_c.shutdown().await;
        drop(cluster);
    });
}
