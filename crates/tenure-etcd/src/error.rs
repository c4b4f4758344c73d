//! etcd client errors mapped into tenure's, retryable or not.

use std::time::Duration;

use tenure_core::Error;
use tonic::Code;

pub(crate) const BACKEND: &str = "etcd";

/// Maps an etcd client error: transport trouble and an unavailable or busy
/// cluster are retryable; bad arguments and auth failures are not.
pub(crate) fn map(error: etcd_client::Error) -> Error {
    use etcd_client::Error as E;
    let retryable = match &error {
        E::IoError(_) | E::TransportError(_) | E::LeaseKeepAliveError(_) | E::WatchError(_) => true,
        E::GRpcStatus(status) => matches!(
            status.code(),
            Code::Unavailable
                | Code::DeadlineExceeded
                | Code::Aborted
                | Code::ResourceExhausted
                | Code::Unknown
                | Code::Cancelled
        ),
        _ => false,
    };
    if retryable {
        Error::Unavailable {
            backend: BACKEND,
            source: Box::new(error),
        }
    } else {
        Error::Backend {
            backend: BACKEND,
            source: Box::new(error),
        }
    }
}

/// Whether the error is etcd saying the lease does not exist (any more).
pub(crate) fn is_lease_not_found(error: &etcd_client::Error) -> bool {
    match error {
        etcd_client::Error::GRpcStatus(s) => s.code() == Code::NotFound,
        // etcd-client's keep-alive stream reports an unknown lease this way.
        etcd_client::Error::LeaseKeepAliveError(message) => message.contains("not found"),
        _ => false,
    }
}

/// Runs one unary request with a deadline of its own (never a channel-wide
/// timeout, which would also cut long-lived watches).
pub(crate) async fn bounded<T>(
    operation: &'static str,
    after: Duration,
    request: impl std::future::Future<Output = Result<T, etcd_client::Error>>,
) -> tenure_core::Result<T> {
    match tokio::time::timeout(after, request).await {
        Ok(result) => result.map_err(map),
        Err(_) => Err(Error::Timeout { operation, after }),
    }
}
