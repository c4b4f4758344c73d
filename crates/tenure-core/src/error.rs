//! The one error type of tenure.

use std::time::Duration;

use crate::{FencingToken, LossReason};

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
        /// What the backend could tell about why.
        reason: LossReason,
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

    /// Builds an [`Error::Unavailable`]: `backend` could not serve for now,
    /// and retrying may help.
    pub fn unavailable(backend: &'static str, source: impl Into<BoxError>) -> Self {
        Error::Unavailable {
            backend,
            source: source.into(),
        }
    }

    /// Builds an [`Error::Backend`]: `backend` answered with an error that
    /// retrying will not fix.
    pub fn backend(backend: &'static str, source: impl Into<BoxError>) -> Self {
        Error::Backend {
            backend,
            source: source.into(),
        }
    }

    /// A client library's error: [`Error::Unavailable`] if `retryable`, else
    /// [`Error::Backend`]. Each backend decides which of its client's
    /// errors are transient; this is the one place they become tenure's.
    pub fn from_client(
        backend: &'static str,
        retryable: bool,
        source: impl Into<BoxError>,
    ) -> Self {
        if retryable {
            Error::unavailable(backend, source)
        } else {
            Error::backend(backend, source)
        }
    }

    /// Builds an [`Error::LeaseLost`].
    pub fn lease_lost(key: impl Into<String>, reason: LossReason) -> Self {
        Error::LeaseLost {
            key: key.into(),
            reason,
        }
    }

    /// A copy of the same kind and fields, for a report that keeps an error
    /// the caller gets too, or a batched request whose one failure answers
    /// several callers. A client library's source cannot be cloned: the
    /// copy's source keeps its message (with its own sources') only.
    pub fn duplicate(&self) -> Error {
        fn text(source: &BoxError) -> BoxError {
            let mut message = source.to_string();
            let mut next = source.source();
            while let Some(cause) = next {
                message.push_str(": ");
                message.push_str(&cause.to_string());
                next = cause.source();
            }
            message.into()
        }
        match self {
            Error::InvalidArgument { field, reason } => Error::invalid(field, reason.clone()),
            Error::LeaseLost { key, reason } => Error::lease_lost(key.clone(), *reason),
            Error::Unavailable { backend, source } => Error::Unavailable {
                backend,
                source: text(source),
            },
            Error::Timeout { operation, after } => Error::Timeout {
                operation,
                after: *after,
            },
            Error::Backend { backend, source } => Error::Backend {
                backend,
                source: text(source),
            },
            Error::Unsupported { backend, operation } => Error::Unsupported { backend, operation },
            Error::StaleToken {
                resource,
                presented,
                highest,
            } => Error::StaleToken {
                resource: resource.clone(),
                presented: *presented,
                highest: *highest,
            },
            Error::Shutdown => Error::Shutdown,
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

    /// Why the lease is lost, if this error says it is.
    pub fn loss_reason(&self) -> Option<LossReason> {
        match self {
            Error::LeaseLost { reason, .. } => Some(*reason),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duplicate_keeps_the_kind_fields_and_message() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset by peer");
        let errors = [
            Error::invalid("ttl", "must be greater than zero"),
            Error::lease_lost("k", LossReason::TakenOver),
            Error::Unavailable {
                backend: "etcd",
                source: Box::new(io),
            },
            Error::Timeout {
                operation: "renew",
                after: Duration::from_secs(1),
            },
            Error::Shutdown,
        ];
        for error in &errors {
            let copy = error.duplicate();
            assert_eq!(copy.to_string(), error.to_string());
            assert_eq!(copy.is_retryable(), error.is_retryable());
            assert_eq!(copy.loss_reason(), error.loss_reason());
        }
        assert!(matches!(
            errors[0].duplicate(),
            Error::InvalidArgument { field: "ttl", .. }
        ));
    }
}
