//! Redlock against real Redis masters in containers, each behind a fault
//! proxy of its own: a minority of masters is not enough, a lease's
//! validity shrinks by the time its round took and by Redlock's drift, and
//! the figures the note quotes (acquire and hand-over on 3 masters).

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tenure_conformance::{Link, LinkFault};
use tenure_core::{AcquireMode, Acquisition, Candidacy, ElectionKey, Elector, Error, LeaseBackend};
use tenure_redis::redis::aio::MultiplexedConnection;
use tenure_redis::{redlock_drift, RedisBackend, RedlockOptions};
use tenure_testkit::harness::{Cluster, Topology};
use tenure_testkit::ProxyLink;
use tokio::time::Instant;

/// Three masters, and a client of them whose link to each master is its own.
struct Three {
    cluster: Cluster,
    links: Vec<Arc<ProxyLink>>,
    client: RedisBackend,
}

async fn three() -> Three {
    let cluster = Cluster::start(Topology::Redis { masters: 3 })
        .await
        .expect("three redis masters");
    let mut links = Vec::new();
    let mut endpoints = Vec::new();
    for node in cluster.nodes() {
        let (link, addr) = ProxyLink::start(node.addr()).await.expect("a proxy");
        links.push(link);
        endpoints.push(addr.to_string());
    }
    let client = RedisBackend::builder(&endpoints)
        .allow_unfenced()
        .connect()
        .await
        .expect("a client of three masters");
    Three {
        cluster,
        links,
        client,
    }
}

fn candidacy(key: &str, who: &str, ttl: Duration) -> Candidacy {
    Candidacy::parse(key, who, ttl).unwrap()
}

