//! The harness's error type.

use std::time::Duration;

/// What went wrong while driving containers or talking to a server.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HarnessError {
    /// The docker engine refused a request or could not be reached.
    #[error("docker: {0}")]
    Docker(#[from] bollard::errors::Error),
    /// A socket operation failed (connection refused, reset, ...).
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// An HTTP request to a server failed.
    #[error("http: {0}")]
    Http(#[from] reqwest::Error),
    /// Something did not happen within its deadline.
    #[error("timed out after {after:?}: {what}")]
    Timeout {
        /// What was being waited for.
        what: String,
        /// How long the harness waited.
        after: Duration,
    },
    /// A server answered, but not in the way its protocol says.
    #[error("protocol: {0}")]
    Protocol(String),
    /// `conformance/image/build.sh` failed.
    #[error("image build failed ({status}): {output}")]
    Build {
        /// The script's exit status.
        status: String,
        /// The tail of its output.
        output: String,
    },
    /// A node index outside the cluster, or an operation the topology lacks.
    #[error("invalid use: {0}")]
    Invalid(String),
}

impl HarnessError {
    /// Whether this is a [`HarnessError::Timeout`]: the server accepted the
    /// connection (or the request) but did not answer in time, as a paused
    /// or partitioned server does.
    pub fn is_timeout(&self) -> bool {
        matches!(self, HarnessError::Timeout { .. })
    }
}

/// The harness's result type.
pub type Result<T, E = HarnessError> = std::result::Result<T, E>;
