//! The suite's factory on each backend's servers: every one runs the same
//! candidate process.

use std::sync::Arc;

use tenure_core::Capabilities;
use tenure_testkit::{ClusterFactory, Deployment};

/// The suite's candidate process: its cases over `tenure::connect`.
const CANDIDATE: &str = env!("CARGO_BIN_EXE_tenure-e2e-candidate");

/// The factory named `name` (the report's backend name) over `deployment`,
/// whose clients promise `capabilities` and whose servers are `version`;
/// its process cases run [`CANDIDATE`].
pub fn over<D: Deployment>(
    name: &'static str,
    deployment: D,
    capabilities: Capabilities,
    version: Option<String>,
) -> Arc<ClusterFactory<D>> {
    Arc::new(ClusterFactory::new(
        name,
        deployment,
        capabilities,
        version,
        CANDIDATE,
    ))
}
