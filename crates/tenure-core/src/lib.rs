#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

// DESIGN. The contract, the layers every backend is wrapped in, and the
// Elector that drives any backend; nothing here knows a server.
//
//   backend.rs       LeaseBackend, the one trait, and its contract (MUST 1-12)
//   names.rs         ElectionKey, CandidateId: validated names
//   token.rs         FencingToken
//   leader.rs        LeaderInfo, LeaderEvent: what a watch reports
//   lease.rs         Candidacy (asked for), Lease (granted: valid_until from send time)
//   capabilities.rs  what a backend promises, and the input checks that follow
//   loss.rs          LossReason: why a term ended
//   error.rs         Error: the one error type, retryable or not
//   layers/          what surrounds every backend's protocol, once, each a
//                    LeaseBackend over any other: Checked, Traced, OnHeartbeat
//   hosted.rs        HeartbeatBackend (a networked backend's protocol, made a
//                    LeaseBackend by the layers), CleanupOnDrop, bounded()
//   hosted/stream.rs watch_stream: a backend's watch from its Looks, the
//                    newest state winning
//   backend_url.rs   one URL grammar for every backend's connect(url)
//   backoff.rs       jitter and retry delays
//   elector/         the Elector over any LeaseBackend: campaign, renew on the
//                    heartbeat thread, step down by valid_until, observe
//   fence.rs         the storage side of fencing
//   simulation.rs    what a deterministic simulation fixes (seeded draws,
//                    ordered selects, the renewal grid, spawns); hidden
//   memory/          the in-memory backend: the whole contract in one
//                    process, with per-client fault knobs for tests

mod backend;
pub mod backend_url;
mod backoff;
mod capabilities;
mod elector;
mod error;
mod fence;
pub mod hosted;
pub mod layers;
mod leader;
mod lease;
mod loss;
pub mod memory;
mod names;
#[cfg(feature = "__simulation")]
#[doc(hidden)]
pub mod simulation;
#[cfg(not(feature = "__simulation"))]
mod simulation;
mod token;

pub use backend::{AcquireMode, Acquisition, LeaseBackend};
pub use capabilities::{Capabilities, KeyRule};
#[cfg(feature = "__elector_mutants")]
#[doc(hidden)]
pub use elector::ElectorBug;
pub use elector::{
    default_identity, heartbeat_runtime, Elector, ElectorBuilder, ElectorState, Health, Leadership,
    RenewOn, Term, Unhealthy, DEFAULT_TTL,
};
pub use error::{BoxError, Error, Result};
pub use fence::Fence;
pub use hosted::HeartbeatBackend;
pub use layers::on_heartbeat_runtime;
pub use leader::{LeaderEvent, LeaderInfo};
pub use lease::{default_drift_margin, Candidacy, Lease, LeaseHandle, LossSignal, Warning};
pub use loss::LossReason;
pub use memory::MemoryBackend;
pub use names::{CandidateId, ElectionKey, MAX_IDENTITY_LEN, MAX_KEY_LEN};
pub use token::FencingToken;