/// Whether any master stores the key.
async fn stored_anywhere(cluster: &Cluster, key: &str) -> bool {
    let stored = format!("{}{key}", RedlockOptions::default().key_prefix);
    for i in 0..cluster.nodes().len() {
        let mut c = admin(cluster, i).await;
        let n: u64 = tenure_redis::redis::cmd("EXISTS")
            .arg(&stored)
            .query_async(&mut c)
            .await
            .unwrap();
        if n > 0 {
            return true;
        }
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_on_three_masters() {
    let t = three().await;
    let ttl = Duration::from_secs(1);

    // --- A minority of masters reachable: not acquired, and nothing left.
    for link in &t.links[..2] {
        link.set(LinkFault::Blackhole).await.unwrap();
    }
    let c = candidacy("minority", "a", ttl);
    match t.client.acquire(&c, AcquireMode::Once).await {
        Err(e) => {
            assert!(e.is_retryable(), "a minority is retryable: {e}");
            assert!(e.to_string().contains("no majority"), "{e}");
        }
        Ok(Acquisition::Granted(lease)) => {
            panic!("granted with one master of three reachable: {lease:?}")
        }
        Ok(Acquisition::Held(info)) => panic!("nobody holds the key, yet Held({info:?})"),
    }
    // The one master that answered granted that round; the round's undo
    // takes it back at once, long before the key's TTL would.
    let undone = Instant::now() + ttl / 3;
    while stored_anywhere(&t.cluster, "minority").await {
        assert!(
            Instant::now() < undone,
            "the failed round's key outlived a third of its TTL: not undone"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // A waiting acquire waits while only a minority answers …
    let waiting = {
        let client = t.client.clone();
        let c = candidacy("minority", "a", ttl);
        tokio::spawn(async move { client.acquire(&c, AcquireMode::Wait).await })
    };
    tokio::time::sleep(ttl).await;
    assert!(
        !waiting.is_finished(),
        "granted by a minority while waiting"
    );
    // … and is granted once a majority answers again.
    for link in &t.links[..2] {
        link.set(LinkFault::Pass).await.unwrap();
    }
    let granted = tokio::time::timeout(ttl * 3, waiting)
        .await
        .expect("granted once a majority answers")
        .unwrap()
        .unwrap()
        .granted()
        .expect("granted");
    t.client.release(&granted).await.unwrap();
    // The rounds that failed left nothing behind (their keys were undone or
    // have expired), and the release took the granted one.
    tokio::time::sleep(ttl + Duration::from_millis(100)).await;
    assert!(!stored_anywhere(&t.cluster, "minority").await);

    // --- Validity counts from the send, less the drift margins: answers
    // held back 100 ms shrink it by at least that much.
    let hold = Duration::from_millis(100);
    for link in &t.links {
        link.set(LinkFault::DelayAnswers(hold)).await.unwrap();
    }
    let c = candidacy("validity", "a", ttl);
    let before = Instant::now();
    let lease = t
        .client
        .acquire(&c, AcquireMode::Once)
        .await
        .unwrap()
        .granted()
        .expect("a vacant key");
    let after = Instant::now();
    let full = ttl - c.drift_margin() - redlock_drift(ttl);
    assert_eq!(lease.expiry_lead(), redlock_drift(ttl));
    assert!(lease.sent_at() >= before && lease.sent_at() <= before + hold);
    assert_eq!(lease.valid_until(), lease.sent_at() + full);
    assert!(
        lease.valid_until() <= after + full - hold,
        "the {:?} the answers took must come off the validity",
        after - before
    );
    let before = Instant::now();
    let renewed = t.client.renew(&lease).await.unwrap();
    assert!(renewed.sent_at() >= before);
    assert_eq!(renewed.valid_until(), renewed.sent_at() + full);
    assert!(renewed.valid_until() <= Instant::now() + full - hold);
    for link in &t.links {
        link.set(LinkFault::Pass).await.unwrap();
    }
    t.client.release(&renewed).await.unwrap();

    // --- The Elector refuses Redlock without the opt-in.
    let refused = Elector::builder(Arc::new(t.client.clone()))
        .key("elector")
        .identity("a")
        .ttl(ttl)
        .build();
    assert!(matches!(
        refused.map(drop),
        Err(Error::InvalidArgument {
            field: "allow_unfenced",
            ..
        })
    ));

    // --- Figures: uncontended acquire, and hand-over to a waiting standby.
    let standby = RedisBackend::builder(&t.cluster.endpoints())
        .allow_unfenced()
        .connect()
        .await
        .unwrap();
    let direct = RedisBackend::builder(&t.cluster.endpoints())
        .allow_unfenced()
        .connect()
        .await
        .unwrap();
    let mut acquires = Vec::new();
    for i in 0..200 {
        let c = candidacy(&format!("uncontended-{i}"), "a", ttl);
        let start = Instant::now();
        let lease = direct
            .acquire(&c, AcquireMode::Once)
            .await
            .unwrap()
            .granted()
            .unwrap();
        acquires.push(start.elapsed());
        direct.release(&lease).await.unwrap();
    }
    let mut handovers = Vec::new();
    for i in 0..50 {
        let key = format!("handover-{i}");
        let lease = direct
            .acquire(&candidacy(&key, "a", ttl), AcquireMode::Once)
            .await
            .unwrap()
            .granted()
            .unwrap();
        let waiter = {
            let standby = standby.clone();
            let c = candidacy(&key, "b", ttl);
            tokio::spawn(async move {
                let lease = standby.acquire(&c, AcquireMode::Wait).await.unwrap();
                (Instant::now(), lease.granted().unwrap())
            })
        };
        // Until the standby is subscribed and has been refused once.
        tokio::time::sleep(Duration::from_millis(20)).await;
        let released = Instant::now();
        direct.release(&lease).await.unwrap();
        let (granted_at, lease) = waiter.await.unwrap();
        handovers.push(granted_at - released);
        standby.release(&lease).await.unwrap();
    }
    let p = |samples: &mut Vec<Duration>, q: f64| {
        samples.sort();
        samples[((samples.len() - 1) as f64 * q).round() as usize]
    };
    let (a50, a99) = (p(&mut acquires, 0.5), p(&mut acquires, 0.99));
    let (h50, h99) = (p(&mut handovers, 0.5), p(&mut handovers, 0.99));
    println!(
        "3 masters: uncontended acquire p50 {a50:?} p99 {a99:?} (200); \
         hand-over after release p50 {h50:?} p99 {h99:?} (50)"
    );
    // Loose bounds, so that a polling standby or a serial round fails.
    assert!(a50 < Duration::from_millis(20), "acquire p50 {a50:?}");
    assert!(h50 < Duration::from_millis(25), "hand-over p50 {h50:?}");
}

/// Runs `cmd` on master `i` directly, as an operator (or a restart that
/// lost the key) would.
async fn on_master(cluster: &Cluster, i: usize, cmd: &tenure_redis::redis::Cmd) -> i64 {
    let mut c = admin(cluster, i).await;
    cmd.query_async(&mut c).await.unwrap()
}

/// A connection of our own (no fault proxy) to master `i`.
async fn admin(cluster: &Cluster, i: usize) -> MultiplexedConnection {
    let node = &cluster.nodes()[i];
    let client =
        tenure_redis::redis::Client::open(format!("redis://{}/", node.endpoint())).unwrap();
    client.get_multiplexed_async_connection().await.unwrap()
}

/// Sets the key on master `i` alone, as a value of tenure's shape held by
/// "ghost" for 30 s: an orphan (a release or an undo that missed it, a key
/// set by hand).
async fn plant_ghost(cluster: &Cluster, i: usize, key: &str) {
    plant(cluster, i, key, "ghost", 30_000).await;
}

/// Sets the key on master `i` alone, as a value of tenure's shape held by
/// `holder` for `ms` milliseconds.
async fn plant(cluster: &Cluster, i: usize, key: &str, holder: &str, ms: u64) {
    let stored = format!("{}{key}", RedlockOptions::default().key_prefix);
    let mut set = tenure_redis::redis::cmd("SET");
    set.arg(&stored)
        .arg(format!("{}:{holder}", "0".repeat(40)))
        .arg("PX")
        .arg(ms);
    let mut c = admin(cluster, i).await;
    let _: () = set.query_async(&mut c).await.unwrap();
}

/// Makes the key vanish on master `i` (a master restarted empty, an
/// eviction), and waits until it has.
async fn lose_key_on(cluster: &Cluster, i: usize, key: &str) {
    let stored = format!("{}{key}", RedlockOptions::default().key_prefix);
    let mut expire = tenure_redis::redis::cmd("PEXPIRE");
    expire.arg(&stored).arg(1);
    assert_eq!(
        on_master(cluster, i, &expire).await,
        1,
        "master {i} held no key"
    );
    let mut exists = tenure_redis::redis::cmd("EXISTS");
    exists.arg(&stored);
    while on_master(cluster, i, &exists).await > 0 {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// A lease that lost its key on one master of three rests on the other
/// two with no spare: one more loss and another candidate assembles a
/// majority while the holder still believes it leads. A renewal that
/// reached a majority takes the missing masters back (safe: we hold a
/// majority, and majorities intersect).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_lost_on_one_master_is_taken_again_at_the_next_renewal() {
    let t = three().await;
    let other = RedisBackend::builder(&t.cluster.endpoints())
        .allow_unfenced()
        .connect()
        .await
        .expect("a second client");
    let ttl = Duration::from_secs(10);
    // The repair is told to the candidacy's owner (an Elector counts it in
    // its health).
    let told = Arc::new(std::sync::Mutex::new(Vec::new()));
    let a = {
        let told = told.clone();
        candidacy("decay", "a", ttl).with_warnings(move |w| told.lock().unwrap().push(w))
    };
    let lease = match t.client.acquire(&a, AcquireMode::Once).await {
        Ok(Acquisition::Granted(lease)) => lease,
        other => panic!("a was not granted a free key: {other:?}"),
    };
    lose_key_on(&t.cluster, 0, "decay").await;
    let lease = t
        .client
        .renew(&lease)
        .await
        .expect("a renews on two of three");
    // Master 0 is taken back with the renewal when its answer is among the
    // majority's, else in the background when it comes: within a second.
    let repaired = Instant::now() + Duration::from_secs(1);
    while told.lock().unwrap().is_empty() && Instant::now() < repaired {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    {
        let told = told.lock().unwrap();
        assert!(
            told.len() == 1 && told[0].operation == "renew" && told[0].message.contains("lost"),
            "the repair was not told as one renew warning: {told:?}"
        );
    }
    lose_key_on(&t.cluster, 1, "decay").await;
    let b = candidacy("decay", "b", ttl);
    match other.acquire(&b, AcquireMode::Once).await {
        Ok(Acquisition::Granted(_)) if lease.is_valid() => panic!(
            "b was granted while a's lease is valid: a's renewal did not take back the master \
             that had lost its key, and one more loss left it on one master of three"
        ),
        Ok(Acquisition::Held(holder)) => assert_eq!(holder.identity.as_str(), "a"),
        other => panic!("b: {other:?}"),
    }
}

/// A key left on the first master alone (a release or an undo that missed
/// it, a key set by hand) is not a holder: a majority is free. The first
/// master's refusal is a hint, and the others are asked before a campaign
/// concludes that someone holds the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orphan_key_on_the_first_master_alone_does_not_block_a_campaign() {
    let t = three().await;
    plant_ghost(&t.cluster, 0, "orphan").await;
    let started = Instant::now();
    let ttl = Duration::from_secs(10);
    match t
        .client
        .acquire(&candidacy("orphan", "a", ttl), AcquireMode::Once)
        .await
    {
        Ok(Acquisition::Granted(_)) => {}
        other => panic!("a free majority was not granted: {other:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "granted only after {:?}",
        started.elapsed()
    );
}

/// A refused attempt names the holder a majority holds. Here the first
/// master keeps an orphan with more time left than b's keys on the other
/// two: the first two refusals (the orphan, then b) name one holder each,
/// and the tie went to the key with the most time left, the orphan, which
/// holds nothing. Racers were told so in the suite when a round's loser had
/// just set the first master after the winner took the other two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_split_between_two_holders_names_the_one_a_majority_holds() {
    let t = three().await;
    let ttl = Duration::from_secs(10);
    let other = RedisBackend::builder(&t.cluster.endpoints())
        .allow_unfenced()
        .connect()
        .await
        .expect("a second client");
    match other
        .acquire(&candidacy("split", "b", ttl), AcquireMode::Once)
        .await
    {
        Ok(Acquisition::Granted(_)) => {}
        other => panic!("b was not granted a free key: {other:?}"),
    }
    // b's key on the first master is replaced by an orphan that outlives
    // the others.
    plant_ghost(&t.cluster, 0, "split").await;
    match t
        .client
        .acquire(&candidacy("split", "a", ttl), AcquireMode::Once)
        .await
    {
        Ok(Acquisition::Held(holder)) => assert_eq!(
            holder.identity.as_str(),
            "b",
            "b holds two masters of three, the orphan one"
        ),
        other => panic!("a: {other:?}"),
    }
}

/// Masters split between two candidates that took one each (here two
/// orphans, set by hand for 100 ms) hold nothing: a single attempt that
/// finds them so pauses and tries again, as Redlock prescribes, instead of
/// answering that one of them holds the key. Racers whose first master was
/// slow to answer split the masters this way in the suite.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_attempt_on_split_masters_tries_again_rather_than_name_a_minority() {
    let t = three().await;
    plant(&t.cluster, 0, "even", "ghost-0", 100).await;
    plant(&t.cluster, 1, "even", "ghost-1", 100).await;
    let started = Instant::now();
    match t
        .client
        .acquire(
            &candidacy("even", "a", Duration::from_secs(10)),
            AcquireMode::Once,
        )
        .await
    {
        Ok(Acquisition::Granted(_)) => {}
        other => panic!("two masters of three hold a minority each, yet {other:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "granted only after {:?}",
        started.elapsed()
    );
}

/// A user whose Redis ACL allows only the keys (and channels) under the
/// configured prefix can connect and campaign: nothing tenure touches lies
/// outside it, the connect check included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_limited_to_the_key_prefix_can_connect_and_campaign() {
    let cluster = Cluster::start(Topology::Redis { masters: 1 })
        .await
        .expect("a redis master");
    let node = &cluster.nodes()[0];
    let mut c = admin(&cluster, 0).await;
    let _: () = tenure_redis::redis::cmd("ACL")
        .arg("SETUSER")
        .arg("jobs")
        .arg("on")
        .arg(">secret")
        .arg("~jobs:*")
        .arg("&jobs:*")
        .arg("+@all")
        .query_async(&mut c)
        .await
        .unwrap();
    let mut options = RedlockOptions::default();
    options.key_prefix = "jobs:".into();
    let client = RedisBackend::builder(&[node.endpoint()])
        .allow_unfenced()
        .password(Some("jobs".into()), "secret")
        .options(options)
        .connect()
        .await
        .expect("a user limited to jobs:* connects");
    match client
        .acquire(
            &candidacy("billing", "a", Duration::from_secs(2)),
            AcquireMode::Once,
        )
        .await
    {
        Ok(Acquisition::Granted(_)) => {}
        other => panic!("a campaign under the user's prefix: {other:?}"),
    }
}

/// Commands the master has processed so far.
async fn commands_processed(c: &mut tenure_redis::redis::aio::MultiplexedConnection) -> u64 {
    let info: String = tenure_redis::redis::cmd("INFO")
        .arg("stats")
        .query_async(c)
        .await
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("total_commands_processed:"))
        .expect("INFO stats has total_commands_processed")
        .trim()
        .parse()
        .unwrap()
}

/// A key that never expires (set by hand without `PX`, or `PERSIST`ed) is
/// held with no known end: a waiter and a watch look again with back-off,
/// not as fast as they can. Once it is deleted, the waiter is granted
/// within a TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_that_never_expires_is_waited_on_without_spinning() {
    let cluster = Cluster::start(Topology::Redis { masters: 1 })
        .await
        .expect("a redis master");
    let node = &cluster.nodes()[0];
    let mut c = admin(&cluster, 0).await;
    let stored = format!("{}forever", RedlockOptions::default().key_prefix);
    let _: () = tenure_redis::redis::cmd("SET")
        .arg(&stored)
        .arg(format!("{}:someone", "0".repeat(40)))
        .query_async(&mut c)
        .await
        .unwrap();
    let client = RedisBackend::builder(&[node.endpoint()])
        .allow_unfenced()
        .connect()
        .await
        .unwrap();
    let ttl = Duration::from_secs(2);
    let waiting = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .acquire(&candidacy("forever", "a", ttl), AcquireMode::Wait)
                .await
        })
    };
    let mut watch = client
        .watch(&ElectionKey::new("forever").unwrap())
        .await
        .unwrap();
    let watching = tokio::spawn(async move { while watch.next().await.is_some() {} });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = commands_processed(&mut c).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let during = commands_processed(&mut c).await - before - 1;
    assert!(
        during <= 30,
        "{during} commands in 1 s from one waiter and one watch on a key that never expires"
    );
    let _: () = tenure_redis::redis::cmd("DEL")
        .arg(&stored)
        .query_async(&mut c)
        .await
        .unwrap();
    let granted = tokio::time::timeout(ttl + Duration::from_millis(500), waiting).await;
    assert!(
        matches!(granted, Ok(Ok(Ok(Acquisition::Granted(_))))),
        "not granted within a TTL of the key's deletion: {granted:?}"
    );
    watching.abort();
}

