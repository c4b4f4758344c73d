//! The one error type of tenure.

use std::time::Duration;

use crate::FencingToken;

/// A boxed error from a backend's client library.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// `Result` with tenure's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in tenure.
///
/// Losing an election is not an error: [`crate::Acquisition::Held`] reports it.
/// Use [`Error::is_retryable`] to decide whether to try again.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An argument was rejected before anything was sent to the backend.
    #[error("invalid {field}: {reason}")]
    InvalidArgument {
        /// The argument or field at fault, e.g. `key`, `ttl`, `identity`.
        field: &'static str,
        /// Which rule it broke.
        reason: String,
    },

    /// The lease is gone: someone else may hold it now, or soon.
    #[error("lease on {key:?} lost: {reason}")]
    LeaseLost {
        /// The election key.
        key: String,
        /// Why we know, or why we gave up.
        reason: String,
    },

    /// The backend could not be reached or refused to serve for now; retrying may help.
    #[error("{backend} unavailable: {source}")]
    Unavailable {
        /// The backend's name.
        backend: &'static str,
        /// The client library's error.
        #[source]
        source: BoxError,
    },

    /// An operation did not finish in time.
    #[error("{operation} timed out after {after:?}")]
    Timeout {
        /// The operation, e.g. `renew`.
        operation: &'static str,
        /// How long we waited.
        after: Duration,
    },

    /// The backend answered with an error that retrying will not fix.
    #[error("{backend} error: {source}")]
    Backend {
        /// The backend's name.
        backend: &'static str,
        /// The client library's error.
        #[source]
        source: BoxError,
    },

    /// The backend cannot do this.
    #[error("{backend} does not support {operation}")]
    Unsupported {
        /// The backend's name.
        backend: &'static str,
        /// What was asked for.
        operation: &'static str,
    },

    /// A [`crate::Fence`] refused a write carrying an older token than one it has seen.
    #[error("stale fencing token for {resource:?}: presented {presented}, already saw {highest}")]
    StaleToken {
        /// The guarded resource.
        resource: String,
        /// The token that came with the refused write.
        presented: FencingToken,
        /// The highest token the fence has accepted for the resource.
        highest: FencingToken,
    },

    /// The elector was shut down.
    #[error("elector shut down")]
    Shutdown,
}

impl Error {
    /// Builds an [`Error::InvalidArgument`].
    pub fn invalid(field: &'static str, reason: impl Into<String>) -> Self {
        Error::InvalidArgument {
            field,
            reason: reason.into(),
        }
    }

    /// Builds an [`Error::LeaseLost`].
    pub fn lease_lost(key: impl Into<String>, reason: impl Into<String>) -> Self {
        Error::LeaseLost {
            key: key.into(),
            reason: reason.into(),
        }
    }

    /// Whether trying the same operation again may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::Unavailable { .. } | Error::Timeout { .. })
    }

    /// Whether this error says the lease is lost.
    pub fn is_lease_lost(&self) -> bool {
        matches!(self, Error::LeaseLost { .. })
    }
}
