//! Fencing tokens: what the holder has is what every observer reports, and
//! the leaseTransitions option does what its documentation says.

mod common;

use std::time::Duration;

use common::{candidacy, env, hold, lease_transitions};
use futures::StreamExt;
use tenure_core::{AcquireMode, Acquisition, ElectionKey, LeaderEvent, LeaseBackend};
use tokio::time::timeout;

/// Renewals move the Lease's resourceVersion but not the term's token: a
/// one-shot acquire and a watch report exactly the holder's token, before
/// and after renewals.
#[tokio::test(flavor = "multi_thread")]
async fn held_and_watch_report_the_holders_own_token_across_renewals() {
    let env = env().await;
    let raw = env.raw().await;
    let (a, b) = (env.backend().await, env.backend().await);
    let mut lease = hold(&a, "observed", "a").await;
    let token = lease.token().expect("a token");
    let first_rv = common::rv(&raw.get("observed").await.unwrap());
    for round in 0..3 {
        if round > 0 {
            lease = a.renew(&lease).await.expect("renew");
            assert_eq!(lease.token(), Some(token), "a renewal changed the token");
        }
        match b
            .acquire(&candidacy("observed", "b"), AcquireMode::Once)
            .await
            .unwrap()
        {
            Acquisition::Held(info) => {
                assert_eq!(info.identity.as_str(), "a");
                assert_eq!(info.token, Some(token), "round {round}: Held");
            }
            Acquisition::Granted(_) => panic!("b was granted a held Lease"),
        }
        let mut watch = b
            .watch(&ElectionKey::new("observed").unwrap())
            .await
            .unwrap();
        let first = timeout(Duration::from_secs(5), watch.next())
            .await
            .expect("a first event")
            .expect("an open watch")
            .unwrap();
        match first {
            LeaderEvent::Elected(info) => {
                assert_eq!(info.identity.as_str(), "a");
                assert_eq!(info.token, Some(token), "round {round}: watch");
            }
            other => panic!("round {round}: the watch began with {other:?}"),
        }
    }
    let last_rv = common::rv(&raw.get("observed").await.unwrap());
    assert!(
        last_rv > first_rv,
        "the renewals did not move the resourceVersion"
    );
}

/// The leaseTransitions option, as documented: its tokens start again at 0
/// when the Lease is deleted, and its capabilities say tokens do not
/// survive that; the default's do.
#[tokio::test(flavor = "multi_thread")]
async fn lease_transitions_tokens_restart_after_deletion_as_their_capabilities_say() {
    let env = env().await;
    let raw = env.raw().await;
    let a = env.backend_with(lease_transitions()).await;
    assert!(!a.capabilities().tokens_survive_state_loss);
    assert!(env.backend().await.capabilities().tokens_survive_state_loss);
    let mut tokens = Vec::new();
    for _ in 0..3 {
        let lease = hold(&a, "counted", "a").await;
        tokens.push(lease.token().expect("a token").get());
        a.release(&lease).await.unwrap();
    }
    assert_eq!(tokens, [0, 1, 2]);
    raw.delete("counted", &Default::default()).await.unwrap();
    let lease = hold(&a, "counted", "a").await;
    assert_eq!(lease.token().map(|t| t.get()), Some(0));
}