/// A master that answers nothing (black-holed: its connection stays open,
/// nothing comes back) costs a campaign and a release no more than the
/// others' round trips: the first master, asked alone, is given a few round
/// trips before the others are asked too, a master that failed is not asked
/// first again until it answers, and a release returns once a majority let
/// go. At TTL 30 s, with a per-master timeout of a third of it, each waited
/// 10 s for the silent master before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_black_holed_master_stalls_neither_a_campaign_nor_a_release() {
    let t = three().await;
    let ttl = Duration::from_secs(30);
    let quick = Duration::from_secs(1);
    // Warm the connections, then silence the first master: the one a
    // campaign asks alone.
    let warm = candidacy("warm", "a", ttl);
    match t.client.acquire(&warm, AcquireMode::Once).await {
        Ok(Acquisition::Granted(lease)) => t.client.release(&lease).await.unwrap(),
        other => panic!("warm-up: {other:?}"),
    }
    t.links[0].set(LinkFault::Blackhole).await.unwrap();

    for round in 0..2 {
        let started = Instant::now();
        let lease = match t
            .client
            .acquire(&candidacy("silent", "a", ttl), AcquireMode::Once)
            .await
        {
            Ok(Acquisition::Granted(lease)) => lease,
            other => panic!("round {round}: two masters of three are free, yet {other:?}"),
        };
        let took = started.elapsed();
        let left = lease
            .valid_until()
            .saturating_duration_since(Instant::now());
        assert!(
            took < quick && left > Duration::from_secs(25),
            "round {round}: with the first master black-holed, acquire took {took:?} and the \
             lease has {left:?} of its {ttl:?} left"
        );
        let started = Instant::now();
        t.client.release(&lease).await.unwrap();
        eprintln!(
            "round {round}, first master black-holed: acquire {took:?} ({left:?} left), release {:?}",
            started.elapsed()
        );
        assert!(
            started.elapsed() < quick,
            "round {round}: with one master black-holed, release took {:?}",
            started.elapsed()
        );
    }

    // An Elector's shutdown (so `tenure run`'s exit) does not wait for it.
    let elector = Elector::builder(Arc::new(t.client.clone()))
        .key("silent-elector")
        .identity("a")
        .ttl(ttl)
        .allow_unfenced()
        .build()
        .unwrap();
    let leadership = tokio::time::timeout(quick, elector.campaign())
        .await
        .expect("an elector leads within a second with one master black-holed")
        .unwrap();
    let started = Instant::now();
    tokio::time::timeout(Duration::from_secs(15), elector.shutdown())
        .await
        .expect("shutdown ended");
    eprintln!(
        "first master black-holed: an elector's shutdown {:?}",
        started.elapsed()
    );
    assert!(
        started.elapsed() < quick,
        "with one master black-holed, shutdown took {:?}",
        started.elapsed()
    );
    leadership.lost().await;
    t.links[0].set(LinkFault::Pass).await.unwrap();
}

