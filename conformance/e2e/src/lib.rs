//! Tests and their candidate binary: `tests/` holds the conformance suite
//! on every backend and the facade's end-to-end tests, all on real servers
//! in containers (see this crate's Cargo.toml for why they are not in the
//! root package or the backends' crates).

// DESIGN. The one crate that builds every backend at once.
//   tests/{etcd,zookeeper,kube,redis}.rs  the conformance suite on each
//                  backend's 1- and 3-node deployments (libtest-mimic)
//   tests/factory/  their factories, which all run the one candidate
//   tests/connect.rs  `tenure::connect` end to end, on every backend
//   src/bin/tenure-e2e-candidate.rs  the suite's candidate process over
//                  `tenure::connect`
