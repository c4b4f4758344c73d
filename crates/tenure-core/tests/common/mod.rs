//! Helpers shared by tenure-core's tests.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use tenure_core::{Candidacy, CandidateId, ElectionKey, Elector, MemoryBackend, RenewOn};

pub const KEY: &str = "billing";

pub fn key() -> ElectionKey {
    ElectionKey::new(KEY).unwrap()
}

pub fn candidacy(identity: &str, ttl: Duration) -> Candidacy {
    Candidacy::new(key(), CandidateId::new(identity).unwrap(), ttl).unwrap()
}

/// An elector on `client` that renews on the test's (paused) runtime, without jitter.
pub fn elector(client: &MemoryBackend, identity: &str, ttl: Duration) -> Elector {
    Elector::builder(Arc::new(client.clone()))
        .key(KEY)
        .identity(identity)
        .ttl(ttl)
        .renew_jitter(0.0)
        .renew_on(RenewOn::CurrentRuntime)
        .build()
        .unwrap()
}

/// Lets spawned tasks run without moving the paused clock.
pub async fn settle() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
}
