//! Renewal must not be starved by an application that blocks every worker thread.

use std::sync::Arc;
use std::time::Duration;

use tenure_core::{ElectionKey, Elector, LeaseBackend, MemoryBackend, RenewOn};

const TTL: Duration = Duration::from_millis(600);
const BLOCKED: Duration = Duration::from_millis(1_500);

fn app_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Blocks every thread of the runtime (both workers and the `block_on` thread)
/// with `std::thread::sleep` for `BLOCKED`, then reports whether leadership
/// survived and how many renewals the server saw meanwhile.
fn block_everything(renew_on: RenewOn) -> (bool, u64) {
    let server = MemoryBackend::new();
    let rt = app_runtime();
    rt.block_on(async {
        let elector = Elector::builder(Arc::new(server.clone()))
            .key("starved")
            .identity("a")
            .ttl(TTL)
            .renew_on(renew_on)
            .build()
            .unwrap();
        let leadership = elector.campaign().await.unwrap();
        let before = server.stats().renewals;
        let blockers: Vec<_> = (0..2)
            .map(|_| tokio::spawn(async { std::thread::sleep(BLOCKED) }))
            .collect();
        std::thread::sleep(BLOCKED);
        for b in blockers {
            b.await.unwrap();
        }
        let renewed = server.stats().renewals - before;
        // Nobody else could have taken it meanwhile.
        let key = ElectionKey::new("starved").unwrap();
        let still_ours = server
            .holder(&key)
            .is_some_and(|h| h.identity.as_str() == "a");
        (leadership.is_valid() && still_ours, renewed)
    })
}

#[test]
fn renewal_survives_a_runtime_whose_workers_are_all_blocked() {
    let (valid, renewals) = block_everything(RenewOn::DedicatedThread);
    assert!(
        valid,
        "leadership was lost while the application runtime was blocked"
    );
    // TTL/3 = 200 ms: about 7 renewals in 1.5 s.
    assert!(renewals >= 5, "only {renewals} renewals while blocked");
}

#[test]
fn renewal_on_the_blocked_runtime_itself_does_starve() {
    // The control experiment: the same test fails on the application runtime,
    // so the one above measures what it claims.
    let (valid, renewals) = block_everything(RenewOn::CurrentRuntime);
    assert!(!valid);
    assert_eq!(renewals, 0);
}

#[tokio::test]
async fn backend_is_usable_as_a_trait_object() {
    let backend: Arc<dyn LeaseBackend> = Arc::new(MemoryBackend::new());
    assert_eq!(backend.name(), "memory");
    assert!(backend.capabilities().fencing);
}
