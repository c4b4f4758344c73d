//! `/healthz` over a real socket: 200 for a leader renewing, 503 once its
//! renewals have failed for longer than the bound.

use std::sync::Arc;
use std::time::Duration;

use tenure::{Elector, MemoryBackend};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const TTL: Duration = Duration::from_secs(2);
const RENEW: Duration = Duration::from_millis(250);
const BOUND: Duration = Duration::from_millis(500);

/// One `GET /healthz` over HTTP/1.1: the status code and the body.
async fn get(addr: std::net::SocketAddr) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {answer:?}"));
    let body = answer
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default();
    (status, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_is_200_while_renewing_and_503_after_renewals_stop() {
    let client = MemoryBackend::new();
    let elector = Elector::builder(Arc::new(client.clone()))
        .key("healthz")
        .identity("a")
        .ttl(TTL)
        .renew_interval(RENEW)
        .renew_jitter(0.0)
        .build()
        .unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = tenure_example_healthz::router(elector.clone(), BOUND);
    tokio::spawn(async move { axum::serve(listener, app).await });

    let (status, body) = get(addr).await;
    assert_eq!((status, body.as_str()), (200, "ok\n"), "a follower");

    let leadership = elector.campaign().await.unwrap();
    tokio::time::sleep(RENEW * 3).await;
    let (status, body) = get(addr).await;
    assert_eq!((status, body.as_str()), (200, "ok\n"), "a renewing leader");

    // Renewals fail from now on: past the bound, and well before the
    // term's own deadline (at least TTL - RENEW away), the probe fails.
    client.faults().fail_calls(true);
    tokio::time::sleep(BOUND + RENEW + Duration::from_millis(50)).await;
    assert!(
        leadership.is_valid(),
        "the term has not reached its deadline"
    );
    let (status, body) = get(addr).await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("last successful renewal"), "{body}");
    assert!(body.contains("500ms"), "{body}");
    drop(leadership);
}
