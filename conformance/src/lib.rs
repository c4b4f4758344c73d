//! tenure-conformance: the shared suite every tenure backend must pass, the
//! container harness that starts real servers, and the fault injection used
//! by the suite.

pub mod harness;
pub mod proxy;
