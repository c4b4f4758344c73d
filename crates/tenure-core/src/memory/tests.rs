//! The server-wide knobs: refreshing and wiping every lease, a node down.

use std::time::Duration;

use tokio::time::{advance, timeout};

use crate::{AcquireMode, Acquisition, Candidacy, ElectionKey, Lease, LeaseBackend};

use super::MemoryBackend;

const TTL: Duration = Duration::from_secs(2);

fn candidacy(key: &str, who: &str) -> Candidacy {
    Candidacy::parse(key, who, TTL).unwrap()
}

async fn grant(client: &MemoryBackend, key: &str, who: &str) -> Lease {
    match client
        .acquire(&candidacy(key, who), AcquireMode::Once)
        .await
        .unwrap()
    {
        Acquisition::Granted(lease) => lease,
        Acquisition::Held(h) => panic!("{who}: held by {h:?}"),
    }
}

fn holder(server: &MemoryBackend, key: &str) -> Option<String> {
    server
        .holder(&ElectionKey::new(key).unwrap())
        .map(|h| h.identity.as_str().to_owned())
}

#[tokio::test(start_paused = true)]
async fn refresh_all_restarts_every_ttl_from_now() {
    let server = MemoryBackend::new();
    grant(&server, "k1", "a").await;
    grant(&server, "k2", "b").await;
    advance(Duration::from_millis(1500)).await;
    server.refresh_all();
    advance(Duration::from_millis(1000)).await; // past the grants' own TTL
    assert_eq!(holder(&server, "k1").as_deref(), Some("a"));
    assert_eq!(holder(&server, "k2").as_deref(), Some("b"));
    advance(Duration::from_millis(1001)).await; // past the refreshed TTL
    assert_eq!(holder(&server, "k1"), None);
    assert_eq!(holder(&server, "k2"), None);
}

#[tokio::test(start_paused = true)]
async fn wipe_all_frees_every_key_and_grants_waiters_with_higher_tokens() {
    let server = MemoryBackend::new();
    let a = grant(&server, "k1", "a").await;
    grant(&server, "k2", "b").await;
    let waiter = {
        let client = server.client();
        tokio::spawn(async move {
            client
                .acquire(&candidacy("k1", "c"), AcquireMode::Wait)
                .await
        })
    };
    while server.queue_len(&ElectionKey::new("k1").unwrap()) == 0 {
        tokio::task::yield_now().await;
    }
    server.wipe_all();
    let c = waiter.await.unwrap().unwrap().granted().expect("c granted");
    assert!(
        c.token() > a.token(),
        "{:?} after {:?}",
        c.token(),
        a.token()
    );
    assert_eq!(holder(&server, "k1").as_deref(), Some("c"));
    assert_eq!(holder(&server, "k2"), None);
    assert!(server.renew(&a).await.unwrap_err().is_lease_lost());
}

#[tokio::test(start_paused = true)]
async fn a_node_down_holds_calls_until_it_is_back_whatever_the_link_does() {
    let server = MemoryBackend::new();
    let client = server.client();
    client.faults().node_down(true);
    let call = {
        let client = client.clone();
        tokio::spawn(async move { grant(&client, "k", "a").await })
    };
    advance(Duration::from_secs(5)).await;
    assert!(
        !call.is_finished(),
        "a call went through a node that is down"
    );
    client.faults().reset();
    client.faults().heal();
    advance(Duration::from_secs(5)).await;
    assert!(
        !call.is_finished(),
        "the link's reset brought the node back"
    );
    client.faults().node_down(false);
    let lease = timeout(Duration::from_secs(1), call)
        .await
        .expect("the call goes through once the node is back")
        .unwrap();
    assert_eq!(lease.holder().as_str(), "a");
}

#[tokio::test(start_paused = true)]
async fn a_session_limit_ends_the_leases_that_count_on_more_and_keeps_the_others() {
    let server = MemoryBackend::new();
    let (a, other) = (server.client(), server.client());
    let held = grant(&a, "k", "a").await;
    let untouched = grant(&other, "k2", "o").await;
    let limit = Duration::from_millis(500);
    a.limit_session(Some(limit));
    assert_eq!(held.signalled_loss(), Some(crate::LossReason::Revoked));
    assert!(a.renew(&held).await.unwrap_err().is_lease_lost());
    assert_eq!(untouched.signalled_loss(), None);
    // The server keeps a's lease for the limit from the reconnect, not its TTL.
    advance(limit + Duration::from_millis(1)).await;
    assert_eq!(holder(&server, "k"), None);
    assert_eq!(holder(&server, "k2").as_deref(), Some("o"));
    // A lease granted while the limit holds ends at once; lifted, one lasts.
    let late = grant(&a, "k", "a").await;
    assert_eq!(late.signalled_loss(), Some(crate::LossReason::Revoked));
    a.release(&late).await.unwrap();
    a.limit_session(None);
    let whole = grant(&a, "k", "a").await;
    assert_eq!(whole.signalled_loss(), None);
    advance(TTL - Duration::from_millis(1)).await;
    assert_eq!(holder(&server, "k").as_deref(), Some("a"));
}

