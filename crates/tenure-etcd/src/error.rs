//! etcd client errors mapped into tenure's, retryable or not.

use std::time::Duration;

use etcd_client::Client;
use tenure_core::Error;
use tonic::Code;

pub(crate) const BACKEND: &str = "etcd";

/// Maps an etcd client error: transport trouble, an unavailable or busy
/// cluster, and a token etcd no longer takes (expired, or issued before an
/// auth-store change: [`needs_new_token`]) are retryable; bad arguments and
/// refused credentials are not.
pub(crate) fn map(error: etcd_client::Error) -> Error {
    use etcd_client::Error as E;
    let retryable = match &error {
        E::IoError(_) | E::TransportError(_) | E::LeaseKeepAliveError(_) | E::WatchError(_) => true,
        E::GRpcStatus(status) => {
            matches!(
                status.code(),
                Code::Unavailable
                    | Code::DeadlineExceeded
                    | Code::Aborted
                    | Code::ResourceExhausted
                    | Code::Unknown
                    | Code::Cancelled
            ) || needs_new_token(&error)
        }
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

/// etcd's answer to a request whose token it no longer takes.
const INVALID_AUTH_TOKEN: &str = "etcdserver: invalid auth token";
/// etcd's answer to a request whose token was issued before the auth store
/// last changed (any `user add`, `role grant`, ...): every JWT, and a simple
/// token racing the change, until the client authenticates again.
const AUTH_OLD_REVISION: &str = "etcdserver: revision of auth store is old";

/// Whether etcd refused the request's auth token, expired ("invalid auth
/// token": `Unauthenticated`, or `Unknown` from the election and lock
/// services) or stale ("revision of auth store is old": `InvalidArgument`,
/// which etcd-client's own token refresh does not match): authenticating
/// again and resending is the cure.
pub(crate) fn needs_new_token(error: &etcd_client::Error) -> bool {
    let etcd_client::Error::GRpcStatus(status) = error else {
        return false;
    };
    match status.code() {
        Code::Unauthenticated => true,
        Code::Unknown => status.message() == INVALID_AUTH_TOKEN,
        Code::InvalidArgument => status.message() == AUTH_OLD_REVISION,
        _ => false,
    }
}

/// Runs one unary request with a deadline of its own (never a channel-wide
/// timeout, which would also cut long-lived watches). A request refused for
/// its token ([`needs_new_token`]) is sent once more after authenticating
/// again, within the same deadline.
pub(crate) async fn bounded<T, F, Fut>(
    client: &Client,
    operation: &'static str,
    after: Duration,
    mut request: F,
) -> tenure_core::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, etcd_client::Error>>,
{
    let attempt = async {
        match request().await {
            Err(error) if needs_new_token(&error) => {
                tracing::debug!(operation, %error, "etcd refused our auth token; authenticating again");
                client.refresh_token().await?;
                request().await
            }
            answer => answer,
        }
    };
    match tokio::time::timeout(after, attempt).await {
        Ok(result) => result.map_err(map),
        Err(_) => Err(Error::Timeout { operation, after }),
    }
}
