//! The hand-over from the heartbeat runtime to the caller.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::*;
use crate::{CandidateId, LeaseHandle};

/// A backend whose acquire grants when `go` is notified, and which records
/// what it released and which acquires were dropped midway.
#[derive(Clone, Debug, Default)]
struct Fake {
    go: Arc<Notify>,
    granted: Arc<Notify>,
    released: Arc<Mutex<Vec<u64>>>,
    dropped: Arc<Mutex<u32>>,
    withdrawn: Arc<Mutex<u32>>,
    /// How many releases fail (transiently) before one succeeds.
    failing_releases: Arc<Mutex<u32>>,
}

struct CountDrop(Fake);

impl Drop for CountDrop {
    fn drop(&mut self) {
        *self.0.dropped.lock().unwrap() += 1;
        let fake = self.0.clone();
        spawn_cleanup(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            *fake.withdrawn.lock().unwrap() += 1;
        });
    }
}

#[async_trait]
impl HeartbeatBackend for Fake {
    const NAME: &'static str = "fake";
    type LeaseState = u64;

    fn capabilities(&self) -> Capabilities {
        Capabilities::new(true, true)
    }

    async fn acquire(&self, candidacy: Candidacy, _mode: AcquireMode) -> Result<Acquisition> {
        let guard = CountDrop(self.clone());
        self.go.notified().await;
        std::mem::forget(guard);
        let lease = Lease::new(
            candidacy,
            Some(crate::FencingToken::new(7)),
            Instant::now(),
            LeaseHandle::new(7u64),
        );
        self.granted.notify_one();
        Ok(Acquisition::Granted(lease))
    }

    async fn renew(&self, lease: Lease, _id: &u64) -> Result<Lease> {
        if lease.key().as_str() == "panic" {
            panic!("renew panicked");
        }
        Ok(lease)
    }

    async fn release(&self, _lease: Lease, id: &u64) -> Result<()> {
        let id = *id;
        {
            let mut failing = self.failing_releases.lock().unwrap();
            if *failing > 0 {
                *failing -= 1;
                return Err(Error::unavailable("fake", "connection reset"));
            }
        }
        self.released.lock().unwrap().push(id);
        Ok(())
    }

    async fn watch(&self, _key: ElectionKey) -> Result<BoxStream<'static, Result<LeaderEvent>>> {
        Ok(Box::pin(futures::stream::empty()))
    }
}

fn candidacy(key: &str) -> Candidacy {
    Candidacy::parse(key, "a", Duration::from_secs(2)).unwrap()
}

/// A waiting acquire whose grant is made and on its way, dropped by its
/// caller before it takes the grant.
async fn gone_before_taking_the_grant(fake: &Fake) {
    let c = candidacy("k");
    let mut acquiring = Box::pin(LeaseBackend::acquire(fake, &c, AcquireMode::Wait));
    assert!((&mut acquiring).now_or_never().is_none());
    fake.go.notify_one();
    fake.granted.notified().await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    drop(acquiring);
}

#[tokio::test]
async fn a_grant_the_caller_never_took_is_released() {
    let fake = Fake::default();
    gone_before_taking_the_grant(&fake).await;
    cleanups_finished().await;
    assert_eq!(*fake.released.lock().unwrap(), vec![7]);
    assert_eq!(*fake.dropped.lock().unwrap(), 0);
}

#[tokio::test]
async fn a_grant_the_caller_never_took_is_released_despite_transient_errors() {
    let fake = Fake::default();
    *fake.failing_releases.lock().unwrap() = 2;
    gone_before_taking_the_grant(&fake).await;
    // Two releases fail (a connection reset); the cleanup goes on until one lands.
    tokio::time::timeout(Duration::from_secs(2), cleanups_finished())
        .await
        .expect("the cleanup ends");
    assert_eq!(*fake.failing_releases.lock().unwrap(), 0, "not retried");
    assert_eq!(
        *fake.released.lock().unwrap(),
        vec![7],
        "the grant nobody took was left to expire after one transient error"
    );
}

