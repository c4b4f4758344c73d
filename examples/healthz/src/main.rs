//! Campaigns on a backend URL (default `memory://`) and serves `/healthz`.
//!
//! Run: `cargo run -p tenure-example-healthz -- [URL] [LISTEN]`, e.g.
//! `cargo run -p tenure-example-healthz -- memory:// 127.0.0.1:8080`, then
//! `curl -i http://127.0.0.1:8080/healthz`. Other backends need their
//! feature: `--features etcd -- etcd://127.0.0.1:2379`.

use std::time::Duration;

use tenure::Elector;

const TTL: Duration = Duration::from_secs(10);

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt().with_env_filter("info").init();
    let mut args = std::env::args().skip(1);
    let url = args.next().unwrap_or_else(|| "memory://".to_owned());
    let listen = args.next().unwrap_or_else(|| "127.0.0.1:8080".to_owned());

    let backend = tenure::connect(&url).await?;
    let elector = Elector::builder(backend)
        .key("healthz-demo")
        .ttl(TTL)
        .build()?;
    // Two renew intervals (TTL/3 each) without a successful renewal is
    // unhealthy: the probe fails before the term gives itself up.
    let app = tenure_example_healthz::router(elector.clone(), TTL * 2 / 3);
    let listener = tokio::net::TcpListener::bind(&listen).await?;
    println!("serving http://{}/healthz", listener.local_addr()?);

    let leader = elector.clone();
    let work = tokio::spawn(async move {
        leader
            .run(|leadership| async move {
                println!("leading with token {:?}", leadership.token());
                let reason = leadership.lost().await;
                println!("leadership ended: {reason}");
            })
            .await
    });
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    elector.shutdown().await;
    work.await??;
    Ok(())
}
