#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

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
