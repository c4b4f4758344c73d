//! Leader state without polling: `Elector::state`, `Elector::leader`, the
//! term's cancellation token, and the default identity.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{elector, settle};
use futures::stream::BoxStream;
use tenure_core::{
    AcquireMode, Acquisition, Candidacy, Capabilities, ElectionKey, Elector, ElectorState,
    FencingToken, LeaderEvent, Lease, LeaseBackend, MemoryBackend, Result,
};

const TTL: Duration = Duration::from_secs(2);

fn leader_with(token: Option<FencingToken>) -> ElectorState {
    ElectorState::Leader { token }
}

#[tokio::test(start_paused = true)]
async fn state_follows_each_term_and_ends_stopped() {
    let server = MemoryBackend::new();
    let a = elector(&server.client(), "a", TTL);
    let mut state = a.state();
    assert_eq!(*state.borrow_and_update(), ElectorState::Follower);

    let first = a.campaign().await.unwrap();
    assert_eq!(*state.borrow_and_update(), leader_with(first.token()));
    first.resign().await.unwrap();
    assert_eq!(*state.borrow_and_update(), ElectorState::Follower);

    let second = a.campaign().await.unwrap();
    assert!(second.token() > Some(FencingToken::new(0)));
    assert_eq!(*state.borrow_and_update(), leader_with(second.token()));
    drop(second);
    settle().await;
    assert_eq!(*state.borrow_and_update(), ElectorState::Follower);

    let _third = a.campaign().await.unwrap();
    a.shutdown().await;
    assert_eq!(*state.borrow_and_update(), ElectorState::Stopped);
}

#[tokio::test(start_paused = true)]
async fn state_turns_follower_at_the_deadline_when_renewals_fail() {
    let server = MemoryBackend::new();
    let client = server.client();
    let a = elector(&client, "a", TTL);
    let mut state = a.state();
    let leadership = a.campaign().await.unwrap();
    assert!(matches!(
        *state.borrow_and_update(),
        ElectorState::Leader { .. }
    ));
    let deadline = leadership.valid_until();
    client.faults().cut_off();
    state.changed().await.unwrap();
    assert_eq!(*state.borrow_and_update(), ElectorState::Follower);
    assert!(
        tokio::time::Instant::now() <= deadline,
        "the state said Leader past the term's deadline"
    );
    assert!(!leadership.is_valid());
}

#[tokio::test(start_paused = true)]
async fn the_cancellation_token_is_cancelled_when_the_term_ends() {
    let server = MemoryBackend::new();
    let client = server.client();
    let a = elector(&client, "a", TTL);

    // Resigned: cancelled before the release goes out.
    let leadership = a.campaign().await.unwrap();
    let token = leadership.cancellation_token();
    assert!(!token.is_cancelled());
    leadership.resign().await.unwrap();
    assert!(token.is_cancelled());

    // Expired: cancelled by the deadline at the latest.
    let leadership = a.campaign().await.unwrap();
    let token = leadership.cancellation_token();
    let deadline = leadership.valid_until();
    client.faults().cut_off();
    token.cancelled().await;
    assert!(tokio::time::Instant::now() <= deadline);
    client.faults().heal();

    // A child cancelled by its holder leaves the term alone.
    let leadership = a.campaign().await.unwrap();
    leadership.cancellation_token().cancel();
    settle().await;
    assert!(leadership.is_valid());
    assert!(!leadership.cancellation_token().is_cancelled());
}

