//! Two candidates hand leadership over on a Redis server (Redlock), which
//! cannot fence.
//!
//! Run: `cargo run --example redis --features redis -- 'redis://127.0.0.1:6379?allow_unfenced=true'`
//! (the URL is the default; list 3 or 5 independent masters for Redlock
//! proper: `redis://h1:6379,h2:6379,h3:6379?allow_unfenced=true`; see the README
//! for a server to try it on).
//!
//! What "unfenced" means: Redis gives no fencing token (`token()` is
//! `None`), so nothing downstream can refuse the writes of a leader that
//! was deposed while it was paused (GC, host suspend) or whose lease a
//! restarted master forgot. The only guard is the leader's own clock:
//! check [`is_valid`](tenure::Term::is_valid) right before each
//! leader-only step, and keep each step short against the TTL. Use it
//! where a duplicate run costs time, not correctness (a cache warm-up, a
//! report mailed twice); for anything else, use etcd, ZooKeeper or
//! Kubernetes and pass the token with every write (see
//! `examples/sqlite_fencing.rs`).

use std::time::Duration;

use tenure::{Elector, Leadership};
use tokio::time::Instant;

/// Does three short leader-only steps, checking `is_valid()` before each:
/// without a token, that check is all that stands between a deposed leader
/// and the work.
async fn work(name: &str, leadership: &Leadership) {
    for step in 1..=3 {
        if !leadership.is_valid() {
            println!("{name}: no longer leader, stopping before step {step}");
            return;
        }
        let left = leadership.valid_until() - Instant::now();
        println!(
            "{name}: step {step} (valid for {:.1} s more; token {:?})",
            left.as_secs_f64(),
            leadership.token()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::main]
async fn main() -> tenure::Result<()> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "redis://127.0.0.1:6379?allow_unfenced=true".to_owned());
    println!("backend: {url}");
    // Two candidates, each with its own connections.
    let elector = |identity: &'static str| {
        let url = url.clone();
        async move {
            let backend = tenure::connect(&url).await?;
            let ttl = backend.capabilities().min_ttl.max(Duration::from_secs(5));
            Elector::builder(backend)
                .key("tenure-example")
                .identity(identity)
                .ttl(ttl)
                // Required: without it, build() refuses a backend that
                // cannot fence. With it, the Elector logs one WARN.
                .allow_unfenced()
                .build()
        }
    };
    let (a, b) = (elector("replica-a").await?, elector("replica-b").await?);
    println!(
        "fencing: {} (no token: check is_valid() before each step)",
        a.backend().capabilities().fencing
    );

    let first = a.campaign().await?;
    println!("replica-a leads, token {:?}", first.token());
    work("replica-a", &first).await;

    let standby = tokio::spawn({
        let b = b.clone();
        async move { b.campaign().await }
    });
    // Let b queue up behind a, then hand over.
    tokio::time::sleep(Duration::from_millis(500)).await;
    println!(
        "who leads, as replica-b sees it: {:?}",
        b.leader().await?.map(|l| l.identity)
    );
    let resigned = Instant::now();
    first.resign().await?;
    let second = standby.await.expect("the standby's task")?;
    println!(
        "replica-b leads {:.1} ms after replica-a resigned, token {:?}",
        resigned.elapsed().as_secs_f64() * 1000.0,
        second.token(),
    );
    work("replica-b", &second).await;
    second.resign().await?;
    a.shutdown().await;
    b.shutdown().await;
    println!("done");
    Ok(())
}
