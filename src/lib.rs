#![doc = include_str!("../README.md")]
//!
//! # Cargo features
//!
//! `default` builds the in-memory backend only (no protoc, no TLS stack,
//! nothing to install). Each backend is a feature of its own:
#![doc = document_features::document_features!()]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

// DESIGN. The facade: tenure-core re-exported for applications, each
// backend crate behind its feature, `backend` for backend authors, and
// `connect(url)` (connect.rs), which picks the backend from the URL scheme.

// What applications use. Backend authors' plumbing is in [`backend`].
pub use tenure_core::{
    default_identity, memory, BoxError, CandidateId, Capabilities, ElectionKey, Elector,
    ElectorBuilder, ElectorState, Error, Fence, FencingToken, Health, KeyRule, LeaderEvent,
    LeaderInfo, Leadership, LeaseBackend, LossReason, MemoryBackend, RenewOn, Result, Term,
    Unhealthy, DEFAULT_TTL, MAX_IDENTITY_LEN, MAX_KEY_LEN,
};

/// For writing a backend, or calling one directly: the [`LeaseBackend`]
/// trait's types, the heartbeat runtime tenure runs backend calls on, and
/// [`HeartbeatBackend`](backend::HeartbeatBackend), which runs a backend's
/// operations there, and the [`layers`](backend::layers) every backend is
/// made of (input checks, a span per operation, the heartbeat hand-over),
/// to wrap a backend in one of your own. Applications need none of it: the
/// [`Elector`] drives the backend.
pub mod backend {
    pub use tenure_core::backend_url;
    pub use tenure_core::hosted::{
        self, bounded, spawn_cleanup, watch_stream, CleanupOnDrop, Looks,
    };
    pub use tenure_core::layers::{self, Layer};
    pub use tenure_core::{
        default_drift_margin, heartbeat_runtime, on_heartbeat_runtime, AcquireMode, Acquisition,
        Candidacy, Capabilities, HeartbeatBackend, KeyRule, Lease, LeaseBackend, LeaseHandle,
    };
}

/// The etcd backend (feature `etcd`).
#[cfg(feature = "etcd")]
#[cfg_attr(docsrs, doc(cfg(feature = "etcd")))]
pub use tenure_etcd as etcd;

/// The ZooKeeper backend (feature `zookeeper`).
#[cfg(feature = "zookeeper")]
#[cfg_attr(docsrs, doc(cfg(feature = "zookeeper")))]
pub use tenure_zookeeper as zookeeper;

/// The Kubernetes Lease backend (feature `kube`).
#[cfg(feature = "kube")]
#[cfg_attr(docsrs, doc(cfg(feature = "kube")))]
pub use tenure_kube as kube;

/// The Redis backend (feature `redis`): Redlock, which cannot fence.
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use tenure_redis as redis;

mod connect;
pub use connect::connect;