#[tokio::test]
async fn a_grant_the_caller_took_is_not_released() {
    let fake = Fake::default();
    let c = candidacy("k");
    fake.go.notify_one();
    let got = LeaseBackend::acquire(&fake, &c, AcquireMode::Wait)
        .await
        .unwrap();
    assert!(got.granted().is_some());
    cleanups_finished().await;
    assert!(fake.released.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_dropped_wait_drops_the_operation_and_close_waits_for_its_cleanup() {
    let fake = Fake::default();
    let c = candidacy("k");
    let mut acquiring = Box::pin(LeaseBackend::acquire(&fake, &c, AcquireMode::Wait));
    assert!((&mut acquiring).now_or_never().is_none());
    tokio::time::sleep(Duration::from_millis(20)).await;
    drop(acquiring);
    // The cleanup its drop guard started takes 50 ms; close waits for it.
    LeaseBackend::close(&fake).await.unwrap();
    assert_eq!(*fake.dropped.lock().unwrap(), 1);
    assert_eq!(*fake.withdrawn.lock().unwrap(), 1);
    assert!(fake.released.lock().unwrap().is_empty());
}

#[tokio::test]
async fn input_is_checked_before_the_operation_runs() {
    let fake = Fake::default();
    let c = Candidacy::new(
        ElectionKey::new("k").unwrap(),
        CandidateId::new("a").unwrap(),
        Duration::from_nanos(1),
    )
    .unwrap();
    let err = LeaseBackend::acquire(&fake, &c, AcquireMode::Once)
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::InvalidArgument { field: "ttl", .. }),
        "{err}"
    );
    assert_eq!(*fake.dropped.lock().unwrap(), 0);
}

#[tokio::test]
async fn a_panic_in_an_operation_reaches_the_caller() {
    let fake = Fake::default();
    let lease = Lease::new(
        candidacy("panic"),
        None,
        Instant::now(),
        LeaseHandle::new(1u64),
    );
    let caught = std::panic::AssertUnwindSafe(LeaseBackend::renew(&fake, &lease))
        .catch_unwind()
        .await;
    assert!(caught.is_err());
}

/// A cleanup that counts its runs in `runs`, after a short pause.
fn counting_cleanup(runs: Arc<Mutex<u32>>) -> BoxFuture<'static, ()> {
    Box::pin(async move {
        tokio::time::sleep(Duration::from_millis(30)).await;
        *runs.lock().unwrap() += 1;
    })
}

#[tokio::test]
async fn a_guard_dropped_armed_cleans_up_and_close_waits_for_it() {
    let runs = Arc::new(Mutex::new(0));
    drop(CleanupOnDrop::arm(runs.clone(), counting_cleanup));
    assert_eq!(
        *runs.lock().unwrap(),
        0,
        "the cleanup runs in the background"
    );
    cleanups_finished().await;
    assert_eq!(*runs.lock().unwrap(), 1);
}

#[tokio::test]
async fn a_disarmed_guard_hands_back_its_state_and_runs_nothing() {
    let runs = Arc::new(Mutex::new(0));
    let mut guard = CleanupOnDrop::arm(runs.clone(), counting_cleanup);
    *guard.state_mut().lock().unwrap() += 10;
    let state = guard.disarm();
    assert!(Arc::ptr_eq(&state, &runs));
    tokio::time::sleep(Duration::from_millis(60)).await;
    assert_eq!(*runs.lock().unwrap(), 10);
}

#[tokio::test]
async fn cleaning_up_now_waits_for_the_cleanup_or_the_bound() {
    let runs = Arc::new(Mutex::new(0));
    CleanupOnDrop::arm(runs.clone(), counting_cleanup)
        .clean_up_now(Duration::from_secs(5))
        .await;
    assert_eq!(*runs.lock().unwrap(), 1, "waited for the cleanup");

    let started = Instant::now();
    CleanupOnDrop::arm(runs.clone(), |runs| {
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            *runs.lock().unwrap() += 1;
        })
    })
    .clean_up_now(Duration::from_millis(20))
    .await;
    assert!(started.elapsed() < Duration::from_millis(250));
    assert_eq!(*runs.lock().unwrap(), 1, "the wait ended first");
    cleanups_finished().await;
    assert_eq!(*runs.lock().unwrap(), 2, "the cleanup went on");
}

#[tokio::test]
async fn a_lease_another_backend_granted_is_refused_by_name() {
    let fake = Fake::default();
    let foreign = Lease::new(
        candidacy("foreign"),
        None,
        Instant::now(),
        LeaseHandle::new("another backend's state"),
    );
    for error in [
        LeaseBackend::renew(&fake, &foreign).await.unwrap_err(),
        LeaseBackend::release(&fake, &foreign).await.unwrap_err(),
    ] {
        assert!(
            matches!(&error, Error::InvalidArgument { field: "lease", reason } if reason == "was not granted by the fake backend"),
            "{error}"
        );
    }
    assert!(fake.released.lock().unwrap().is_empty());
}
