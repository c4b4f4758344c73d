//! Layers: one concern each, wrapped around any [`LeaseBackend`].
//!
//! What every backend needs around its protocol is written once, here, as a
//! wrapper that is itself a `LeaseBackend` (as tower's `Layer` and OpenDAL's
//! layers are):
//!
//! - [`Checked`] refuses bad input before the backend sees it
//!   ([contract](LeaseBackend#contract) point 1);
//! - [`Traced`] runs each operation in one `tenure` span;
//! - [`OnHeartbeat`] runs each operation on the
//!   [heartbeat runtime](crate::heartbeat_runtime) and hands its result over
//!   to the caller without ever losing a grant.
//!
//! A networked backend gets all three by implementing
//! [`HeartbeatBackend`](crate::HeartbeatBackend); the memory backend and
//! the conformance suite's remote client wrap themselves in the first two. An application can add
//! a layer of its own (metrics, fault injection) the same way:
//!
//! ```
//! use std::sync::atomic::{AtomicU64, Ordering};
//! use std::sync::Arc;
//!
//! use async_trait::async_trait;
//! use futures::stream::BoxStream;
//! use tenure_core::layers::Layer;
//! use tenure_core::{
//!     AcquireMode, Acquisition, Candidacy, Capabilities, ElectionKey, LeaderEvent, Lease,
//!     LeaseBackend, MemoryBackend, Result,
//! };
//!
//! /// Counts acquire calls.
//! #[derive(Debug)]
//! struct Counted<B> { inner: B, acquires: Arc<AtomicU64> }
//!
//! struct CountLayer(Arc<AtomicU64>);
//!
//! impl<B: LeaseBackend> Layer<B> for CountLayer {
//!     type Backend = Counted<B>;
//!     fn layer(&self, inner: B) -> Counted<B> {
//!         Counted { inner, acquires: self.0.clone() }
//!     }
//! }
//!
//! #[async_trait]
//! impl<B: LeaseBackend> LeaseBackend for Counted<B> {
//!     fn name(&self) -> &'static str { self.inner.name() }
//!     fn capabilities(&self) -> Capabilities { self.inner.capabilities() }
//!     fn check(&self, candidacy: &Candidacy) -> Result<()> { self.inner.check(candidacy) }
//!     fn check_key(&self, key: &ElectionKey) -> Result<()> { self.inner.check_key(key) }
//!     async fn acquire(&self, candidacy: &Candidacy, mode: AcquireMode) -> Result<Acquisition> {
//!         self.acquires.fetch_add(1, Ordering::Relaxed);
//!         self.inner.acquire(candidacy, mode).await
//!     }
//!     async fn renew(&self, lease: &Lease) -> Result<Lease> { self.inner.renew(lease).await }
//!     async fn release(&self, lease: &Lease) -> Result<()> { self.inner.release(lease).await }
//!     async fn watch(&self, key: &ElectionKey) -> Result<BoxStream<'static, Result<LeaderEvent>>> {
//!         self.inner.watch(key).await
//!     }
//!     async fn close(&self) -> Result<()> { self.inner.close().await }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<()> {
//! let acquires = Arc::new(AtomicU64::new(0));
//! let backend = CountLayer(acquires.clone()).layer(MemoryBackend::new());
//! let candidacy = Candidacy::new(
//!     ElectionKey::new("billing")?,
//!     tenure_core::CandidateId::new("a")?,
//!     std::time::Duration::from_secs(2),
//! )?;
//! backend.acquire(&candidacy, AcquireMode::Once).await?;
//! assert_eq!(acquires.load(Ordering::Relaxed), 1);
//! # Ok(()) }
//! ```

/// The methods a layer passes to its inner backend (`self.inner`)
/// untouched: its name, what it promises and its input rules.
macro_rules! pass_through_to_inner {
    () => {
        fn name(&self) -> &'static str {
            self.inner.name()
        }

        fn capabilities(&self) -> crate::Capabilities {
            self.inner.capabilities()
        }

        fn check(&self, candidacy: &crate::Candidacy) -> crate::Result<()> {
            self.inner.check(candidacy)
        }

        fn check_key(&self, key: &crate::ElectionKey) -> crate::Result<()> {
            self.inner.check_key(key)
        }
    };
}

/// The [`Layer`] that wraps a backend in `$wrapper::new`: a unit struct
/// with the given docs.
macro_rules! layer_of {
    ($(#[$doc:meta])* $layer:ident => $wrapper:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, Default)]
        pub struct $layer;

        impl<B: LeaseBackend> Layer<B> for $layer {
            type Backend = $wrapper<B>;

            fn layer(&self, inner: B) -> $wrapper<B> {
                $wrapper::new(inner)
            }
        }
    };
}

mod check;
mod heartbeat;
mod trace;

pub use check::{CheckLayer, Checked};
pub use heartbeat::{on_heartbeat_runtime, HeartbeatLayer, OnHeartbeat};
pub use trace::{TraceLayer, Traced};

use crate::LeaseBackend;

/// Wraps a backend in one that adds a concern: the wrapper is a
/// [`LeaseBackend`] too, so layers stack.
pub trait Layer<B: LeaseBackend> {
    /// The wrapped backend.
    type Backend: LeaseBackend;

    /// Wraps `inner`.
    fn layer(&self, inner: B) -> Self::Backend;
}
