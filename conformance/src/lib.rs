#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

// DESIGN. The suite judges any LeaseBackend, and depends on no backend.
// Real servers to judge come from elsewhere: tenure-testkit (containers,
// fault proxies), tenure-lease-server (the Lease API test server), and
// tenure-e2e, where the suite runs against every backend.
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

pub mod factory;
mod macros;
pub mod memory;
pub mod planted;
pub mod process;
pub mod report;
pub mod suite;
pub mod trials;

/// Re-exported for implementing [`BackendFactory`] and [`Link`].
pub use async_trait::async_trait;
pub use factory::{
    until_writes_settle, BackendFactory, CandidateCommand, Client, Gap, Link, LinkFault,
    ServerFaults, Timing, TtlStart,
};
pub use memory::MemoryFactory;
pub use report::{CaseReport, Expect, Figures, Outcome, Property, Violation};
pub use suite::{run_all, run_one, Case, CASES};
pub use trials::{async_trial, run_targets, run_targets_with, Target};
