//! Fencing tokens: what the holder has is what every observer reports, and
//! the leaseTransitions option does what its documentation says.

mod common;

use std::time::Duration;

use common::{env, env_with, held_by, hold, lease_transitions, leave_free};
use futures::StreamExt;
use tenure_core::{ElectionKey, LeaderEvent, LeaseBackend};
use tokio::time::timeout;

/// Renewals move the Lease's resourceVersion but not the term's token: a
/// one-shot acquire and a watch report exactly the holder's token, before
/// and after renewals.
#[tokio::test(flavor = "multi_thread")]
async fn held_and_watch_report_the_holders_own_token_across_renewals() {
    let (env, [a, b]) = env_with().await;
    let mut lease = hold(&a, "observed", "a").await;
    let token = lease.token().expect("a token");
    let first_rv = common::rv(&env.raw.get("observed").await.unwrap());
    for round in 0..3 {
        if round > 0 {
            lease = a.renew(&lease).await.expect("renew");
            assert_eq!(lease.token(), Some(token), "a renewal changed the token");
        }
        let holder = held_by(&b, "observed", "b").await;
        assert_eq!(holder.identity.as_str(), "a");
        assert_eq!(holder.token, Some(token), "round {round}: Held");
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
    let last_rv = common::rv(&env.raw.get("observed").await.unwrap());
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
    env.raw
        .delete("counted", &Default::default())
        .await
        .unwrap();
    let lease = hold(&a, "counted", "a").await;
    assert_eq!(lease.token().map(|t| t.get()), Some(0));
}

/// Two token schemes, one scale: a resourceVersion-token holder (tokens
/// near the cluster's resourceVersions, ~10^6 and more) that hands over to
/// a leaseTransitions-token candidate (tokens near the Lease's transitions,
/// ~10) would give the rightful leader a token a `Fence` refuses. A grant
/// after a resourceVersion-token holder has a token above it, whatever the
/// scheme of the candidate (its leaseTransitions lifted above the token
/// stamped on the Lease), and a `Fence` takes the new leader's writes.
#[tokio::test(flavor = "multi_thread")]
async fn a_lease_transitions_grant_after_a_resource_version_holder_has_a_higher_token() {
    let env = env().await;
    let (a, b) = (
        env.backend().await,
        env.backend_with(lease_transitions()).await,
    );
    // Move the cluster's resourceVersion well past any leaseTransitions.
    for _ in 0..3 {
        leave_free(&a, "elsewhere", "a").await;
    }
    let old = hold(&a, "schemes", "a").await;
    let old_token = old.token().expect("a token");
    a.release(&old).await.unwrap();
    let new = hold(&b, "schemes", "b").await;
    let new_token = new.token().expect("a token");
    assert!(
        new_token > old_token,
        "b's leaseTransitions token {new_token} is not above a's resourceVersion token \
         {old_token}: a Fence would refuse the rightful leader"
    );
    let fence = tenure_core::Fence::new();
    fence.check("invoices", old_token).unwrap();
    fence
        .check("invoices", new_token)
        .expect("the new leader's write was refused by the fence");

    // And back: a resourceVersion-token grant after it is above it again.
    b.release(&new).await.unwrap();
    let again = hold(&a, "schemes", "a").await;
    let again_token = again.token().expect("a token");
    assert!(
        again_token > new_token,
        "a's token {again_token} is not above b's {new_token}"
    );
}