/// The repair script as the crate ships it, run on master `i` directly:
/// the answer, then the key's value and `PTTL` afterwards.
async fn repair_on(
    cluster: &Cluster,
    i: usize,
    key: &str,
    value: &str,
    ms: u64,
) -> (i64, Option<String>, i64) {
    let mut c = admin(cluster, i).await;
    let script = tenure_redis::redis::Script::new(include_str!("../src/lua/repair.lua"));
    let answer: i64 = script
        .key(key)
        .arg(value)
        .arg(ms)
        .invoke_async(&mut c)
        .await
        .unwrap();
    let held: Option<String> = tenure_redis::redis::cmd("GET")
        .arg(key)
        .query_async(&mut c)
        .await
        .unwrap();
    let left: i64 = tenure_redis::redis::cmd("PTTL")
        .arg(key)
        .query_async(&mut c)
        .await
        .unwrap();
    (answer, held, left)
}

/// A repair only ever lengthens a key that holds our value. Commands on
/// one master run in the order sent: renewal k's late repair (with k's
/// time left) can land after renewal k+1's extension, which was counted
/// towards k+1's majority; a repair that set the expiry back would let
/// that master free the key about a renewal period before k+1's deadline.
/// It still takes a key that is gone and leaves someone else's alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repair_never_shortens_a_key_that_holds_our_value() {
    let cluster = Cluster::start(Topology::Redis { masters: 1 })
        .await
        .expect("a redis master");
    let mut c = admin(&cluster, 0).await;
    let set = |key: &str, value: &str, ms: u64| {
        let mut set = tenure_redis::redis::cmd("SET");
        set.arg(key).arg(value).arg("PX").arg(ms);
        set
    };
    // Ours, 10 s left; a late repair with 100 ms left.
    let _: () = set("k", "v", 10_000).query_async(&mut c).await.unwrap();
    let (answer, held, left) = repair_on(&cluster, 0, "k", "v", 100).await;
    assert_eq!((answer, held.as_deref()), (1, Some("v")));
    assert!(
        left >= 9_000,
        "a repair with 100 ms left set a key with 10 s left back to PTTL {left} ms"
    );
    // Ours, 100 ms left: lengthened to the repair's time.
    let _: () = set("short", "v", 100).query_async(&mut c).await.unwrap();
    let (answer, _, left) = repair_on(&cluster, 0, "short", "v", 10_000).await;
    assert!(answer == 1 && left >= 9_000, "answer {answer}, PTTL {left}");
    // Gone: taken, to expire with the repair's time.
    let (answer, held, left) = repair_on(&cluster, 0, "gone", "v", 10_000).await;
    assert_eq!((answer, held.as_deref()), (2, Some("v")));
    assert!((9_000..=10_000).contains(&left), "PTTL {left}");
    // Someone else's: left as it is.
    let _: () = set("theirs", "w", 5_000).query_async(&mut c).await.unwrap();
    let (answer, held, left) = repair_on(&cluster, 0, "theirs", "v", 10_000).await;
    assert_eq!((answer, held.as_deref()), (0, Some("w")));
    assert!(left <= 5_000, "PTTL {left}");
}

