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
