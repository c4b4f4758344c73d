//! What the backend examples share: two candidates on one key of a real
//! server, a hand-over between them, and the tokens a fence would check.

use std::time::Duration;

use tenure::Elector;
use tokio::time::Instant;

/// Runs the example against the backend at `url` (the first argument, else
/// `default_url`).
pub async fn run(default_url: &str) -> tenure::Result<()> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| default_url.to_owned());
    println!("backend: {url}");
    // Two candidates, each with its own client (connection, session).
    let elector = |identity: &'static str| {
        let url = url.clone();
        async move {
            let backend = tenure::connect(&url).await?;
            // 5 s, or the backend's minimum (a ZooKeeper session's timeout).
            let ttl = backend.capabilities().min_ttl.max(Duration::from_secs(5));
            Elector::builder(backend)
                .key("tenure-example")
                .identity(identity)
                .ttl(ttl)
                .build()
        }
    };
    let (a, b) = (elector("replica-a").await?, elector("replica-b").await?);

    let first = a.campaign().await?;
    let first_token = first.token();
    println!("replica-a leads with token {first_token:?}");
    let mut b_state = b.state();
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
        "replica-b leads {:.1} ms after replica-a resigned, with token {:?} (greater: {})",
        resigned.elapsed().as_secs_f64() * 1000.0,
        second.token(),
        second.token() > first_token,
    );
    println!("replica-b's state: {:?}", *b_state.borrow_and_update());
    second.resign().await?;
    a.shutdown().await;
    b.shutdown().await;
    println!("replica-b's state after shutdown: {:?}", *b_state.borrow());
    Ok(())
}