/// Renewal k's repair of a master that stalled must not shorten the key
/// renewal k+1 counted there. Master 0 stalls (`CLIENT PAUSE WRITE`:
/// scripts wait, `CLIENT UNPAUSE` does not) while `a` renews (k) on
/// masters 1 and 2; `a` is then cut off from master 2 and renews again
/// (k+1) while renewal k still waits for master 0 (a third of the TTL).
/// Master 0 resumes once renewal k has given up on it (and, on the old
/// code, sent its repair, which then runs after k+1's extension with the
/// time k had left); k+1 counts masters 0 and 1. Master 2's key expires
/// with renewal k: a standby that could take master 0 too would lead
/// about a renewal period before `a`'s deadline. No bound here is a
/// race: masters 0 and 1 hold until at least k+1's send plus the TTL,
/// and `a`'s deadline is that less the drift margins, whatever the
/// machine's load does to the steps in between (a slow step only delays
/// the standby); the steps' own margins (k+1 sent 250 ms before k's
/// timeout, master 0 resumed at least 500 ms before k+1's) only decide
/// whether the old code's repair lands in the order that breaks it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_repair_does_not_let_a_standby_in_while_the_holder_leads() {
    let t = three().await;
    let ttl = Duration::from_secs(3);
    // A master's timeout is a third of the TTL until it answered 8 calls.
    let node_timeout = ttl / 3;
    let standby = RedisBackend::builder(&t.cluster.endpoints())
        .allow_unfenced()
        .connect()
        .await
        .expect("the standby's client");
    let lease = match t
        .client
        .acquire(&candidacy("late-repair", "a", ttl), AcquireMode::Once)
        .await
    {
        Ok(Acquisition::Granted(lease)) => lease,
        other => panic!("a was not granted a free key: {other:?}"),
    };
    let mut m0 = admin(&t.cluster, 0).await;
    let _: () = tenure_redis::redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(30_000)
        .arg("WRITE")
        .query_async(&mut m0)
        .await
        .unwrap();
    let sent_k = Instant::now();
    let lease_k = t
        .client
        .renew(&lease)
        .await
        .expect("renewal k on masters 1 and 2");
    t.links[2].set(LinkFault::Blackhole).await.unwrap();
    tokio::time::sleep_until(sent_k + node_timeout * 3 / 4).await;
    let sent_k1 = Instant::now();
    let renewing = {
        let (client, lease) = (t.client.clone(), lease_k.clone());
        tokio::spawn(async move { client.renew(&lease).await })
    };
    // Master 0's link carries renewal k+1's extension, then (on the old
    // code) renewal k's repair once k gave up on master 0.
    let proxy = &t.links[0].proxies()[0];
    let give_up = sent_k + node_timeout + Duration::from_millis(200);
    while proxy.requests_since(sent_k1).len() < 2 && Instant::now() < give_up {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let repairs_sent = proxy.requests_since(sent_k1).len().saturating_sub(1);
    let _: () = tenure_redis::redis::cmd("CLIENT")
        .arg("UNPAUSE")
        .query_async(&mut m0)
        .await
        .unwrap();
    let lease_k1 = renewing
        .await
        .unwrap()
        .expect("renewal k+1 on masters 0 and 1");
    let give_up = lease_k1.valid_until() + ttl;
    loop {
        match standby
            .acquire(&candidacy("late-repair", "b", ttl), AcquireMode::Once)
            .await
        {
            Ok(Acquisition::Granted(b)) => {
                let left = lease_k1
                    .valid_until()
                    .saturating_duration_since(Instant::now());
                assert!(
                    !lease_k1.is_valid(),
                    "b was granted {:?} after a's renewal k while a leads for {left:?} more \
                     (its renewal k+1 counted master 0; {repairs_sent} request(s) of a's \
                     reached master 0's link after k+1's: a late repair of renewal k set \
                     master 0's key back)",
                    Instant::now() - sent_k
                );
                eprintln!(
                    "b granted {:?} after a's renewal k, {:?} after a's deadline; {repairs_sent} \
                     request(s) of a's reached master 0's link after renewal k+1's",
                    Instant::now() - sent_k,
                    Instant::now() - lease_k1.valid_until()
                );
                standby.release(&b).await.unwrap();
                break;
            }
            Ok(Acquisition::Held(_)) => {}
            Err(e) if e.is_retryable() => {}
            Err(e) => panic!("b: {e}"),
        }
        assert!(
            Instant::now() < give_up,
            "b was not granted within a TTL of a's deadline"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    t.links[2].set(LinkFault::Pass).await.unwrap();
}

/// A waiting candidate that saw the holder's key on its first master and
/// had it confirmed by the others believes that master's later refusals
/// naming the same key without asking the others again. A release that
/// misses that master (the holder's link to it is cut) leaves the key there
/// alone, an orphan for the rest of its TTL: the released message says the
/// holder let go, so the waiter asks the others again and is granted by
/// them, in a few round trips rather than the orphan's 10 s. The 2 s bound
/// is many times the few local round trips a grant takes (the hand-over's
/// p50 is under 25 ms, measured above) and a fifth of the TTL the bug
/// costs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_not_held_up_by_a_released_key_left_on_its_first_master() {
    let t = three().await;
    let ttl = Duration::from_secs(10);
    let waiter = RedisBackend::builder(&t.cluster.endpoints())
        .allow_unfenced()
        .connect()
        .await
        .expect("the waiter's client");
    let lease = match t
        .client
        .acquire(&candidacy("left-behind", "a", ttl), AcquireMode::Once)
        .await
    {
        Ok(Acquisition::Granted(lease)) => lease,
        other => panic!("a was not granted a free key: {other:?}"),
    };
    let waiting = {
        let waiter = waiter.clone();
        tokio::spawn(async move {
            waiter
                .acquire(&candidacy("left-behind", "b", ttl), AcquireMode::Wait)
                .await
        })
    };
    // Setting up: until b has subscribed on every master, and then its
    // first round (a refusal at master 0 confirmed on masters 1 and 2,
    // a few local round trips) is done.
    let stored = format!("{}left-behind", RedlockOptions::default().key_prefix);
    'subscribed: loop {
        for i in 0..3 {
            let mut numsub = tenure_redis::redis::cmd("PUBSUB");
            numsub.arg("NUMSUB").arg(&stored);
            let mut c = admin(&t.cluster, i).await;
            let (_, n): (String, u64) = numsub.query_async(&mut c).await.unwrap();
            if n == 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue 'subscribed;
            }
        }
        break;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiting.is_finished(), "b was granted a held key");
    t.links[0].set(LinkFault::Blackhole).await.unwrap();
    let released = Instant::now();
    t.client
        .release(&lease)
        .await
        .expect("released on masters 1 and 2");
    let granted = tokio::time::timeout(Duration::from_secs(2), waiting).await;
    match granted {
        Ok(Ok(Ok(Acquisition::Granted(_)))) => {
            eprintln!("b granted {:?} after a's release", released.elapsed())
        }
        Err(_) => panic!(
            "b was not granted within 2 s of a's release ({:?} so far): a's key left on b's \
             first master (the release missed it) was believed without asking the others",
            released.elapsed()
        ),
        other => panic!("b: {other:?}"),
    }
    t.links[0].set(LinkFault::Pass).await.unwrap();
}

