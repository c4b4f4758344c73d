#![doc = include_str!("../README.md")]
//!
//! # Cargo features
#![doc = document_features::document_features!()]
#![cfg_attr(docsrs, feature(doc_cfg))]

// DESIGN. The suite judges any LeaseBackend; the harness (feature
// `harness`) gives it real servers to judge.
//
// The suite, light and publishable:
//   factory.rs      BackendFactory: what a backend author implements
//   suite/          the cases, one per MUST, each with its mutant
//   macros.rs       the case table, in one place
//   planted.rs      bugs planted over any backend's clients
//   memory.rs       the factory for MemoryBackend, dressed as a cluster
//   process/        candidates as OS processes (SIGSTOP, SIGKILL): the line
//                   protocol, the candidate side, RemoteBackend
//   report/         what a run found, as a table, JSON and markdown
//   trials.rs       the suite as a test binary (libtest-mimic)
// The harness:
//   harness/        etcd, ZooKeeper and Redis in containers, and their faults
//   proxy.rs, link.rs, taps.rs   TCP fault proxies per client, the Link over
//                   them, and taps that count a protocol's messages
//   servers.rs      ServerFaults over a harness cluster
//   lease_server/   the Lease API test server (Kubernetes), over etcd

#[cfg(feature = "harness")]
#[cfg_attr(docsrs, doc(cfg(feature = "harness")))]
pub mod harness;
#[cfg(feature = "harness")]
#[cfg_attr(docsrs, doc(cfg(feature = "harness")))]
pub mod lease_server;
#[cfg(feature = "harness")]
#[cfg_attr(docsrs, doc(cfg(feature = "harness")))]
pub mod proxy;

pub mod factory;
#[cfg(feature = "harness")]
#[cfg_attr(docsrs, doc(cfg(feature = "harness")))]
pub mod link;
mod macros;
pub mod memory;
pub mod planted;
pub mod process;
pub mod report;
#[cfg(feature = "harness")]
#[cfg_attr(docsrs, doc(cfg(feature = "harness")))]
pub mod servers;
pub mod suite;
#[cfg(feature = "harness")]
#[cfg_attr(docsrs, doc(cfg(feature = "harness")))]
pub mod taps;
pub mod trials;

/// Re-exported for implementing [`BackendFactory`] and [`Link`].
pub use async_trait::async_trait;
pub use factory::{
    until_writes_settle, BackendFactory, CandidateCommand, Client, Gap, Link, LinkFault,
    ServerFaults, Timing, TtlStart,
};
#[cfg(feature = "harness")]
#[cfg_attr(docsrs, doc(cfg(feature = "harness")))]
pub use lease_server::compact_etcd;
#[cfg(feature = "harness")]
#[cfg_attr(docsrs, doc(cfg(feature = "harness")))]
pub use link::ProxyLink;
pub use memory::MemoryFactory;
pub use report::{CaseReport, Expect, Figures, Outcome, Property, Violation};
#[cfg(feature = "harness")]
#[cfg_attr(docsrs, doc(cfg(feature = "harness")))]
pub use servers::ClusterServers;
pub use suite::{run_all, run_one, Case, CASES};
pub use trials::{async_trial, run_targets, run_targets_with, Target};
