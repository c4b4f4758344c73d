//! tenure-conformance: the shared suite every tenure backend must pass, the
//! container harness that starts real servers, and the fault injection used
//! by the suite.
//!
//! A backend author implements [`BackendFactory`] and calls
//! [`conformance_tests!`] (one test per case) or [`run_all`]; see the
//! crate's README.

pub mod harness;
pub mod lease_server;
pub mod proxy;

pub mod factory;
pub mod link;
mod macros;
pub mod memory;
pub mod process;
pub mod report;
pub mod servers;
pub mod suite;
pub mod taps;
pub mod trials;

/// Re-exported for implementing [`BackendFactory`] and [`Link`].
pub use async_trait::async_trait;
pub use factory::{
    until_writes_settle, BackendFactory, CandidateCommand, Client, Gap, Link, LinkFault,
    ServerFaults, Timing,
};
pub use lease_server::compact_etcd;
pub use link::ProxyLink;
pub use memory::MemoryFactory;
pub use report::{CaseReport, Expect, Figures, Outcome, Property, Violation};
pub use servers::ClusterServers;
pub use suite::{run_all, run_one, Case, CASES};
pub use trials::{run_targets, Target};