#[tokio::test(start_paused = true)]
async fn a_client_deaf_to_its_session_limit_keeps_its_deadline_while_the_server_keeps_less() {
    let server = MemoryBackend::new();
    let a = server.client();
    a.faults().ignore_session_limits(true);
    let held = grant(&a, "k", "a").await;
    let limit = Duration::from_millis(500);
    a.limit_session(Some(limit));
    a.limit_session(Some(limit)); // the limit in force: nothing changes
    assert_eq!(held.signalled_loss(), None);
    advance(Duration::from_millis(300)).await;
    let renewed = a.renew(&held).await.expect("the deaf client renews");
    advance(limit + Duration::from_millis(1)).await;
    assert!(renewed.is_valid(), "its deadline counts from its TTL");
    assert_eq!(
        holder(&server, "k"),
        None,
        "the server kept it for the limit"
    );
}

#[tokio::test(start_paused = true)]
async fn a_fast_server_clock_expires_leases_early_by_the_clients_clock() {
    let server = MemoryBackend::new();
    server.set_server_clock_rate(1.25);
    let lease = grant(&server, "k", "a").await;
    // 2 s of the server's time are 1.6 s of the client's.
    advance(Duration::from_millis(1590)).await;
    assert_eq!(holder(&server, "k").as_deref(), Some("a"));
    advance(Duration::from_millis(20)).await;
    assert_eq!(holder(&server, "k"), None);
    assert!(
        lease.valid_until() > tokio::time::Instant::now(),
        "the client still counts on it"
    );
}

#[tokio::test(start_paused = true)]
async fn a_reset_fails_a_waiting_acquire_and_withdraws_it() {
    let server = MemoryBackend::new();
    let _a = grant(&server, "k", "a").await;
    let b = server.client();
    let waiting = {
        let b = b.clone();
        tokio::spawn(async move { b.acquire(&candidacy("k", "b"), AcquireMode::Wait).await })
    };
    while server.queue_len(&ElectionKey::new("k").unwrap()) == 0 {
        tokio::task::yield_now().await;
    }
    b.faults().reset_connections();
    let failed = waiting.await.unwrap();
    assert!(
        failed.as_ref().is_err_and(|e| e.is_retryable()),
        "{failed:?}"
    );
    assert_eq!(server.queue_len(&ElectionKey::new("k").unwrap()), 0);
    // New calls go through.
    let held = b
        .acquire(&candidacy("k", "b"), AcquireMode::Once)
        .await
        .unwrap();
    assert!(held.granted().is_none());
}

#[tokio::test(start_paused = true)]
async fn a_lost_answer_is_executed_and_its_grant_released_when_the_call_fails() {
    let server = MemoryBackend::new();
    let a = server.client();
    a.faults().drop_answers(true);
    let call = {
        let a = a.clone();
        tokio::spawn(async move { a.acquire(&candidacy("k", "a"), AcquireMode::Once).await })
    };
    while holder(&server, "k").is_none() {
        tokio::task::yield_now().await;
    }
    advance(Duration::from_secs(5)).await;
    assert!(!call.is_finished(), "the answer was lost: the call waits");
    a.faults().drop_answers(false);
    let failed = call.await.unwrap();
    assert!(
        failed.as_ref().is_err_and(|e| e.is_retryable()),
        "{failed:?}"
    );
    assert_eq!(holder(&server, "k"), None, "the unseen grant is released");
}

#[tokio::test(start_paused = true)]
async fn a_grant_kept_by_the_bug_knob_holds_the_key_until_its_ttl() {
    let server = MemoryBackend::new();
    let a = server.client();
    a.faults().keep_undelivered_grants(true);
    a.faults().drop_answers(true);
    let call = {
        let a = a.clone();
        tokio::spawn(async move { a.acquire(&candidacy("k", "a"), AcquireMode::Once).await })
    };
    while holder(&server, "k").is_none() {
        tokio::task::yield_now().await;
    }
    call.abort();
    let _ = call.await;
    assert_eq!(holder(&server, "k").as_deref(), Some("a"));
    advance(TTL).await;
    assert_eq!(holder(&server, "k"), None);
}
