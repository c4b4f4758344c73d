#![doc = include_str!("../README.md")]
//!
//! # Cargo features
#![doc = document_features::document_features!()]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

// DESIGN. Redlock over N independent masters, nothing else: the layers in
// tenure-core check input, trace, and run every operation on the heartbeat
// runtime.
//
//   lib.rs       RedisBackend: the HeartbeatBackend impl
//   builder.rs   options, the builder that checks them (and the unfenced
//                opt-in), connecting to every master
//   round.rs     the Redlock round: take a majority, keep it, let it go;
//                a round not granted undoes what it took
//   scripts.rs   the Lua scripts: one atomic step per master, by value
//   master.rs    one master's connection and its bounded call
//   answers.rs   what the masters answer, parsed
//   watch.rs     watching a key: what a majority of masters hold
//   granted.rs   what a granted lease carries (RedisGrant)
//   url.rs       redis:// and rediss:// URLs

mod answers;
mod builder;
mod granted;
mod master;
mod round;
mod scripts;
mod url;
mod watch;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::stream::BoxStream;

pub use redis;
use tenure_core::{
    AcquireMode, Acquisition, Candidacy, Capabilities, ElectionKey, Error, HeartbeatBackend,
    LeaderEvent, Lease, Result,
};

use granted::RedisGrant;
use master::Master;
use scripts::Scripts;

const BACKEND: &str = "redis";

pub use builder::{RedlockBuilder, RedlockOptions};

/// The old name of [`RedisBackend`], named like the other backends now.
#[deprecated(since = "0.1.0", note = "renamed to `RedisBackend`")]
pub type RedlockBackend = RedisBackend;

/// Leader election on Redis with the Redlock algorithm, over 1, 3 or 5
/// independent masters (no replication between them).
///
/// **It cannot fence**: leases carry no token. Building one requires
/// [`RedlockBuilder::allow_unfenced`], and an `Elector` over it requires
/// `ElectorBuilder::allow_unfenced`. See the crate documentation for what
/// that costs.
#[derive(Clone)]
pub struct RedisBackend {
    inner: Arc<Inner>,
}

struct Inner {
    masters: Vec<Master>,
    quorum: usize,
    scripts: Scripts,
    options: RedlockOptions,
}

impl std::fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBackend")
            .field("masters", &self.inner.masters)
            .field("quorum", &self.inner.quorum)
            .field("options", &self.inner.options)
            .finish()
    }
}

/// The drift allowance Redlock prescribes: 1 % of the TTL plus 2 ms, for the
/// masters' clocks running at rates a little apart from ours.
pub fn redlock_drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

impl RedisBackend {
    /// The number of masters that must agree.
    pub fn quorum(&self) -> usize {
        self.inner.quorum
    }
}

fn unavailable(why: String) -> Error {
    Error::unavailable(BACKEND, why)
}

#[async_trait]
impl HeartbeatBackend for RedisBackend {
    const NAME: &'static str = BACKEND;
    type LeaseState = RedisGrant;

    fn capabilities(&self) -> Capabilities {
        let mut caps = Capabilities::new(false, false);
        caps.tokens_survive_state_loss = false;
        // Below this the per-master timeout and the drift allowance leave
        // too little of the TTL to lead in.
        caps.min_ttl = Duration::from_millis(100);
        // Waiters retry when a majority's keys should have expired; a
        // release message wakes them at once.
        caps.expiry_slack = Duration::from_millis(10);
        caps
    }

    async fn acquire(&self, candidacy: Candidacy, mode: AcquireMode) -> Result<Acquisition> {
        match mode {
            AcquireMode::Wait => self.acquire_waiting(&candidacy).await,
            AcquireMode::Once => self.acquire_once(&candidacy).await,
        }
    }

    async fn renew(&self, lease: Lease, state: &RedisGrant) -> Result<Lease> {
        self.renew_inner(&lease, state).await
    }

    async fn release(&self, lease: Lease, state: &RedisGrant) -> Result<()> {
        self.release_inner(&lease, state).await
    }

    async fn watch(&self, key: ElectionKey) -> Result<BoxStream<'static, Result<LeaderEvent>>> {
        watch::start(self.clone(), self.redis_key(&key)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drift_is_one_percent_plus_two_ms() {
        assert_eq!(
            redlock_drift(Duration::from_secs(1)),
            Duration::from_millis(12)
        );
        assert_eq!(
            redlock_drift(Duration::from_secs(10)),
            Duration::from_millis(102)
        );
    }
}