/// A TCP proxy in front of one master whose new connections reach the
/// master only after a delay (a master far away over TLS takes several
/// round trips to connect), or are closed at once; it counts the
/// connections it accepted and can drop the ones open.
struct Connects {
    addr: std::net::SocketAddr,
    /// `None`: close new connections at once.
    delay: Arc<std::sync::Mutex<Option<Duration>>>,
    accepted: Arc<std::sync::atomic::AtomicUsize>,
    open: Arc<std::sync::Mutex<tokio::task::JoinSet<()>>>,
    accepting: tokio::task::JoinHandle<()>,
}

impl Connects {
    async fn start(upstream: std::net::SocketAddr) -> Connects {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let delay = Arc::new(std::sync::Mutex::new(Some(Duration::ZERO)));
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let open = Arc::new(std::sync::Mutex::new(tokio::task::JoinSet::new()));
        let accepting = {
            let (delay, accepted, open) = (delay.clone(), accepted.clone(), open.clone());
            tokio::spawn(async move {
                while let Ok((mut client, _)) = listener.accept().await {
                    accepted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let Some(delay) = *delay.lock().unwrap() else {
                        drop(client);
                        continue;
                    };
                    open.lock().unwrap().spawn(async move {
                        tokio::time::sleep(delay).await;
                        if let Ok(mut server) = tokio::net::TcpStream::connect(upstream).await {
                            let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                        }
                    });
                }
            })
        };
        Connects {
            addr,
            delay,
            accepted,
            open,
            accepting,
        }
    }

