//! The in-memory backend against the contract: queue, tokens, watch, input checks.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{candidacy, key, settle};
use futures::StreamExt;
use tenure_core::{
    AcquireMode, Acquisition, Candidacy, CandidateId, Capabilities, ElectionKey, Elector, Error,
    KeyRule, LeaderEvent, LeaseBackend, MemoryBackend,
};
use tokio::time::Instant;

const TTL: Duration = Duration::from_secs(2);

async fn grant(client: &MemoryBackend, who: &str) -> tenure_core::Lease {
    match client
        .acquire(&candidacy(who, TTL), AcquireMode::Once)
        .await
        .unwrap()
    {
        Acquisition::Granted(lease) => lease,
        Acquisition::Held(h) => panic!("{who}: held by {h:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn acquire_when_held_reports_holder() {
    let server = MemoryBackend::new();
    let lease = grant(&server.client(), "a").await;
    match server
        .client()
        .acquire(&candidacy("b", TTL), AcquireMode::Once)
        .await
        .unwrap()
    {
        Acquisition::Held(holder) => {
            assert_eq!(holder.identity.as_str(), "a");
            assert_eq!(holder.token, lease.token());
        }
        Acquisition::Granted(_) => panic!("granted a held key"),
    }
}

#[tokio::test(start_paused = true)]
async fn cancelled_waiting_acquire_leaves_no_queue_entry() {
    let server = MemoryBackend::new();
    let a = server.client();
    let lease = grant(&a, "a").await;
    let b = server.client();
    let b_wait = candidacy("b", TTL);
    let attempt = tokio::time::timeout(
        Duration::from_millis(100),
        b.acquire(&b_wait, AcquireMode::Wait),
    );
    assert!(attempt.await.is_err(), "b must still be waiting");
    assert_eq!(server.queue_len(&key()), 0);
    a.release(&lease).await.unwrap();
    assert!(
        server.holder(&key()).is_none(),
        "the withdrawn candidate must not be granted"
    );
    assert_eq!(server.stats().withdrawn, 1);
}

#[tokio::test(start_paused = true)]
async fn tokens_strictly_increase_across_grants_including_the_same_identity() {
    let server = MemoryBackend::new();
    let a = server.client();
    let mut last = None;
    for (round, who) in ["a", "a", "b", "a", "a"].into_iter().enumerate() {
        let lease = grant(&a, who).await;
        assert!(
            lease.token() > last,
            "round {round}: {:?} after {last:?}",
            lease.token()
        );
        last = lease.token();
        if round.is_multiple_of(2) {
            a.release(&lease).await.unwrap();
        } else {
            tokio::time::sleep(TTL).await; // expiry instead of release
        }
    }
}

#[tokio::test(start_paused = true)]
async fn expiry_happens_at_the_ttl_not_before() {
    let server = MemoryBackend::new();
    let _lease = grant(&server.client(), "a").await;
    tokio::time::sleep(TTL - Duration::from_millis(1)).await;
    assert!(server.holder(&key()).is_some());
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert!(server.holder(&key()).is_none());
}

#[tokio::test(start_paused = true)]
async fn renew_after_expiry_is_lease_lost() {
    let server = MemoryBackend::new();
    let a = server.client();
    let lease = grant(&a, "a").await;
    tokio::time::sleep(TTL).await;
    assert!(matches!(
        a.renew(&lease).await,
        Err(Error::LeaseLost { .. })
    ));
}

#[tokio::test(start_paused = true)]
async fn watch_starts_with_current_state_and_reports_changes_in_order_and_vacancy() {
    let server = MemoryBackend::new();
    let a = server.client();
    let first = grant(&a, "a").await;
    let mut events = server.client().watch(&key()).await.unwrap();
    let elected = |who: &str, lease: &tenure_core::Lease| {
        LeaderEvent::Elected(tenure_core::LeaderInfo {
            identity: CandidateId::new(who).unwrap(),
            token: lease.token(),
        })
    };
    assert_eq!(events.next().await.unwrap().unwrap(), elected("a", &first));
    a.release(&first).await.unwrap();
    assert_eq!(events.next().await.unwrap().unwrap(), LeaderEvent::Vacant);
    let second = grant(&server.client(), "b").await;
    assert_eq!(events.next().await.unwrap().unwrap(), elected("b", &second));
    // Expiry is reported at the TTL even though nobody touches the key.
    let before = Instant::now();
    assert_eq!(events.next().await.unwrap().unwrap(), LeaderEvent::Vacant);
    assert_eq!(Instant::now() - before, TTL);
}

#[tokio::test(start_paused = true)]
async fn a_slow_watcher_sees_the_latest_state() {
    let server = MemoryBackend::new();
    let mut events = server.watch(&key()).await.unwrap();
    assert_eq!(events.next().await.unwrap().unwrap(), LeaderEvent::Vacant);
    let c = server.client();
    for who in ["a", "b", "c"] {
        let lease = grant(&c, who).await;
        c.release(&lease).await.unwrap();
    }
    let last = grant(&c, "d").await;
    let seen = events.next().await.unwrap().unwrap();
    assert_eq!(seen.leader().map(|l| l.token), Some(last.token()));
}

#[tokio::test(start_paused = true)]
async fn a_leadership_change_wakes_one_waiter_of_a_hundred() {
    let server = MemoryBackend::new();
    let a = server.client();
    let lease = grant(&a, "a").await;
    let waiters: Vec<_> = (0..100)
        .map(|i| {
            let client = server.client();
            tokio::spawn(async move {
                client
                    .acquire(&candidacy(&format!("w{i}"), TTL), AcquireMode::Wait)
                    .await
            })
        })
        .collect();
    settle().await;
    assert_eq!(server.queue_len(&key()), 100);
    let before = server.stats();
    a.release(&lease).await.unwrap();
    settle().await;
    let after = server.stats();
    assert_eq!(after.wakeups - before.wakeups, 1);
    // release + grant to the next in line
    assert_eq!(after.writes() - before.writes(), 2);
    assert_eq!(server.queue_len(&key()), 99);
    for w in waiters {
        w.abort();
    }
}

#[tokio::test(start_paused = true)]
async fn bad_input_is_rejected_by_field_and_writes_nothing() {
    let mut caps = Capabilities::new(true, true);
    caps.min_ttl = Duration::from_millis(100);
    caps.ttl_granularity = Duration::from_millis(10);
    caps.key_rule = KeyRule::Dns1123Subdomain;
    caps.max_key_len = 63;
    let server = MemoryBackend::with_capabilities(caps);
    let field = |r: Result<_, Error>| match r {
        Err(Error::InvalidArgument { field, .. }) => field,
        Err(other) => panic!("expected InvalidArgument, got {other}"),
        Ok(_) => panic!("expected InvalidArgument, got Ok"),
    };
    assert_eq!(field(ElectionKey::new("").map(drop)), "key");
    assert_eq!(field(ElectionKey::new("a\u{0}b").map(drop)), "key");
    assert_eq!(field(CandidateId::new("").map(drop)), "identity");
    let id = CandidateId::new("a").unwrap();
    let attempt = |k: &str, ttl: Duration| {
        let server = server.clone();
        let c = Candidacy::new(ElectionKey::new(k).unwrap(), id.clone(), ttl);
        async move {
            match c {
                Ok(c) => server.acquire(&c, AcquireMode::Once).await.map(drop),
                Err(e) => Err(e),
            }
        }
    };
    let ms = Duration::from_millis;
    assert_eq!(field(attempt("Upper", ms(500)).await), "key");
    assert_eq!(field(attempt("under_score", ms(500)).await), "key");
    assert_eq!(field(attempt(&"k".repeat(64), ms(500)).await), "key");
    assert_eq!(field(attempt("ok", ms(0)).await), "ttl");
    assert_eq!(field(attempt("ok", ms(50)).await), "ttl");
    assert_eq!(field(attempt("ok", ms(505)).await), "ttl");
    assert_eq!(
        field(
            server
                .watch(&ElectionKey::new("Upper").unwrap())
                .await
                .map(drop)
        ),
        "key"
    );

    let build = |key: &str, ttl: Duration, interval: Option<Duration>| {
        let mut b = Elector::builder(Arc::new(server.clone()))
            .key(key)
            .identity("a")
            .ttl(ttl);
        if let Some(i) = interval {
            b = b.renew_interval(i);
        }
        b.build().map(drop)
    };
    assert_eq!(field(build("ok", ms(500), Some(ms(500)))), "renew_interval");
    assert_eq!(field(build("ok", ms(500), Some(ms(495)))), "renew_interval");
    assert_eq!(field(build("ok", ms(500), Some(ms(0)))), "renew_interval");
    assert_eq!(field(build("ok", ms(0), None)), "ttl");
    assert_eq!(field(build("ok", ms(20), None)), "ttl");
    assert_eq!(field(build("", ms(500), None)), "key");
    assert_eq!(
        field(
            Elector::builder(Arc::new(server.clone()))
                .key("ok")
                .identity("")
                .build()
                .map(drop)
        ),
        "identity"
    );
    let margin = Elector::builder(Arc::new(server.clone()))
        .key("ok")
        .identity("a")
        .ttl(ms(500))
        .drift_margin(ms(500))
        .build();
    assert_eq!(field(margin.map(drop)), "drift_margin");

    for k in ["ok", "Upper", "under_score"] {
        assert!(
            !server.knows(&ElectionKey::new(k).unwrap()),
            "{k}: state was written"
        );
    }
    assert_eq!(server.stats().writes(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_backend_that_cannot_fence_is_refused_without_the_opt_in() {
    let server = MemoryBackend::with_capabilities(Capabilities::new(false, true));
    let refused = Elector::builder(Arc::new(server.clone()))
        .key("billing")
        .identity("a")
        .build()
        .map(drop);
    match refused {
        Err(Error::InvalidArgument { field, reason }) => {
            assert_eq!(field, "allow_unfenced");
            assert!(reason.contains("memory"), "names the backend: {reason}");
        }
        other => panic!("expected InvalidArgument naming allow_unfenced, got {other:?}"),
    }
    let elector = Elector::builder(Arc::new(server.clone()))
        .key("billing")
        .identity("a")
        .allow_unfenced()
        .build()
        .expect("with the opt-in the elector is built");
    elector.campaign().await.unwrap().resign().await.unwrap();
    // A backend that fences needs no opt-in.
    Elector::builder(Arc::new(MemoryBackend::new()))
        .key("billing")
        .identity("a")
        .build()
        .expect("a fencing backend needs no opt-in");
}
