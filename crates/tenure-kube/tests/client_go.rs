//! tenure and client-go's LeaseLock share one Lease: each respects the
//! other's holder, renewals and releases, field for field. The Go side is
//! `common::GoCandidate`, raw Lease API calls doing what client-go does,
//! as strictly as client-go (it sees a Lease's times to the second only).
//! A client-go holder writes no fencing token: tenure reports it with none
//! (with resourceVersion tokens, the default), or with leaseTransitions
//! (with that option).

mod common;

use std::time::Duration;

use common::{
    env, go_lease, granted_within, held_by, hold, lease_transitions, leave_free, rv, spec,
    wait_for_grant, wall_clock_at, Env, GoCandidate, GoRecord, TTL,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::chrono::{DateTime, TimeDelta, Utc};
use kube::api::PostParams;
use tenure_core::{FencingToken, LeaseBackend};
use tenure_kube::TOKEN_ANNOTATION;
use tokio::time::{sleep, Instant};

const DURATION_SECS: i32 = TTL.as_secs() as i32;

/// A client-go holder of Lease `billing`, four transitions in.
async fn go_holds_billing(env: &Env) -> GoCandidate {
    let mut go = GoCandidate::new(env.raw.clone(), "billing", "go-replica", DURATION_SECS);
    go.create_held(4).await;
    go
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_go_holder_keeps_the_lease_while_it_renews_and_loses_it_when_it_stops() {
    let env = env().await;
    let mut go = go_holds_billing(&env).await;
    let tenure = env.backend().await;

    // Not taken: its Go holder had just written it.
    let holder = held_by(&tenure, "billing", "rust-replica").await;
    assert_eq!(holder.identity.as_str(), "go-replica");
    assert_eq!(holder.token, None, "a client-go holder has no token");

    // The Go holder renews every 300 ms for twice its lease duration.
    let waiting = wait_for_grant(&tenure, "billing", "rust-replica");
    let renewing_until = Instant::now() + TTL * 2;
    let (mut last_sent, mut last_done) = (Instant::now(), Instant::now());
    while Instant::now() < renewing_until {
        sleep(Duration::from_millis(300)).await;
        assert!(
            !waiting.is_finished(),
            "tenure took the Lease while its Go holder renewed it"
        );
        last_sent = Instant::now();
        assert!(
            go.renew().await,
            "the Go holder lost its Lease while renewing"
        );
        last_done = Instant::now();
    }

    // It stops renewing: tenure takes over once it has seen the record
    // unchanged for leaseDurationSeconds, by its own clock.
    let (lease, granted_at) = granted_within(
        TTL + Duration::from_secs(3),
        waiting,
        "tenure never took the abandoned Lease",
    )
    .await;
    let after_last_renewal = granted_at - last_sent;
    println!("taken over {after_last_renewal:?} after the Go holder's last renewal was sent");
    assert!(
        granted_at >= last_sent + TTL,
        "taken {after_last_renewal:?} after the last renewal, before leaseDurationSeconds"
    );
    assert!(
        granted_at <= last_done + TTL + Duration::from_secs(1),
        "taken only {:?} after the last renewal's answer",
        granted_at - last_done
    );
    let token = lease.token().expect("a token").get();
    assert!(
        token > rv(go.last()),
        "token {token} is not above the Go holder's last write, {}",
        rv(go.last())
    );
    let taken = spec(&env.raw, "billing").await;
    assert_eq!(taken.holder_identity.as_deref(), Some("rust-replica"));
    assert_eq!(taken.lease_transitions, Some(5));
    assert_eq!(taken.lease_duration_seconds, Some(DURATION_SECS));

    // Back from its pause, the Go replica sees a fresh holder and stays out.
    assert!(!go.try_acquire_or_renew().await);
    assert!(!go.is_leader());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_go_release_hands_over_at_once() {
    let env = env().await;
    let mut go = go_holds_billing(&env).await;
    let tenure = env.backend().await;
    let waiting = wait_for_grant(&tenure, "billing", "rust-replica");
    sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "tenure took a held Lease");

    let released = Instant::now();
    go.release().await;
    let (lease, granted_at) =
        granted_within(TTL, waiting, "tenure did not take the released Lease").await;
    let handover = granted_at - released;
    println!("hand-over after a client-go release: {handover:?}");
    // The released record says 1 s: waiting that out would take longer.
    assert!(
        handover < Duration::from_millis(500),
        "hand-over took {handover:?}: the empty holder was not taken as a release"
    );
    let token = lease.token().expect("a token").get();
    assert!(
        token > rv(go.last()),
        "token {token} is not above the release"
    );
    let taken = spec(&env.raw, "billing").await;
    assert_eq!(taken.holder_identity.as_deref(), Some("rust-replica"));
    assert_eq!(taken.lease_transitions, Some(5));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tenure_lease_reads_as_client_go_expects_and_a_go_candidate_stays_out_until_released() {
    let env = env().await;
    let tenure = env.backend().await;
    let mut lease = hold(&tenure, "billing", "rust-replica").await;
    let token = lease.token().expect("a token");

    let first = spec(&env.raw, "billing").await;
    assert_eq!(first.holder_identity.as_deref(), Some("rust-replica"));
    assert_eq!(first.lease_duration_seconds, Some(DURATION_SECS));
    assert!(first.acquire_time.is_some(), "no acquireTime: {first:?}");
    assert!(first.renew_time.is_some(), "no renewTime: {first:?}");
    let transitions = first.lease_transitions.expect("leaseTransitions");

    // A Go candidate tries every 200 ms for twice the lease duration while
    // tenure renews every TTL/3, but at most once a wall-clock second (a
    // renewal within the second of the one before waits for the next: a
    // client-go peer could not tell them apart): it never gets in.
    let mut go = GoCandidate::new(env.raw.clone(), "billing", "go-replica", DURATION_SECS);
    let mut last = first;
    let mut renewals = 0;
    let (until, mut renewed_at) = (Instant::now() + TTL * 2, Instant::now());
    while Instant::now() < until {
        assert!(
            !go.try_acquire_or_renew().await,
            "the Go candidate took a Lease tenure was renewing"
        );
        sleep(Duration::from_millis(200)).await;
        if renewed_at.elapsed() >= TTL / 3 {
            renewed_at = Instant::now();
            lease = tenure.renew(&lease).await.expect("renew");
            renewals += 1;
            let now = spec(&env.raw, "billing").await;
            let (was, is) = (last.renew_time.clone(), now.renew_time.clone());
            assert!(
                is.as_ref().map(|t| t.0) > was.as_ref().map(|t| t.0),
                "renewTime did not advance: {was:?} then {is:?}"
            );
            assert_eq!(now.holder_identity, last.holder_identity);
            assert_eq!(now.acquire_time, last.acquire_time);
            assert_eq!(now.lease_duration_seconds, Some(DURATION_SECS));
            assert_eq!(now.lease_transitions, Some(transitions));
            last = now;
        }
    }
    assert!(renewals >= 3, "only {renewals} renewals");

    // Released, the record is what client-go's release writes ...
    tenure.release(&lease).await.expect("release");
    let released = spec(&env.raw, "billing").await;
    assert_eq!(released.holder_identity.as_deref(), Some(""));
    assert_eq!(released.lease_duration_seconds, Some(1));
    assert_eq!(released.lease_transitions, Some(transitions));
    // ... and the Go candidate takes it with its next PUT.
    assert!(
        go.try_acquire_or_renew().await,
        "the Go candidate could not take the released Lease"
    );
    let taken = spec(&env.raw, "billing").await;
    assert_eq!(taken.holder_identity.as_deref(), Some("go-replica"));
    assert_eq!(taken.lease_transitions, Some(transitions + 1));
    // client-go keeps the annotations: tenure's token is still on the Lease,
    // but it names tenure's term, so the Go holder is reported with none.
    let annotations = go.last().metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        annotations.get(TOKEN_ANNOTATION).map(String::as_str),
        Some(token.get().to_string().as_str()),
        "the Go candidate did not keep tenure's annotations"
    );
    // Not taken: the Go candidate's Lease is fresh.
    let holder = held_by(&tenure, "billing", "rust-replica").await;
    assert_eq!(holder.identity.as_str(), "go-replica");
    assert_eq!(
        holder.token, None,
        "the Go holder was reported with the token of tenure's term"
    );
}

/// With `Fencing::LeaseTransitions`, tokens are client-go's own
/// leaseTransitions: a Go holder is reported with its transitions, and
/// taking over from it bumps them by one.
#[tokio::test(flavor = "multi_thread")]
async fn with_lease_transitions_tokens_are_client_gos_transitions() {
    let env = env().await;
    let mut go = go_holds_billing(&env).await;
    let tenure = env.backend_with(lease_transitions()).await;
    let holder = held_by(&tenure, "billing", "rust-replica").await;
    assert_eq!(holder.identity.as_str(), "go-replica");
    assert_eq!(holder.token, Some(FencingToken::new(4)));
    let waiting = wait_for_grant(&tenure, "billing", "rust-replica");
    go.release().await;
    let (lease, _) = granted_within(TTL, waiting, "tenure did not take the released Lease").await;
    assert_eq!(lease.token(), Some(FencingToken::new(5)));
    assert_eq!(spec(&env.raw, "billing").await.lease_transitions, Some(5));
    tenure.release(&lease).await.unwrap();
    assert!(go.try_acquire_or_renew().await);
    let holder = held_by(&tenure, "billing", "rust-replica").await;
    assert_eq!(holder.token, Some(FencingToken::new(6)));
}

/// The stand-in is as strict as client-go: `tryAcquireOrRenew` compares the
/// record's JSON, whose `metav1.Time`s are whole seconds, so a renewal
/// within the second of the write before it is no change to it (its
/// observed time stays), and one in the next second is.
#[tokio::test(flavor = "multi_thread")]
async fn the_client_go_stand_in_sees_two_renewals_within_one_second_as_one() {
    let env = env().await;
    let second: DateTime<Utc> = "2030-01-01T00:00:00Z".parse().unwrap();
    let at = |millis: i64| MicroTime(second + TimeDelta::milliseconds(millis));
    let mut lease = go_lease("seconds", "holder", DURATION_SECS, 3);
    lease.spec.as_mut().unwrap().renew_time = Some(at(100));
    let mut current = env
        .raw
        .create(&PostParams::default(), &lease)
        .await
        .unwrap();

    let mut go = GoCandidate::new(env.raw.clone(), "seconds", "go-replica", DURATION_SECS);
    assert!(!go.try_acquire_or_renew().await, "took a held Lease");
    let first_look = go.observed_time();
    let first = GoRecord::of(current.spec.as_ref().unwrap()).raw();

    // A renewal 500 ms later, in the same second.
    current.spec.as_mut().unwrap().renew_time = Some(at(600));
    current = env
        .raw
        .replace("seconds", &PostParams::default(), &current)
        .await
        .unwrap();
    let same_second = GoRecord::of(current.spec.as_ref().unwrap()).raw();
    assert_eq!(
        String::from_utf8_lossy(&first),
        String::from_utf8_lossy(&same_second),
        "two renewals in one second marshal differently"
    );
    assert!(!go.try_acquire_or_renew().await, "took a held Lease");
    assert_eq!(
        go.observed_time(),
        first_look,
        "the stand-in saw a renewal within the second as a change"
    );

    // One in the next second is a change.
    current.spec.as_mut().unwrap().renew_time = Some(at(1_000));
    env.raw
        .replace("seconds", &PostParams::default(), &current)
        .await
        .unwrap();
    let before = Instant::now();
    assert!(!go.try_acquire_or_renew().await, "took a held Lease");
    assert!(
        go.observed_time() >= before,
        "the stand-in missed a renewal in the next second"
    );
}

/// client-go sees a renewal only to the second (issue 23): a client-go
/// candidate that looked at the Lease early in a second sees a renewal in
/// that same second as no change, so its expiry still counts from its
/// look. A renewal's deadline must not count from its own send then: hold
/// at TTL 2 s at .05 of a second, the stand-in looks at .10, renew at .70,
/// the stand-in polls every 20 ms: it must not acquire before the renewed
/// lease's valid_until.
#[tokio::test(flavor = "multi_thread")]
async fn a_client_go_candidate_never_acquires_before_a_renewed_holders_valid_until() {
    let env = env().await;
    let tenure = env.backend().await;
    // The Lease exists already: the grant is one take-over.
    leave_free(&tenure, "seconds", "rust-replica").await;

    let second = wall_clock_at(Utc::now().timestamp() + 1, Duration::from_millis(50)).await;
    let lease = hold(&tenure, "seconds", "rust-replica").await;
    let mut go = GoCandidate::new(env.raw.clone(), "seconds", "go-replica", DURATION_SECS);
    wall_clock_at(second, Duration::from_millis(100)).await;
    assert!(
        !go.try_acquire_or_renew().await,
        "took a Lease just granted"
    );
    wall_clock_at(second, Duration::from_millis(700)).await;
    let renewed = tenure.renew(&lease).await.expect("renew");
    let valid_until = renewed.valid_until();

    let acquired_at = loop {
        let at = Instant::now();
        assert!(
            at < valid_until + TTL * 2,
            "the stand-in never acquired the abandoned Lease"
        );
        if go.try_acquire_or_renew().await {
            break at;
        }
        sleep(Duration::from_millis(20)).await;
    };
    let from_grant = |t: Instant| t.saturating_duration_since(lease.sent_at());
    println!(
        "after the grant: renewal sent {:?}, valid until {:?}, client-go acquired {:?}",
        from_grant(renewed.sent_at()),
        from_grant(valid_until),
        from_grant(acquired_at)
    );
    assert!(
        acquired_at >= valid_until,
        "the client-go candidate acquired {:?} after the grant, before the holder's \
         valid_until ({:?} after it): both led for {:?}",
        from_grant(acquired_at),
        from_grant(valid_until),
        valid_until - acquired_at
    );
}