#[tokio::test(start_paused = true)]
async fn run_cancels_the_tasks_its_work_started_when_the_term_is_lost() {
    let server = MemoryBackend::new();
    let client = server.client();
    let a = elector(&client, "a", TTL);
    let (started_tx, started_rx) = tokio::sync::oneshot::channel();
    let (stopped_tx, stopped_rx) = tokio::sync::oneshot::channel();
    let mut channels = Some((started_tx, stopped_tx));
    let runner = a.clone();
    let run = tokio::spawn(async move {
        runner
            .run(|leadership| {
                let channels = channels.take();
                async move {
                    let token = leadership.cancellation_token();
                    if let Some((started, stopped)) = channels {
                        // A task of the leader's own, outliving `work`'s future.
                        tokio::spawn(async move {
                            token.cancelled().await;
                            let _ = stopped.send(());
                        });
                        let _ = started.send(());
                    }
                    std::future::pending::<()>().await
                }
            })
            .await
    });
    started_rx.await.unwrap();
    client.faults().cut_off();
    tokio::time::timeout(TTL, stopped_rx)
        .await
        .expect("the task was told within the TTL")
        .unwrap();
    client.faults().heal();
    a.shutdown().await;
    run.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn leader_says_who_leads_now() {
    let server = MemoryBackend::new();
    let a = elector(&server.client(), "a", TTL);
    let b = elector(&server.client(), "b", TTL);
    assert_eq!(b.leader().await.unwrap(), None);
    let leadership = a.campaign().await.unwrap();
    let now = b.leader().await.unwrap().expect("a leads");
    assert_eq!(now.identity.as_str(), "a");
    assert_eq!(now.token, leadership.token());
    leadership.resign().await.unwrap();
    assert_eq!(b.leader().await.unwrap(), None);
}

/// One test touches the environment, so no other reads it meanwhile.
#[test]
fn the_identity_defaults_to_pod_name_else_host_and_pid() {
    let build = || {
        Elector::builder(Arc::new(MemoryBackend::new()))
            .key("billing")
            .build()
            .unwrap()
    };
    std::env::remove_var("POD_NAME");
    let fallback = build();
    let identity = fallback.candidacy().identity().as_str().to_owned();
    assert!(
        identity.ends_with(&format!("-{}", std::process::id())),
        "{identity}"
    );
    std::env::set_var("POD_NAME", "billing-7f9c-2");
    assert_eq!(build().candidacy().identity().as_str(), "billing-7f9c-2");
    std::env::set_var("POD_NAME", "   ");
    assert_eq!(build().candidacy().identity().as_str(), identity);
    std::env::remove_var("POD_NAME");
}

/// A memory client that notes the elector's state whenever a release is
/// about to be sent.
#[derive(Debug)]
struct StateAtRelease {
    inner: MemoryBackend,
    state: std::sync::Mutex<Option<tokio::sync::watch::Receiver<ElectorState>>>,
    seen: std::sync::Mutex<Vec<ElectorState>>,
}

#[async_trait::async_trait]
impl LeaseBackend for StateAtRelease {
    fn name(&self) -> &'static str {
        "state-at-release"
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    async fn acquire(&self, candidacy: &Candidacy, mode: AcquireMode) -> Result<Acquisition> {
        self.inner.acquire(candidacy, mode).await
    }
    async fn renew(&self, lease: &Lease) -> Result<Lease> {
        self.inner.renew(lease).await
    }
    async fn release(&self, lease: &Lease) -> Result<()> {
        if let Some(state) = &*self.state.lock().unwrap() {
            self.seen.lock().unwrap().push(*state.borrow());
        }
        self.inner.release(lease).await
    }
    async fn watch(&self, key: &ElectionKey) -> Result<BoxStream<'static, Result<LeaderEvent>>> {
        self.inner.watch(key).await
    }
}

/// The state says Follower before a release is sent: whoever gates work
/// on it never acts while another candidate may be granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_state_is_follower_before_any_release_is_sent() {
    let backend = Arc::new(StateAtRelease {
        inner: MemoryBackend::new(),
        state: Default::default(),
        seen: Default::default(),
    });
    let a = Elector::builder(backend.clone())
        .key("billing")
        .identity("a")
        .ttl(TTL)
        .build()
        .unwrap();
    *backend.state.lock().unwrap() = Some(a.state());
    for _ in 0..20 {
        a.campaign().await.unwrap().resign().await.unwrap();
    }
    let dropped = a.campaign().await.unwrap();
    drop(dropped);
    let _held = a.campaign().await.unwrap();
    a.shutdown().await;
    let seen = backend.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 22, "{seen:?}");
    assert!(
        seen.iter().all(|s| *s == ElectorState::Follower),
        "the state at each release: {seen:?}"
    );
}
