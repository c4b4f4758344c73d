//! ZooKeeper client errors mapped into tenure's, retryable or not.

use tenure_core::Error;
use zookeeper_client::Error as ZkError;

pub(crate) const BACKEND: &str = "zookeeper";

/// Whether the error is transient: the connection dropped, the server was
/// slow or throttled, or the session ended (a new session may succeed).
///
/// `Custom` is what a request in flight gets when its connection fails
/// under it: an I/O error, or no answer within the connection timeout
/// ("no response from connection in ..ms", e.g. a paused server); the client
/// then reconnects. (Its other uses, TLS and SASL setup, are features this
/// crate does not enable.)
pub(crate) fn is_transient(error: &ZkError) -> bool {
    matches!(
        error,
        ZkError::ConnectionLoss
            | ZkError::Timeout
            | ZkError::NoHosts
            | ZkError::Throttled
            | ZkError::SessionMoved
            | ZkError::SessionExpired
            | ZkError::ClientClosed
            | ZkError::Custom(_)
    )
}

/// Maps a client error: transient ones are retryable, the rest are not.
pub(crate) fn map(error: ZkError) -> Error {
    Error::from_client(BACKEND, is_transient(&error), error)
}

/// A retryable error with a message.
pub(crate) fn unavailable(message: &'static str) -> Error {
    Error::unavailable(BACKEND, message)
}