    /// New connections reach the master after `delay`; `None`: are closed.
    fn connect_after(&self, delay: Option<Duration>) {
        *self.delay.lock().unwrap() = delay;
    }

    /// Closes every connection open now.
    fn drop_open(&self) {
        self.open.lock().unwrap().abort_all();
    }

    fn accepted(&self) -> usize {
        self.accepted.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Drop for Connects {
    fn drop(&mut self) {
        self.accepting.abort();
        self.drop_open();
    }
}

/// Three masters, the first behind a [`Connects`] proxy.
async fn three_with_slow_first() -> (Cluster, Connects, RedisBackend) {
    let cluster = Cluster::start(Topology::Redis { masters: 3 })
        .await
        .expect("three redis masters");
    let first = Connects::start(cluster.nodes()[0].addr()).await;
    let mut endpoints = vec![first.addr.to_string()];
    endpoints.extend(cluster.endpoints().into_iter().skip(1));
    let client = RedisBackend::builder(&endpoints)
        .allow_unfenced()
        .connect()
        .await
        .expect("a client of three masters");
    (cluster, first, client)
}

/// Whether master `i` stores `key`.
async fn stored_on(cluster: &Cluster, i: usize, key: &str) -> bool {
    let mut exists = tenure_redis::redis::cmd("EXISTS");
    exists.arg(format!("{}{key}", RedlockOptions::default().key_prefix));
    on_master(cluster, i, &exists).await > 0
}

/// Rounds on fresh keys until master 0 takes part again (holds a granted
/// key): how long that took, or `None` within `limit`.
async fn until_first_master_takes_part(
    cluster: &Cluster,
    client: &RedisBackend,
    ttl: Duration,
    limit: Duration,
) -> Option<Duration> {
    let started = Instant::now();
    for i in 0.. {
        let key = format!("back-{i}");
        let lease = match client
            .acquire(&candidacy(&key, "a", ttl), AcquireMode::Once)
            .await
        {
            Ok(Acquisition::Granted(lease)) => lease,
            other => panic!("masters 1 and 2 are free, yet {other:?}"),
        };
        let taken = stored_on(cluster, 0, &key).await;
        client.release(&lease).await.unwrap();
        if taken {
            return Some(started.elapsed());
        }
        if started.elapsed() > limit {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

/// A master's per-call timeout, once derived from its round trips (here
/// 250 ms, the least), bounds a call, not a reconnect: a master whose
/// connection broke and whose connects take 600 ms (a TLS master some
/// 50 ms away takes several round trips to connect) is connected again in
/// the background, within `connect_timeout` (2 s), and takes part in the
/// rounds after. Before, every call started a connect and gave it up at
/// the call's timeout: the master was lost for the life of the process.
/// The 10 s limit is five connect timeouts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_whose_reconnect_outlasts_its_call_timeout_is_reached_again() {
    let (cluster, first, client) = three_with_slow_first().await;
    let ttl = Duration::from_secs(3);
    // Master 0's timeout is derived once it answered 8 calls: 250 ms here.
    for i in 0..10 {
        let c = candidacy(&format!("warm-{i}"), "a", ttl);
        match client.acquire(&c, AcquireMode::Once).await {
            Ok(Acquisition::Granted(lease)) => client.release(&lease).await.unwrap(),
            other => panic!("warm-up: {other:?}"),
        }
    }
    assert!(stored_on_after_grant(&cluster, &client, ttl).await);
    let connect = Duration::from_millis(600);
    first.connect_after(Some(connect));
    first.drop_open();
    let back = until_first_master_takes_part(&cluster, &client, ttl, Duration::from_secs(10)).await;
    eprintln!(
        "master 0, its connection dropped and its connects taking {connect:?}: back after {back:?}"
    );
    assert!(
        back.is_some(),
        "master 0 took part in no round for 10 s after its connection dropped, with connects \
         taking {connect:?} ({} connection(s) accepted): each reconnect was given up at the \
         call's timeout",
        first.accepted()
    );
}

/// Master 0 holds a key granted now (the warm-up reached it).
async fn stored_on_after_grant(cluster: &Cluster, client: &RedisBackend, ttl: Duration) -> bool {
    until_first_master_takes_part(cluster, client, ttl, Duration::ZERO)
        .await
        .is_some()
}

/// A master that closes every new connection is not connected to again
/// on every call: reconnects back off (50 ms doubling to 250 ms,
/// jittered), so two seconds of rounds back to back, each calling it twice
/// (acquire and release), cost it at most one connect per 50 ms (41, the
/// least pause; about 10 on average), not one a call (thousands). Once it
/// accepts connections again, it takes part within the longest pause
/// (250 ms) and a round; 3 s allows for a loaded machine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconnects_to_a_master_that_closes_connections_back_off() {
    let (cluster, first, client) = three_with_slow_first().await;
    let ttl = Duration::from_secs(3);
    assert!(stored_on_after_grant(&cluster, &client, ttl).await);
    first.connect_after(None);
    first.drop_open();
    let before = first.accepted();
    let started = Instant::now();
    let mut rounds = 0;
    while started.elapsed() < Duration::from_secs(2) {
        let c = candidacy("busy", "a", ttl);
        match client.acquire(&c, AcquireMode::Once).await {
            Ok(Acquisition::Granted(lease)) => client.release(&lease).await.unwrap(),
            other => panic!("masters 1 and 2 are free, yet {other:?}"),
        }
        rounds += 1;
    }
    let connects = first.accepted() - before;
    eprintln!("{connects} connect(s) to master 0 in {rounds} rounds over 2 s");
    assert!(
        connects <= 41,
        "{connects} connects in 2 s ({rounds} rounds) to a master that closes every connection: \
         no back-off"
    );
    first.connect_after(Some(Duration::ZERO));
    let back = until_first_master_takes_part(&cluster, &client, ttl, Duration::from_secs(5)).await;
    assert!(
        back.is_some_and(|d| d < Duration::from_secs(3)),
        "master 0 took part again only after {back:?} once it accepted connections"
    );
}
